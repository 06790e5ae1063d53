"""Done-when of the vocoder backends: `voxgate serve` with `engine.vocoder: onnxruntime` serves a call
whose audio equals the torch backend's (two real gateway processes on loopback, one real client each)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import websockets

pytest.importorskip("onnxruntime", reason="the onnx extra is not installed (pip install 'voxgate[onnx]')")
pytest.importorskip("onnx", reason="the onnx extra is not installed (pip install 'voxgate[onnx]')")

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Same sound."  # the tiny random model never says EOS: its text-length cap (~4 s) ends the turn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gateway(tmp_path: Path, tiny_dir: str, vocoder: str):
    port = free_port()
    cfg = tmp_path / f"{vocoder}.yaml"
    cfg.write_text(
        "server: {host: 127.0.0.1, port: %d}\n"
        "engine: {kind: qwen3, model_dir: %s, device: cpu, dtype: float32, max_batch: 4, vocoder: %s, vocoder_cache: %s}\n"
        "playout: {prebuffer_ms: 400}\n" % (port, tiny_dir, vocoder, tmp_path / "cache")
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(cfg)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, port


def wait_ready(proc, port: int, timeout: float = 180.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"gateway exited {proc.returncode}: {proc.stdout.read()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("gateway not ready in time")


async def one_call(port: int) -> np.ndarray:
    """The call's audio as heard: pcm16 frames between audio.start and turn.done, gap silence dropped."""
    frames: list[bytes] = []
    async with websockets.connect(f"ws://127.0.0.1:{port}/v1/ws", max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.start", "output": {"encoding": "pcm16", "sample_rate": 24000}}))
        await ws.send(json.dumps({"type": "text", "turn_id": "t", "text": TEXT, "final": True}))
        started = False
        while True:
            m = await asyncio.wait_for(ws.recv(), 120)
            if isinstance(m, bytes):
                if started:
                    frames.append(m)
                continue
            event = json.loads(m)
            if event["type"] == "audio.start":
                started = True
            elif event["type"] == "turn.done":
                break
            elif event["type"] == "error":
                raise AssertionError(event)
    pcm = [np.frombuffer(f, dtype="<i2") for f in frames]
    # An underrun plays exact digital silence; random-weight speech never has a whole silent 20 ms frame.
    return np.concatenate([f for f in pcm if f.any()]).astype(np.float32) / 32768.0


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


async def test_onnxruntime_gateway_serves_the_torch_gateways_audio(tmp_path, tiny_dir):
    procs = {v: start_gateway(tmp_path, tiny_dir, v) for v in ("onnxruntime", "torch")}
    try:
        for proc, port in procs.values():
            wait_ready(proc, port)
        calls = await asyncio.gather(*(one_call(port) for _, port in procs.values()))
        audio = dict(zip(procs, calls))
        assert 'vocoder="onnxruntime-cpu"' in metrics(procs["onnxruntime"][1])
        assert 'vocoder="torch-eager-cpu"' in metrics(procs["torch"][1])
    finally:
        for proc, _ in procs.values():
            proc.terminate()
        for proc, _ in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    ort_pcm, torch_pcm = audio["onnxruntime"], audio["torch"]
    assert len(ort_pcm) == len(torch_pcm) > 24000 // 2  # same frames, at least half a second of speech
    assert np.abs(ort_pcm - torch_pcm).max() < 1e-4
    assert np.abs(torch_pcm).max() > 0.01


def test_asking_for_tensorrt_without_it_refuses_the_start_in_one_line(tmp_path, tiny_dir):
    try:
        import tensorrt  # noqa: F401

        pytest.skip("TensorRT is importable here")
    except ImportError:
        pass
    proc, _ = start_gateway(tmp_path, tiny_dir, "tensorrt")
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 1
    lines = [line for line in out.splitlines() if line.startswith("voxgate: cannot start")]
    assert len(lines) == 1 and "tensorrt" in lines[0].lower() and "cuda" in lines[0].lower(), out
