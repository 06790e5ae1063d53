"""Answering an inbound INVITE the intake let through (gateway/legs/sip.py `_admitted`): the call's state, its
per-IP slot, its session timer, the RTP session (and SRTP), the cluster's claim, the call registry, the 200 OK
with our SDP answer, the wait for the ACK (Timer H), and the greeting when no agent attached. Anything that
fails before the 200 OK refuses the INVITE with the stable code's status; after it, the call is hung up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from aiortp import RTPSession
from aiosipua import IncomingCall, SipRequest
from aiosipua.dialog import Dialog
from aiosipua.utils import format_addr

from gateway import protocol as P
from gateway.cluster.forward import owner_elsewhere
from gateway.cluster.plane import ClusterUnavailable
from gateway.core.calls import normalize_call_id
from gateway.sip import routes, session_timer
from gateway.sip.addresses import WILDCARDS
from gateway.sip.call import SipCall, SipLeg
from gateway.sip.identity import call_identity
from gateway.sip.in_dialog import header_pairs
from gateway.sip.sdp_check import AudioOffer, check_offer
from gateway.sip.srtp import SrtpSession, protect_sends
from gateway.wire import sip as wire

log = logging.getLogger("voxgate.sip")

USER_AGENT = "voxgate"
RTCP_INTERVAL_S = 5.0  # RFC 3550's minimum; aiortp spreads each report over 0.5x..1.5x of it
NO_DTMF_PAYLOAD_TYPE = 128  # outside RTP's 7 bits: no packet is taken for a telephone-event the offer did not bind


class Answering:
    """One per SipServer (`server.answering`); aiosipua calls `on_invite`."""

    def __init__(self, server):
        self.server = server

    def on_invite(self, incoming: IncomingCall) -> None:
        """An INVITE `_admitted` let through, now held by the stack."""
        server = self.server
        door = server._door_of(incoming)
        offer = check_offer(incoming.invite.text, server.payload_types, srtp=server.config.srtp != "off")  # `_admitted`
        c = SipCall(server, incoming, door, offer, codec=wire.CODEC_OF_PAYLOAD_TYPE[offer.payload_type])
        incoming.dialog = RoutedDialog.of(incoming.dialog, incoming.invite)
        c.hop = routes.first_hop(incoming.dialog.route_set, incoming.source_addr, door.name)
        c.keys = server._srtp_keys(door, offer)  # passed in `_admitted` too: fresh keys of ours for this call
        pairs = header_pairs(incoming.invite)
        timer = session_timer.engaged(server.timers.answer(pairs), pairs)  # the answer passed in `_admitted`
        if timer is not None:  # aiosipua's accept writes Session-Expires; its timer watches from the ACK
            incoming.session_interval, incoming.session_refresher_us = timer.interval, timer.we_refresh
        if timer is not None and timer.we_refresh:  # we refresh with our own clock: aiosipua's UPDATE is sent once,
            # never again when lost, and its failure never ends the call; aiosipua sees ours as the call's timer
            c.clock = incoming._session_timer = server.requests.session_clock(c, timer)
        server.calls[incoming.call_id] = c
        if door.name == "UDP":  # over TCP the connection holds the per-IP slot (_TcpSip)
            source = incoming.source_addr[0]
            refused = server.core.peers.open(source)
            if refused is not None:
                server.core.metrics.connections_refused.labels(reason=refused).inc()
                server._forget(c)
                server._refuse(incoming, P.RATE_LIMITED, f"per-IP limit {refused} (server.limits)")
                return
            c.peer_slot = source
        server._spawn(self._answer(c))

    async def _answer(self, c: SipCall) -> None:
        server = self.server
        incoming, offer = c.incoming, c.offer
        loop = asyncio.get_running_loop()
        try:
            if server.config.answer_delay_ms > 0:
                incoming.ringing()
                await asyncio.sleep(server.config.answer_delay_ms / 1000.0)
                if self._gone(c):
                    return
            try:
                c.rtp = await RTPSession.create(
                    local_addr=(server.host, 0),
                    remote_addr=offer.address,
                    payload_type=offer.payload_type,
                    dtmf_payload_type=offer.dtmf_payload_type or NO_DTMF_PAYLOAD_TYPE,
                    symmetric_rtp=False,  # strict RTP: the guard, not aiortp, decides where media goes
                    port_allocator=server.ports,
                    jitter_prefetch=2,
                    cname=USER_AGENT,
                    rtcp_interval=RTCP_INTERVAL_S,
                )
            except RuntimeError:
                server._forget(c)
                server._refuse(incoming, P.RTP_PORTS_EXHAUSTED, f"no free RTP port pair in {server.config.rtp_ports}")
                return
            if c.keys is not None:
                c.srtp = SrtpSession(*c.keys)
                protect_sends(c.rtp, c.srtp)
            if self._gone(c):  # cancelled while the sockets were bound
                await server.media.close(c)
                return
            if server.core.cluster is not None and not await self._claimed_here(c):
                await server.media.close(c)
                return
            c.leg = SipLeg(c, server.core.metrics)
            try:
                c.call = server.core.calls.connect_media(
                    call_ids(incoming.invite), c.leg, "sip", details={"sip": self._identity(incoming.invite)}
                )
            except P.ProtocolError as exc:
                await server.media.close(c)
                server._forget(c)
                server._refuse(incoming, exc.code, exc.message)
                return
            server.media.wire(c)
            if server.config.public_ip is None and server.host in WILDCARDS:  # Contact: the address the peer reaches
                incoming.advertised_addr = (server._media_ip(c), c.door.transport.local_addr[1])
            incoming.accept(server._sdp_answer(c, offer))
            incoming.dialog.contact = f"<sip:{format_addr(*incoming._signaling_addr())}>"  # as the 200's
            if c.clock is not None:
                c.clock.start()
            c.sending = sends(offer)
            c.ack_timer = loop.call_later(server.config.ack_timeout_s, self._ack_deadline, c)
            log.info(
                "sip: call %s answered from %s (%s, RTP port %d)",
                incoming.call_id,
                incoming.source_addr[0],
                c.codec,
                rtp_port(c),
            )
            await c.call.session.flush_events()
            if server.config.greeting and c.call.control is None:
                await asyncio.wait([loop.create_task(c.media_opened.wait())], timeout=server.config.ack_timeout_s)
                if c.media_open and not c.ended and c.call.control is None:
                    await c.call.session.handle(
                        {"type": "text", "turn_id": "greeting", "text": server.config.greeting, "final": True}
                    )
        except Exception:
            log.exception("sip: answering call %s failed", incoming.call_id)
            if not incoming._answered:  # the INVITE still needs its final answer
                server._forget(c)
                server._refuse(incoming, P.INTERNAL, "answering the call failed")
            await server.hang_up(c, P.INTERNAL)

    def _identity(self, invite: SipRequest) -> dict:
        """Who calls whom, for the agent (gateway/sip/identity.py): only `sip.pass_headers` among the rest."""
        server = self.server
        return call_identity("inbound", invite.uri, header_pairs(invite), server.pass_headers)

    async def _claimed_here(self, c: SipCall) -> bool:
        """Cluster mode: the call's ids are claimed for this node (its RTP never leaves it). A call another node
        already owns (its agent attached there first) is refused: RTP cannot be forwarded."""
        server = self.server
        ids = call_ids(c.incoming.invite)
        try:
            owner = await owner_elsewhere(server.core, None, ids)
        except ClusterUnavailable as exc:
            server._forget(c)
            server._refuse(c.incoming, P.CLUSTER_UNAVAILABLE, f"the call plane is unavailable ({exc})")
            return False
        if owner is not None:
            server._forget(c)
            server._refuse(
                c.incoming,
                P.CALL_BUSY,
                f"call {ids[0]!r} is owned by another node; SIP calls are served where they arrive",
            )
            return False
        return True

    def _gone(self, c: SipCall) -> bool:
        """The INVITE was cancelled (the stack answered 487) or the call ended meanwhile."""
        return c.ended or c.door.uas.get_call(c.sip_call_id) is not c.incoming

    def _ack_deadline(self, c: SipCall) -> None:
        server = self.server
        if not c.acked and not c.ended:
            log.info(
                "sip: call %s: no ACK for the 200 OK within %g s (Timer H); ending it with BYE",
                c.sip_call_id,
                server.config.ack_timeout_s,
            )
            server._spawn(server.hang_up(c, "no_ack"))


@dataclasses.dataclass
class RoutedDialog(Dialog):
    """aiosipua's dialog of an inbound call with its route set as RFC 3261 §12.1.1 has it (aiosipua reverses the
    INVITE's Record-Route, as only a UAC should) and the responses it makes (our 1xx and 2xx) copying the request's
    Record-Route headers, which aiosipua leaves out: the proxies that recorded the route then see the answer
    come back and the dialog's later requests through them (gateway/sip/routes.py)."""

    contact: str | None = None  # ours, for the 2xx to an UPDATE (a target refresh, RFC 3311 §5.2; aiosipua has none)

    @classmethod
    def of(cls, dialog: Dialog, invite: SipRequest) -> RoutedDialog:
        fields = {f.name: getattr(dialog, f.name) for f in dataclasses.fields(Dialog)}
        return cls(**{**fields, "route_set": routes.uas_route_set(invite.headers.get("record-route"))})

    def create_response(self, request, status_code, reason_phrase="", *, contact=None):
        if contact is None and 200 <= status_code < 300 and request.method.upper() == "UPDATE":
            contact = self.contact
        resp = super().create_response(request, status_code, reason_phrase, contact=contact)
        if 100 < status_code < 300:
            for value in request.headers.get("record-route"):
                resp.headers.append("Record-Route", value)
        return resp

    def create_request(self, method, **via):
        request = super().create_request(method, **via)
        routes.add_routes(request, self.route_set)  # a strict router becomes the Request-URI
        return request


def rtp_port(c: SipCall) -> int:
    """The local RTP port of a call (what the SDP answer names); aiortp keeps its socket on its transport."""
    return c.rtp._rtp_transport._transport.get_extra_info("sockname")[1]


def call_ids(invite: SipRequest) -> list[str] | None:
    """The call's ids: X-Call-Id when the trunk or PBX sets one, and the SIP Call-ID."""
    ids = [invite.get_header("x-call-id"), invite.call_id]
    try:
        return [normalize_call_id(i) for i in ids if i]
    except P.ProtocolError:
        return None


def sends(offer: AudioOffer) -> bool:
    """Whether the caller wants our audio: not on hold by direction, nor by the old `c=0.0.0.0`."""
    return offer.direction in ("sendrecv", "recvonly") and offer.address[0] != "0.0.0.0"
