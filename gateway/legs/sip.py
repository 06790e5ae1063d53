"""Direct SIP: a trunk or a PBX sends INVITEs to `sip.port` (UDP, TCP) or `sip.tls.port` (TLS); each answered call is
a media leg with RTP.

Signalling is aiosipua's user agent server (transactions, dialogs, 2xx retransmission, CANCEL, OPTIONS),
media is one aiortp RTP session per call (one UDP socket pair and aiortp's RTCP timer task, no thread, no
pacer: the shared clock sends each 20 ms frame). This module adapts both to the call registry, as the AudioSocket leg does:

* INVITE from an address outside `sip.allow` -> 403, unless `sip.auth` lets credentials stand in for it; with
  `sip.auth`, an INVITE without credentials -> 401 with digest challenges, with refused ones -> 403
  (gateway/sip/inbound_auth.py); more than `sip.invites_per_source_per_s` from one
  source, or over the per-IP caps (`server.limits`) -> 503; at capacity or draining -> 503; a call id already
  in use -> 486; an SDP offer voxgate cannot answer truthfully -> 488 (gateway/sip/sdp_check.py). These are
  answered before the SIP stack sees the INVITE: a refused INVITE leaves no state. Every refusal carries
  voxgate's stable code in `X-Voxgate-Reason`.
* In-dialog requests (ACK, BYE, CANCEL, INFO, NOTIFY, re-INVITE, UPDATE) must carry the dialog's tags and come
  from its peer or `sip.allow` (gateway/sip/dialogs.py): else 481 / 403, and nothing changes.
* The call's ids: the SIP Call-ID, and `X-Call-Id` when the trunk or PBX sets one; the agent attaches on
  `/v1/control` with either.
* RTP out: G.711 μ-law or A-law, 20 ms, continuous sequence numbers and timestamps (silence while idle, as the
  far end expects a frame every 20 ms), the marker bit on the first frame of each talkspurt; sent to the SDP's
  address, or where the caller's RTP comes from in the first packets (strict RTP, gateway/sip/media_guard.py:
  a NAT's port, never a stranger's), and only once the ACK or the caller's first RTP arrived (no reflection
  towards an address an INVITE names). RTCP sender reports come from aiortp. Ports are drawn at random.
* RTP in: into the call's inbound path (recording, VAD barge-in, STT); RFC 4733 telephone-events and SIP INFO
  DTMF become `dtmf` events.
* BYE from the caller ends the call; the session ending (session.end, max call length, shutdown) sends BYE.
  A 200 OK never ACKed ends the call after `sip.ack_timeout_s` with BYE (RFC 3261 §13.3.1.4).
* `call.transfer` on the control socket sends REFER to a target `sip.transfer_targets` allows, as a client
  transaction; its answer and the NOTIFYs for it come back as `call.transfer` events.
* Playback truth: RTP has no far-end confirmation, so played_text counts what left on the clock.

The parts, each with one job, in gateway/sip/: in_dialog.py (our requests in a dialog: REFER, session refreshes;
the far end's re-INVITE/UPDATE on outbound calls), media.py (RTP to and from a call, strict RTP, DTMF),
dialing.py (outbound calls), registration.py (`sip.register`), dialogs.py, sdp_check.py, session_timer.py,
inbound_auth.py, sdes.py/srtp.py, transports.py. This module is the intake and the call's life: admit or refuse
an INVITE, answer it, route each message to its part, end the call.

A SIP call is owned by the node that answered it: its RTP never crosses nodes (docs/sip.md).
"""

from __future__ import annotations

import asyncio
import logging


try:  # the `sip` extra; without it the leg refuses a config that sets sip.port (install below)
    from aiosipua import (
        IncomingCall,
        Registration,
        SipRequest,
        SipResponse,
        SipUAC,
        SipUAS,
    )
    from aiosipua.sdp import SdpMessage, negotiate_sdp
    from aiosipua.utils import generate_tag

    from gateway.sip import sdes, session_timer
    from gateway.sip.answering import Answering, call_ids, rtp_port, sends
    from gateway.sip.call import Door, SipCall, SipLeg
    from gateway.sip.dialing import Dialing
    from gateway.sip.in_dialog import DialogRequests, dialog_refusal, header_pairs, reinvite_pending
    from gateway.sip.registration import register_all
    from gateway.sip.tls import server_context
    from gateway.sip.transports import TcpSip, TlsSip, UdpSip
except ImportError as exc:  # pragma: no cover - exercised only where the extra is missing
    _MISSING: ImportError | None = exc
else:
    _MISSING = None

from gateway import protocol as P
from gateway.config import sip_port_range
from gateway.core import CallCore
from gateway.legs.host import LegHost
from gateway.security.peers import parse_networks
from gateway.sip import dialogs, inbound_auth
from gateway.sip.addresses import media_address
from gateway.sip.identity import pass_header_names
from gateway.sip.media import CallMedia
from gateway.sip.rate import REASON as INVITE_RATE_REASON
from gateway.sip.rate import InviteRate
from gateway.sip.rtp_ports import RandomPortAllocator
from gateway.sip.sdp_check import AudioOffer, Refusal, check_offer
from gateway.wire import sip as wire

log = logging.getLogger("voxgate.sip")


USER_AGENT = "voxgate"
FRAME_PTIME_MS = 20
# A refusal's SIP status per voxgate code; anything else is a 500.
REFUSAL_STATUS = {
    P.SIP_FORBIDDEN: (403, "Forbidden"),
    P.SIP_AUTH_FAILED: (403, "Forbidden"),
    P.AT_CAPACITY: (503, "Service Unavailable"),
    P.SHUTTING_DOWN: (503, "Service Unavailable"),
    P.CLUSTER_UNAVAILABLE: (503, "Service Unavailable"),
    P.RTP_PORTS_EXHAUSTED: (503, "Service Unavailable"),
    P.ENGINE_UNAVAILABLE: (503, "Service Unavailable"),
    P.RATE_LIMITED: (503, "Service Unavailable"),
    P.CALL_BUSY: (486, "Busy Here"),
    P.UNSUPPORTED_FORMAT: (488, "Not Acceptable Here"),
    P.BAD_SDP: (488, "Not Acceptable Here"),
    P.SDP_ADDRESS: (488, "Not Acceptable Here"),
    P.SDP_PORT: (488, "Not Acceptable Here"),
    P.AUDIO_DECLINED: (488, "Not Acceptable Here"),
    P.SRTP_UNSUPPORTED: (488, "Not Acceptable Here"),
    P.SRTP_REQUIRED: (488, "Not Acceptable Here"),
    P.SESSION_INTERVAL_TOO_SMALL: (422, "Session Interval Too Small"),
    P.BAD_MESSAGE: (400, "Bad Request"),
}
RETRY_AFTER_S = "1"  # a rate-limited INVITE's Retry-After
CHALLENGED = "challenged"  # `_refusal`'s code for a 401 digest challenge (not an error, not in REFUSAL_STATUS)


class SipServer:
    def __init__(self, core: CallCore):
        self.core = core
        self.config = core.config.sip
        self.allow = parse_networks(self.config.allow)
        self.admission = inbound_auth.InboundAuth(self.allow, self.config.auth)
        self.pass_headers = pass_header_names(self.config.pass_headers)
        self.timers = session_timer.SessionTimerPolicy(self.config.session_expires_s, self.config.min_se_s)
        self.trusted = dialogs.trusted_networks(self.allow)  # who may speak for any dialog besides its peer
        self.invite_rate = InviteRate(self.config.invites_per_source_per_s)
        self.ports = RandomPortAllocator(sip_port_range(self.config.rtp_ports))
        self.media = CallMedia(core.metrics, self._spawn)  # RTP to and from the calls (gateway/sip/media.py)
        self.payload_types = [wire.PAYLOAD_TYPES[c] for c in self.config.codecs]
        self.calls: dict[str, SipCall] = {}  # SIP Call-ID -> call
        self.host: str | None = None
        self.port: int | None = None
        self.tls_port: int | None = None
        self.doors: list[Door] = []  # UDP (registrations go out on it), TCP, TLS: as sip.transports lists them
        self.uac: SipUAC | None = None
        self._tasks: set[asyncio.Task] = set()
        self.registrations: list[Registration] = []
        self._keepers: list[asyncio.Task] = []  # one per registration (gateway/sip/registration.py)
        self._watch: asyncio.Task | None = None
        self.dialing = Dialing(self)  # outbound calls: POST /v1/calls (gateway/sip/dialing.py)
        self.answering = Answering(self)  # inbound INVITEs let through (gateway/sip/answering.py)
        self.requests = DialogRequests(self)  # our REFER, refreshes; outbound re-INVITEs (gateway/sip/in_dialog.py)

    # ------------------------------------------------------------ lifecycle
    async def start(self, host: str, port: int) -> int:
        """UDP and TCP on one port number (`port` 0: a free one, the same for both), as `sip.transports` lists
        them; TLS on `sip.tls.port`. Returns the plain port (the TLS one when plain SIP is off)."""
        self.host = host
        plain = [t.upper() for t in ("udp", "tcp") if t in self.config.transports]
        if plain:
            self.port = await self._open_plain(host, port, plain)
        if self.config.tls is not None and "tls" in self.config.transports:
            self.tls_port = await self._open_tls(host, self.config.tls.port)
            self.port = self.port if self.port is not None else self.tls_port
        if self.config.public_ip:
            for door in self.doors:
                door.uas.advertised_addr = (self.config.public_ip, door.transport.local_addr[1])
            if self.uac is not None:
                self.uac.advertised_addr = (self.config.public_ip, self.port)
        log.info(
            "SIP listening on %s (%s; RTP %s)",
            host,
            ", ".join(f"{d.name} {d.transport.local_addr[1]}" for d in self.doors),
            self.config.rtp_ports,
        )
        if self.config.auth is not None:
            auth = self.config.auth
            log.info(
                "sip.auth: INVITEs %s authenticate with digest (realm %r, %s)",
                "from outside sip.allow must" if auth.combine == "either" else "from sip.allow must also",
                auth.realm,
                ", ".join(auth.algorithms),
            )
        if any(n.prefixlen == 0 for n in self.allow):
            log.warning(
                "sip.allow %s lets any address on the network start calls (and take sessions and RTP ports): "
                "list your trunk's or PBX's addresses instead where you can",
                self.config.allow,
            )
        self.registrations, self._keepers = await register_all(self.uac, self.config.register, USER_AGENT)
        self._watch = asyncio.get_running_loop().create_task(self._watch_rtp())
        return self.port

    async def _open_plain(self, host: str, port: int, names: list[str]) -> int:
        """UDP and/or TCP on one port number; with `port` 0, a number free for both."""
        for attempt in range(20 if port == 0 else 1):
            opened: list[Door] = []
            try:
                for name in names:
                    door = self._plain_door(name, host, opened[0].transport.local_addr[1] if opened else port)
                    await self._open(door)
                    opened.append(door)
                    door.transport.local_addr = (host, _bound_port(door))  # port 0: Via and Contact name the real one
                return opened[0].transport.local_addr[1]
            except OSError:  # the number UDP got is taken for TCP: another one (a fixed sip.port fails here)
                for door in opened:
                    self.doors.remove(door)
                    await door.uas.stop()
                if attempt == 19 or port != 0:
                    raise
        raise AssertionError("unreachable")

    def _plain_door(self, name: str, host: str, port: int) -> Door:
        if name == "UDP":
            udp = UdpSip(local_addr=(host, port))
            self.uac = SipUAC(udp)  # REGISTER (and the answers to it) goes through it
            return Door("UDP", udp, SipUAS(udp, user_agent=USER_AGENT, uac=self.uac))
        tcp = TcpSip((host, port), *self._stream_rules())
        return Door("TCP", tcp, SipUAS(tcp, user_agent=USER_AGENT))

    async def _open_tls(self, host: str, port: int) -> int:
        tls = TlsSip((host, port), *self._stream_rules(), context=server_context(self.config.tls))
        door = Door("TLS", tls, SipUAS(tls, user_agent=USER_AGENT))
        await self._open(door)
        tls.local_addr = (host, _bound_port(door))
        return tls.local_addr[1]

    def _stream_rules(self) -> tuple:
        """TcpSip's and TlsSip's rules: who may connect (credentials may admit any source), per-IP caps, idle close."""
        allow = [] if self.admission.open_to_any_source else self.allow
        return self.core.peers, allow, self.core.metrics, self.config.tcp_idle_s, self._carries_call

    async def _watch_rtp(self) -> None:
        """One task for every call: a caller whose RTP stopped (its phone or network went away without a BYE) is
        hung up after `sip.rtp_timeout_s`, not kept until `limits.max_call_s`. A caller holding the call with
        `inactive` sends nothing, so hold stops the count."""
        loop = asyncio.get_running_loop()
        timeout = self.config.rtp_timeout_s
        while True:
            await asyncio.sleep(min(timeout / 4, 5.0))
            now = loop.time()
            for c in list(self.calls.values()):
                if c.call is None or c.ended or c.held_inactive:
                    continue
                if now - c.heard_at > timeout:
                    log.info(
                        "sip: call %s: no RTP from the caller for %g s; ending it with BYE", c.sip_call_id, timeout
                    )
                    self._spawn(self.hang_up(c, "rtp_timeout"))

    async def _open(self, door: Door) -> None:
        uas = door.uas
        uas.on_invite = self.answering.on_invite
        uas.on_reinvite = self._on_reinvite
        uas.on_update = self._on_update
        uas.on_bye = self._on_bye
        uas.on_cancel = self._on_cancel
        uas.on_ack_timeout = lambda incoming: self._end_soon(incoming.call_id, "no_ack", send_bye=False)
        # the caller's session refreshes stopped (RFC 4028 §10): aiosipua sent the BYE
        uas.on_session_expired = lambda incoming: self._end_soon(incoming.call_id, "session_expired", send_bye=False)
        await uas.start()
        # our intake runs first (allow list, ACK, INFO, NOTIFY), then the stack's
        door.intake = door.transport.on_message
        door.transport.on_message = lambda msg, addr, door=door: self._on_message(door, msg, addr)
        self.doors.append(door)

    def _carries_call(self, addr: tuple[str, int]) -> bool:
        """Whether a call of ours came in on the TCP connection from `addr` (it may send nothing until its BYE)."""
        return any(c.door.name != "UDP" and tuple(c.incoming.source_addr) == addr for c in self.calls.values())

    def _door_of(self, incoming: IncomingCall) -> Door:
        return next(d for d in self.doors if d.transport is incoming.transport)

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        for keeper in self._keepers:  # none may register again after this
            keeper.cancel()
        for reg in self.registrations:
            if reg.state.value == "registered":
                reg.unregister()  # Expires: 0, best effort: the registrar forgets us now, not at expiry
        for c in list(self.calls.values()):
            await self.hang_up(c, "shutdown")
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for door in self.doors:
            await door.uas.stop()
        self.doors = []

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------ intake
    def _on_message(self, door: Door, msg, addr: tuple[str, int]) -> None:
        """Every message, before the SIP stack: new INVITEs are admitted or refused here (a refusal leaves no
        state), requests for our calls are checked against their dialog, answers to our REFER are taken."""
        if isinstance(msg, SipResponse):
            if not self.requests.on_response(msg, addr) and not self.dialing.feed(msg, addr):
                door.intake(msg, addr)
            return
        method = msg.method.upper()
        c = self.calls.get(msg.call_id or "")
        if c is not None and (method != "OPTIONS" or self.dialing.owns(c)):
            if not self._in_dialog(door, c, msg, method, addr):
                return
            if self.dialing.owns(c):  # the stack knows nothing of an outbound call: its BYE, ACK are ours
                self.dialing.in_dialog(door, c, msg, method)
                return
        elif method == "INVITE":
            if not self._admitted(door, msg, addr):
                return
        elif method in ("NOTIFY", "INFO"):  # for no call of ours: nothing to tell anyone
            self._reply(door, msg, *dialog_refusal(dialogs.NO_SUCH_DIALOG))
            return
        door.intake(msg, addr)

    def _in_dialog(self, door: Door, c: SipCall, msg: SipRequest, method: str, addr: tuple[str, int]) -> bool:
        """A request naming one of our calls: True when the stack should go on with it."""
        to_tag = msg.to_addr.tag if msg.to_addr else None
        verdict = dialogs.check(
            c.dialog, method, msg.from_addr.tag if msg.from_addr else None, to_tag, addr[0], self.trusted
        )
        if verdict is not None:
            self.core.metrics.errors.labels(code=verdict.code).inc()
            log.info("sip: %s for call %s from %s refused: %s", method, c.sip_call_id, addr[0], verdict.code)
            if method != "ACK":  # an ACK is never answered
                self._reply(door, msg, *dialog_refusal(verdict))
            return False
        if method == "INVITE" and not to_tag:
            self._reply(door, msg, 100, "Trying")  # a retransmission of the INVITE being answered: not a second call
            return False
        if method == "INVITE" and reinvite_pending(c) and not self.dialing.owns(c):  # outbound: in_dialog.py's
            self._reply(door, msg, 491, "Request Pending")  # glare with our refresh (RFC 3261 §14.2)
            return False
        if method == "ACK":
            c.acked = True
            c.open_media()
        elif method == "INFO":
            self._on_info(door, c, msg)
            return False
        elif method == "NOTIFY":
            self.requests.on_notify(door, c, msg)
            return False
        elif method in ("INVITE", "UPDATE") and msg.body:  # a new offer is checked before the stack parses it
            checked = check_offer(msg.text, self.payload_types, srtp=c.keys is not None)
            if isinstance(checked, Refusal):
                self._reply(door, msg, *self._sdp_refusal(checked, c.sip_call_id))
                return False
            crypto = list(checked.sdp.audio.attributes.get("crypto", ()))
            if not sdes.same_protection(c.keys is not None, checked.proto, crypto):  # SRTP kept, or never begun
                refusal = Refusal(P.SRTP_UNSUPPORTED, "a re-INVITE may not switch between RTP and SRTP")
                self._reply(door, msg, *self._sdp_refusal(refusal, c.sip_call_id))
                return False
            c.reoffer = checked
        elif method in ("INVITE", "UPDATE"):
            c.reoffer = None
        return True

    def _admitted(self, door: Door, msg: SipRequest, addr: tuple[str, int]) -> bool:
        """A new INVITE: refused here, statelessly, or handed to the stack (which then calls `Answering.on_invite`, gateway/sip/answering.py)."""
        refusal = self._refusal(door, msg, addr[0])
        if refusal is None:
            return True
        code, why, headers = refusal
        if code == CHALLENGED:  # the usual first answer to a trunk that authenticates: not an error
            log.debug("sip: INVITE %s from %s challenged (%s)", msg.call_id, addr[0], why)
            self._reply(door, msg, 401, "Unauthorized", headers)
            return False
        status, reason = REFUSAL_STATUS.get(code, (500, "Server Internal Error"))
        self.core.metrics.errors.labels(code=code).inc()
        # a flood is counted, not logged line by line (voxgate_connections_refused_total); failed credentials are
        # logged once per burst and source by gateway/sip/auth_failures.py
        level = logging.DEBUG if code in (P.RATE_LIMITED, P.SIP_AUTH_FAILED) else logging.INFO
        log.log(level, "sip: INVITE %s from %s refused with %d (%s): %s", msg.call_id, addr[0], status, code, why)
        self._reply(
            door,
            msg,
            status,
            reason,
            {**wire.refusal_headers(code), "Reason": f'SIP;cause={status};text="{code}"', **headers},
        )
        return False

    def _refusal(self, door: Door, msg: SipRequest, source: str) -> tuple[str, str, dict] | None:
        screened = self.admission.screen(source)
        if screened is not None:
            self.core.metrics.connections_refused.labels(reason="sip_allow").inc()
            return P.SIP_FORBIDDEN, screened.reason, {}
        if not self.invite_rate.admit(source):
            self.core.metrics.connections_refused.labels(reason=INVITE_RATE_REASON).inc()
            return (
                P.RATE_LIMITED,
                f"more than sip.invites_per_source_per_s ({self.config.invites_per_source_per_s:g}) new INVITEs",
                {"Retry-After": RETRY_AFTER_S},
            )
        credentials = msg.headers.get("authorization") + msg.headers.get("proxy-authorization")
        decision = self.admission.decide(source, "INVITE", credentials)
        if decision.kind == inbound_auth.CHALLENGE:
            return CHALLENGED, decision.reason, {"WWW-Authenticate": decision.challenges}
        if decision.kind == inbound_auth.REFUSED:
            self.core.metrics.connections_refused.labels(reason="sip_auth").inc()
            return P.SIP_AUTH_FAILED, f"digest authentication refused ({decision.reason})", {}
        if not self.core.accepting or self.core.draining:
            return P.SHUTTING_DOWN, "the gateway is not accepting calls", {}
        if self.core.registry.full(self.dialing.ringing()):  # an outbound call ringing holds its place too
            return (
                P.AT_CAPACITY,
                f"the gateway holds its maximum of {self.core.config.server.max_sessions} sessions",
                {},
            )
        if not msg.body or (msg.content_type or "").split(";")[0].strip().lower() != "application/sdp":
            return P.UNSUPPORTED_FORMAT, "the INVITE carries no SDP offer (late offers are not supported)", {}
        checked = check_offer(msg.text, self.payload_types, srtp=self.config.srtp != "off")
        if isinstance(checked, Refusal):
            return checked.code, checked.message, {}
        try:
            self._srtp_keys(door, checked)
        except sdes.SdesError as exc:
            return P.SRTP_REQUIRED if exc.code == "srtp_required" else P.SRTP_UNSUPPORTED, str(exc), {}
        timer = self.timers.answer(header_pairs(msg))
        if isinstance(timer, session_timer.Refusal):
            code = P.SESSION_INTERVAL_TOO_SMALL if timer.status == 422 else P.BAD_MESSAGE
            return code, f"session timer: {timer.reason}", timer.headers
        if call_ids(msg) is None:
            return P.BAD_MESSAGE, "Call-ID or X-Call-Id is not a usable call id (1..128 printable characters)", {}
        return None

    def _reply(self, door: Door, request: SipRequest, status: int, reason: str, headers: dict | None = None) -> None:
        """A response outside the stack (refusals before a call exists, in-dialog refusals, INFO, NOTIFY)."""
        self._send_reply(door, self._response(request, status, reason, headers))

    @staticmethod
    def _send_reply(door: Door, resp: SipResponse) -> None:
        try:
            door.transport.send_reply(resp)
        except (ValueError, RuntimeError):
            pass  # no Via to answer to, or the TCP connection is gone: nothing can be said

    @staticmethod
    def _response(request: SipRequest, status: int, reason: str, headers: dict | None = None) -> SipResponse:
        """The answer to `request`: its Via, From, Call-ID, CSeq; its To with a tag. A header whose value is a list
        is sent once per item (e.g. one WWW-Authenticate per digest algorithm)."""
        resp = SipResponse(status_code=status, reason_phrase=reason)
        for v in request.headers.get("via"):
            resp.headers.append("Via", v)
        for name in ("From", "Call-ID", "CSeq"):
            value = request.headers.get_first(name.lower())
            if value:
                resp.headers.set_single(name, value)
        to = request.headers.get_first("to")
        if to:
            resp.headers.set_single("To", to if ";tag=" in to else f"{to};tag={generate_tag()}")
        resp.headers.set_single("User-Agent", USER_AGENT)
        for name, value in (headers or {}).items():
            if isinstance(value, list):
                for item in value:
                    resp.headers.append(name, item)
            else:
                resp.headers.set_single(name, value)
        return resp

    def _srtp_keys(self, door: Door, offer: AudioOffer) -> tuple | None:
        """(our crypto line, the caller's) when the call is to be SRTP, None for plain RTP; SdesError: 488."""
        return sdes.answer_over(door.name == "TLS", self.config.srtp, offer.proto, list(offer.crypto))

    def _sdp_refusal(self, refusal: Refusal, call_id: str) -> tuple[int, str, dict[str, str]]:
        self.core.metrics.errors.labels(code=refusal.code).inc()
        log.info("sip: re-INVITE for call %s refused (%s): %s", call_id, refusal.code, refusal.message)
        return 488, "Not Acceptable Here", wire.refusal_headers(refusal.code)

    def _refuse(self, incoming: IncomingCall, code: str, why: str) -> None:
        """Refuse an INVITE the stack already holds (found out while answering): the answer, then no state left."""
        status, reason = REFUSAL_STATUS.get(code, (500, "Server Internal Error"))
        self.core.metrics.errors.labels(code=code).inc()
        log.info("sip: call %s refused with %d (%s): %s", incoming.call_id, status, code, why)
        incoming._send_response(
            status, reason, extra_headers={**wire.refusal_headers(code), "Reason": f'SIP;cause={status};text="{code}"'}
        )
        incoming.dialog.terminate()
        door = self._door_of(incoming)
        if door.uas._calls.get(incoming.call_id) is incoming:
            del door.uas._calls[incoming.call_id]
        door.uas._remove_invite_transaction(incoming.invite)

    # ------------------------------------------------------------ INVITE
    # ------------------------------------------------------------ outbound (gateway/sip/dialing.py)
    def _local_ip_towards(self, peer_ip: str) -> str:
        return media_address(self.config.public_ip, self.host, peer_ip)

    def new_call(self, dialog, door: Door, answer: AudioOffer, rtp) -> SipCall:
        """An answered outbound call: the dialog our INVITE made and the RTP session its offer named."""
        c = SipCall(self, dialog, door, answer, codec=wire.CODEC_OF_PAYLOAD_TYPE[answer.payload_type], rtp=rtp)
        rtp.update_remote(answer.address)
        c.hop = dialog.next_hop
        self.calls[dialog.call_id] = c
        return c

    def connect_call(self, c: SipCall, ids: list[str], identity: dict) -> None:
        """The call joins the registry (the agent's control socket, capacity) and its media starts."""
        c.leg = SipLeg(c, self.core.metrics)
        c.call = self.core.calls.connect_media(ids, c.leg, "sip", details={"sip": identity})
        self.media.wire(c)
        agreement = self.timers.agreed(header_pairs(c.incoming.answer))
        if agreement is not None:  # the 2xx set a session timer: we refresh it or watch for the peer's refreshes
            c.clock = self.requests.session_clock(c, agreement)
            c.clock.start()

    def _sdp_answer(self, c: SipCall, offer: AudioOffer) -> SdpMessage:
        answer, _ = negotiate_sdp(
            offer.sdp,
            local_ip=self._media_ip(c),
            rtp_port=rtp_port(c),
            supported_codecs=[wire.PAYLOAD_TYPES[c.codec]],
            dtmf_payload_type=offer.dtmf_payload_type or 0,  # 0: no telephone-event in the answer
            ptime=FRAME_PTIME_MS,
            session_name=USER_AGENT,
        )
        answer.audio.attributes["ptime"] = [str(FRAME_PTIME_MS)]  # we send 20 ms packets, whatever ptime was offered
        if c.keys is not None:  # RTP/SAVP (the offer's proto) with our key: we encrypt with it, the caller with its own
            answer.audio.attributes["crypto"] = [c.keys[0].to_sdp()]
        # one session for the call, its version one more for each SDP we send (RFC 3264 §8)
        session, version = c.sdp_origin or (answer.origin.session_id, int(answer.origin.session_version) - 1)
        c.sdp_origin = (session, version + 1)
        answer.origin.session_id, answer.origin.session_version = session, str(version + 1)
        return answer

    def _media_ip(self, c: SipCall) -> str:
        return media_address(self.config.public_ip, self.host, c.incoming.source_addr[0])

    # ------------------------------------------------------------ in-dialog
    def _on_reinvite(self, incoming: IncomingCall) -> None:
        """re-INVITE from the dialog's peer (checked in `_in_dialog`): hold (sendonly / inactive), resume, a new
        address or codec; answered from the new offer. It and UPDATE (`_on_update`) are the only ways to move a call's
        media."""
        c = self.calls.get(incoming.call_id)
        if c is None or c.rtp is None:
            incoming._send_response(481, "Call/Transaction Does Not Exist")
            return
        offer = c.reoffer
        if offer is None:  # a refresh without SDP: the answer we gave
            incoming.accept(self._sdp_answer(c, c.offer))
            return
        incoming.accept(self._take_offer(c, offer))

    def _on_update(self, incoming: IncomingCall, request: SipRequest) -> SdpMessage | None:
        """UPDATE from the dialog's peer (checked in `_in_dialog`, RFC 3311): with an offer, taken as a re-INVITE's
        is and answered in the 200; without one (a session refresh) the stack answers 200 alone. None with an
        offer: the stack answers 488 (the call is not answered yet)."""
        c = self.calls.get(incoming.call_id)
        if c is None or c.rtp is None or c.reoffer is None:
            return None
        offer, c.reoffer = c.reoffer, None
        return self._take_offer(c, offer)

    def _take_offer(self, c: SipCall, offer: AudioOffer) -> SdpMessage:
        """A new offer in the call (re-INVITE or UPDATE): hold, resume, a new address or codec. Returns our answer."""
        codec = wire.CODEC_OF_PAYLOAD_TYPE[offer.payload_type]
        before = (c.sending, c.codec, c.offer.address)  # a session refresh offering the same SDP changes none
        if codec != c.codec:  # same SSRC and sequence, new payload type (RFC 3550 allows it)
            c.codec = codec
            c.rtp._sender._payload_type = offer.payload_type
        if offer.address != c.offer.address and offer.address[0] != "0.0.0.0":
            c.guard.move(offer.address, c.incoming.source_addr[0])
            c.rtp.update_remote(offer.address)
        c.offer = offer
        c.held_inactive = offer.direction in ("inactive", "recvonly")  # the caller sends no RTP then
        c.heard_at = asyncio.get_running_loop().time()
        was_sending = c.sending
        c.sending = sends(offer)
        if c.sending and not was_sending and c.leg is not None:
            c.leg.talkspurt()
        answer = self._sdp_answer(c, offer)
        if c.call is not None and (c.sending, c.codec, c.offer.address) != before:  # tell the agent of changes only
            self._spawn(
                c.call.notify(
                    {
                        "type": "call.media",
                        "state": "held" if not c.sending else "connected",
                        "leg": "sip",
                        "codec": codec,
                    }
                )
            )
        return answer

    def _on_bye(self, incoming: IncomingCall, request: SipRequest) -> None:
        c = self.calls.get(incoming.call_id)
        if c is not None:
            self._spawn(self._end(c, "hangup"))

    def _on_cancel(self, request: SipRequest, addr) -> None:
        c = self.calls.get(request.call_id or "")
        if c is not None and c.call is None:
            self._forget(c)  # the stack answered 487; the pending answer sees the call gone

    def _end_soon(self, sip_call_id: str, reason: str, send_bye: bool) -> None:
        c = self.calls.get(sip_call_id)
        if c is not None:
            self._spawn(self.hang_up(c, reason) if send_bye else self._end(c, reason))

    def _on_info(self, door: Door, c: SipCall, request: SipRequest) -> None:
        if c.call is None:
            self._reply(door, request, *dialog_refusal(dialogs.NO_SUCH_DIALOG))
            return
        digit = wire.dtmf_from_info(request.content_type, request.text if request.body else "")
        if digit is None:
            self._reply(
                door, request, 415, "Unsupported Media Type", {"Accept": "application/dtmf-relay, application/dtmf"}
            )
            return
        self._reply(door, request, 200, "OK")
        self._spawn(self.media.dtmf(c, digit, "info"))

    # ------------------------------------------------------------ ending
    async def hang_up(self, c: SipCall, reason: str) -> None:
        """Our side ends the call: BYE (when answered), RTP closed, the session ended."""
        if c.ended:
            return
        if c.incoming._answered:
            c.incoming._stop_retransmissions()  # a 200 OK still unACKed is not sent again after our BYE
            self.requests.bye(c)
        await self._end(c, reason)

    async def _end(self, c: SipCall, reason: str) -> None:
        if c.ended:
            return
        c.ended = True
        if c.ack_timer is not None:
            c.ack_timer.cancel()
        if c.clock is not None:
            c.clock.cancel()
        for pending in list((c.requests or {}).values()):
            pending.answered(487, "Request Terminated")  # our requests' transactions stop resending
        if c.refer is not None:
            c.refer.answered(487, "Request Terminated")
        self._forget(c)
        await self.media.close(c)
        if c.call is not None:
            await self.core.calls.end_media(c.call, reason)

    def _forget(self, c: SipCall) -> None:
        self.dialing.forget(c.sip_call_id)
        if self.calls.get(c.sip_call_id) is c:
            del self.calls[c.sip_call_id]
        if c.door.uas._calls.get(c.sip_call_id) is c.incoming:
            del c.door.uas._calls[c.sip_call_id]  # the stack keeps a dialog we ended ourselves until told
        c.door.uas._remove_invite_transaction(c.incoming.invite)
        if c.peer_slot is not None:
            self.core.peers.close(c.peer_slot)
            c.peer_slot = None


def _bound_port(door: Door) -> int:
    """The port a door's socket really bound (asked for 0 in tests)."""
    t = door.transport
    sock = t._udp_transport.get_extra_info("sockname") if door.name == "UDP" else t._server.sockets[0].getsockname()
    return sock[1]


def install(core: CallCore, host: LegHost) -> SipServer | None:
    """The SIP leg, when `sip.port` is set (UDP and TCP; its own port, it is not HTTP)."""
    cfg = core.config.sip
    if cfg.port is None:
        return None
    if _MISSING is not None:
        raise ValueError(
            f"{core.config.source}: sip.port is set but the SIP stack is not installed "
            f"(pip install 'voxgate[sip]'): {_MISSING}"
        )
    server = SipServer(core)
    if cfg.trunks:
        from gateway.http.calls import routes

        host.add_routes(routes(core, server))

    async def start() -> None:
        await server.start(cfg.host or core.config.server.host, cfg.port)

    host.on_start(start)
    host.on_stop(server.stop)
    return server


__all__ = ["SipLeg", "SipServer", "install"]
