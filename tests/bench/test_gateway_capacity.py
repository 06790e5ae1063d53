"""The capacity bench end to end, tiny: a real `voxgate serve` subprocess, real native-WS callers."""

from __future__ import annotations

import json

from bench import gateway_capacity
from tests.bench.test_plots import assert_drawn


def test_a_small_level_reports_pacing_cpu_and_underruns_by_cause(tmp_path, capsys):
    out = tmp_path / "capacity.json"
    assert (
        gateway_capacity.main(
            [
                "--levels",
                "4",
                "--window",
                "2",
                "--warmup",
                "1.5",
                "--json-output",
                str(out),
                "--plot",
                str(tmp_path / "levels.png"),
            ]
        )
        == 0
    )
    (row,) = json.loads(out.read_text())["levels"]
    assert row["sessions"] == 4 and row["errors"] == 0 and row["connected"] == 4 and row["client"] == "lean"
    assert row["frames_per_s_received"] > 50  # four paced calls talk most of the time: 50 frames/s each
    assert row["ticks"] >= 50 and 0 <= row["lateness_p50_ms"] <= row["lateness_p99_ms"]
    assert row["server_cpu_us_per_frame"] > 0 and row["client_cpu_us_per_frame"] > 0 and row["workers"] == 1
    # the clock's own CPU is part of the process's: read from /metrics, never more than the whole
    assert 0 < row["tick_cpu_us_per_frame"] <= row["server_cpu_us_per_frame"] and row["tick_cpu_us_per_call_tick"] > 0
    assert 0 <= row["server_kernel_pct_of_cpu"] <= 100
    assert sum(row["underruns_by_cause"].values()) == row["underruns"]
    assert "holds up to" in capsys.readouterr().out
    drawn = assert_drawn(tmp_path / "levels.png", "capacity")  # --plot: the same levels, drawn
    assert drawn["runs"][0]["result"]["levels"][0]["lateness_p99_ms"] == row["lateness_p99_ms"]
    assert drawn["runs"][0]["command"].startswith("python -m bench.gateway_capacity --levels 4")


def test_workers_one_and_two_behind_one_port_side_by_side(tmp_path, capsys):
    import shutil

    import pytest

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/install_test_deps.sh installs it)")
    import os

    out = tmp_path / "workers.json"
    # --pin (where there are 2+ CPUs): the run checks that every worker really runs on the gateway CPUs
    pin = ["--pin"] if len(os.sched_getaffinity(0)) >= 2 else []
    assert (
        gateway_capacity.main(
            [
                "--workers",
                "1,2",
                "--levels",
                "6",
                "--window",
                "2",
                "--warmup",
                "1.5",
                "--idle-s",
                "1",
                "--json-output",
                str(out),
                *pin,
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    rows = result["levels"]
    assert [r["workers"] for r in rows] == [1, 2]
    for row in rows:
        assert row["connected"] == 6 and row["errors"] == 0 and row["frames_per_s_received"] > 75
        assert (
            row["ticks"] >= 50 * row["workers"]
        )  # every worker's clock is read: its own /metrics, not the shared port's
        assert row["server_cpu_us_per_frame"] > 0 and row["server_preemptions_per_s"] >= 0
    assert set(result["idle_cpu_pct"]) == {"1", "2"} and all(v >= 0 for v in result["idle_cpu_pct"].values())
    text = capsys.readouterr().out
    assert "side by side" in text and "2 workers: holds up to" in text and "gateway CPU with no call up" in text
    if pin:
        assert result["pin"] == "auto" and "pinned: gateway processes on CPUs" in text


def test_pin_placements():
    assert gateway_capacity.parse_pin(None, [0, 1]) is None
    assert gateway_capacity.parse_pin("auto", [0, 1, 2]) == ({0, 1}, {2})
    assert gateway_capacity.parse_pin("0:1", [0, 1]) == ({0}, {1})
    assert gateway_capacity.parse_pin("0,1:2", [0, 1, 2]) == ({0, 1}, {2})
    import pytest

    for spec, cpus in (("auto", [0]), ("0:7", [0, 1]), ("x:1", [0, 1]), ("0:", [0, 1])):
        with pytest.raises(SystemExit):
            gateway_capacity.parse_pin(spec, cpus)


def test_side_by_side_pairs_the_rounds_so_drift_between_them_cancels(capsys):
    def row(w, rnd, us, tick):
        return {
            "workers": w,
            "round": rnd,
            "sessions": 300,
            "lateness_p99_ms": 5.0,
            "holds": True,
            "server_cpu_us_per_frame": us,
            "tick_cpu_us_per_frame": tick,
        }

    # the machine ran 2x slower in round 1: per round the second worker costs +10 % (whole) and +0 % (ticks)
    rows = [
        row(1, 0, 20.0, 10.0),
        row(2, 0, 22.0, 10.0),
        row(1, 1, 40.0, 20.0),
        row(2, 1, 44.0, 20.0),
        row(1, 2, 30.0, 15.0),
        row(2, 2, 33.0, 15.0),
    ]
    gateway_capacity.side_by_side(rows, [1, 2])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("300"))
    assert "+10.0 % (+10.0..+10.0)" in line and "+0.0 % (+0.0..+0.0)" in line and "30.0" in line and "33.0" in line
