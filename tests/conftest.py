"""Shared fixtures: a real gateway on a loopback port, and a protocol client."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
import websockets

from gateway.config import load_config
from gateway.app import Gateway

# cluster configs in tests name this variable in cluster.secret_env (subprocess nodes inherit it)
CLUSTER_SECRET_ENV = "VOXGATE_TEST_CLUSTER_SECRET"
os.environ.setdefault(CLUSTER_SECRET_ENV, "voxgate-test-cluster-secret-0123456789")

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
