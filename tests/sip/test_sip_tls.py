"""SIP over TLS (`sip.tls`): baresip dials voxgate with `transport=tls` and a certificate the test makes, hears the
agent's speech, and hangs up over the same TLS connection; `sip.transports: [tls]` leaves no plain listener."""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest

from tests.sip.baresip import Baresip, write_wav
from tests.sip.certs import self_signed
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


def tls_config(tmp_path, **extra) -> dict:
    cert, key = self_signed(tmp_path / "certs")
    return {"tls": {"port": 0, "cert_file": str(cert), "key_file": str(key)}, **extra}


async def test_baresip_over_tls_hears_the_agent(sip_gateway, tmp_path):
    gw = await sip_gateway(sip=tls_config(tmp_path, transports=["tls"]))
    leg = gw.legs["gateway.legs.sip"]
    assert [d.name for d in leg.doors] == ["TLS"]  # plain SIP switched off: nothing listens for UDP/TCP SIP
    write_wav(tmp_path / "caller.wav", np.zeros(8000 * 6, dtype=np.int16))
    ua = await Baresip.start(
        tmp_path / "baresip", tmp_path / "caller.wav", config=f"sip_cafile {tmp_path / 'certs' / 'cert.pem'}\n"
    )
    try:
        await ua.command("dial", f"sip:agent@127.0.0.1:{leg.tls_port};transport=tls")
        await ua.event("CALL_ESTABLISHED", timeout=15)
        for _ in range(100):
            if gw.calls.ids():
                break
            await asyncio.sleep(0.02)
        (c,) = leg.calls.values()
        assert c.door.name == "TLS"
        control = await Control.connect(gw)
        await control.attach(gw.calls.ids()[0])
        await control.send({"type": "text", "turn_id": "t1", "text": "Hello over TLS, this is a test.", "final": True})
        done = await control.expect("turn.done", turn_id="t1", timeout=15)
        assert done["interrupted"] is False and done["played_ms"] > 500
        await asyncio.sleep(0.3)
        await ua.command("hangup")  # BYE: over the TLS connection, as our Contact says transport=tls
        ended = await control.expect("call.media", timeout=5, state="ended")
        assert ended["reason"] == "hangup"
        await ua.event("CALL_CLOSED", timeout=5)
        await asyncio.sleep(0.3)  # sndfile closes its WAV when the audio stream goes
        pcm, rate = ua.heard()
    finally:
        await ua.stop()
    frame = rate // 50
    levels = np.abs(pcm[: len(pcm) // frame * frame].reshape(-1, frame).astype(np.int32)).max(axis=1)
    loud = np.flatnonzero(levels > 500)
    assert len(loud), "baresip heard only silence"
    heard_ms = (loud[-1] - loud[0] + 1) * 20
    assert abs(heard_ms - done["played_ms"]) <= 200, f"heard {heard_ms} ms, the gateway played {done['played_ms']}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # TLS 1.0/1.1 named on purpose: they are refused
async def test_tls_listener_refuses_old_protocols_and_plain_text(sip_gateway, tmp_path):
    import ssl

    gw = await sip_gateway(sip=tls_config(tmp_path))
    leg = gw.legs["gateway.legs.sip"]
    assert [d.name for d in leg.doors] == ["UDP", "TCP", "TLS"]
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.check_hostname, old.verify_mode = False, ssl.CERT_NONE
    old.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.0/1.1 at all
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    try:
        old.minimum_version = ssl.TLSVersion.TLSv1
    except ValueError:
        pass
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _, writer = await asyncio.open_connection("127.0.0.1", leg.tls_port, ssl=old)
        writer.close()
    # a plain-text SIP request on the TLS port gets no SIP answer
    with socket.create_connection(("127.0.0.1", leg.tls_port), timeout=5) as s:
        s.sendall(b"OPTIONS sip:agent@127.0.0.1 SIP/2.0\r\nContent-Length: 0\r\n\r\n")
        s.settimeout(5)
        try:
            answer = s.recv(4096)
        except (TimeoutError, ConnectionError):
            answer = b""
        assert not answer.startswith(b"SIP/2.0")
