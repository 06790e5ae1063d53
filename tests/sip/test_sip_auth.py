"""Inbound digest authentication (`sip.auth`) with SIPp as the caller, on loopback: an INVITE without credentials
gets 401 with a challenge, SIPp's answer with the right password is answered, with a wrong one refused; `sip.allow`
and credentials combine as `sip.auth.combine` says; failures are rate-limited per source and logged once per burst
without credentials."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.config import ConfigError, load_config
from tests.sip.conftest import sip_port
from tests.sip.sipp import run_sipp
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")

PASSWORD_ENV = "VOXGATE_TEST_SIP_PASSWORD"
PASSWORD = "correct horse 7"


def auth() -> dict:
    # Debian's SIPp 3.6 answers only MD5, and only the first challenge: MD5 alone here
    return {"realm": "voxgate.test", "users": [{"user": "alice", "password_env": PASSWORD_ENV}], "algorithms": ["MD5"]}


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)


def sipp_as(user: str, password: str) -> list[str]:
    return ["-au", user, "-ap", password]


def refused(gw, code: str) -> float:
    return gw.metrics.errors.labels(code=code)._value.get()


async def answered_call(gw, tmp_path, call_id: str, **sipp) -> None:
    """SIPp's auth_call.xml (401, credentials, 200, BYE) is answered and reaches the agent as a call."""
    control = await Control.connect(gw)
    await control.attach(f"{call_id}1")
    run = asyncio.create_task(run_sipp(tmp_path, sip_port(gw), "auth_call.xml", fields=[call_id], **sipp))
    media = await control.expect("call.media", timeout=10)
    assert media["state"] == "connected" and media["leg"] == "sip"
    ended = await control.expect("call.media", timeout=10)
    assert ended["state"] == "ended" and ended["reason"] == "hangup"
    (await run).assert_ok()


async def test_challenged_then_answered_with_the_right_password(sip_gateway, tmp_path):
    gw = await sip_gateway(sip={"allow": ["127.0.0.2"], "auth": auth()})  # the caller (127.0.0.1) is not listed
    await answered_call(gw, tmp_path, "sipp-auth-", options=sipp_as("alice", PASSWORD))
    assert refused(gw, "auth_failed") == 0


async def test_over_tcp_credentials_let_a_source_outside_allow_connect(sip_gateway, tmp_path):
    gw = await sip_gateway(sip={"allow": ["127.0.0.2"], "auth": auth()})
    await answered_call(gw, tmp_path, "sipp-auth-tcp-", tcp=True, options=sipp_as("alice", PASSWORD))


async def test_a_wrong_password_is_refused_and_logged_once_without_credentials(sip_gateway, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="voxgate")
    gw = await sip_gateway(sip={"allow": ["127.0.0.2"], "auth": auth()})
    for _ in range(2):
        run = await run_sipp(
            tmp_path, sip_port(gw), "auth_refused.xml", fields=["x"], options=sipp_as("alice", "guess1")
        )
        run.assert_ok()  # 401, then 403 with X-Voxgate-Reason: auth_failed
    assert len(gw.calls) == 0
    assert refused(gw, "auth_failed") == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "digest" in r.getMessage()]
    assert len(warnings) == 1 and "127.0.0.1" in warnings[0]  # one line for the burst
    logged = caplog.text
    assert "guess1" not in logged and "alice" not in logged and "response=" not in logged


async def test_a_source_that_keeps_failing_is_blocked_without_a_challenge(sip_gateway, tmp_path):
    gw = await sip_gateway(sip={"allow": ["127.0.0.2"], "auth": {**auth(), "max_failures": 1}})
    run = await run_sipp(tmp_path, sip_port(gw), "auth_refused.xml", fields=["x"], options=sipp_as("alice", "guess1"))
    run.assert_ok()
    run = await run_sipp(tmp_path, sip_port(gw), "auth_blocked.xml", timeout_s=10)
    run.assert_ok()  # blocked for block_s: 403 auth_failed at once, no challenge to answer
    assert refused(gw, "auth_failed") == 2 and len(gw.calls) == 0


async def test_either_a_source_in_allow_is_not_challenged(sip_gateway, tmp_path):
    gw = await sip_gateway(sip={"allow": ["127.0.0.1"], "auth": auth()})
    control = await Control.connect(gw)
    await control.attach("sipp-allowed-1")
    run = asyncio.create_task(run_sipp(tmp_path, sip_port(gw), "call_pcap.xml", fields=["sipp-allowed-", "500"]))
    media = await control.expect("call.media", timeout=10)  # call_pcap.xml has no credentials and takes no 401
    assert media["state"] == "connected"
    (await run).assert_ok()


async def test_both_a_source_in_allow_must_authenticate_too(sip_gateway, tmp_path):
    gw = await sip_gateway(sip={"allow": ["127.0.0.1"], "auth": {**auth(), "combine": "both"}})
    await answered_call(gw, tmp_path, "sipp-both-", options=sipp_as("alice", PASSWORD))  # its 401 is not optional


async def test_both_a_source_outside_allow_is_forbidden_before_any_challenge(sip_gateway, tmp_path):
    gw = await sip_gateway(sip={"allow": ["127.0.0.2"], "auth": {**auth(), "combine": "both"}})
    run = await run_sipp(tmp_path, sip_port(gw), "forbidden.xml", timeout_s=10)
    run.assert_ok()  # 403 with X-Voxgate-Reason: forbidden, no 401
    assert len(gw.calls) == 0


@pytest.mark.parametrize(
    "section, words",
    [
        ({"realm": ""}, "sip.auth.realm: must be set"),
        ({"users": []}, "sip.auth.users: must list at least one"),
        ({"users": [{"user": "alice", "password_env": "VOXGATE_TEST_UNSET_ENV"}]}, "[0].password_env names"),
        ({"algorithms": ["SHA-512"]}, "sip.auth.algorithms: must list some of SHA-256, MD5"),
        ({"combine": "any"}, "sip.auth.combine: must be one of either, both"),
        ({"nonce_secret_env": PASSWORD_ENV + "_UNSET"}, "must hold at least 16 characters"),
        ({"colour": "blue"}, "sip.auth.colour: unknown key"),
    ],
)
def test_config_refuses_a_bad_auth_section_in_one_line(section, words):
    with pytest.raises(ConfigError) as err:
        load_config(None, {"sip": {"port": 5060, "auth": {**auth(), **section}}})
    message = str(err.value)
    assert words in message and "\n" not in message


def test_config_auth_alone_opens_the_port_and_both_needs_allow():
    assert load_config(None, {"sip": {"port": 5060, "auth": auth()}}).sip.auth.realm == "voxgate.test"
    with pytest.raises(ConfigError, match="sip.allow: is empty but sip.auth.combine is both"):
        load_config(None, {"sip": {"port": 5060, "auth": {**auth(), "combine": "both"}}})
