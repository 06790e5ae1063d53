"""A real gateway with the SIP leg on a free loopback UDP port (SimulatedEngine, fast settings)."""

from __future__ import annotations

import pytest

from tests.telephony.conftest import FAST, merge, started_gateways

SIP_FAST = merge(
    FAST,
    {
        "sip": {
            "port": 0,
            "host": "127.0.0.1",
            "allow": ["127.0.0.1"],  # strangers in the attack tests call from other 127.x addresses
            "rtp_ports": "30000-39999",
            "ack_timeout_s": 1.5,
        },
        "telephony": {"unknown_call_timeout_s": 10},
    },
)


@pytest.fixture
async def sip_gateway():
    async with started_gateways() as start:

        async def make(**overrides):
            return await start(merge(SIP_FAST, overrides))

        yield make


def sip_port(gw) -> int:
    return gw.legs["gateway.legs.sip"].port
