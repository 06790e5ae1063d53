"""A SIP call's RTP session wired to the call (inbound and outbound calls alike):

* every datagram on the call's two sockets is authenticated (SRTP) and passes strict RTP
  (gateway/sip/media_guard.py) before aiortp sees it; what is refused is dropped and counted
  (`voxgate_rtp_dropped_total{reason}`);
* the caller's audio goes into the call's inbound path (recording, VAD barge-in, STT), RFC 4733 telephone-events
  and SIP INFO digits become `dtmf` events; each packet heard moves `heard_at` (the leg's RTP timeout).
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from gateway.sip.media_guard import MediaGuard
from gateway.wire import sip as wire

log = logging.getLogger("voxgate.sip")


class CallMedia:
    """One per SipServer; `spawn` runs a coroutine as one of the server's tasks."""

    def __init__(self, metrics, spawn):
        self.metrics = metrics
        self.spawn = spawn
        self._dropped: dict[str, object] = {}  # drop reason -> its counter

    def wire(self, c) -> None:
        """The call's RTP session starts: the guard on its sockets, its audio and DTMF to the call."""
        c.guard = MediaGuard.for_call(c.offer.address, c.incoming.source_addr[0])
        rtp = c.rtp
        for transport in (rtp._rtp_transport, rtp._rtcp_transport):
            transport._on_rtp = lambda data, addr, c=c: self._on_rtp(c, data, addr)
            transport._on_rtcp = lambda data, addr, c=c: self._on_rtcp(c, data, addr)
        rtp.on_audio = lambda pcm, ts, c=c: self._on_audio(c, pcm)
        rtp.on_dtmf = lambda digit, duration, c=c: self.spawn(self.dtmf(c, digit, "rfc4733"))
        c.heard_at = asyncio.get_running_loop().time()
        c.media_opened = asyncio.Event()

    def _on_rtp(self, c, data: bytes, addr: tuple[str, int]) -> None:
        rtp = c.rtp
        if c.srtp is not None:  # authenticated before anything else: a packet without the key teaches the guard nothing
            data = c.srtp.unprotect(data)
            if data is None:
                self._drop(f"srtp_{c.srtp.last_drop}")
                return
        why = c.guard.admit(addr, rtp._loop.time())
        if why is not None:
            self._drop(why)
            return
        if c.guard.peer != rtp._remote_addr:  # learned: a NAT's port for the SDP's address
            rtp.update_remote(c.guard.peer)
        c.open_media()
        rtp._handle_rtp(data, addr)

    def _on_rtcp(self, c, data: bytes, addr: tuple[str, int]) -> None:
        if c.srtp is not None:
            data = c.srtp.unprotect_rtcp(data)
            if data is None:
                self._drop(f"srtp_{c.srtp.last_drop}")
                return
        why = c.guard.admit_rtcp(addr)
        if why is not None:
            self._drop(why)
            return
        c.rtp._handle_rtcp(data, addr)

    def _drop(self, reason: str) -> None:
        counter = self._dropped.get(reason)
        if counter is None:
            counter = self._dropped[reason] = self.metrics.rtp_dropped.labels(reason=reason)
        counter.inc()

    def _on_audio(self, c, pcm: bytes) -> None:
        c.heard_at = asyncio.get_running_loop().time()
        if c.call is not None and not c.ended:
            c.call.inbound.push(np.frombuffer(pcm, dtype=np.int16))

    async def dtmf(self, c, digit: str, via: str) -> None:
        """A digit from RTP (`rfc4733`) or SIP INFO (`info`) as a `dtmf` event."""
        if via == "rfc4733":
            c.heard_at = asyncio.get_running_loop().time()
        if c.call is not None and digit in wire.DTMF_DIGITS:
            await c.call.notify({"type": "dtmf", "digit": digit, "via": via})

    @staticmethod
    async def close(c) -> None:
        """The call's RTP session closed (its ports back to the allocator)."""
        if c.rtp is not None:
            rtp, c.rtp = c.rtp, None
            try:
                await rtp.close()
            except Exception:
                log.debug("closing RTP failed", exc_info=True)
