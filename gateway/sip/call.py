"""One SIP call as the leg keeps it: its dialog (aiosipua's IncomingCall, or an outbound call's OutgoingDialog in
the same shape), the SIP transport it came on (`Door`), its RTP session and SRTP keys, its media state, and
`SipLeg`, the media leg the call registry drives (G.711 RTP frames from the shared clock)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiortp import RTPSession
from aiosipua import IncomingCall, SipTransport, SipUAS

from audio.playout import PlayoutEvent
from gateway.core.calls import TELEPHONY_PCM, Call
from gateway.sip import dialogs
from gateway.sip import transfer as sip_transfer
from gateway.sip.media_guard import MediaGuard
from gateway.sip.sdp_check import AudioOffer
from gateway.sip.session_clock import SessionClock
from gateway.sip.srtp import SrtpSession
from gateway.wire import sip as wire


@dataclass
class Door:
    """One SIP transport (UDP or TCP) and the user agent server reading it."""

    name: str  # UDP | TCP: also what our own requests' Via says
    transport: "SipTransport"
    uas: "SipUAS"
    intake: object = None  # the stack's own message handler, called after ours


class SipLeg:
    """The media leg of one SIP call: G.711 RTP frames from the shared clock."""

    clock_driven = True
    send_idle_silence = (
        True  # RTP runs on through silence: continuous timestamps, the far end's jitter buffer stays fed
    )
    absorbs_bursts = False  # each frame leaves as a packet: a catch-up burst would reach the caller as a burst
    output = TELEPHONY_PCM  # the session hands us PCM16 8 kHz; we make G.711 of it

    def __init__(self, sip_call: "SipCall", metrics):
        self.sip_call = sip_call
        self.metrics = metrics
        self._frames = metrics.frames_sent.labels(leg="sip")
        self._marker = 1  # the first packet of the stream starts a talkspurt

    def congested(self) -> bool:
        """The next frame will not go out (on hold, media not open yet, ended): the playout counts it as a network
        gap, so `played_ms` and marks never claim what the caller could not hear."""
        c = self.sip_call
        return c.ended or not c.sending or not c.media_open or c.rtp is None

    def send_audio_now(self, pcm16: bytes) -> bool:
        c = self.sip_call
        rtp = c.rtp
        if self.congested():
            return False
        # aiortp's public send has no marker bit; its sender does (RFC 3551: marker on a talkspurt's first packet)
        rtp._sender.send_frame_auto(wire.encode_frame(c.codec, pcm16), marker=self._marker, addr=rtp._remote_addr)
        self._marker = 0
        self._frames.inc()
        return True

    async def send_audio(self, pcm16: bytes) -> bool:
        return self.send_audio_now(pcm16)

    async def on_flush(self) -> None:
        pass  # what was sent has been played or is in the far end's short jitter buffer: nothing to take back

    def on_playout_event(self, event: PlayoutEvent) -> None:
        if event.type == "first_audio":
            self._marker = 1

    async def transfer(self, target: str, headers: dict | None = None) -> None:
        """`call.transfer`: blind transfer with REFER (RFC 3515), with the message's `X-` headers on it."""
        await self.sip_call.server.requests.transfer(self.sip_call, target, headers)

    def talkspurt(self) -> None:
        """The next packet starts a talkspurt (e.g. sending resumes after hold)."""
        self._marker = 1

    async def hangup(self) -> None:
        await self.sip_call.server.hang_up(self.sip_call, "ended")


@dataclass
class SipCall:
    """One SIP dialog and its RTP session."""

    server: object  # the leg's SipServer (gateway/legs/sip.py)
    incoming: IncomingCall
    door: Door
    offer: AudioOffer
    codec: str = "PCMU"
    rtp: RTPSession | None = None
    call: Call | None = None
    leg: SipLeg | None = None
    acked: bool = False
    ended: bool = False
    sending: bool = True  # False while the caller holds the call (sendonly / inactive offer)
    ack_timer: asyncio.TimerHandle | None = None
    heard_at: float = 0.0  # loop time of the caller's last RTP packet (audio or DTMF), or of the answer
    held_inactive: bool = False  # the caller's hold offer says `inactive`: no RTP to expect
    guard: MediaGuard | None = None  # strict RTP: where media comes from and goes to
    media_open: bool = False  # the ACK or the caller's first RTP came: RTP may flow (never before)
    media_opened: asyncio.Event | None = None
    reoffer: AudioOffer | None = None  # a re-INVITE's offer, checked before the stack saw it
    refer: sip_transfer.PendingRefer | None = None  # our REFER, until its subscription ends
    keys: tuple | None = None  # SDES (our crypto line, the caller's) for an SRTP call (gateway/sip/sdes.py)
    srtp: SrtpSession | None = None  # the call's SRTP once its RTP session exists
    peer_slot: str | None = None  # the source address whose per-IP slot (server.limits) this UDP call holds
    requests: dict | None = None  # CSeq -> our in-dialog request awaiting its final answer (transactions.Pending)
    clock: SessionClock | None = None  # the session timer we keep: outbound calls, inbound ones we refresh
    acks: dict | None = None  # our last re-INVITE's CSeq -> the ACK of its 2xx (sent again with a resent 2xx)
    sdp_origin: tuple[str, int] | None = None  # our SDP's o= session id and last version (inbound calls)
    hop: tuple[str, int] | None = None  # where our in-dialog requests go (gateway/sip/routes.py first_hop)

    @property
    def next_hop(self) -> tuple[str, int]:
        """Where our requests in the dialog go: the route set's first hop, else the dialog's peer."""
        return self.hop or self.incoming.source_addr

    def open_media(self) -> None:
        if not self.media_open:
            self.media_open = True
            if self.media_opened is not None:
                self.media_opened.set()

    @property
    def dialog(self) -> dialogs.Dialog:
        d = self.incoming.dialog
        return dialogs.Dialog(self.incoming.source_addr[0], d.remote_tag, d.local_tag)

    @property
    def sip_call_id(self) -> str:
        return self.incoming.call_id
