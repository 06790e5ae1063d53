"""Outbound INVITEs (gateway/sip/outbound.py) against SIPp as the far end on loopback: answered, busy (its 486
resent: each copy must be ACKed), ringing past the ring timeout (CANCEL), and a 407 whose credentials SIPp checks.
A scenario fails on SIPp's side when an ACK, a CANCEL or the right credentials do not come."""

from __future__ import annotations

import asyncio
import socket

import pytest

from aiosipua import SipMessage, SipResponse

from gateway.sip.outbound import Dialed, InviteClient, failure_code
from tests.sip.sipp import free_udp_port, run_sipp

PASSWORD = "s3cret-trunk-pass"


class Dialer:
    """Our side: one UDP socket, the InviteClient's messages out of it, the far end's answers fed back."""

    def __init__(self, far_port: int, lose_first_ack: bool = False):
        self.far = ("127.0.0.1", far_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.sent: list[str] = []
        self.progress: list[tuple[str, int]] = []
        self.lose_first_ack = lose_first_ack  # the path loses our first ACK: the far end resends its final

    def client(self, ring_timeout_s: float = 10.0, credentials=None) -> InviteClient:
        dialed = Dialed(
            request_uri=f"sip:+15551234567@127.0.0.1:{self.far[1]}",
            from_uri="sip:+15550100@voxgate.test",
            contact=f"sip:voxgate@127.0.0.1:{self.port}",
            via_host=f"127.0.0.1:{self.port}",
            sdp="v=0\r\no=voxgate 1 1 IN IP4 127.0.0.1\r\ns=voxgate\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
            "m=audio 40000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n",
            credentials=credentials,
        )

        def send(req) -> None:
            self.sent.append(req.method)
            if req.method == "ACK" and self.lose_first_ack:
                self.lose_first_ack = False
                return
            self.sock.sendto(bytes(req), self.far)

        return InviteClient(dialed, send, ring_timeout_s=ring_timeout_s, on_progress=lambda *p: self.progress.append(p))

    async def pump(self, client: InviteClient) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await loop.sock_recv(self.sock, 65535)
            msg = SipMessage.parse(data)
            if isinstance(msg, SipResponse):
                client.feed(msg)


async def _call(tmp_path, scenario: str, *, ring_timeout_s=10.0, credentials=None, fields=None, lose_first_ack=False):
    far_port = free_udp_port()
    dialer = Dialer(far_port, lose_first_ack)
    sipp = asyncio.create_task(run_sipp(tmp_path, None, scenario, listen_port=far_port, fields=fields, timeout_s=15))
    await asyncio.sleep(0.5)  # SIPp binds its port
    client = dialer.client(ring_timeout_s, credentials)
    pump = asyncio.create_task(dialer.pump(client))
    calling = asyncio.create_task(client.run())
    try:
        run = await sipp  # the transaction ACKs resent finals meanwhile, after its outcome too (Timer D)
        await asyncio.wait([calling], timeout=3)
    finally:
        calling.cancel()
        pump.cancel()
        dialer.sock.close()
    outcome = client.outcome  # None: the call had no outcome when SIPp ended
    return outcome, run, dialer


async def test_an_answered_call_is_acked(tmp_path):
    outcome, run, dialer = await _call(tmp_path, "out_answer.xml", fields=["no"])
    run.assert_ok()
    assert outcome.answered and outcome.status == 200 and outcome.code is None
    assert dialer.progress == [("trying", 100), ("ringing", 180)]
    assert dialer.sent[-1] == "ACK"


async def test_busy_is_acked_each_time_it_is_resent(tmp_path):
    """Our first ACK is lost on the way: SIPp resends the 486 until an ACK reaches it, so the resent 486 must be
    ACKed again (RFC 3261 §17.1.1.3), after the call already failed."""
    outcome, run, dialer = await _call(tmp_path, "out_busy.xml", lose_first_ack=True)
    run.assert_ok()  # an ACK reached SIPp within 5 s
    assert (outcome.answered, outcome.status, outcome.code) == (False, 486, "busy")
    assert dialer.sent.count("ACK") >= 2


async def test_ring_timeout_cancels(tmp_path):
    outcome, run, dialer = await _call(tmp_path, "out_ringing.xml", ring_timeout_s=1.0)
    run.assert_ok()  # SIPp saw the CANCEL and the 487's ACK
    assert (outcome.answered, outcome.status, outcome.code) == (False, 487, "no_answer")
    assert "CANCEL" in dialer.sent and dialer.progress == [("ringing", 180)]


async def test_401_is_answered_with_credentials_sipp_verifies(tmp_path):
    outcome, run, dialer = await _call(tmp_path, "out_auth.xml", credentials=("voxgate", PASSWORD), fields=[PASSWORD])
    run.assert_ok()  # verifyauth passed, the 407 and the 200 were ACKed
    assert outcome.answered and outcome.status == 200
    assert dialer.sent == ["INVITE", "ACK", "INVITE", "ACK"]


async def test_407_is_acked_and_answered_with_proxy_authorization(tmp_path):
    outcome, run, dialer = await _call(tmp_path, "out_proxy_auth.xml", credentials=("voxgate", PASSWORD))
    run.assert_ok()  # the 407 was ACKed, the second INVITE carried Proxy-Authorization for its realm and nonce
    assert outcome.answered and dialer.sent == ["INVITE", "ACK", "INVITE", "ACK"]


async def test_a_second_challenge_fails_the_call_with_auth_failed(tmp_path):
    """Digest answers a challenge once per request: a trunk that challenges again refused the credentials."""
    outcome, run, dialer = await _call(tmp_path, "out_auth_twice.xml", credentials=("voxgate", PASSWORD))
    run.assert_ok()  # both 401s were ACKed
    assert (outcome.answered, outcome.status, outcome.code) == (False, 401, "auth_failed")
    assert dialer.sent == ["INVITE", "ACK", "INVITE", "ACK"]


async def test_wrong_credentials_fail_sipps_check(tmp_path):
    """The check can fail: SIPp refuses a wrong password (and so the 200 never comes)."""
    outcome, run, _ = await _call(tmp_path, "out_auth.xml", credentials=("voxgate", "wrong"), fields=[PASSWORD])
    assert run.rc != 0 and outcome is None


@pytest.mark.parametrize(
    "status, code",
    [(486, "busy"), (600, "busy"), (603, "rejected"), (403, "rejected"), (404, "not_found"), (487, "no_answer")]
    + [(503, "unavailable"), (500, "unavailable"), (408, "unavailable"), (480, "unavailable"), (407, "auth_failed")],
)
def test_failure_codes(status, code):
    assert failure_code(status) == code
