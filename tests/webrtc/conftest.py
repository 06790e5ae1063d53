from __future__ import annotations

import pytest

from gateway.config import load_config
from gateway.app import Gateway


def make_config(**sections):
    base = {
        "server": {"host": "127.0.0.1", "port": 0, "max_sessions": 4},
        "engine": {"kind": "simulated"},
        "simulated": {"first_packet_ms": 20, "ms_per_char": 30},
        "llm": {"kind": "simulated", "ttft_ms": 30, "tokens_per_s": 200},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return load_config(None, base)


@pytest.fixture
async def gateway_factory():
    started = []

    async def start(**sections) -> Gateway:
        gw = Gateway(make_config(**sections))
        await gw.start()
        started.append(gw)
        return gw

    yield start
    for gw in started:
        await gw.stop()


@pytest.fixture
async def gateway(gateway_factory) -> Gateway:
    return await gateway_factory()
