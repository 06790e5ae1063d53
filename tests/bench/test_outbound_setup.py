"""bench.outbound_setup runs for real (a gateway subprocess, SIPp answering) and reports each call's times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.outbound_setup import METRICS, p95
from tests.sip.sipp import require

ROOT = Path(__file__).resolve().parents[2]


def test_two_calls_are_placed_answered_and_timed(tmp_path):
    pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")
    require("sipp")
    out = tmp_path / "rows.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.outbound_setup", "--calls", "2", "--warmup", "0", "--json", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert len(rows) == 2 and all(set(row) == set(METRICS) for row in rows)
    # an order, not a speed: the POST answers before the call is answered, and RTP comes with the answer
    assert all(0 < row["post_201_ms"] <= row["post_to_answered_ms"] for row in rows)
    assert all(row["post_to_first_rtp_ms"] > 0 for row in rows)
    assert "post_to_answered_ms" in run.stdout


def test_p95_is_a_value_of_the_sample():
    assert p95([5.0, 1.0, 3.0]) == 5.0 and p95(list(map(float, range(1, 101)))) == 95.0
