"""A real gateway on loopback with the SimulatedEngine (fast settings: tests stay quick)."""

from __future__ import annotations

import contextlib

import pytest

from gateway.config import load_config
from gateway.app import Gateway
from tests.conftest import heap_frozen

FAST = {
    "server": {"host": "127.0.0.1", "port": 0, "max_sessions": 100},
    "engine": {"kind": "simulated"},
    "simulated": {"first_packet_ms": 10, "capacity_x": 500, "ms_per_char": 20, "stream_rtf": 0.05},
    "playout": {"prebuffer_ms": 40},
    "telephony": {"audiosocket_port": 0, "unknown_call_timeout_s": 0.6},
}


def merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@contextlib.asynccontextmanager
async def started_gateways():
    """Yields `await start(config, install=())`: a Gateway from the config dict, each `install(gw)` hook run
    before it starts on port 0; every gateway started is stopped when the block ends."""
    started: list[Gateway] = []

    async def start(config: dict, install=()) -> Gateway:
        gw = Gateway(load_config(None, config))
        for fn in install:
            fn(gw)
        await gw.start(port=0)
        started.append(gw)
        return gw

    with heap_frozen():
        try:
            yield start
        finally:
            for gw in started:
                await gw.stop()


@pytest.fixture
async def make_gateway():
    async with started_gateways() as start:

        async def make(**overrides) -> Gateway:
            return await start(merge(FAST, overrides))

        yield make


@pytest.fixture
async def gateway(make_gateway, tmp_path):
    return await make_gateway(telephony={"record_inbound_dir": str(tmp_path / "inbound")})
