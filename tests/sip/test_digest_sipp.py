"""SIPp's digest client (its `[authentication]` keyword, MD5 with qop=auth) against voxgate's digest server side
(gateway/sip/digest.py), over UDP on loopback: right credentials answered, a wrong password refused, and SIPp's own
Authorization replayed refused.

The far end here is a few lines of UDP answering OPTIONS with the DigestServer's verdict, not the SIP leg: the leg
takes the server side in the next step of issue 42; this checks the digest arithmetic against a real client."""

from __future__ import annotations

import asyncio

from gateway.sip.digest import DigestServer, Verdict
from tests.sip.sipp import run_sipp


class DigestResponder(asyncio.DatagramProtocol):
    """Answers each OPTIONS: 401 with the server's challenges without credentials, 200 or 403 with them."""

    def __init__(self, server: DigestServer):
        self.server = server
        self.verdicts: list[Verdict] = []
        self.authorizations: list[str] = []

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        head = data.decode(errors="replace").split("\r\n\r\n", 1)[0].split("\r\n")
        method, _, _ = head[0].split(" ", 2)
        headers = [line.partition(":") for line in head[1:]]
        values = {name.strip().lower(): [] for name, _, _ in headers}
        for name, _, value in headers:
            values[name.strip().lower()].append(value.strip())
        echoed = [f"{n}: {v}" for n in ("Via", "From", "To", "Call-ID", "CSeq") for v in values.get(n.lower(), [])]
        given = values.get("authorization", [])
        if not given:
            status, extra = "401 Unauthorized", [f"WWW-Authenticate: {c}" for c in self.server.challenges()]
        else:
            self.authorizations += given
            verdict = self.server.verify(method, given)
            self.verdicts.append(verdict)
            status, extra = ("200 OK", []) if verdict.ok else ("403 Forbidden", [])
        reply = "\r\n".join([f"SIP/2.0 {status}", *echoed, *extra, "Content-Length: 0", "", ""])
        self.transport.sendto(reply.encode(), addr)


async def answer_sipp(tmp_path, server: DigestServer, user: str, password: str) -> DigestResponder:
    loop = asyncio.get_running_loop()
    transport, responder = await loop.create_datagram_endpoint(
        lambda: DigestResponder(server), local_addr=("127.0.0.1", 0)
    )
    try:
        port = transport.get_extra_info("sockname")[1]
        run = await run_sipp(tmp_path, port, "digest_uac.xml", timeout_s=10, options=["-au", user, "-ap", password])
        run.assert_ok()
    finally:
        transport.close()
    return responder


async def test_sipp_answers_our_challenge(tmp_path):
    server = DigestServer("voxgate.test", {"alice": "s3cret"}, algorithms=["MD5"])  # SIPp answers MD5 only
    responder = await answer_sipp(tmp_path, server, "alice", "s3cret")
    assert responder.verdicts == [Verdict("ok", "alice")]
    assert "qop=auth" in responder.authorizations[0] and "nc=00000001" in responder.authorizations[0]
    # SIPp's header sent again, as a listener on the path could: refused
    assert server.verify("OPTIONS", responder.authorizations).code == "replay"


async def test_sipp_with_a_wrong_password_is_refused(tmp_path):
    server = DigestServer("voxgate.test", {"alice": "s3cret"}, algorithms=["MD5"])
    responder = await answer_sipp(tmp_path, server, "alice", "guess")
    assert responder.verdicts == [Verdict("wrong_credentials", "alice")]
