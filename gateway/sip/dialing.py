"""Outbound calls through `sip.trunks` (`POST /v1/calls`): the INVITE (gateway/sip/outbound.py), its progress and
outcome to the agent's control socket, and once answered an ordinary SIP call of the leg (gateway/legs/sip.py).

Control events, for an agent attached on `/v1/control/{call_id}` before or after the answer:
`call.progress` {state: trying | ringing | early, status}, then `call.answered` {status, sip} or
`call.failed` {code, status, reason}; an agent that attaches later gets the latest of each again
(gateway/core/sticky.py). The call counts against the same capacity as inbound ones.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import ssl

from aiortp import RTPSession

from gateway import protocol as P
from gateway.sip import routes, sdes, tls
from gateway.sip.identity import call_identity
from gateway.sip.in_dialog import header_pairs
from gateway.sip.outbound import ALLOW, TIMER_D_S, TLS_FAILED, UNAVAILABLE, Dialed, InviteClient, Outcome
from gateway.sip.outgoing_dialog import OutgoingDialog, sdp_offer
from gateway.sip.sdp_check import Refusal, check_offer
from gateway.sip.srtp import SrtpSession, protect_sends
from gateway.sip.tls import client_context

log = logging.getLogger("voxgate.sip")
GREETING_GRACE_S = 1.0  # an answered call with no agent yet waits this long for one before the greeting plays


class Dialing:
    def __init__(self, server):
        self.server = server
        self.clients: dict[str, InviteClient] = {}  # SIP Call-ID -> its INVITE, until Timer D after the outcome
        self.trunk_ips: dict[str, str] = {}  # SIP Call-ID -> the address its INVITE went to: only it may answer
        self.outbound: set[str] = set()  # SIP Call-IDs of answered outbound calls
        self.placing = 0  # calls POSTed whose INVITE is not yet out (RTP ports, DNS, the trunk's connection)
        self._contexts: dict[str, object] = {}  # TLS trunk name -> its ssl client context

    # ------------------------------------------------------------ from the leg's intake
    def feed(self, response, addr: tuple[str, int]) -> bool:
        """True when the answer is for one of our INVITEs (taken, or dropped when it does not come from the trunk)."""
        call_id = response.call_id or ""
        client = self.clients.get(call_id)
        if client is None:
            return False
        if addr[0] != self.trunk_ips.get(call_id):  # a stranger's forged 486 or 200 must not end or take the call
            log.info(
                "sip: answer %s to outbound call %s from %s, not its trunk: dropped",
                response.status_code,
                call_id,
                addr[0],
            )
            return True
        client.feed(response)
        return True

    def ringing(self) -> int:
        """Outbound calls placed but not yet answered or failed."""
        return self.placing + sum(1 for client in self.clients.values() if client.outcome is None)

    def owns(self, c) -> bool:
        return c.sip_call_id in self.outbound

    def in_dialog(self, door, c, msg, method: str) -> None:
        """A request in an outbound call's dialog (its tags and peer checked; INFO and NOTIFY taken before): BYE
        ends it; a re-INVITE or UPDATE is answered (hold, a new codec or address, a session refresh); OPTIONS
        gets 200; the rest 501."""
        server = self.server
        if method == "ACK":
            server.requests.acked(c, msg)
        elif method == "BYE":
            server._reply(door, msg, 200, "OK")
            server._spawn(server._end(c, "hangup"))
        elif method == "CANCEL":
            server._reply(door, msg, 200, "OK")
        elif method in ("INVITE", "UPDATE"):
            server.requests.answer_offer(door, c, msg, method)
        elif method == "OPTIONS":
            server._reply(door, msg, 200, "OK", {"Allow": ALLOW, "Supported": "timer"})
        else:
            server._reply(door, msg, 501, "Not Implemented")

    # ------------------------------------------------------------ POST /v1/calls
    def start(self, call_id: str, trunk, request_uri: str, from_uri: str, headers: dict, ring_timeout_s: float) -> None:
        self.placing += 1
        self.server.core.calls.sticky.open(call_id)  # an agent attaching before the first event waits for it
        self.server._spawn(self._dial(call_id, trunk, request_uri, from_uri, headers, ring_timeout_s))

    async def _notify(self, call_id: str, event: dict) -> None:
        """To the agent now, and again to one that attaches later (the registry keeps the call's latest)."""
        await self.server.core.calls.announce(call_id, event)

    async def _dial(self, call_id, trunk, request_uri, from_uri, headers, ring_timeout_s) -> None:
        server = self.server
        door = next(d for d in server.doors if d.name == trunk.transport.upper())
        stream = door.name != "UDP"  # TCP, TLS: over a connection of ours to the trunk
        host, port = trunk.target()
        loop = asyncio.get_running_loop()
        peer = None
        try:
            try:
                kind = socket.SOCK_STREAM if stream else socket.SOCK_DGRAM  # one answer per address
                infos = await loop.getaddrinfo(host, port, family=socket.AF_INET, type=kind)
                peer = infos[0][4][:2]
                if stream:
                    door.transport.ringing[peer] += 1  # the connection is not idle while this call rings
                    await door.transport.connect(peer, self._tls_context(trunk) if door.name == "TLS" else None, host)
            except (OSError, IndexError) as exc:  # ssl.SSLError and TimeoutError are OSErrors
                self.placing -= 1
                await self._failed(call_id, self._unreachable(trunk, door.name, host, peer or (host, port), exc))
                return
            try:
                dialed, rtp, ours = await self._dialed(call_id, trunk, door, peer, request_uri, from_uri, headers)
            except (OSError, RuntimeError) as exc:  # no free RTP port pair
                self.placing -= 1
                log.info("sip: outbound call %s to trunk %s not placed: %s", call_id, trunk.name, exc)
                await self._failed(call_id, Outcome(False, 503, str(exc)[:200], UNAVAILABLE))
                return
            await self._invite(call_id, dialed, door, peer, rtp, ours, trunk.srtp, ring_timeout_s)
        finally:
            self._release(door, peer)

    async def _dialed(self, call_id, trunk, door, peer, request_uri, from_uri, headers) -> tuple:
        """(the INVITE's Dialed, its RTP session, our SDES lines or None): Via and Contact name the listener of the
        trunk's transport (its in-dialog requests may come there), the offer our RTP port and keys."""
        server = self.server
        local_ip = server._local_ip_towards(peer[0])
        payload_type = server.payload_types[0]
        rtp = await RTPSession.create(
            local_addr=(server.host, 0),
            remote_addr=peer,
            payload_type=payload_type,
            dtmf_payload_type=101,
            symmetric_rtp=False,
            port_allocator=server.ports,
            jitter_prefetch=2,
            cname="voxgate",
            rtcp_interval=5.0,
        )
        _no_far_end_yet(rtp)
        ours = sdes.offer() if trunk.srtp != "off" else None
        profile = "RTP/SAVP" if trunk.srtp == "required" else "RTP/AVP"  # optional: keys offered best effort
        rtp_port = rtp._rtp_transport._transport.get_extra_info("sockname")[1]
        local_port = door.transport.local_addr[1]
        password = os.environ.get(trunk.password_env or "", "")
        return (
            Dialed(
                request_uri=request_uri,
                from_uri=from_uri,
                contact=f"sip:voxgate@{local_ip}:{local_port}"
                + ("" if door.name == "UDP" else f";transport={door.name.lower()}"),
                via_host=f"{local_ip}:{local_port}",
                sdp=sdp_offer(local_ip, rtp_port, payload_type, 1, ours, profile),
                transport=door.name,
                headers=headers,
                credentials=(trunk.user, password) if trunk.user else None,
                call_id=call_id,
            ),
            rtp,
            ours,
        )

    async def _invite(self, call_id, dialed, door, peer, rtp, ours, srtp_mode, ring_timeout_s) -> None:
        server = self.server
        loop = asyncio.get_running_loop()

        def progress(state: str, status: int) -> None:
            server._spawn(self._notify(call_id, {"type": "call.progress", "state": state, "status": status}))

        def send(request) -> None:  # the 2xx's ACK goes to its first route's hop; the rest (no Route) to the trunk
            door.transport.send(request, routes.hop_of(request, peer, door.name))

        client = InviteClient(
            dialed,
            send,
            ring_timeout_s=ring_timeout_s,
            on_progress=progress,
            timers=server.timers,
        )
        self.clients[call_id] = client
        self.trunk_ips[call_id] = peer[0]
        self.placing -= 1
        loop.call_later(ring_timeout_s + 32 + TIMER_D_S, self._forget_client, call_id)
        try:
            outcome = await client.run()
        except asyncio.CancelledError:  # shutdown while it rings: the far end stops ringing, the ports are freed
            client.cancel_now()
            await rtp.close()
            raise
        if not outcome.answered:
            await rtp.close()
            await self._failed(call_id, outcome)
            return
        await self._answered(call_id, client, outcome, door, peer, rtp, ours, srtp_mode)

    def _tls_context(self, trunk):
        """The trunk's client context (gateway/sip/tls.py), made once per trunk."""
        ctx = self._contexts.get(trunk.name)
        if ctx is None:
            ctx = self._contexts[trunk.name] = client_context(self.server.config.tls, trunk.ca_file)
        return ctx

    def _unreachable(self, trunk, transport: str, host: str, addr: tuple, exc: BaseException) -> Outcome:
        """The Outcome of a trunk we could not reach: `tls_failed` when TLS failed (its certificate did not verify,
        the handshake failed), else `unavailable` (a name that does not resolve, refused, timed out: RFC 3261
        §8.1.3.1 reads a transport error as 503). One log line names the trunk, its address and why."""
        why = tls.failure(exc) if isinstance(exc, ssl.SSLError) else (str(exc) or type(exc).__name__)
        if isinstance(exc, ssl.SSLError):
            log.warning(
                "sip: trunk %s (%s, %s:%d over TLS): %s; outbound calls to it fail with tls_failed",
                trunk.name,
                host,
                *addr,
                why,
            )
            return Outcome(False, 503, f"TLS with trunk {trunk.name}: {why}"[:200], TLS_FAILED)
        if isinstance(exc, TimeoutError):
            why = "no connection within the connect timeout"
        log.warning("sip: trunk %s (%s, %s:%d over %s) not reachable: %s", trunk.name, host, *addr, transport, why)
        return Outcome(False, 503, f"trunk {trunk.name} not reachable over {transport}: {why}"[:200], UNAVAILABLE)

    @staticmethod
    def _release(door, peer) -> None:
        if door.name != "UDP" and peer is not None and door.transport.ringing[peer] > 0:
            door.transport.ringing[peer] -= 1

    async def _failed(self, call_id: str, outcome: Outcome) -> None:
        log.info("sip: outbound call %s failed: %s (%d %s)", call_id, outcome.code, outcome.status, outcome.reason)
        self.server.core.metrics.errors.labels(code=f"call_{outcome.code}").inc()
        event = {"type": "call.failed", "code": outcome.code, "status": outcome.status, "reason": outcome.reason}
        calls = self.server.core.calls
        await calls.announce(call_id, event)
        calls.sticky.end([call_id])  # kept a while: an agent attaching late still learns how the call failed
        call = calls.get(call_id)
        if call is not None:
            await call.session.close()

    async def _answered(self, call_id, client, outcome, door, peer, rtp, ours=None, srtp_mode="off") -> None:
        server = self.server
        answer = check_offer(outcome.response.text, server.payload_types, srtp=srtp_mode != "off")
        dialog = OutgoingDialog(client, outcome.response, peer, door.transport.send)
        keys = None
        if not isinstance(answer, Refusal) and ours is not None:
            audio = answer.sdp.audio
            try:
                keys = sdes.answer_keys(srtp_mode, ours, audio.proto, list(audio.attributes.get("crypto", ())))
            except sdes.SdesError as exc:
                answer = Refusal(exc.code, str(exc))
        if isinstance(answer, Refusal):
            log.info("sip: outbound call %s: the answer's SDP is unusable (%s); BYE", call_id, answer.message)
            dialog.hangup()
            await rtp.close()
            await self._failed(call_id, Outcome(False, 488, f"{answer.code}: {answer.message}"[:200], "rejected"))
            return
        srtp = SrtpSession(*keys) if keys is not None else None
        if srtp is not None:  # every packet we send is protected; each that comes is unprotected before strict RTP
            protect_sends(rtp, srtp)
        identity = call_identity(
            "outbound", client.dialed.request_uri, header_pairs(client.invite), server.pass_headers
        )
        c = server.new_call(dialog, door, answer, rtp)
        c.keys, c.srtp = keys, srtp
        self.outbound.add(call_id)
        try:
            server.connect_call(c, [call_id], identity)
        except P.ProtocolError as exc:
            self.outbound.discard(call_id)
            dialog.hangup()
            await server._end(c, exc.code)
            await self._failed(call_id, Outcome(False, 503, exc.message, UNAVAILABLE))
            return
        c.acked = True
        c.open_media()  # we sent the ACK: media may flow
        log.info("sip: outbound call %s answered by %s (%s)", call_id, peer[0], c.codec)
        await self._notify(call_id, {"type": "call.answered", "status": outcome.status, "sip": identity})
        if server.config.greeting and c.call.control is None:
            await self._greet_unless_attached(c)

    async def _greet_unless_attached(self, c) -> None:
        """No agent to speak: the demo's greeting, as on inbound calls. The agent that POSTed the call attaches a
        moment after the POST; a far end that answers at once (a softphone on auto-answer) must not beat it."""
        await asyncio.sleep(GREETING_GRACE_S)
        if c.call.control is None and not c.ended and not c.call.session.closed:
            text = self.server.config.greeting
            await c.call.session.handle({"type": "text", "turn_id": "greeting", "text": text, "final": True})

    def _forget_client(self, call_id: str) -> None:
        self.clients.pop(call_id, None)
        self.trunk_ips.pop(call_id, None)

    def forget(self, sip_call_id: str) -> None:
        self.outbound.discard(sip_call_id)


def _no_far_end_yet(rtp) -> None:
    """Until the answer's SDP names the far end's media address (SipServer.new_call), the RTP session has none: it
    takes nothing (early media is not played; strict RTP starts from the answer) and sends nothing, where aiortp
    would send RTCP receiver reports for what came, and a BYE at close, to the address it was created with, the
    trunk's signalling address."""
    for transport in (rtp._rtp_transport, rtp._rtcp_transport):
        transport._on_rtp = transport._on_rtcp = _ignored
    rtp._remote_addr = rtp._remote_rtcp_addr = None  # aiortp's sockets send nothing to no address


def _ignored(data: bytes, addr: tuple[str, int]) -> None:
    pass


def new_call_id() -> str:
    return f"out-{secrets.token_hex(12)}"
