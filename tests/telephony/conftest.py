"""A real gateway on loopback with the SimulatedEngine (fast settings: tests stay quick)."""

from __future__ import annotations

import pytest

from gateway.config import load_config
from gateway.app import Gateway

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


@pytest.fixture
async def make_gateway():
    started: list[Gateway] = []

    async def make(**overrides) -> Gateway:
        gw = Gateway(load_config(None, merge(FAST, overrides)))
        await gw.start(port=0)
        started.append(gw)
        return gw

    yield make
    for gw in started:
        await gw.stop()


@pytest.fixture
async def gateway(make_gateway, tmp_path):
    return await make_gateway(telephony={"record_inbound_dir": str(tmp_path / "inbound")})
