"""SIP and RTP details the SIP leg needs beyond what the SIP stack (aiosipua) and RTP stack (aiortp) give: pure
functions, no sockets.

* codecs: the G.711 payload types and how a 20 ms frame of PCM16 8 kHz becomes one RTP payload;
* DTMF in SIP INFO (`application/dtmf-relay` "Signal=5" and `application/dtmf` "5"), the way most PBXs send it
  when RFC 4733 is off;
* REFER outcomes: the status line of a `message/sipfrag` NOTIFY body;
* the stable reasons voxgate writes into a refusal (`X-Voxgate-Reason`, and RFC 3326 `Reason`).
"""

from __future__ import annotations

import numpy as np

from audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode

PAYLOAD_TYPES = {"PCMU": 0, "PCMA": 8}
CODEC_OF_PAYLOAD_TYPE = {pt: name for name, pt in PAYLOAD_TYPES.items()}
SAMPLES_PER_FRAME = 160  # 20 ms at 8 kHz: the RTP timestamp step
DTMF_DIGITS = frozenset("0123456789*#ABCD")
MAX_INFO_BODY = 1024  # a DTMF INFO body is a few bytes; anything larger is not one
REASON_HEADER = "X-Voxgate-Reason"


def encode_frame(codec: str, pcm16: bytes) -> bytes:
    """One frame of PCM16 8 kHz little-endian as a G.711 payload."""
    samples = np.frombuffer(pcm16, dtype=np.int16)
    return ulaw_encode(samples) if codec == "PCMU" else alaw_encode(samples)


def decode_payload(codec: str, payload: bytes) -> np.ndarray:
    """A G.711 payload as int16 samples."""
    return ulaw_decode(payload) if codec == "PCMU" else alaw_decode(payload)


def dtmf_from_info(content_type: str | None, body: str) -> str | None:
    """The digit a SIP INFO carries, or None when the INFO is not a DTMF press we understand."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if len(body) > MAX_INFO_BODY:
        return None
    if kind == "application/dtmf-relay":
        for line in body.splitlines():
            name, sep, value = line.partition("=")
            if sep and name.strip().lower() == "signal":
                return _digit(value.strip())
        return None
    if kind == "application/dtmf":
        return _digit(body.strip())
    return None


def _digit(text: str) -> str | None:
    if text in ("10", "11"):  # some PBXs write * and # as their RFC 4733 event numbers
        return "*" if text == "10" else "#"
    text = text.upper()
    return text if len(text) == 1 and text in DTMF_DIGITS else None


def sipfrag_status(body: str) -> tuple[int, str] | None:
    """`SIP/2.0 200 OK` (a REFER NOTIFY's body) as (200, "OK"), or None when it is not a status line."""
    line = body.strip().splitlines()[0] if body.strip() else ""
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].upper().startswith("SIP/") or not parts[1].isdigit():
        return None
    return int(parts[1]), (parts[2] if len(parts) > 2 else "")


def refusal_headers(code: str) -> dict[str, str]:
    """Headers that carry voxgate's stable error code on a SIP refusal."""
    return {REASON_HEADER: code}
