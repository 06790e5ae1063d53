"""Strict RTP: which source a call's media may come from, and where its media goes.

A call's media peer is the address and port its SDP names. In a short learning window at the start (the first
`LEARN_PACKETS` packets from the peer, or `LEARN_S` after the first one) a packet from another port of an
expected IP (the SDP's, or the one its signalling came from) moves the peer there: a NAT kept the IP and rewrote
the port. After that, and from any other IP at any time, packets are dropped and counted: they never reach the
call, never move where its audio goes, never keep it alive (Asterisk's `strictrtp`, after the RTP-bleed
CVE-2017-14099). A re-INVITE from the dialog's own peer is the only way to move media later (`move`).

Pure bookkeeping: the leg calls `admit` with each datagram's source and acts on the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LEARN_PACKETS = 5  # packets from the latched source that close the learning window
LEARN_S = 1.0  # or this long after the first packet accepted

# drop reasons (the `reason` label of voxgate_rtp_dropped_total)
STRANGER = "stranger"  # from an IP that is neither the SDP's nor the signalling's
AFTER_LEARNING = "after_learning"  # from an expected IP but another port, once the window closed
RTCP_STRANGER = "rtcp_stranger"  # RTCP from an IP other than the media peer's


@dataclass
class MediaGuard:
    peer: tuple[str, int]  # where the call's RTP goes, and the one source it is taken from once learned
    expected_ips: set[str] = field(default_factory=set)  # IPs a NAT-rewritten port may come from while learning
    learning: bool = True
    _accepted: int = 0
    _first_at: float | None = None

    @classmethod
    def for_call(cls, sdp_addr: tuple[str, int], signalling_ip: str) -> MediaGuard:
        return cls(peer=sdp_addr, expected_ips={sdp_addr[0], signalling_ip})

    def admit(self, source: tuple[str, int], now: float) -> str | None:
        """None when a packet from `source` belongs to the call (maybe latching onto it), else why it is dropped."""
        if source == self.peer:
            self._count(now)
            return None
        if source[0] not in self.expected_ips:
            return STRANGER
        if self.learning and (self._first_at is None or now - self._first_at < LEARN_S):
            self.peer = source  # NAT: the same IP, another port
            self._accepted = 0
            self._count(now)
            return None
        self.learning = False
        return AFTER_LEARNING

    def admit_rtcp(self, source: tuple[str, int]) -> str | None:
        """RTCP only from the media peer's IP (its port is the RTP port + 1, or whatever a NAT made of it)."""
        return None if source[0] == self.peer[0] else RTCP_STRANGER

    def move(self, sdp_addr: tuple[str, int], signalling_ip: str) -> None:
        """A re-INVITE from the dialog's peer names a new media address: learn again from there."""
        self.peer = sdp_addr
        self.expected_ips = {sdp_addr[0], signalling_ip}
        self.learning, self._accepted, self._first_at = True, 0, None

    def _count(self, now: float) -> None:
        if not self.learning:
            return
        if self._first_at is None:
            self._first_at = now
        self._accepted += 1
        if self._accepted >= LEARN_PACKETS or now - self._first_at >= LEARN_S:
            self.learning = False
