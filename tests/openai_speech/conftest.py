"""Fixtures: upstream speech servers (`voxgate serve` in other processes) and a gateway whose engine is
`engine.kind: openai-speech` pointed at them."""

from __future__ import annotations

import pytest

from gateway.app import Gateway
from gateway.config import load_config
from tests.conftest import merge
from tests.openai_speech.servers import SpeechServer


@pytest.fixture
async def speech_servers(tmp_path):
    """`await speech_servers(name, sim=..., **sections)` → a started, ready SpeechServer; all stopped afterwards."""
    made: list[SpeechServer] = []

    async def _start(name: str, sim: dict | None = None, **sections) -> SpeechServer:
        server = SpeechServer.simulated(tmp_path, name, sim, **sections).start()
        made.append(server)
        return await server.wait_ready()

    _start.made = made
    yield _start
    for server in made:
        server.stop()


@pytest.fixture
async def chained_gateway():
    """`await chained_gateway(endpoints, **overrides)` → a started Gateway speaking through openai-speech."""
    started: list[Gateway] = []

    async def _start(endpoints: list[str], overrides: dict | None = None) -> Gateway:
        cfg = load_config(
            None,
            merge(
                {
                    "engine": {"kind": "openai-speech", "endpoints": endpoints, "connect_timeout_s": 3},
                    "playout": {"prebuffer_ms": 40},
                },
                overrides or {},
            ),
        )
        gw = Gateway(cfg)
        await gw.start(host="127.0.0.1", port=0)
        started.append(gw)
        return gw

    yield _start
    for gw in started:
        await gw.stop()
