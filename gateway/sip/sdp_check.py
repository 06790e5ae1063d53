"""An SDP offer checked before anything answers it: what voxgate would send to, and in what.

An offer is answered only when voxgate can keep every promise of the answer: the media address is an IPv4
literal (a name would be resolved on the media path, per packet) of one host (not multicast or broadcast: an SDP
must not turn our RTP into a stream to a whole network), the audio port is a usable even RTP port,
audio is not declined (`m=audio 0`), the transport profile is plain RTP/AVP (an `RTP/SAVP` offer wants SRTP:
answering it `SAVP` without keys is a lie the phone hangs up on), and one offered codec is one voxgate speaks.
`telephone-event` is answered only at 8000 Hz, the clock voxgate sends, with the payload type the offer bound to
that rate. Anything else is refused with a stable code (`X-Voxgate-Reason`) and a message naming what was wrong.

Pure: the body text in, an `AudioOffer` or a `Refusal` out. The SIP stack's own parser never sees an offer
that fails here (it raises on some of them, and the transaction then leaks).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from gateway import protocol as P

try:
    from aiosipua.sdp import SdpMessage, parse_sdp
except ImportError:  # pragma: no cover - the `sip` extra; the leg refuses to start without it
    SdpMessage = None  # type: ignore[assignment,misc]

# m=<media> <port> <proto> <fmt> ...: the port as plain digits (no port/count: one stream per offer)
_MEDIA_LINE = re.compile(r"m=(\S+) (\S+) (\S+)(?: (.*))?")
_PT = re.compile(r"\d{1,3}")
DTMF_RATE = 8000  # what voxgate's telephone-events would be timed at


@dataclass
class AudioOffer:
    sdp: SdpMessage
    address: tuple[str, int]  # where the caller wants our RTP (0.0.0.0: on hold, nothing to send)
    payload_type: int  # the first offered codec voxgate speaks (the caller's preference, RFC 3264)
    dtmf_payload_type: int | None  # the offer's telephone-event/8000, None when it has none
    direction: str  # sendrecv | sendonly | recvonly | inactive
    proto: str = "RTP/AVP"  # RTP/AVP, or RTP/SAVP(F) when SRTP may be taken (check_offer's `srtp`)
    crypto: tuple[str, ...] = ()  # the audio stream's a=crypto values (SDES keys), for gateway/sip/sdes.py


@dataclass
class Refusal:
    code: str
    message: str


def check_offer(text: str, payload_types: list[int], srtp: bool = False) -> AudioOffer | Refusal:
    """Check the SDP `text` against the payload types voxgate may answer with (in voxgate's order of taste).
    `srtp`: an RTP/SAVP offer may be answered (sip.srtp is not off; gateway/sip/sdes.py decides on its keys)."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("m="):
            m = _MEDIA_LINE.fullmatch(line)
            if m is None or not m.group(2).isdigit():
                return Refusal(P.BAD_SDP, f"the media line {line[:80]!r} is not 'm=<media> <port> <proto> <formats>'")
            if not all(_PT.fullmatch(f) for f in (m.group(4) or "").split()):
                return Refusal(P.BAD_SDP, f"the media line {line[:80]!r} lists a format that is not a payload type")
        elif line.startswith("c=") and len(line[2:].split()) != 3:
            return Refusal(P.SDP_ADDRESS, f"{line[:80]!r} is not 'c=IN IP4 <address>'")
        elif line.startswith("a=rtpmap:") or line.startswith("a=fmtp:"):
            if not _PT.fullmatch(line.split(":", 1)[1].split(" ", 1)[0]):
                return Refusal(P.BAD_SDP, f"{line[:80]!r} names no payload type")
    try:
        sdp = parse_sdp(text)
    except (ValueError, IndexError) as exc:
        return Refusal(P.BAD_SDP, f"the SDP offer does not parse ({exc})")
    audio = sdp.audio
    if audio is None:
        return Refusal(P.UNSUPPORTED_FORMAT, "the SDP offer has no audio stream")
    if audio.port == 0:
        return Refusal(P.AUDIO_DECLINED, "the offer declines audio (m=audio 0)")
    secure = audio.proto.upper() in ("RTP/SAVP", "RTP/SAVPF")
    if "SAVP" in audio.proto.upper() and not (srtp and secure):
        return Refusal(P.SRTP_UNSUPPORTED, f"the offer wants SRTP ({audio.proto}); sip.srtp is off")
    if audio.proto.upper() != "RTP/AVP" and not secure:
        return Refusal(P.UNSUPPORTED_FORMAT, f"transport profile {audio.proto!r}: voxgate speaks RTP/AVP")
    if not (2 <= audio.port <= 65534 and audio.port % 2 == 0):
        return Refusal(P.SDP_PORT, f"audio port {audio.port}: RTP needs an even port 2..65534")
    connection = audio.connection or sdp.connection
    if connection is None:
        return Refusal(P.SDP_ADDRESS, "the offer has no c= line for its audio")
    if not _ipv4_literal(connection.address) or connection.addr_type.upper() != "IP4":
        return Refusal(P.SDP_ADDRESS, f"c={connection.address!r} is not an IPv4 address (names are not resolved)")
    if _group_address(connection.address):
        return Refusal(
            P.SDP_ADDRESS, f"c={connection.address}: voxgate sends RTP to one peer, not a group or broadcast"
        )
    chosen = next((c.payload_type for c in audio.codecs if c.payload_type in payload_types and _g711(c)), None)
    if chosen is None:
        offered = [c.encoding_name or str(c.payload_type) for c in audio.codecs]
        return Refusal(P.UNSUPPORTED_FORMAT, f"no codec in common: offered {offered}")
    dtmf = next(
        (
            c.payload_type
            for c in audio.codecs
            if c.encoding_name.lower() == "telephone-event" and c.clock_rate == DTMF_RATE and c.payload_type >= 96
        ),
        None,
    )
    crypto = tuple(audio.attributes.get("crypto", ())) if secure else ()
    return AudioOffer(sdp, (connection.address, audio.port), chosen, dtmf, audio.direction, audio.proto, crypto)


def _g711(codec) -> bool:
    """A static payload type 0/8 is PCMU/PCMA unless an rtpmap binds it to something else."""
    return not codec.encoding_name or codec.encoding_name.upper() in ("PCMU", "PCMA")


def _group_address(text: str) -> bool:
    """Multicast (224/4), broadcast or reserved (240/4): our RTP sent there would reach every host on a network."""
    address = ipaddress.IPv4Address(text)
    return address.is_multicast or address.is_reserved


def _ipv4_literal(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True
