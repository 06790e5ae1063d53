"""Level statistics on crafted turn records: known latencies and gaps in, exact numbers out."""

import pytest

from bench.loadtest.servers import counter_deltas, parse_prometheus
from bench.loadtest.stats import Slo, capacities, level_metrics, percentile


def turn(ttfa, e2e=None, server_ttfa=None, heard=(), server=(), error=None, in_window=True, audio_ms=1000.0):
    return {
        "ttfa_client_ms": ttfa,
        "e2e_ms": e2e if e2e is not None else (ttfa + 500 if ttfa is not None else None),
        "ttfa_server_ms": server_ttfa if server_ttfa is not None else (ttfa - 1 if ttfa is not None else None),
        "heard_gaps": [{"duration_ms": d, "source": s, "kind": "audible" if d >= 200 else "micro"} for d, s in heard],
        "server_gaps": [{"duration_ms": d, "cause": c, "kind": "audible" if d >= 200 else "micro"} for d, c in server],
        "error": error,
        "in_window": in_window,
        "heard_audio_ms": audio_ms,
    }


def test_percentiles_interpolate_linearly_between_order_statistics():
    xs = [500, 100, 400, 200, 300]
    assert percentile(xs, 50) == 300
    assert percentile(xs, 95) == pytest.approx(480)
    assert percentile(xs, 99) == pytest.approx(496)
    assert percentile([7], 99) == 7
    assert percentile([], 50) is None


def crafted_level():
    turns = [turn(100.0 * (i + 1)) for i in range(10)]  # TTFA 100..1000 ms
    turns[0] = turn(100.0, heard=[(300, "server"), (40, "delivery")], server=[(300, "engine"), (60, "text")])
    turns[1] = turn(200.0, heard=[(60, "server")], server=[(60, "engine")])
    turns[2] = turn(300.0, heard=[(220, "mixed")])
    turns[9] = turn(None, error="timeout", audio_ms=0.0)
    turns.append(turn(50.0, heard=[(5000, "delivery")], in_window=False))  # cool-down: ignored
    return turns


def test_level_metrics_count_turns_errors_latencies_and_gaps_exactly():
    m = level_metrics(crafted_level(), level=20, window_s=10.0, label="A", session_errors=1)
    assert m.turns == 10 and m.errors == 2
    assert m.error_rate == pytest.approx(2 / 11)
    ok = [100.0 * (i + 1) for i in range(9)]  # the timeout turn has no latency
    assert m.ttfa_client_ms["n"] == 9
    assert m.ttfa_client_ms["p50"] == 500.0
    assert m.ttfa_client_ms["p95"] == pytest.approx(percentile(ok, 95)) == pytest.approx(860.0)
    assert m.ttfa_client_ms["p99"] == pytest.approx(892.0)
    assert m.ttfa_server_ms["p50"] == 499.0
    assert m.e2e_ms["p95"] == pytest.approx(1360.0)
    h = m.heard_gaps
    assert (h["micro"], h["audible"]) == (2, 2)
    assert h["per_100_turns"] == {"micro": pytest.approx(20.0), "audible": pytest.approx(20.0)}
    assert h["by_source"]["server"] == {"micro": 1, "audible": 1}
    assert h["by_source"]["delivery"] == {"micro": 1, "audible": 0}
    assert h["by_source"]["mixed"] == {"micro": 0, "audible": 1}
    assert h["duration_ms"]["max"] == 300 and h["duration_ms"]["p50"] == pytest.approx(140.0)
    assert h["duration_ms"]["p95"] == pytest.approx(288.0)
    assert h["total_ms"] == 620
    s = m.server_gaps
    assert s["by_cause"]["engine"] == {"micro": 1, "audible": 1}
    assert s["by_cause"]["text"] == {"micro": 1, "audible": 0}
    assert m.pct_turns_audible_heard == pytest.approx(20.0)
    assert m.pct_turns_audible_server == pytest.approx(10.0)
    assert m.audio_s == pytest.approx(9.0) and m.audio_x == pytest.approx(0.9)


def test_slo_verdict_names_the_failing_checks():
    m = level_metrics(crafted_level(), level=20, window_s=10.0, session_errors=1)
    assert m.slo["ttfa_p95_ms"]["pass"] is False  # 860 > 800
    assert m.slo["e2e_p95_ms"]["pass"] is True  # 1360 <= 2000
    assert m.slo["audible_per_turn"]["value"] == pytest.approx(0.2) and m.slo["audible_per_turn"]["pass"] is True
    assert m.slo["error_rate"]["pass"] is False
    assert m.slo["pass"] is False and m.slo["zero_audible"] is False
    loose = level_metrics(crafted_level(), level=20, window_s=10.0, slo=Slo(ttfa_p95_ms=900, error_rate=0.2))
    assert loose.slo["pass"] is True
    by_server = level_metrics(crafted_level(), level=20, window_s=10.0, slo=Slo(gaps_from="server"))
    assert by_server.slo["audible_per_turn"]["value"] == pytest.approx(0.1)


def test_capacity_is_the_highest_level_below_the_first_failure():
    good = [turn(100.0) for _ in range(10)]
    micro = [turn(100.0, heard=[(100, "server")]) for _ in range(10)]  # micro gaps only: passes both
    few = [
        turn(100.0, heard=[(400, "server")] if i == 0 else []) for i in range(10)
    ]  # 0.1 audible/turn: SLO yes, strict no
    audible = [
        turn(100.0, heard=[(400, "server")], server=[(400, "engine")]) for _ in range(10)
    ]  # 1 audible per turn: fails SLO
    levels = [
        level_metrics(good, 10, 10.0),
        level_metrics(micro, 20, 10.0),
        level_metrics(few, 40, 10.0),
        level_metrics(audible, 60, 10.0),
        level_metrics(micro, 80, 10.0),  # noise above the knee
    ]
    assert capacities(levels) == {
        "slo": 40,
        "slo_any": 80,
        "strict": 20,
        "strict_any": 80,
        "strict_engine": 40,
        "strict_engine_any": 80,
    }


def test_a_level_without_turns_never_passes():
    m = level_metrics([], 10, 10.0)
    assert m.turns == 0 and m.slo["pass"] is False and capacities([m])["slo"] is None


def test_metric_scrapes_are_compared_counter_by_counter():
    before = 'voxgate_turns_total{interrupted="false"} 10.0\nvoxgate_sessions_active 3.0\n# HELP x\n'
    after = 'voxgate_turns_total{interrupted="false"} 25.0\nvoxgate_sessions_active 0.0\nvoxgate_underruns_total{kind="micro",cause="engine"} 2.0\n'
    assert parse_prometheus(before)["voxgate_sessions_active"] == 3.0
    assert counter_deltas(before, after) == {
        'voxgate_turns_total{interrupted="false"}': 15.0,
        "voxgate_sessions_active": 0.0,
        'voxgate_underruns_total{kind="micro",cause="engine"}': 2.0,
    }


def test_late_delivery_during_a_client_stall_is_flagged_as_suspect():
    from bench.loadtest.runner import mark_client_stalls

    turns = [
        {
            "heard_gaps": [
                {
                    "t": 10.0,
                    "duration_ms": 40.0,
                    "source": "delivery",
                    "kind": "micro",
                },  # stall at 9.95 for 60 ms: suspect
                {"t": 20.0, "duration_ms": 40.0, "source": "delivery", "kind": "micro"},  # no stall near
                {
                    "t": 10.0,
                    "duration_ms": 40.0,
                    "source": "server",
                    "kind": "micro",
                },  # silence the gateway sent: never suspect
            ]
        }
    ]
    mark_client_stalls(turns, [(9.95, 0.06)], prebuffer_s=0.06)
    assert [g.get("client_stall") for g in turns[0]["heard_gaps"]] == [True, False, None]
    m = level_metrics(turns, 10, 10.0)
    assert m.heard_gaps["during_client_stall"] == 1


def test_a_run_can_be_re_judged_with_other_slo_thresholds():
    from bench.loadtest.report import rederive, render_report

    levels = [level_metrics([turn(100.0 * (i + 1)) for i in range(10)], 10, 10.0, label="A")]
    doc = {
        "params": {"slo": Slo().__dict__.copy(), "window_s": 10.0, "seed": 0},
        "targets": {"A": {"ws_url": "ws://x", "config": "c.yaml"}},
        "levels": {"A": [m.as_dict() for m in levels]},
        "capacities": {"A": capacities(levels)},
        "worst_calls": {},
    }
    assert doc["capacities"]["A"]["slo"] is None  # TTFA p95 955 ms > 800
    doc = rederive(doc, {"ttfa_p95_ms": 1000.0})
    assert doc["capacities"]["A"]["slo"] == 10 and doc["levels"]["A"][0]["slo"]["pass"] is True
    env = {"scenarios": {"path": "s.yaml", "sha256": "0" * 64}}
    assert "<svg" in render_report(doc, env)
