"""SRTP on the SIP leg (`sip.srtp`, SDES over TLS): baresip with its srtp module (mandatory; libre's own SRTP, not
libsrtp) calls over TLS and hears the agent; packets with a wrong key are dropped and counted; a plain RTP offer
to `srtp: required` and an SRTP offer over plain SIP get 488."""

from __future__ import annotations

import asyncio
import socket
import struct
import wave

import numpy as np
import pytest

from gateway.sip import sdes
from gateway.sip.srtp import SrtpSession
from tests.sip.baresip import Baresip, write_wav
from tests.sip.certs import self_signed
from tests.sip.tls_calls import assert_heard_speech, dial_tls_and_say, hang_up_and_hear

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")
pytest.importorskip("pylibsrtp", reason="pylibsrtp is not installed (the sip extra)")


def srtp_config(tmp_path, mode: str) -> dict:
    cert, key = self_signed(tmp_path / "certs")
    return {"tls": {"port": 0, "cert_file": str(cert), "key_file": str(key)}, "srtp": mode}


async def baresip(tmp_path, srtp: bool) -> Baresip:
    t = np.arange(8000 * 8) / 8000.0
    write_wav(tmp_path / "caller.wav", (np.sin(2 * np.pi * 300 * t) * 3000).astype(np.int16))  # the caller's voice
    return await Baresip.start(
        tmp_path / "baresip",
        tmp_path / "caller.wav",
        modules=("srtp.so",) if srtp else (),
        account_params=";mediaenc=srtp-mand" if srtp else "",
        config=f"sip_cafile {tmp_path / 'certs' / 'cert.pem'}\n",
    )


def dropped(gw, reason: str) -> float:
    return gw.metrics.rtp_dropped.labels(reason=reason)._value.get()


def refused(gw, code: str) -> float:
    return gw.metrics.errors.labels(code=code)._value.get()


async def test_baresip_srtp_over_tls_hears_the_agent_and_wrong_keys_are_dropped(sip_gateway, tmp_path):
    gw = await sip_gateway(
        sip=srtp_config(tmp_path, "required"),
        telephony={"record_inbound_dir": str(tmp_path / "inbound")},
        barge_in={"mode": "off"},  # the caller talks all along; the agent's turn plays out
    )
    ua = await baresip(tmp_path, srtp=True)
    try:
        control, c, done = await dial_tls_and_say(gw, ua, "Hello over SRTP, this is a test.")
        assert c.srtp is not None and c.offer.proto == "RTP/SAVP"
        # baresip's RTP all authenticates (libre also sends a plain RTCP APP "PING", which is dropped as malformed)
        assert c.srtp.dropped["auth"] == 0 and c.srtp.dropped["replay"] == 0
        # SRTP packets under a key nobody offered, to the call's RTP port: dropped before the call sees them
        stranger = SrtpSession(sdes.generate(c.keys[1].suite), sdes.generate(c.keys[1].suite))
        rtp_port = c.rtp._rtp_transport._transport.get_extra_info("sockname")[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for seq in range(20):
                packet = struct.pack("!BBHII", 0x80, 0, seq, seq * 160, 0x1234) + bytes(160)
                s.sendto(stranger.protect(packet), ("127.0.0.1", rtp_port))
            for _ in range(100):
                if dropped(gw, "srtp_auth") >= 20:
                    break
                await asyncio.sleep(0.02)
        assert dropped(gw, "srtp_auth") == 20 and c.srtp.dropped["auth"] == 20
        pcm, rate = await hang_up_and_hear(ua, control)
    finally:
        await ua.stop()
    assert_heard_speech(pcm, rate, done["played_ms"])
    # and we decrypted baresip's: the caller's tone is in the inbound recording
    (wav,) = (tmp_path / "inbound").glob("*.wav")
    with wave.open(str(wav)) as w:
        inbound = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    assert len(inbound) >= 1600 and np.abs(inbound.astype(np.int32)).max() > 1000


@pytest.mark.parametrize(
    "mode, srtp_offer, door, code",
    [
        ("required", False, "tls", "srtp_required"),  # a plain RTP offer to srtp: required
        ("optional", True, "udp", "srtp_unsupported"),  # SRTP over plain SIP: its keys would travel in clear text
    ],
)
async def test_refused_offers_get_488(sip_gateway, tmp_path, mode, srtp_offer, door, code):
    gw = await sip_gateway(sip=srtp_config(tmp_path, mode))
    leg = gw.legs["gateway.legs.sip"]
    ua = await baresip(tmp_path, srtp=srtp_offer)
    target = f"{leg.tls_port};transport=tls" if door == "tls" else str(leg.port)
    try:
        await ua.command("dial", f"sip:agent@127.0.0.1:{target}")
        closed = await ua.event("CALL_CLOSED", timeout=15)
        assert "488" in closed.get("param", ""), closed
        for _ in range(200):
            if refused(gw, code) >= 1:
                break
            await asyncio.sleep(0.05)
        assert refused(gw, code) == 1 and len(gw.calls) == 0
    finally:
        await ua.stop()


def test_srtp_without_tls_is_refused_at_start():
    from gateway.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="sip.srtp: needs sip.tls"):
        load_config(None, {"sip": {"port": 5060, "allow": ["127.0.0.1"], "srtp": "optional"}})
