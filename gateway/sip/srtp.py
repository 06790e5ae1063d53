"""One call's SRTP (RFC 3711) over libsrtp (pylibsrtp, the binding aiortc uses): protect what we send with our
key, unprotect what arrives with the peer's, and drop and count what does not authenticate or is replayed.

libsrtp keeps a stream per SSRC and clones one for a new inbound SSRC only once a packet of it authenticates,
so packets from someone without the key cost a hash and nothing else.
"""

from __future__ import annotations

from collections import Counter

import pylibsrtp

from gateway.sip.sdes import Crypto

PROFILES = {
    "AES_CM_128_HMAC_SHA1_80": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80,
    # SRTCP keeps an 80-bit tag with this suite (RFC 4568 §6.2.2); libsrtp's profile does so
    "AES_CM_128_HMAC_SHA1_32": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_32,
}
# libsrtp's error texts (pylibsrtp.ERRORS) sorted into why a packet was dropped
_DROP_REASONS = {
    "authentication failure": "auth",
    "replay check failed (bad index)": "replay",
    "replay check failed (index too old)": "replay",
}


class SrtpSession:
    """`local`: the crypto line we sent (our key); `remote`: the peer's. Both must name the same suite.
    `dropped` counts inbound packets dropped, by reason: auth, replay, malformed."""

    def __init__(self, local: Crypto, remote: Crypto):
        if local.suite != remote.suite:
            raise ValueError(f"SRTP suites differ: ours {local.suite}, the peer's {remote.suite}")
        profile = PROFILES[local.suite]
        self._tx = pylibsrtp.Session(
            pylibsrtp.Policy(local.master_key, pylibsrtp.Policy.SSRC_ANY_OUTBOUND, srtp_profile=profile)
        )
        self._rx = pylibsrtp.Session(
            pylibsrtp.Policy(remote.master_key, pylibsrtp.Policy.SSRC_ANY_INBOUND, srtp_profile=profile)
        )
        self.dropped: Counter[str] = Counter()
        self.last_drop: str | None = None  # why the last packet `unprotect` returned None for was dropped

    def protect(self, rtp: bytes) -> bytes:
        return self._tx.protect(rtp)

    def protect_rtcp(self, rtcp: bytes) -> bytes:
        return self._tx.protect_rtcp(rtcp)

    def unprotect(self, srtp: bytes) -> bytes | None:
        """The RTP packet, or None when it was dropped (and counted)."""
        return self._inbound(self._rx.unprotect, srtp)

    def unprotect_rtcp(self, srtcp: bytes) -> bytes | None:
        """The RTCP packet, or None when it was dropped (and counted)."""
        return self._inbound(self._rx.unprotect_rtcp, srtcp)

    def _inbound(self, unprotect, packet: bytes) -> bytes | None:
        try:
            return unprotect(packet)
        except pylibsrtp.Error as e:
            self.last_drop = _DROP_REASONS.get(str(e), "malformed")
        except ValueError:  # longer than libsrtp's buffer
            self.last_drop = "malformed"
        self.dropped[self.last_drop] += 1
        return None


def protect_sends(rtp_session, srtp: SrtpSession) -> None:
    """Every RTP and RTCP packet aiortp's session sends leaves protected (its transports' one way out)."""
    for transport, protect in (
        (rtp_session._rtp_transport, srtp.protect),
        (rtp_session._rtcp_transport, srtp.protect_rtcp),
    ):
        plain_send = transport.send
        transport.send = lambda data, addr=None, send=plain_send, protect=protect: send(protect(data), addr)
