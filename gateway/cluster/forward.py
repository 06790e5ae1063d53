"""The one-hop forward: a leg that lands on a node that does not own its call is spliced to the owner.

The door decides where a call lives once it knows the call's ids: from the path (`/v1/twilio/{call_id}`,
before the upgrade) or from the leg's opening messages (Twilio's `start`, `call.attach`, a wire's start:
read here, then replayed to whoever serves the leg). The owner is told with a signed, single-use
`X-Voxgate-Hop` header (gateway/cluster/hop.py: bound to the method, path, query and call) that this node
already checked the leg (auth, tokens, Origin, per-IP caps), so it checks nothing twice and never forwards
again; a leg whose opening messages name another call than its hop is refused. Messages then pass both
ways untouched, text as text and binary as binary, and a close on either side closes the other with the
same code: the far end notices nothing.
No audio passes through Redis; the hop is one WebSocket (or, for AudioSocket, one TCP stream) per leg.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from typing import Callable

import aiohttp
from aiohttp import WSCloseCode, WSMsgType, web
from yarl import URL

from gateway import protocol as P
from gateway.cluster import hop
from gateway.cluster.plane import ClusterPlane, ClusterUnavailable, Owner
from gateway.core.calls import normalize_call_id

log = logging.getLogger("voxgate.cluster")

HOP_HEADER = "X-Voxgate-Hop"
HOP_KEY = web.RequestKey("voxgate.hop", hop.Hop)  # the accepted hop, set by the guard
CONNECT_TIMEOUT_S = 2.0
PEEK_MESSAGES = 3  # opening messages read to learn a call's ids (Twilio: connected, start)
MAX_HOP_MESSAGE = 4 * 2**20
_CLOSING = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)


# ------------------------------------------------------------ the hop, checked where it arrives
async def accept_hop(plane: ClusterPlane, value: str, method: str, target: str) -> hop.Hop:
    """A hop that verifies for this request and whose nonce this plane has not seen (now spent); raises
    HopRefused saying why, or ClusterUnavailable when Redis cannot say whether the nonce is fresh."""
    if not plane.secret:
        raise hop.HopRefused("this node has no hop secret")
    checked = hop.verify(plane.secret, value, method, target)
    if not await plane.hop_nonce_spend(checked.nonce, int(hop.NONCE_TTL_S * 1000)):
        raise hop.HopRefused("its nonce was used before (a replayed hop)")
    return checked


def claimed_node(value: str) -> str:
    """The node a hop says it comes from, for a refusal's log line (unverified: it is what the value claims)."""
    parts = value.split(";")
    return parts[1][:64] if len(parts) > 1 else "?"


def hop_of(request: web.BaseRequest) -> hop.Hop | None:
    return request.get(HOP_KEY)


def is_hop(request: web.BaseRequest) -> bool:
    return hop_of(request) is not None


def hop_matches(request: web.BaseRequest, ids: list[str]) -> bool:
    """Whether the call a request's hop was signed for is one of `ids` (the leg's own call ids)."""
    checked = hop_of(request)
    try:
        return checked is not None and checked.call_id in {normalize_call_id(i) for i in ids if i}
    except P.ProtocolError:
        return False


def log_wrong_call(request: web.BaseRequest, door: str, ids: list[str]) -> None:
    checked = hop_of(request)
    log.warning(
        "cluster: refused a %s leg forwarded by node %s: its hop was signed for call %s, the leg names %s",
        door,
        checked.node if checked else "?",
        checked.call_id if checked else "?",
        ", ".join(ids) or "no call",
    )


# ------------------------------------------------------------ where a call lives
async def owner_elsewhere(core, request: web.BaseRequest | None, ids: list[str]) -> Owner | None:
    """None: serve the leg here (the call lives here, or is now claimed for this node); else its owner.

    Raises ClusterUnavailable when Redis cannot say (a call already live here needs no Redis)."""
    ids = [normalize_call_id(i) for i in ids if i]
    if not ids or any(core.calls.get(i) is not None for i in ids):
        return None
    if request is not None and is_hop(request):
        try:  # the forwarding node found us as the owner; keep the claim (it may have just expired)
            await core.cluster.claim(ids)
        except ClusterUnavailable:
            pass
        return None
    return await core.cluster.claim(ids)


def ws_url(owner: Owner, path_qs: str) -> str:
    base = owner.url.rstrip("/")
    return ("wss://" + base[8:] if base.startswith("https://") else "ws://" + base.removeprefix("http://")) + path_qs


async def connect_owner(
    core, request: web.BaseRequest, owner: Owner, ids: list[str]
) -> aiohttp.ClientWebSocketResponse | None:
    """The hop to the owner, or None when this node should serve the leg itself (the owner is gone and its
    claim passed to us: the call is then one that never existed, as anywhere else)."""
    plane = core.cluster
    for _ in range(2):
        if owner.url:
            signed = hop.sign(plane.secret, plane.node_id, request.method, request.raw_path, normalize_call_id(ids[0]))
            headers = {
                HOP_HEADER: signed,
                "Host": request.host,
                "X-Forwarded-For": ", ".join(filter(None, [request.headers.get("X-Forwarded-For"), request.remote])),
                "X-Forwarded-Proto": request.scheme,
            }
            protocols = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
            try:
                # encoded=True: the owner sees the very path and query the hop was signed for
                return await _http(core).ws_connect(
                    URL(ws_url(owner, request.raw_path), encoded=True),
                    headers=headers,
                    protocols=protocols,
                    compress=0,
                    max_msg_size=MAX_HOP_MESSAGE,
                    autoping=True,
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5.0),
                )
            except aiohttp.WSServerHandshakeError as exc:
                if exc.status != 403:
                    raise ClusterUnavailable(f"node {owner.node_id} answered the hop with HTTP {exc.status}") from None
                # the owner lives and refused us: taking its call over would split the call in two
                log.warning(
                    "cluster: node %s refused this node's hop for call %s (HTTP 403; its log says why: most "
                    "often the nodes hold different secrets in cluster.secret_env)",
                    owner.node_id,
                    ids[0],
                )
                raise ClusterUnavailable(f"node {owner.node_id} refused this node's hop") from None
            except aiohttp.ClientSSLError as exc:  # it answers, we cannot trust it: not a dead owner either
                log.warning(
                    "cluster: node %s's TLS certificate does not verify (%s; is its CA in cluster.peer_ca_file?)",
                    owner.node_id,
                    exc,
                )
                raise ClusterUnavailable(f"node {owner.node_id}'s certificate does not verify") from None
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                log.warning(
                    "cluster: owner %s of call %s unreachable (%s); taking the call over", owner.node_id, ids[0], exc
                )
        owner = await plane.take_over(ids, owner.node_id)
        if owner is None:
            return None
    return None


def _http(core) -> aiohttp.ClientSession:
    plane = core.cluster
    if plane.http is None:
        # an owner that advertises https:// is reached over wss://, its certificate checked against
        # cluster.peer_ca_file (a private CA for the nodes) or the system's CAs
        ca_file = core.config.cluster.peer_ca_file
        tls = ssl.create_default_context(cafile=ca_file) if ca_file else True
        plane.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=tls),
            timeout=aiohttp.ClientTimeout(total=None, connect=CONNECT_TIMEOUT_S, sock_connect=CONNECT_TIMEOUT_S),
        )
    return plane.http


async def close(core) -> None:
    session = core.cluster.http
    if session is not None:
        core.cluster.http = None
        await session.close()


# ------------------------------------------------------------ the splice
async def splice(down: web.WebSocketResponse, up: aiohttp.ClientWebSocketResponse, first: list = ()) -> None:
    """Pass messages both ways until one side closes; then close the other with its code."""
    for msg in first:
        await _relay(msg, up)

    async def one_way(src, dst) -> None:
        while True:
            msg = await src.receive()
            if msg.type in _CLOSING:
                return
            await _relay(msg, dst)

    to_owner = asyncio.ensure_future(one_way(down, up))
    from_owner = asyncio.ensure_future(one_way(up, down))
    try:
        done, _ = await asyncio.wait({to_owner, from_owner}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (to_owner, from_owner):
            task.cancel()
        await asyncio.gather(to_owner, from_owner, return_exceptions=True)
    if from_owner in done:  # the owner closed: the far end gets the owner's code
        code = up.close_code if up.close_code not in (None, 1005, 1006) else WSCloseCode.GOING_AWAY
        if not down.closed:
            await down.close(code=code)
        await up.close()
    else:
        code = down.close_code if down.close_code not in (None, 1005, 1006) else WSCloseCode.OK
        await up.close(code=code)
        if not down.closed:
            await down.close(code=code)


async def _relay(msg, dst) -> None:
    if msg.type == WSMsgType.TEXT:
        await dst.send_str(msg.data)
    elif msg.type == WSMsgType.BINARY:
        await dst.send_bytes(msg.data)


class ReplayingSocket:
    """A prepared WebSocket whose first `receive()`s return the messages the door already read."""

    def __init__(self, ws: web.WebSocketResponse, first: list):
        self._ws = ws
        self._first = deque(first)

    async def receive(self, timeout: float | None = None):
        if self._first:
            return self._first.popleft()
        return await self._ws.receive(timeout)

    def __getattr__(self, name):
        return getattr(self._ws, name)


# ------------------------------------------------------------ AudioSocket: the same hop over TCP
async def forward_tcp(
    core,
    owner: Owner,
    ids: list[str],
    first: bytes,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    hop_kind: int,
) -> bool:
    """Splice an AudioSocket connection to its owner's AudioSocket port: a signed hop frame, the far end's
    handshake as read, then bytes both ways. False when the owner is gone and the call is now ours."""
    plane = core.cluster
    for _ in range(2):
        if owner.audiosocket:
            host, _, port = owner.audiosocket.rpartition(":")
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(host, int(port)), CONNECT_TIMEOUT_S
                )
                break
            except (OSError, asyncio.TimeoutError, ValueError) as exc:
                log.warning(
                    "cluster: owner %s of call %s unreachable over AudioSocket (%s); taking the call over",
                    owner.node_id,
                    ids[0],
                    exc,
                )
        owner = await plane.take_over(ids, owner.node_id)
        if owner is None:
            return False
    else:
        return False
    signed = hop.sign(plane.secret, plane.node_id, hop.AUDIOSOCKET_METHOD, hop.AUDIOSOCKET_TARGET, ids[0]).encode()
    up_writer.write(bytes([hop_kind]) + len(signed).to_bytes(2, "big") + signed + first)
    core.metrics.cluster_forwards.labels(door="audiosocket").inc()
    plane.forwarded_legs += 1

    async def one_way(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass

    tasks = [asyncio.ensure_future(one_way(reader, up_writer)), asyncio.ensure_future(one_way(up_reader, writer))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for w in (up_writer, writer):
            if not w.is_closing():
                w.close()
        plane.forwarded_legs -= 1
    return True


async def accept_tcp_hop(core, payload: bytes, peer: str | None) -> hop.Hop | None:
    """An AudioSocket hop frame's hop, or None (refused, and logged in one line saying why). The caller
    still checks that the call the connection then names is the hop's call."""
    value = payload.decode("ascii", "replace")
    try:
        return await accept_hop(core.cluster, value, hop.AUDIOSOCKET_METHOD, hop.AUDIOSOCKET_TARGET)
    except (hop.HopRefused, ClusterUnavailable) as exc:
        core.metrics.connections_refused.labels(reason="hop").inc()
        log.warning("cluster: refused an AudioSocket hop from %s claiming node %s: %s", peer, claimed_node(value), exc)
        return None


# ------------------------------------------------------------ the doors
def unavailable_event(exc: ClusterUnavailable) -> dict:
    return P.error_event(P.CLUSTER_UNAVAILABLE, f"the call plane is unavailable ({exc}); try again shortly")


async def forward_by_path(
    core, request: web.Request, door: str, ids: list[str], ws_kwargs: dict | None = None
) -> web.StreamResponse | None:
    """A door whose call ids are known before the upgrade: the finished forwarded response, a refusal, or None
    (serve it here)."""
    if core.cluster is None or not ids:
        return None
    if is_hop(request):  # the owner's side: the hop must name this leg's call
        if hop_matches(request, ids):
            return None
        log_wrong_call(request, door, ids)
        return web.json_response(P.error_event(P.UNAUTHORIZED, "the hop was signed for another call"), status=403)
    try:
        owner = await owner_elsewhere(core, request, ids)
        if owner is None:
            return None
        up = await connect_owner(core, request, owner, ids)
    except ClusterUnavailable as exc:
        core.metrics.errors.labels(code=P.CLUSTER_UNAVAILABLE).inc()
        return web.json_response(unavailable_event(exc), status=503, headers={"Retry-After": "1"})
    if up is None:
        return None
    kwargs = dict(ws_kwargs or {})
    kwargs["protocols"] = (up.protocol,) if up.protocol else ()
    down = web.WebSocketResponse(compress=False, max_msg_size=MAX_HOP_MESSAGE, **kwargs)
    await down.prepare(request)
    await _spliced(core, door, down, up, [])
    return down


async def forward_after_peek(
    core,
    request: web.Request,
    ws: web.WebSocketResponse,
    door: str,
    ids_of: Callable[[object], list[str] | None],
    timeout: float,
    native_errors: bool = False,
):
    """A door whose call ids come in its opening messages: reads up to a few, then serves the leg here (returns a
    socket that replays them) or forwards it to the owner (returns None: the leg is over)."""
    if core.cluster is None:
        return ws
    first, ids = [], []
    try:
        async with asyncio.timeout(timeout):
            while len(first) < PEEK_MESSAGES:
                msg = await ws.receive()
                first.append(msg)
                if msg.type in _CLOSING:
                    break
                found = ids_of(msg)
                if found is not None:
                    ids = found
                    break
    except TimeoutError:
        pass
    if is_hop(request):  # the owner's side: the forwarding node replays the messages it read, naming the hop's call
        if hop_matches(request, ids):
            return ReplayingSocket(ws, first)
        log_wrong_call(request, door, ids)
        await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"the hop was signed for another call")
        return None
    if not ids:
        return ReplayingSocket(ws, first)
    try:
        owner = await owner_elsewhere(core, request, ids)
        up = None if owner is None else await connect_owner(core, request, owner, ids)
    except ClusterUnavailable as exc:
        core.metrics.errors.labels(code=P.CLUSTER_UNAVAILABLE).inc()
        log.info("cluster: %s leg for %s refused: %s", door, ids[0], exc)
        if native_errors:
            await ws.send_json(unavailable_event(exc))
        await ws.close(code=P.CLOSE_TRY_AGAIN_LATER)
        return None
    except P.ProtocolError:  # an id that is not one: the leg's own code says so
        return ReplayingSocket(ws, first)
    if up is None:
        return ReplayingSocket(ws, first)
    await _spliced(core, door, ws, up, first)
    return None


async def _spliced(core, door: str, down, up, first: list) -> None:
    core.metrics.cluster_forwards.labels(door=door).inc()
    core.calls.track(down.close)  # a shutdown closes forwarded legs too
    core.cluster.forwarded_legs += 1  # a draining node waits for these as for its own calls
    try:
        await splice(down, up, first)
    except (ConnectionError, aiohttp.ClientError) as exc:
        log.info("cluster: %s forward ended: %s", door, exc)
        if not down.closed:
            await down.close(code=WSCloseCode.GOING_AWAY)
        await up.close()
    finally:
        core.cluster.forwarded_legs -= 1
