"""A real gateway on loopback (SimulatedEngine) with the caller's voice turned on."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")

from tests.telephony.conftest import FAST, merge, started_gateways  # noqa: E402

VOICE = {
    "barge_in": {"mode": "vad", "min_speech_ms": 250, "echo_holdoff_ms": 300},
    # 20 ms of audio per character: a 300-character turn plays for 6 s, far longer than any test needs
    "simulated": {"first_packet_ms": 10, "capacity_x": 500, "ms_per_char": 20, "stream_rtf": 0.05},
}


@pytest.fixture
async def make_voice_gateway():
    async with started_gateways() as start:

        async def make(install=(), **overrides):
            return await start(merge(merge(FAST, VOICE), overrides), install)

        yield make
