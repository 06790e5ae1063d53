"""Shared fixtures: a real gateway on a loopback port, and a protocol client."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import time

import pytest
import websockets

from gateway.config import load_config
from gateway.app import Gateway
from tests import required

# cluster configs in tests name this variable in cluster.secret_env (subprocess nodes inherit it)
CLUSTER_SECRET_ENV = "VOXGATE_TEST_CLUSTER_SECRET"
os.environ.setdefault(CLUSTER_SECRET_ENV, "voxgate-test-cluster-secret-0123456789")

# ---------------------------------------------------------------- under CI=true, a missing dependency fails
_MISSING = required.missing() if required.in_ci() else []


def pytest_report_header(config):
    if _MISSING:
        return [
            f"CI=true: missing required test dependencies: {', '.join(n.name for n in _MISSING)} "
            "(their suites FAIL; tests/required.py)"
        ]
    return None


def _missing_named_in(report) -> tuple[required.Need, str] | None:
    """The required dependency, missing here, that a skip's reason names (and the reason), or None."""
    if not _MISSING or not report.skipped:
        return None
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    need = next((n for n in _MISSING if n.named_in(reason)), None)
    return None if need is None else (need, reason)


def _why_failed(need: required.Need, reason: str) -> str:
    return (
        f"CI=true: this would skip ({reason}), but {need.name} is a required test dependency "
        f"(tests/required.py): install {need.installs}"
    )


_SKIPPED_MODULES: list[str] = []  # modules skipped whole at collection for a missing dependency (CI=true)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    found = _missing_named_in(report)
    if found is not None:  # the test fails instead of skipping
        report.outcome, report.longrepr = "failed", _why_failed(*found)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield  # a module-level skip (importorskip at import) happens here: the module stays skipped, the run fails
    report = outcome.get_result()
    found = _missing_named_in(report)
    if found is not None:
        _SKIPPED_MODULES.append(f"{report.nodeid}: {_why_failed(*found)}")


def pytest_terminal_summary(terminalreporter):
    for line in _SKIPPED_MODULES:
        terminalreporter.write_line(f"FAILED {line}", red=True)


def pytest_sessionfinish(session, exitstatus):
    if _SKIPPED_MODULES and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


FAST_SIM = {
    "engine": {"kind": "simulated"},
    "simulated": {"first_packet_ms": 20, "capacity_x": 500, "ms_per_char": 20, "stream_rtf": 0.05},
    "playout": {"prebuffer_ms": 40},
}


def merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@contextlib.contextmanager
def heap_frozen():
    """What `voxgate serve` does once started (`settle_gc`, less its collection, which takes seconds on this
    process's heap): the objects that exist now are left out of every collection until the block ends. Here they
    are every earlier test's, and a full collection walking them can stall the gateway's clock for hundreds of ms,
    a pause a served gateway does not have."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture
async def start_gateway():
    """`await start_gateway(overrides)` → a started Gateway on 127.0.0.1:<free port>; stopped after the test."""
    started = []

    async def _start(overrides: dict | None = None) -> Gateway:
        cfg = load_config(None, merge(FAST_SIM, overrides or {}))
        gw = Gateway(cfg)
        await gw.start(host="127.0.0.1", port=0)
        started.append(gw)
        return gw

    with heap_frozen():
        yield _start
        for gw in started:
            await gw.stop()


class Client:
    """A native-protocol client that records every message with its arrival time."""

    def __init__(self, ws):
        self.ws = ws
        self.events: list[tuple[float, dict]] = []
        self.frames: list[tuple[float, bytes]] = []

    @classmethod
    async def connect(cls, gw: Gateway, path: str = "/v1/ws", **kw) -> "Client":
        ws = await websockets.connect(f"ws://127.0.0.1:{gw.port}{path}", max_size=None, **kw)
        return cls(ws)

    async def send(self, msg: dict | str | bytes) -> None:
        await self.ws.send(json.dumps(msg) if isinstance(msg, dict) else msg)

    async def start(self, **fields) -> dict:
        await self.send({"type": "session.start", **fields})
        return await self.until("session.started")

    async def next_event(self, timeout: float = 10.0) -> dict:
        """The next JSON event within `timeout` seconds; audio frames arriving meanwhile are recorded (they do
        not restart the wait, so `until(timeout=)` times out while paced audio flows)."""
        deadline = time.monotonic() + timeout
        while True:
            raw = await asyncio.wait_for(self.ws.recv(), max(0.0, deadline - time.monotonic()))
            now = time.monotonic()
            if isinstance(raw, bytes):
                self.frames.append((now, raw))
                continue
            msg = json.loads(raw)
            self.events.append((now, msg))
            return msg

    async def until(self, type_: str, timeout: float = 15.0, **match) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            msg = await self.next_event(max(0.01, deadline - time.monotonic()))
            if msg["type"] == type_ and all(msg.get(k) == v for k, v in match.items()):
                return msg

    def of_type(self, type_: str) -> list[dict]:
        return [m for _, m in self.events if m["type"] == type_]

    async def close(self) -> None:
        await self.ws.close()
