"""Secrets never reach the logs or /metrics: a real `voxgate serve` process at DEBUG with an API key, a Twilio
auth token and a TURN secret, driven through right and wrong credentials on every door, then its whole
output and a /metrics scrape are searched for each secret (and for what was minted from them)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import aiohttp
import pytest
import websockets

from tests.gateway.test_serve_cli import ROOT, free_port

API_KEY = "vgk-api-key-7f3a91c2e4"
TWILIO_TOKEN = "twilio-auth-token-5b8d0e"
TURN_SECRET = "turn-static-secret-c6a2f9"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM")


async def _wait_ready(port: int) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(400):
            try:
                async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("the gateway did not become ready")


async def _exercise(port: int) -> tuple[str, list[str]]:
    base, ws_base = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}"
    minted: list[str] = []
    key = {"Authorization": f"Bearer {API_KEY}"}
    async with aiohttp.ClientSession() as http:
        for creds in ("wrong-key", API_KEY[:-1], API_KEY + "x"):  # near misses are refused (and must not echo the key)
            with pytest.raises(websockets.InvalidStatus):
                await websockets.connect(f"{ws_base}/v1/ws?token={creds}")
        with pytest.raises(websockets.InvalidStatus):  # a key is never taken from the query string (and not logged)
            await websockets.connect(f"{ws_base}/v1/ws?token={API_KEY}")
        async with websockets.connect(f"{ws_base}/v1/ws", additional_headers=key) as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            await ws.send(
                json.dumps({"type": "text", "turn_id": "t1", "text": f"Say {API_KEY[:3]} please.", "final": True})
            )
            await ws.send(json.dumps({"type": "no.such.type", "key": API_KEY}))  # a bad message quoting a secret
            while True:
                m = await ws.recv()
                if isinstance(m, str) and json.loads(m)["type"] == "turn.done":
                    break
        async with http.post(f"{base}/v1/tokens", headers=key) as r:
            token = (await r.json())["token"]
        minted.append(token)
        async with websockets.connect(f"{ws_base}/v1/ws?token={token}") as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            await ws.recv()
        with pytest.raises(websockets.InvalidStatus):  # spent
            await websockets.connect(f"{ws_base}/v1/ws?token={token}")
        with pytest.raises(websockets.InvalidStatus):  # unsigned, with the API key in its query string
            await websockets.connect(f"{ws_base}/v1/twilio?token={API_KEY}")
        with pytest.raises(websockets.InvalidStatus):
            await websockets.connect(f"{ws_base}/v1/twilio", additional_headers={"X-Twilio-Signature": "bm9wZQ=="})
        async with http.get(f"{base}/v1/webrtc/config", headers=key) as r:
            turn = [s for s in (await r.json())["ice_servers"] if isinstance(s, dict)][0]
        minted.append(turn["credential"])
        async with http.post(
            f"{base}/v1/audio/speech",
            headers={"Authorization": f"Bearer {API_KEY}z"},
            json={"model": "x", "input": "hi", "voice": "alloy"},
        ) as r:
            assert r.status == 401
        # a request aiohttp cannot parse, with the key in it
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /v1/ws?token={API_KEY} HTTP/1.1\r\nHost: x\r\nBad Header {API_KEY}\r\n\r\n".encode())
        await writer.drain()
        await reader.read(4096)
        writer.close()
        async with http.get(f"{base}/metrics") as r:
            metrics = await r.text()
    return metrics, minted


async def test_no_secret_in_logs_or_metrics(tmp_path):
    port = free_port()
    overrides = tmp_path / "locks.yaml"
    overrides.write_text(
        json.dumps(
            {
                "engine": {"kind": "simulated"},
                "server": {"api_keys": [API_KEY], "log_dir": str(tmp_path / "logs")},
                "telephony": {"twilio_auth_token_env": "VOXGATE_T_TWILIO"},
                "webrtc": {"turn_urls": ["turn:turn.example.org:3478"], "turn_secret_env": "VOXGATE_T_TURN"},
            }
        )
    )
    env = {**os.environ, "VOXGATE_T_TWILIO": TWILIO_TOKEN, "VOXGATE_T_TURN": TURN_SECRET, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--config",
            str(overrides),
            "--port",
            str(port),
            "--log-level",
            "debug",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        await _wait_ready(port)
        metrics, minted = await _exercise(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    session_logs = "".join(
        p.read_text(errors="replace") for p in (tmp_path / "logs").rglob("*") if p.is_file() and p.suffix != ".wav"
    )
    assert "refused" in output.lower() and "voxgate_sessions_total" in metrics  # the run did log and scrape
    for secret in (API_KEY, TWILIO_TOKEN, TURN_SECRET, *minted):
        for name, text in (("process output", output), ("/metrics", metrics), ("session logs", session_logs)):
            assert secret not in text, f"{secret[:6]}… appears in the {name}"
