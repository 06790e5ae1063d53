"""SIP over TLS (`sip.tls`): baresip dials voxgate with `transport=tls` and a certificate the test makes, hears the
agent's speech, and hangs up over the same TLS connection; `sip.transports: [tls]` leaves no plain listener."""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest

from tests.sip.baresip import Baresip, write_wav
from tests.sip.certs import self_signed
from tests.sip.tls_calls import assert_heard_speech, dial_tls_and_say, hang_up_and_hear

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
        control, c, done = await dial_tls_and_say(gw, ua, "Hello over TLS, this is a test.")
        assert c.door.name == "TLS"
        pcm, rate = await hang_up_and_hear(ua, control)  # its BYE came over TLS, as our Contact says transport=tls
    finally:
        await ua.stop()
    assert_heard_speech(pcm, rate, done["played_ms"])


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
