"""docs/sip.md "Call baresip from voxgate", done as the page says: a gateway from configs/sip-demo.yaml (the demo
voice), a baresip with the page's `accounts` line (it answers by itself), and the page's Python snippet run as
it is written (only the addresses point at this test's free ports). baresip records what it heard; it must be
as much speech as the gateway says it played."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.sip.baresip import Baresip, write_wav
from tests.telephony.conftest import merge, started_gateways

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "sip.md").read_text()
SECTION = PAGE.split("### Call baresip from voxgate (one machine)", 1)[1].split("\n## ", 1)[0]


def block(marker: str) -> str:
    """The page's fenced block that contains `marker`."""
    (found,) = [b for b in re.findall(r"```[a-z]*\n(.*?)```", SECTION, re.S) if marker in b]
    return found


def loud_frames(pcm: np.ndarray, rate: int) -> np.ndarray:
    frame = rate // 50
    levels = np.abs(pcm[: len(pcm) // frame * frame].reshape(-1, frame).astype(np.int32)).max(axis=1)
    return np.flatnonzero(levels > 500)


@pytest.fixture
async def demo(tmp_path):
    """baresip with the page's `accounts` line (answers by itself) and configs/sip-demo.yaml's config with its
    trunk pointed at that baresip: (baresip, the gateway's config, the trunk's address in the page, baresip's)."""
    config_lines = block("# ~/.baresip-voxgate/config").splitlines()
    (account,) = [ln for ln in block("# ~/.baresip-voxgate/accounts").splitlines() if ln.startswith("<sip:")]
    demo = yaml.safe_load((ROOT / "configs" / "sip-demo.yaml").read_text())
    (trunk,) = demo["sip"]["trunks"]
    assert f"sip_listen {trunk['address']}" in config_lines  # the page's baresip listens where the trunk points

    write_wav(tmp_path / "silence.wav", np.zeros(8000 * 10, dtype=np.int16))  # baresip's microphone: quiet
    ua = await Baresip.start(tmp_path / "baresip", tmp_path / "silence.wav", account=account)
    far = f"127.0.0.1:{ua.sip_port}"
    config = merge(
        demo,
        {
            "server": {"port": 0},
            "telephony": {"audiosocket_port": 0},
            "sip": {"port": 0, "rtp_ports": "30000-39999", "trunks": [{**trunk, "address": far}]},
        },
    )
    try:
        yield ua, config, trunk["address"], far
    finally:
        await ua.stop()


async def test_the_page_places_a_call_to_an_auto_answering_baresip_that_hears_the_demo_voice(demo, tmp_path):
    ua, config, page_address, far = demo
    snippet = block("Session.dial(")
    async with started_gateways() as start:
        gw = await start(config)
        script = tmp_path / "place_call.py"
        script.write_text(snippet.replace("http://127.0.0.1:8080", gw.url).replace(page_address, far))
        env = {**os.environ, "PYTHONPATH": str(ROOT / "clients" / "python")}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 90)
        output = out.decode()
        assert proc.returncode == 0, (output, err.decode())
        assert f"answered by sip:me@{far}" in output, output
        played_ms = float(re.search(r"played (\d+) ms", output).group(1))
        await ua.event("CALL_CLOSED", timeout=10)  # our BYE
        await asyncio.sleep(0.3)  # sndfile closes its WAV when the audio stream goes
    pcm, rate = ua.heard()
    assert played_ms > 2000  # a sentence of the demo voice
    loud = loud_frames(pcm, rate)
    assert len(loud), "baresip heard only silence"
    heard_ms = (loud[-1] - loud[0] + 1) * 20
    # eSpeak ends a sentence with a quiet tail that the level threshold does not count as heard
    assert played_ms - 600 <= heard_ms <= played_ms + 200, f"heard {heard_ms} ms of speech, played {played_ms} ms"


async def test_with_no_agent_the_page_s_post_gets_the_greeting_spoken(demo):
    """The page's curl: nobody attaches, and baresip hears the demo config's `sip.greeting`."""
    import aiohttp

    ua, config, page_address, far = demo
    body = json.loads(re.search(r"-d '(\{.*?\})'", SECTION).group(1).replace(page_address, far))
    config = merge(config, {"sip": {"greeting": "Hello, this is voxgate."}})  # the demo's, shorter
    async with started_gateways() as start:
        gw = await start(config)
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{gw.url}/v1/calls", json=body) as r:
                assert r.status == 201, await r.text()
        await ua.event("CALL_ESTABLISHED", timeout=10)
        await asyncio.sleep(4.0)  # a second for an agent to attach, then the greeting (a second and a half)
        await ua.command("hangup")
        await ua.event("CALL_CLOSED", timeout=5)
        await asyncio.sleep(0.3)
    pcm, rate = ua.heard()
    heard_ms = len(loud_frames(pcm, rate)) * 20
    assert heard_ms > 500, f"baresip heard {heard_ms} ms of speech: no greeting"
