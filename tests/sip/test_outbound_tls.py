"""Outbound calls to a TLS trunk (`sip.trunks[].transport: tls`) with SRTP: voxgate dials baresip over TLS (its
certificate made by the test, checked against the trunk's `ca_file` and the trunk's host), offers RTP/SAVP with SDES
keys (`srtp: required`); baresip (srtp-mand, auto-answer) answers, hears the agent and records it, and the recording
is compared with what the gateway played. A trunk whose certificate does not verify (a CA not in `ca_file`, or a
certificate for another address) fails the call with `tls_failed` and one log line."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
import time

import numpy as np
import pytest

from tests.sip.baresip import Baresip, write_wav
from tests.sip.certs import self_signed
from tests.sip.test_outbound_calls import KEY, _post
from tests.sip.tiny_uas import parse_request, response
from tests.sip.tls_calls import assert_heard_speech
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")
pytest.importorskip("pylibsrtp", reason="pylibsrtp is not installed (the sip extra)")

AUTH = {"Authorization": f"Bearer {KEY}"}


def _gateway_config(tmp_path, trunk: dict) -> dict:
    cert, key = self_signed(tmp_path / "ours")
    return {"tls": {"port": 0, "cert_file": str(cert), "key_file": str(key)}, "trunks": [trunk]}


def _tls_trunk(port: int, ca_file, **extra) -> dict:
    return {
        "name": "secure",
        "address": f"127.0.0.1:{port}",
        "transport": "tls",
        "ca_file": str(ca_file),
        "from": "sip:+15550100@voxgate.test",
        **extra,
    }


async def _baresip_over_tls(tmp_path, mediaenc: str | None) -> tuple[Baresip, int, object]:
    """baresip answering calls itself (auto-answer) on TLS with a certificate for 127.0.0.1; (it, its TLS port,
    the certificate trunks check it with)."""
    cert, key = self_signed(tmp_path / "theirs")
    both = tmp_path / "theirs" / "baresip.pem"  # baresip's sip_certificate: the certificate and its key in one file
    both.write_text(cert.read_text() + key.read_text())
    write_wav(tmp_path / "callee.wav", np.zeros(8000 * 8, dtype=np.int16))
    ua = await Baresip.start(
        tmp_path / "baresip",
        tmp_path / "callee.wav",
        modules=("srtp.so",),
        account_params=";answermode=auto" + (f";mediaenc={mediaenc}" if mediaenc else ""),
        config=f"sip_certificate {both}\n",
    )
    listen = next(line for line in (ua.folder / "config").read_text().splitlines() if line.startswith("sip_listen"))
    return ua, int(listen.rsplit(":", 1)[1]) + 1, cert  # baresip's TLS listener: its SIP port + 1


@pytest.mark.parametrize(
    "srtp, mediaenc, encrypted",
    [
        ("required", "srtp-mand", True),  # RTP/SAVP offered, baresip's mandatory SRTP answers it
        ("optional", "srtp", True),  # keys offered in RTP/AVP (best effort): baresip's best-effort SRTP takes them
        ("optional", None, False),  # baresip without SRTP answers plain RTP/AVP: the call is plain RTP
    ],
)
async def test_a_tls_trunk_hears_the_agent(sip_gateway, tmp_path, srtp, mediaenc, encrypted):
    ua, tls_port, their_cert = await _baresip_over_tls(tmp_path, mediaenc)
    try:
        trunk = _tls_trunk(tls_port, their_cert, srtp=srtp)
        gw = await sip_gateway(sip=_gateway_config(tmp_path, trunk), server={"api_keys": [KEY]})
        status, body = await _post(gw, {"to": f"sip:tester@127.0.0.1:{tls_port}", "trunk": "secure"})
        assert status == 201, body
        control = await Control.connect(gw, additional_headers=AUTH)
        try:
            await control.attach(body["call_id"])
            answered = await control.expect("call.answered", timeout=15)
            assert answered["status"] == 200
            (c,) = gw.legs["gateway.legs.sip"].calls.values()
            assert c.door.name == "TLS" and (c.srtp is not None) == encrypted  # over our TLS connection
            await control.send({"type": "text", "turn_id": "t1", "text": "Hello over TLS and SRTP.", "final": True})
            done = await control.expect("turn.done", turn_id="t1", timeout=15)
            assert done["interrupted"] is False and done["played_ms"] > 500
            await asyncio.sleep(0.3)  # the last packets reach baresip
            heard_from_them = c.rtp.stats.get("packets_received", 0)
            await control.send({"type": "session.end"})  # our BYE, over the TLS connection
            await ua.event("CALL_CLOSED", timeout=10)
            await asyncio.sleep(0.3)  # sndfile closes its recording when the stream goes
        finally:
            await control.ws.close()
        assert heard_from_them > 20  # baresip's RTP, unprotected with the key its answer gave when encrypted
        if c.srtp is not None:  # every packet authenticated under the answer's key: none failed or was replayed
            assert c.srtp.dropped["auth"] == 0 and c.srtp.dropped["replay"] == 0, c.srtp.dropped
            # once in a full suite run (2026-12-06) baresip put one packet libsrtp could not parse on the RTP port
            # (a `malformed` drop, not a key failure); more than one is a fault
            assert c.srtp.dropped["malformed"] <= 1, c.srtp.dropped
        pcm, rate = ua.heard()  # what baresip decrypted and decoded
    finally:
        await ua.stop()
    assert_heard_speech(pcm, rate, done["played_ms"])


class _SlowTlsServer:
    """A TLS server on loopback (a thread with Python's ssl) that accepts one connection a second late (the agent
    attaches meanwhile: the POST answers before the call is placed; the kernel holds the ClientHello), then
    handshakes with `cert`."""

    def __init__(self, cert, key):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        time.sleep(1.0)
        self.sock.settimeout(10)
        try:
            conn, _ = self.sock.accept()
            with self.context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (OSError, ssl.SSLError):
            pass  # the client refuses our certificate: what the test wants

    async def __aenter__(self) -> int:
        self.thread.start()
        return self.sock.getsockname()[1]

    async def __aexit__(self, *exc) -> None:
        await asyncio.to_thread(self.thread.join, 15)
        self.sock.close()


@pytest.mark.parametrize(
    "served_for, trusted, error",
    [
        ("127.0.0.1", "other", "certificate verify failed: self-signed certificate"),  # a CA not in ca_file
        ("127.0.0.2", "served", "certificate verify failed: IP address mismatch"),  # another address's certificate
    ],
)
async def test_a_trunk_whose_certificate_does_not_verify_fails_the_call(
    sip_gateway, tmp_path, caplog, served_for, trusted, error
):
    served_cert, served_key = self_signed(tmp_path / "served", host=served_for)
    other_cert, _ = self_signed(tmp_path / "other")
    caplog.set_level(logging.INFO, logger="voxgate.sip")  # the call's own outcome line (INFO) is seen, not counted
    ca_file = served_cert if trusted == "served" else other_cert
    async with _SlowTlsServer(served_cert, served_key) as port:
        gw = await sip_gateway(sip=_gateway_config(tmp_path, _tls_trunk(port, ca_file)), server={"api_keys": [KEY]})
        status, body = await _post(gw, {"to": "+15551234567", "trunk": "secure"})
        control = await Control.connect(gw, additional_headers=AUTH)
        try:
            await control.attach(body["call_id"])
            failed = await control.expect("call.failed", timeout=15)
        finally:
            await control.ws.close()
    assert (failed["code"], failed["status"]) == ("tls_failed", 503), failed
    assert error in failed["reason"]
    lines = [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "trunk secure" in r.getMessage()
    ]
    assert len(lines) == 1, lines  # one clear line: the trunk, its address, the verification error
    assert f"127.0.0.1:{port} over TLS" in lines[0] and error in lines[0]
    assert KEY not in lines[0]


async def test_srtp_required_to_a_far_end_without_srtp_fails_the_call(sip_gateway, tmp_path):
    ua, tls_port, their_cert = await _baresip_over_tls(tmp_path, None)
    try:
        trunk = _tls_trunk(tls_port, their_cert, srtp="required")
        gw = await sip_gateway(sip=_gateway_config(tmp_path, trunk), server={"api_keys": [KEY]})
        status, body = await _post(gw, {"to": f"sip:tester@127.0.0.1:{tls_port}", "trunk": "secure"})
        control = await Control.connect(gw, additional_headers=AUTH)
        try:
            await control.attach(body["call_id"])
            failed = await control.expect("call.failed", timeout=15)
        finally:
            await control.ws.close()
    finally:
        await ua.stop()
    assert (failed["code"], failed["status"]) == ("rejected", 488), failed  # baresip's own 488 to RTP/SAVP


async def test_an_answer_without_keys_to_srtp_required_is_hung_up(sip_gateway, tmp_path):
    """A far end that answers our RTP/SAVP offer with plain RTP (no a=crypto): we ACK, send BYE, and the call fails
    with `rejected` / 488 `srtp_required`. No real peer answers this way on demand, so the far end is a few lines of
    SIP over a real TLS server (tests/sip/tiny_uas.py's parsing) with its own certificate."""
    cert, key = self_signed(tmp_path / "theirs")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    seen: list[str] = []

    async def far_end(reader, writer) -> None:
        while (data := await _read_message(reader)) is not None:
            request = parse_request(data, ("127.0.0.1", 0))
            if request is None:
                continue
            seen.append(request.method)
            if request.method == "INVITE":
                plain = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
                plain += "m=audio 40000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
                await asyncio.sleep(1.0)  # the agent attaches meanwhile
                extra = ["Contact: <sip:far@127.0.0.1;transport=tls>", "Content-Type: application/sdp"]
                writer.write(response(request, "200 OK", extra, plain))
            elif request.method == "BYE":
                writer.write(response(request, "200 OK"))

    server = await asyncio.start_server(far_end, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        trunk = _tls_trunk(port, cert, srtp="required")
        gw = await sip_gateway(sip=_gateway_config(tmp_path, trunk), server={"api_keys": [KEY]})
        status, body = await _post(gw, {"to": "+15551234567", "trunk": "secure"})
        control = await Control.connect(gw, additional_headers=AUTH)
        try:
            await control.attach(body["call_id"])
            failed = await control.expect("call.failed", timeout=15)
        finally:
            await control.ws.close()
        for _ in range(50):
            if "BYE" in seen:
                break
            await asyncio.sleep(0.05)
    finally:
        server.close()
    assert (failed["code"], failed["status"]) == ("rejected", 488), failed
    assert failed["reason"].startswith("srtp_required"), failed
    assert seen == ["INVITE", "ACK", "BYE"], seen  # the 200 was ACKed, then the call hung up over the connection


async def _read_message(reader) -> bytes | None:
    """One SIP message off a stream (Content-Length framing), None at its end."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.lower().split(b"\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in lines if line.startswith(b"content-length:")), 0)
        return head + await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        return None
