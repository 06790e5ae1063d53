"""SRTP against an independent implementation: baresip with its srtp module (SDES, mandatory; libre's own SRTP,
not libsrtp) calls, gateway/sip/sdes.py answers its RTP/SAVP offer and gateway/sip/srtp.py carries the audio both
ways. Each side sends a tone: we decrypt and hear baresip's, baresip decrypts and records ours.

The answering side is tests/sip/tiny_uas.py, not the SIP leg, which takes SRTP in the next step of issue 42."""

from __future__ import annotations

import asyncio
import struct

import numpy as np
import pytest

from gateway.sip import sdes
from gateway.sip.srtp import SrtpSession
from gateway.wire.sip import decode_payload, encode_frame
from tests.sip.baresip import Baresip, write_wav
from tests.sip.tiny_uas import Request, open_uas, response

parse_sdp = pytest.importorskip("aiosipua.sdp", reason="aiosipua is not installed (the sip extra)").parse_sdp
pytest.importorskip("pylibsrtp", reason="pylibsrtp is not installed (the sip extra)")

THEIR_HZ, OUR_HZ = 440.0, 1000.0


def tone(hz: float, seconds: float) -> np.ndarray:
    t = np.arange(int(8000 * seconds)) / 8000.0
    return (np.sin(2 * np.pi * hz * t) * 8000).astype(np.int16)


def dominant_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64)))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[int(np.argmax(spectrum[1:])) + 1])


class Media(asyncio.DatagramProtocol):
    def __init__(self):
        self.received: list[bytes] = []

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.received.append(data)


async def test_baresip_srtp_call_both_ways(tmp_path):
    write_wav(tmp_path / "caller.wav", tone(THEIR_HZ, 8.0))
    ua = await Baresip.start(
        tmp_path / "baresip", tmp_path / "caller.wav", modules=("srtp.so",), account_params=";mediaenc=srtp-mand"
    )
    loop = asyncio.get_running_loop()
    rtp_transport, media = await loop.create_datagram_endpoint(Media, local_addr=("127.0.0.1", 0))
    rtp_port = rtp_transport.get_extra_info("sockname")[1]
    call: dict = {}

    def handle(request: Request) -> bytes | None:
        if request.method == "ACK":
            return None
        if request.method != "INVITE":
            return response(request, "200 OK")
        offer = parse_sdp(request.body)
        call["offer"] = offer.audio
        call["peer"] = offer.rtp_address
        ours, theirs = sdes.answer_offer("required", offer.audio.proto, offer.audio.attributes.get("crypto", []))
        call["srtp"] = SrtpSession(ours, theirs)
        body = (
            f"v=0\r\no=voxgate 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
            f"m=audio {rtp_port} RTP/SAVP 0\r\na=rtpmap:0 PCMU/8000\r\na=crypto:{ours.to_sdp()}\r\na=sendrecv\r\n"
        )
        extra = [f"Contact: <sip:agent@127.0.0.1:{uas.port}>", "Content-Type: application/sdp"]
        return response(request, "200 OK", extra, body)

    uas = await open_uas(handle)
    try:
        await ua.command("dial", f"sip:agent@127.0.0.1:{uas.port}")
        await ua.event("CALL_ESTABLISHED")
        assert call["offer"].proto == "RTP/SAVP"
        srtp: SrtpSession = call["srtp"]
        ours = tone(OUR_HZ, 3.0)
        for seq in range(len(ours) // 160):
            frame = ours[seq * 160 : (seq + 1) * 160].astype("<i2").tobytes()
            packet = struct.pack("!BBHII", 0x80, 0, seq, seq * 160, 0x5EC0DE) + encode_frame("PCMU", frame)
            rtp_transport.sendto(srtp.protect(packet), call["peer"])
            await asyncio.sleep(0.02)
        await ua.command("hangup")
        await ua.event("CALL_CLOSED", timeout=5)
        await asyncio.sleep(0.3)  # sndfile closes its recording when the stream goes
    finally:
        uas.transport.close()
        rtp_transport.close()
        await ua.stop()

    packets = [srtp.unprotect(p) for p in media.received]
    assert len(packets) > 50 and all(p is not None for p in packets), srtp.dropped
    payloads = [p[12:] for p in packets if p[1] & 0x7F == 0]
    heard_by_us = np.concatenate([decode_payload("PCMU", p) for p in payloads])
    assert abs(dominant_hz(heard_by_us, 8000) - THEIR_HZ) < 10
    heard_by_them, rate = ua.heard()
    loud = heard_by_them[np.abs(heard_by_them) > 1000]
    assert len(loud) > rate // 2, "baresip heard nothing it could decrypt"
    assert abs(dominant_hz(heard_by_them, rate) - OUR_HZ) < 10
