"""Digest authentication (gateway/sip/digest.py, gateway/sip/auth_failures.py): RFC 7616's published vectors, an
independent client (aiosipua's) against our server side, and the refusals: wrong password, replay,
stale nonce, forged nonce, a source that keeps failing."""

from __future__ import annotations

import logging

import pytest

from gateway.sip.auth_failures import AuthFailures
from gateway.sip.digest import (
    Challenge,
    DigestError,
    DigestServer,
    Verdict,
    authorization,
    choose_challenge,
    parse,
    read_challenge,
)

# RFC 7616 §3.9.1: the same request answered with MD5 and with SHA-256
RFC7616 = dict(
    realm="http-auth@example.org",
    nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v",
    opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS",
    cnonce="f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ",
    user="Mufasa",
    password="Circle of Life",
    method="GET",
    uri="/dir/index.html",
)
RFC7616_RESPONSES = {
    "MD5": "8ca523f5e9506fed4657c9700eebdbec",
    "SHA-256": "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1",
}


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("algorithm", ["MD5", "SHA-256"])
def test_client_answers_rfc7616_example(algorithm):
    v = RFC7616
    challenge = read_challenge(
        f'Digest realm="{v["realm"]}", qop="auth, auth-int", algorithm={algorithm}, '
        f'nonce="{v["nonce"]}", opaque="{v["opaque"]}"'
    )
    header = authorization(
        challenge, method=v["method"], uri=v["uri"], user=v["user"], password=v["password"], cnonce=v["cnonce"]
    )
    p = parse(header)
    assert p["response"] == RFC7616_RESPONSES[algorithm]
    assert (p["nc"], p["qop"], p["algorithm"], p["opaque"]) == ("00000001", "auth", algorithm, v["opaque"])


@pytest.mark.parametrize("algorithm", ["MD5", "SHA-256"])
def test_server_accepts_an_independent_client(algorithm):
    """aiosipua's digest client (the SIP stack's own, which the leg's registrations use) answers our challenge;
    we accept its answer once, and refuse it with a wrong password."""
    aiosipua = pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")
    from aiosipua.headers import parse_auth, stringify_auth

    server = DigestServer("voxgate", {"alice": "s3cret"}, algorithms=[algorithm])

    def client_answer(password: str) -> str:
        challenge = parse_auth(server.challenges()[0])
        credentials = aiosipua.auth.build_credentials(
            aiosipua.SipDigestAuth("alice", password), challenge, "INVITE", "sip:agent@voxgate"
        )
        assert credentials.params["algorithm"] == algorithm and credentials.params["qop"] == "auth"
        return stringify_auth(credentials)

    header = client_answer("s3cret")
    assert server.verify("INVITE", [header]).code == "ok"
    assert server.verify("INVITE", [header]).code == "replay"
    assert server.verify("INVITE", [client_answer("wrong")]).code == "wrong_credentials"


def answer(server: DigestServer, *, user="alice", password="s3cret", method="INVITE", uri="sip:agent@voxgate", nc=1):
    challenge = choose_challenge(server.challenges())
    return challenge, authorization(challenge, method=method, uri=uri, user=user, password=password, nc=nc)


@pytest.mark.parametrize("algorithm", ["MD5", "SHA-256"])
def test_round_trip_and_refusals(algorithm):
    server = DigestServer("voxgate", {"alice": "s3cret"}, algorithms=[algorithm])
    _, good = answer(server)
    foreign = 'Digest realm="elsewhere", username="bob", nonce="n", uri="sip:x", response="00"'
    assert server.verify("INVITE", ["Basic Zm9vOmJhcg==", foreign, good]) == Verdict("ok", "alice")
    assert server.verify("INVITE", [good]).code == "replay"
    assert server.verify("INVITE", [answer(server, password="guess")[1]]).code == ("wrong_credentials")
    assert server.verify("INVITE", [answer(server, user="mallory")[1]]).code == ("wrong_credentials")
    assert server.verify("BYE", [answer(server)[1]]).code == "wrong_credentials"


def test_nonce_count_must_grow():
    server = DigestServer("voxgate", {"alice": "s3cret"})
    challenge = choose_challenge(server.challenges())
    first = authorization(challenge, method="INVITE", uri="sip:a@b", user="alice", password="s3cret", nc=1)
    assert server.verify("INVITE", [first]).ok
    again = authorization(challenge, method="INVITE", uri="sip:a@b", user="alice", password="s3cret", nc=2)
    assert server.verify("INVITE", [again]).ok
    older = authorization(challenge, method="INVITE", uri="sip:a@b", user="alice", password="s3cret", nc=2)
    assert server.verify("INVITE", [older]).code == "replay"


def test_expired_nonce_is_answered_stale_only_with_the_right_password():
    clock = Clock()
    server = DigestServer("voxgate", {"alice": "s3cret"}, nonce_ttl_s=300, clock=clock)
    _, good = answer(server)
    _, bad = answer(server, password="guess")
    clock.now += 301
    assert server.verify("INVITE", [good]).code == "stale"
    assert server.verify("INVITE", [bad]).code == "wrong_credentials"
    renewed = read_challenge(server.challenges(stale=True)[0])
    assert renewed.stale and renewed.nonce
    assert server.verify("INVITE", [answer(server)[1]]).ok


def test_forged_and_foreign_nonces_are_refused():
    server = DigestServer("voxgate", {"alice": "s3cret"})
    other = DigestServer("voxgate", {"alice": "s3cret"})  # another secret: its nonces are not ours
    assert server.verify("INVITE", [answer(other)[1]]).code == "bad_nonce"
    forged = Challenge("voxgate", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "SHA-256", "auth", None, False)
    header = authorization(forged, method="INVITE", uri="sip:agent@voxgate", user="alice", password="s3cret")
    assert server.verify("INVITE", [header]).code == "bad_nonce"


def test_a_forgotten_nonce_is_not_trusted_again():
    """With the replay window full, an evicted nonce must not become usable again: it is answered stale."""
    clock = Clock()
    server = DigestServer("voxgate", {"alice": "s3cret"}, max_tracked_nonces=2, clock=clock)
    challenge, first = answer(server)
    assert server.verify("INVITE", [first]).ok
    for _ in range(2):
        clock.now += 1
        assert server.verify("INVITE", [answer(server)[1]]).ok
    assert server.verify("INVITE", [first]).code == "stale"


def test_missing_and_malformed_credentials():
    server = DigestServer("voxgate", {"alice": "s3cret"}, algorithms=["SHA-256"])
    assert server.verify("INVITE", []).code == "missing"
    assert server.verify("INVITE", ['Digest realm="elsewhere", username="x"']).code == "missing"
    assert server.verify("INVITE", ['Digest realm="voxgate", username="x"']).code == "malformed"
    assert server.verify("INVITE", ['Digest realm="voxgate" nonce']).code == "malformed"
    md5 = Challenge("voxgate", server.new_nonce(), "MD5", "auth", None, False)
    header = authorization(md5, method="INVITE", uri="sip:a@b", user="alice", password="s3cret")
    assert server.verify("INVITE", [header]).code == "unsupported_algorithm"
    assert not server.verify("INVITE", []).failed
    assert server.verify("INVITE", [header]).failed


def test_server_challenges_strongest_first():
    values = DigestServer("voxgate", {}).challenges()
    assert [read_challenge(v).algorithm for v in values] == ["SHA-256", "MD5"]
    assert len({read_challenge(v).nonce for v in values}) == 1
    with pytest.raises(ValueError, match="SHA-512"):
        DigestServer("voxgate", {}, algorithms=["SHA-512"])


def test_client_chooses_and_refuses():
    md5 = 'Digest realm="t", nonce="n1", algorithm=MD5, qop="auth"'
    sha = 'Digest realm="t", nonce="n2", algorithm=SHA-256, qop="auth"'
    assert choose_challenge([md5, sha]).algorithm == "SHA-256"
    assert choose_challenge(['Digest realm="t", nonce="n"', "Basic realm=x"]) == Challenge(
        "t", "n", "MD5", None, None, False
    )
    with pytest.raises(DigestError) as e:
        choose_challenge(['Digest realm="t", nonce="n", algorithm=SHA-512-256'])
    assert e.value.code == "unsupported_algorithm"
    with pytest.raises(DigestError) as e:
        choose_challenge(['Digest realm="t", nonce="n", qop="auth-int"'])
    assert e.value.code == "unsupported_qop"
    with pytest.raises(DigestError) as e:
        choose_challenge([])
    assert e.value.code == "missing"


def test_parse_quoting_and_limits():
    assert parse(r'Digest realm="a \"b\", c", nonce=xyz, qop="auth"') == {
        "realm": 'a "b", c',
        "nonce": "xyz",
        "qop": "auth",
    }
    header = authorization(
        Challenge('r"q', "n", "MD5", None, None, False), method="M", uri="u", user='us"er', password="p"
    )
    assert parse(header)["username"] == 'us"er' and parse(header)["realm"] == 'r"q'
    for bad, code in [
        ("Basic x", "not_digest"),
        ('Digest realm="x", realm="y"', "malformed"),
        ("Digest " + "a=b, " * 2000, "malformed"),
        ('Digest realm="unterminated', "malformed"),
    ]:
        with pytest.raises(DigestError) as e:
            parse(bad)
        assert e.value.code == code


def test_failures_block_a_source_and_log_once_per_burst(caplog):
    clock = Clock(0.0)
    failures = AuthFailures(max_failures=3, quiet_s=10, block_s=30, clock=clock)
    caplog.set_level(logging.WARNING, logger="voxgate.sip.auth")
    for _ in range(3):
        assert not failures.blocked("198.51.100.7")
        failures.failed("198.51.100.7", "wrong_credentials")
        clock.now += 1
    assert failures.blocked("198.51.100.7") and not failures.blocked("198.51.100.8")
    while failures.blocked("198.51.100.7"):  # it keeps trying through the block: still the same burst
        clock.now += 5
    assert clock.now >= 32
    failures.failed("198.51.100.7", "wrong_credentials")
    assert failures.blocked("198.51.100.7")  # one more failure in the burst blocks again at once
    assert len(caplog.records) == 1
    assert "198.51.100.7" in caplog.text and "wrong_credentials" in caplog.text
    clock.now += 100
    failures.failed("198.51.100.7", "replay")  # a new burst: logged again
    assert len(caplog.records) == 2 and failures.failures("198.51.100.7") == 1
    failures.succeeded("198.51.100.7")
    assert failures.failures("198.51.100.7") == 0


def test_failure_log_never_carries_credentials(caplog):
    server = DigestServer("voxgate", {"alice": "s3cret"})
    failures = AuthFailures()
    caplog.set_level(logging.DEBUG)
    verdict = server.verify("INVITE", [answer(server, user="alice", password="hunter2", uri="sip:a@b")[1]])
    failures.failed("203.0.113.9", verdict.code)
    assert verdict.code == "wrong_credentials" and "203.0.113.9" in caplog.text
    assert "alice" not in caplog.text and "hunter2" not in caplog.text and "response" not in caplog.text


def test_tracked_sources_are_bounded():
    failures = AuthFailures(max_sources=100, clock=Clock(0.0))
    for i in range(1000):
        failures.failed(f"10.0.{i // 256}.{i % 256}", "wrong_credentials")
    assert len(failures._bursts) == 100 and failures.failures("10.0.3.231") == 1 and failures.failures("10.0.0.0") == 0
