"""One gateway process under attack for the whole module, and one healthy call beside it."""

from __future__ import annotations

import pytest

from bench.fuzz.healthy import HealthyCall
from bench.fuzz.server import GatewayProcess


@pytest.fixture(scope="module")
def fuzz_gateway():
    gw = GatewayProcess().start()
    gw.new_log()  # start-up lines are not findings
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def healthy_call(fuzz_gateway):
    call = HealthyCall(fuzz_gateway.ws).start()
    call.metrics_at_start = fuzz_gateway.metrics()  # the server's clock lateness is read over the same window
    yield call
    if call.result is None:
        call.stop()
