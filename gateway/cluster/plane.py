"""The call plane in Redis/Valkey (docs/cluster.md): who owns each call, which nodes live, and the shared locks.

Nothing on the audio path waits on Redis: a call's claim is taken once, at its first leg's door, and then
kept alive by a heartbeat; tokens, per-IP counts and uploaded voices are read at doors and on the heartbeat.
When Redis fails, `problem` says why (for /readyz); doors refuse what needs it with `cluster_unavailable`
and everything already running goes on. Keys (all under `cluster.key_prefix`, default `voxgate:`):

    call:{id}        string  owner node id             PX claim_ttl_s, refreshed by the owner's heartbeat
    node:{node}      hash    url, audiosocket, draining PX claim_ttl_s, refreshed by the heartbeat
    nodes            zset    node -> expiry (ms)        members past their expiry are dead
    token:{id}       string  "1"                        PXAT the token's expiry; GETDEL spends it
    ip:{addr}        hash    node -> open connections   PX 3 x claim_ttl_s, rewritten by each node's heartbeat
    iprate:{addr}    zset    opens of the last second   score = µs; PX 2 s (a sliding second)
    voice:{name}     hash    wav, ref_text, x_vector_only, language, added   no TTL (deleted with the voice)
    voices           set     uploaded voice names       no TTL
    voice-deleted:{name} string a deletion's tombstone  PX 7 days
    hop:{nonce}      string  "1"                        PX 60 s: a hop's nonce, spent once (SET NX)

The node-to-node hop secret is never written here: every node reads it from `cluster.secret_env`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Callable, Iterable
from urllib.parse import urlsplit

from gateway.config import Config

log = logging.getLogger("voxgate.cluster")

VOICE_TOMBSTONE_MS = 7 * 86400 * 1000  # a node away longer than this shares a voice deleted meanwhile again
MIN_SECRET_CHARS = 16
REDIS_TIMEOUT_S = 1.0  # a door waits at most this long on Redis before refusing with cluster_unavailable


class ClusterUnavailable(Exception):
    """Redis could not be reached or answered an error; the message names the URL (never its password)."""


WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "")


def reachable_audiosocket(bound: str, advertise_url: str) -> str:
    """The AudioSocket address other nodes dial: `bound` (host:port), with a wildcard bind host replaced by
    the host of this node's advertised URL. A pod binds 0.0.0.0, and every pod has the same port: a peer
    dialling 0.0.0.0:9092 would reach its own AudioSocket server, not this node's."""
    host, _, port = bound.rpartition(":")
    if host not in WILDCARD_HOSTS:
        return bound
    return f"{urlsplit(advertise_url).hostname or socket.gethostname()}:{port}"  # IPv6 unbracketed, as the forward reads it


@dataclass(frozen=True)
class Owner:
    """Another node that owns a call: where to forward its legs."""

    node_id: str
    url: str | None  # None: the node is gone (its registration expired)
    audiosocket: str | None = None  # host:port of its AudioSocket server
    draining: bool = False


# Claim every id for ARGV[1] unless one is owned by another node: returns "" (ours now) or that node's id.
_CLAIM = """
for i, key in ipairs(KEYS) do
  local owner = redis.call('GET', key)
  if owner and owner ~= ARGV[1] then return owner end
end
for i, key in ipairs(KEYS) do redis.call('SET', key, ARGV[1], 'PX', ARGV[2]) end
return ''
"""
# Keep (or re-make, after a Redis restart) the claims that are still ours; never steal another node's.
_REFRESH = """
local kept = 0
for i, key in ipairs(KEYS) do
  local owner = redis.call('GET', key)
  if not owner or owner == ARGV[1] then redis.call('SET', key, ARGV[1], 'PX', ARGV[2]); kept = kept + 1 end
end
return kept
"""
_RELEASE = """
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then redis.call('DEL', key) end
end
return 1
"""
# A dead node's claims become ours (the leg is then a call that never existed, as a call on a fresh node).
_TAKE_OVER = """
for i, key in ipairs(KEYS) do
  local owner = redis.call('GET', key)
  if owner and owner ~= ARGV[1] and owner ~= ARGV[3] then return owner end
end
for i, key in ipairs(KEYS) do redis.call('SET', key, ARGV[1], 'PX', ARGV[2]) end
return ''
"""
# Per-IP: KEYS[1] the address's hash, KEYS[2] its opens of the last second (a sorted set, score = µs).
# ARGV: node, cap, rate, hash ttl ms, now µs, live nodes… A sliding second, not a calendar one: a counter per
# whole second let up to twice the rate through across a second's boundary.
_PEER_OPEN = """
local cap, rate, now = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
if rate > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 1000000)
  local n = redis.call('ZCARD', KEYS[2])
  if n >= rate then return 'rate' end
  redis.call('ZADD', KEYS[2], now, ARGV[1] .. ':' .. ARGV[5] .. ':' .. n)
  redis.call('PEXPIRE', KEYS[2], 2000)
end
if cap > 0 then
  local total = 0
  for i = 6, #ARGV do total = total + tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0') end
  if total >= cap then return 'cap' end
end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return ''
"""


def default_node_id(port: int) -> str:
    return f"{socket.gethostname()}:{port}"


class ClusterPlane:
    """One node's view of the plane. `start` connects (or refuses the start), `close` leaves it."""

    def __init__(self, config: Config, metrics=None):
        self.config = config
        self.cc = config.cluster
        self.metrics = metrics
        self.url = self.cc.redis_url or ""  # never holds a password (the config refuses one): safe to log and show
        self.prefix = self.cc.key_prefix
        self.ttl_ms = int(self.cc.claim_ttl_s * 1000)
        self.node_id: str = self.cc.node_id or ""
        self.advertise_url: str = self.cc.advertise_url or ""
        self.audiosocket: str | None = None  # host:port, set by the AudioSocket leg when it listens
        self.secret: bytes = b""
        self.draining = False
        self.problem: str | None = "not started"  # why the plane cannot be used now (None: healthy)
        self.live_nodes: list[str] = []
        self._redis = None
        self._scripts: dict = {}
        self._heartbeat: asyncio.Task | None = None
        self.live_call_ids: Callable[[], Iterable[str]] = lambda: ()  # the call registry's ids (set by CallCore)
        self.local_peers: Callable[[], dict[str, int]] = dict  # address -> open connections here (set by CallCore)
        self.on_heartbeat: list[Callable[[], object]] = []  # async jobs run after each beat (the voice sync)
        self._reported_peers: set[str] = set()
        self.forwarded_legs = 0  # legs this node splices to their calls' owners now
        self.http = None  # the forward's aiohttp client session (gateway/cluster/forward.py)

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    # ------------------------------------------------------------ lifecycle
    async def start(self, host: str, port: int) -> None:
        """Connect, register this node and start the heartbeat; Redis unreachable refuses the start (ValueError)."""
        import redis.asyncio as aioredis  # the `cluster` extra: only a clustered gateway needs it

        self.secret = hop_secret(self.cc.secret_env)
        self.node_id = self.node_id or default_node_id(port)
        if not self.advertise_url:
            shown = socket.gethostname() if host in WILDCARD_HOSTS else host
            self.advertise_url = f"http://{shown}:{port}"
        if self.audiosocket:
            self.audiosocket = reachable_audiosocket(self.audiosocket, self.advertise_url)
        password = os.environ.get(self.cc.password_env) if self.cc.password_env else None
        self._redis = aioredis.Redis.from_url(
            self.cc.redis_url,
            password=password,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_TIMEOUT_S,
            decode_responses=False,
        )
        for name, text in (
            ("claim", _CLAIM),
            ("refresh", _REFRESH),
            ("release", _RELEASE),
            ("take_over", _TAKE_OVER),
            ("peer_open", _PEER_OPEN),
        ):
            self._scripts[name] = self._redis.register_script(text)
        async with refusing_start(self._redis, self.url, self.cc.password_env):
            await self._redis.ping()
            await self._beat()
        self.problem = None
        self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeat_loop(), name="cluster-heartbeat")
        log.info("cluster: node %s (%s) joined the plane at %s", self.node_id, self.advertise_url, self.url)

    async def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
            self._heartbeat = None
        if self._redis is not None:
            try:  # leave at once rather than after the TTL: the ids this node still holds are released by their calls
                await self._redis.zrem(self.key("nodes"), self.node_id)
                await self._redis.delete(self.key("node", self.node_id))
                if self._reported_peers:
                    pipe = self._redis.pipeline(transaction=False)
                    for address in self._reported_peers:
                        pipe.hdel(self.key("ip", address), self.node_id)
                    await pipe.execute()
            except Exception:
                log.debug("cluster: leaving the plane failed", exc_info=True)
            await self._redis.aclose()
            self._redis = None

    async def _heartbeat_loop(self) -> None:
        period = self.cc.claim_ttl_s / 3
        while True:
            await asyncio.sleep(period)
            try:
                await self._beat()
                if self.problem is not None:
                    log.warning("cluster: Redis at %s is back", self.url)
                self.problem = None
            except Exception as exc:
                if self.problem is None:
                    log.warning(
                        "cluster: Redis at %s failed: %s (calls in progress go on; new calls are refused)",
                        self.url,
                        _why(exc),
                    )
                self.problem = f"redis at {self.url} unreachable: {_why(exc)}"
                self._count_error()
                continue
            for job in self.on_heartbeat:
                try:
                    await job()
                except Exception:
                    log.warning("cluster: heartbeat job failed", exc_info=True)

    async def _beat(self) -> None:
        """Register this node, keep its calls' claims, publish its per-IP counts, read who else lives."""
        r = self._redis
        now_ms = int(time.time() * 1000)
        node_key = self.key("node", self.node_id)
        pipe = r.pipeline(transaction=False)
        pipe.hset(
            node_key,
            mapping={
                "url": self.advertise_url,
                "audiosocket": self.audiosocket or "",
                "draining": "1" if self.draining else "0",
            },
        )
        pipe.pexpire(node_key, self.ttl_ms)
        pipe.zadd(self.key("nodes"), {self.node_id: now_ms + self.ttl_ms})
        pipe.zremrangebyscore(self.key("nodes"), 0, now_ms - 60_000)  # forget the long dead
        pipe.zrangebyscore(self.key("nodes"), now_ms, "+inf")
        peers = self.local_peers()
        for address, count in peers.items():
            pipe.hset(self.key("ip", address), self.node_id, count)
            pipe.pexpire(self.key("ip", address), 3 * self.ttl_ms)
        for address in self._reported_peers - set(peers):
            pipe.hdel(self.key("ip", address), self.node_id)
        results = await pipe.execute()
        self._reported_peers = set(peers)
        self.live_nodes = [n.decode() for n in results[4]]
        ids = list(self.live_call_ids())
        for start in range(0, len(ids), 500):
            keys = [self.key("call", i) for i in ids[start : start + 500]]
            await self._scripts["refresh"](keys=keys, args=[self.node_id, self.ttl_ms])

    def _count_error(self) -> None:
        if self.metrics is not None:
            self.metrics.cluster_redis_errors.inc()

    async def _call(self, coro):
        """One Redis request from a door: its failure becomes ClusterUnavailable and marks the plane unhealthy."""
        if self._redis is None:
            raise ClusterUnavailable(f"redis at {self.url}: not connected")
        try:
            return await coro
        except Exception as exc:
            self._count_error()
            self.problem = f"redis at {self.url} unreachable: {_why(exc)}"
            raise ClusterUnavailable(self.problem) from None

    # ------------------------------------------------------------ draining
    async def set_draining(self) -> None:
        self.draining = True
        try:
            await self._call(self._redis.hset(self.key("node", self.node_id), "draining", "1"))
        except ClusterUnavailable:
            log.warning("cluster: could not mark node %s draining in Redis (the heartbeat will)", self.node_id)

    # ------------------------------------------------------------ calls
    async def claim(self, ids: list[str]) -> Owner | None:
        """Claim a call's ids for this node: None when it is ours (now or already), else its owner elsewhere."""
        keys = [self.key("call", i) for i in ids]
        owner = await self._call(self._scripts["claim"](keys=keys, args=[self.node_id, self.ttl_ms]))
        return None if not owner else await self.owner(owner.decode())

    async def take_over(self, ids: list[str], dead: str) -> Owner | None:
        """The owner `dead` cannot be reached: claim the ids from it (None), unless a third node owns one."""
        keys = [self.key("call", i) for i in ids]
        owner = await self._call(self._scripts["take_over"](keys=keys, args=[self.node_id, self.ttl_ms, dead]))
        return None if not owner else await self.owner(owner.decode())

    async def owner(self, node_id: str) -> Owner:
        info = await self._call(self._redis.hgetall(self.key("node", node_id)))
        text = {k.decode(): v.decode() for k, v in info.items()}
        return Owner(node_id, text.get("url") or None, text.get("audiosocket") or None, text.get("draining") == "1")

    def keep(self, ids: Iterable[str]) -> None:
        """Claim more ids of a live call of ours now, not at the next heartbeat (fire and forget)."""
        keys = [self.key("call", i) for i in ids]
        if keys and self._redis is not None:
            asyncio.get_running_loop().create_task(self._keep(keys))

    async def _keep(self, keys: list[str]) -> None:
        try:
            await self._scripts["refresh"](keys=keys, args=[self.node_id, self.ttl_ms])
        except Exception as exc:
            log.info("cluster: claiming %d more call ids failed (%s); the heartbeat retries", len(keys), _why(exc))

    def release(self, ids: Iterable[str]) -> None:
        """The call ended: its ids are free (fire and forget; a failure leaves them to expire within the TTL)."""
        keys = [self.key("call", i) for i in ids]
        if keys and self._redis is not None:
            asyncio.get_running_loop().create_task(self._release(keys))

    async def _release(self, keys: list[str]) -> None:
        try:
            await self._scripts["release"](keys=keys, args=[self.node_id])
        except Exception as exc:
            log.info(
                "cluster: releasing %d call ids failed (%s); they expire within %.0f s",
                len(keys),
                _why(exc),
                self.cc.claim_ttl_s,
            )

    # ------------------------------------------------------------ hops (single use across nodes)
    async def hop_nonce_spend(self, nonce: str, ttl_ms: int) -> bool:
        """True for the first use of a hop's nonce anywhere in the plane (SET NX); False for a replay."""
        return bool(await self._call(self._redis.set(self.key("hop", nonce), b"1", nx=True, px=ttl_ms)))

    # ------------------------------------------------------------ tokens (single use across nodes)
    async def token_minted(self, token_id: str, expires_at: float) -> None:
        await self._call(self._redis.set(self.key("token", token_id), b"1", pxat=int(expires_at * 1000)))

    async def token_spend(self, token_id: str) -> bool:
        """True for the one door in the whole plane that spends it (an atomic GETDEL)."""
        return await self._call(self._redis.getdel(self.key("token", token_id))) is not None

    async def token_unspent(self, token_id: str) -> bool:
        return bool(await self._call(self._redis.exists(self.key("token", token_id))))

    # ------------------------------------------------------------ per-IP caps across nodes
    async def peer_open(self, address: str, cap: int, rate: float) -> str | None:
        """None, or 'cap' / 'rate' when the address is over the plane-wide limit."""
        keys = [self.key("ip", address), self.key("iprate", address)]
        nodes = self.live_nodes if self.node_id in self.live_nodes else [*self.live_nodes, self.node_id]
        why = await self._call(
            self._scripts["peer_open"](
                keys=keys,
                args=[self.node_id, cap, int(rate) if rate else 0, 3 * self.ttl_ms, int(time.time() * 1e6), *nodes],
            )
        )
        return why.decode() or None

    def peer_close(self, address: str) -> None:
        if self._redis is not None:
            asyncio.get_running_loop().create_task(self._peer_close(address))

    async def _peer_close(self, address: str) -> None:
        try:
            await self._redis.hincrby(self.key("ip", address), self.node_id, -1)
        except Exception:
            pass  # the next heartbeat rewrites this node's count

    # ------------------------------------------------------------ uploaded voices (shared by every node)
    async def voice_put(self, name: str, fields: dict[str, bytes | str]) -> None:
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(self.key("voice", name), mapping=fields)
        pipe.sadd(self.key("voices"), name)
        pipe.delete(self.key("voice-deleted", name))
        await self._call(pipe.execute())

    async def voice_delete(self, name: str) -> None:
        """Deleted on purpose: a tombstone tells the other nodes to drop it (a voice merely missing, after a
        Redis that lost its data, is shared again by the nodes that have it)."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(self.key("voice", name))
        pipe.srem(self.key("voices"), name)
        pipe.set(self.key("voice-deleted", name), b"1", px=VOICE_TOMBSTONE_MS)
        await self._call(pipe.execute())

    async def voice_deleted(self, name: str) -> bool:
        return bool(await self._call(self._redis.exists(self.key("voice-deleted", name))))

    async def voice_names(self) -> set[str]:
        return {n.decode() for n in await self._call(self._redis.smembers(self.key("voices")))}

    async def voice_get(self, name: str) -> dict[str, bytes] | None:
        got = await self._call(self._redis.hgetall(self.key("voice", name)))
        return {k.decode(): v for k, v in got.items()} or None


def hop_secret(secret_env: str | None) -> bytes:
    """The plane's hop secret, from the environment only: one secret on every node, never made up by a node nor
    kept in Redis (a node with its own, or with one from a Redis that lost its data, would have its legs refused)."""
    if not secret_env:
        raise ValueError(
            "cluster.secret_env is required with cluster.redis_url: name the environment variable "
            f"holding the nodes' shared secret (at least {MIN_SECRET_CHARS} characters, the same on every node)"
        )
    value = os.environ.get(secret_env, "")
    if len(value) < MIN_SECRET_CHARS:
        raise ValueError(
            f"cluster.secret_env names {secret_env!r}, which must hold at least {MIN_SECRET_CHARS} characters"
        )
    return value.encode()


def _why(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


_LOGIN_REFUSED = (
    "NOAUTH",
    "HELLO must be called",
    "Authentication required",
    "invalid password",
    "invalid username-password",
    "WRONGPASS",
)


def start_refusal(url: str, exc: BaseException, password_env: str | None) -> str:
    """The start's one line when Redis cannot be used: a refused login says which setting to look at."""
    why = _why(exc)
    if type(exc).__name__ in ("AuthenticationError", "AuthenticationWrongNumberOfArgsError") or any(
        s.lower() in why.lower() for s in _LOGIN_REFUSED
    ):
        if not password_env:
            return (
                f"cluster.redis_url {url} wants a password: name the environment variable that holds it in "
                "cluster.password_env"
            )
        return f"cluster.redis_url {url} refused the password in {password_env} ({why})"
    return f"cluster.redis_url {url} is unreachable: {why}"


@contextlib.asynccontextmanager
async def refusing_start(client, url: str, password_env: str | None):
    """Around a start's first Redis calls: any failure closes `client` and refuses the start with a ValueError
    in start_refusal's words (no traceback of redis internals)."""
    try:
        yield
    except Exception as exc:
        await client.aclose()
        raise ValueError(start_refusal(url, exc, password_env)) from None
