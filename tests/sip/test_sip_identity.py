"""The caller's identity to the agent: SIPp sends an INVITE with a display name, P-Asserted-Identity, Diversion, an
X-Customer-Id that `sip.pass_headers` lists and an X-Internal-Secret it does not; the control socket's
`call.attached` (and `call.media` connected) carry the `sip` object, and the built-in agent's conversation has it."""

from __future__ import annotations

import asyncio

import pytest

from gateway.agent.agent import Agent
from gateway.agent.llm_sim import LlmSimulator
from tests.sip.conftest import sip_port
from tests.sip.sipp import run_sipp
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


async def wait_for_call(gw, call_id: str):
    for _ in range(200):
        call = gw.calls.get(call_id)
        if call is not None and call.media_state == "connected":
            return call
        await asyncio.sleep(0.05)
    raise AssertionError(f"no SIP call {call_id!r} connected")


async def test_call_attached_carries_the_callers_identity_and_only_listed_headers(sip_gateway, tmp_path):
    gw = await sip_gateway(sip={"pass_headers": ["x-customer-id"]})  # names match in any case
    sipp = asyncio.create_task(run_sipp(tmp_path, sip_port(gw), "identity.xml", fields=["sipp-who-"]))
    call = await wait_for_call(gw, "sipp-who-1")
    control = await Control.connect(gw)
    attached = await control.attach("sipp-who-1")  # after the media: call.attached carries it
    sip = attached["sip"]
    assert sip["direction"] == "inbound"
    assert sip["from"].startswith("sip:+15550100@") and sip["from_display"] == "Alice"
    assert sip["to"].startswith("sip:agent@") and sip["request_uri"].startswith("sip:+15550123@")
    assert sip["p_asserted_identity"] == "sip:+15550100@trunk.example"
    assert sip["diversion"] == [{"uri": "tel:+15550199", "reason": "no-answer"}]
    assert sip["headers"] == {"X-Customer-Id": "cust-42"}  # X-Internal-Secret is not listed: absent
    media = await control.expect("call.media", state="connected")
    assert media["sip"] == sip
    # the built-in agent's conversation starts with the same facts
    messages = Agent(call.session, LlmSimulator()).conversation.messages()
    assert any("cust-42" in m["content"] and "+15550199" in m["content"] for m in messages if m["role"] == "system")
    assert not any("hidden" in m["content"] for m in messages)
    await control.expect("call.media", state="ended", timeout=10)
    (await sipp).assert_ok()


async def test_an_agent_attached_first_learns_it_from_call_media(sip_gateway, tmp_path):
    gw = await sip_gateway()  # no pass_headers: the identity headers, none of the others
    control = await Control.connect(gw)
    attached = await control.attach("sipp-first-1")
    assert "sip" not in attached  # nothing is known before the INVITE
    sipp = asyncio.create_task(run_sipp(tmp_path, sip_port(gw), "identity.xml", fields=["sipp-first-"]))
    media = await control.expect("call.media", state="connected", timeout=10)
    assert media["sip"]["p_asserted_identity"] == "sip:+15550100@trunk.example" and media["sip"]["headers"] == {}
    await control.expect("call.media", state="ended", timeout=10)
    (await sipp).assert_ok()


def test_config_refuses_a_credential_or_a_non_name_in_pass_headers():
    from gateway.config import ConfigError, load_config

    for name, words in (("Authorization", "carries credentials"), ("X Bad", "is not a SIP header name")):
        with pytest.raises(ConfigError) as err:
            load_config(None, {"sip": {"port": 5060, "allow": ["127.0.0.1"], "pass_headers": [name]}})
        assert "sip.pass_headers:" in str(err.value) and words in str(err.value) and "\n" not in str(err.value)
