"""`voxgate call` as a subprocess against a real gateway, SIPp as the far end on loopback: it prints the call's
progress, speaks once answered and hangs up (exit 0); a busy far end exits 1 with the code; a refusal exits 2."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.sip.sipp import free_udp_port, run_sipp

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")

ROOT = Path(__file__).resolve().parents[2]
KEY = "call-command-key"


def _trunk(port: int) -> dict:
    return {"name": "far", "address": f"127.0.0.1:{port}", "from": "sip:+15550100@voxgate.test"}


async def voxgate_call(gw, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VOXGATE_API_KEY": KEY}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        "call",
        *args,
        "--gateway",
        gw.url,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_voxgate_call_is_answered_speaks_and_hangs_up(sip_gateway, tmp_path):
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_trunk(far)]}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_answer.xml", listen_port=far, fields=["bye"]))
    await asyncio.sleep(0.5)
    rc, out, err = await voxgate_call(gw, "+15551234567", "--trunk", "far", "--say", "Hello from the command line.")
    assert rc == 0, (out, err)
    lines = out.splitlines()
    assert lines[0].startswith("call out-") and "ringing (180)" in lines and "answered (200)" in out, out
    said = next(line for line in lines if line.startswith("said it"))
    assert float(said.split("(")[1].split()[0]) > 0.5  # seconds of audio played to the far end
    (await sipp).assert_ok()  # SIPp got the ACK, then our BYE


async def test_voxgate_call_wait_stays_until_the_far_end_hangs_up(sip_gateway, tmp_path):
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_trunk(far)]}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_answer_hangup.xml", listen_port=far))
    await asyncio.sleep(0.5)
    cmd = asyncio.create_task(voxgate_call(gw, "+15551234567", "--trunk", "far", "--say", "Hi.", "--wait"))
    (await sipp).assert_ok()
    rc, out, err = await cmd
    assert rc == 0, (out, err)
    lines = out.splitlines()
    assert any(line.startswith("said it") for line in lines) and lines[-1] == "the call ended (hangup)", out
    (await sipp).assert_ok()  # our 200 to SIPp's BYE came: we did not hang up first


async def test_voxgate_call_to_a_busy_far_end_exits_1_with_the_code(sip_gateway, tmp_path):
    far = free_udp_port()
    gw = await sip_gateway(sip={"trunks": [_trunk(far)]}, server={"api_keys": [KEY]})
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_busy.xml", listen_port=far))
    await asyncio.sleep(0.5)
    rc, out, err = await voxgate_call(gw, f"sip:bob@127.0.0.1:{far}", "--trunk", "far")
    assert rc == 1 and "failed: busy (486" in err, (out, err)
    (await sipp).assert_ok()


async def test_voxgate_call_refused_exits_2_with_the_gateways_code(sip_gateway):
    gw = await sip_gateway(sip={"trunks": [_trunk(5999)]}, server={"api_keys": [KEY]})
    rc, out, err = await voxgate_call(gw, "+15551234567", "--trunk", "nope")
    assert rc == 2 and "400 bad_message" in err and "trunk must name one of sip.trunks" in err, (out, err)
    rc, out, err = await voxgate_call(gw, "+15551234567", "--trunk", "far", "--api-key", "wrong")
    assert rc == 2 and "401 unauthorized" in err, (out, err)
