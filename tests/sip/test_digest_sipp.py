"""SIPp's digest client (its `[authentication]` keyword, MD5 with qop=auth) against voxgate's digest server side
(gateway/sip/digest.py), over UDP on loopback: right credentials answered, a wrong password refused, and SIPp's own
Authorization replayed refused.

The far end here is tests/sip/tiny_uas.py answering OPTIONS with the DigestServer's verdict, not the SIP leg: the
leg takes the server side in the next step of issue 42; this checks the digest arithmetic against a real client."""

from __future__ import annotations

from gateway.sip.digest import DigestServer, Verdict
from tests.sip.sipp import run_sipp
from tests.sip.tiny_uas import Request, open_uas, response


async def answer_sipp(tmp_path, server: DigestServer, user: str, password: str) -> tuple[list[Verdict], list[str]]:
    """SIPp's OPTIONS answered: 401 with the server's challenges without credentials, 200 or 403 with them."""
    verdicts: list[Verdict] = []
    authorizations: list[str] = []

    def handle(request: Request) -> bytes:
        given = request.values("authorization")
        if not given:
            return response(request, "401 Unauthorized", [f"WWW-Authenticate: {c}" for c in server.challenges()])
        authorizations.extend(given)
        verdicts.append(server.verify(request.method, given))
        return response(request, "200 OK" if verdicts[-1].ok else "403 Forbidden")

    uas = await open_uas(handle)
    try:
        run = await run_sipp(tmp_path, uas.port, "digest_uac.xml", timeout_s=10, options=["-au", user, "-ap", password])
        run.assert_ok()
    finally:
        uas.transport.close()
    return verdicts, authorizations


async def test_sipp_answers_our_challenge(tmp_path):
    server = DigestServer("voxgate.test", {"alice": "s3cret"}, algorithms=["MD5"])  # Debian's SIPp 3.6: MD5 only
    verdicts, authorizations = await answer_sipp(tmp_path, server, "alice", "s3cret")
    assert verdicts == [Verdict("ok", "alice")]
    assert "qop=auth" in authorizations[0] and "nc=00000001" in authorizations[0]
    # SIPp's header sent again, as a listener on the path could: refused
    assert server.verify("OPTIONS", authorizations).code == "replay"


async def test_sipp_with_a_wrong_password_is_refused(tmp_path):
    server = DigestServer("voxgate.test", {"alice": "s3cret"}, algorithms=["MD5"])
    verdicts, _ = await answer_sipp(tmp_path, server, "alice", "guess")
    assert verdicts == [Verdict("wrong_credentials", "alice")]
