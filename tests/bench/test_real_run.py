"""A short real run: the load tester against a real gateway subprocess with the SimulatedEngine."""

import argparse
import json
from pathlib import Path


from bench.loadtest.cli import run_from_args
from tests.bench.test_plots import assert_drawn
from bench.loadtest.client import ClientSettings
from bench.loadtest.runner import SweepParams, run_sweep
from bench.loadtest.scenarios import parse_scenarios
from bench.loadtest.servers import start_local, stop_local

SCENARIOS = """
calls:
  - id: short-en
    language: en
    turns:
      - {pause_ms: 300, reply: "Hello there. Your order is on its way and will arrive tomorrow."}
      - {pause_ms: 300, reply: "Thank you for calling."}
  - id: short-ru
    language: ru
    turns:
      - {pause_ms: 300, reply: "Здравствуйте. Ваш заказ уже в пути и приедет завтра."}
      - {pause_ms: 300, reply: "Спасибо за звонок."}
"""


def write_config(tmp_path: Path, capacity_x: float) -> str:
    p = tmp_path / f"sim_{capacity_x:g}.yaml"
    p.write_text(f"""server: {{host: 127.0.0.1, port: 0}}
engine: {{kind: simulated}}
simulated: {{first_packet_ms: 40, capacity_x: {capacity_x}, ms_per_char: 40, stream_rtf: 0.1, scheduling: edf}}
playout: {{prebuffer_ms: 60}}
voices: {{default: {{language: auto}}}}
""")
    return str(p)


SHORT = """
calls:
  - id: short
    language: en
    turns:
      - {pause_ms: 200, reply: "Yes, that is done now."}
      - {pause_ms: 200, reply: "Thank you, goodbye."}
"""


async def sweep(tmp_path: Path, capacity_x: float, callers: int, scenarios: str = SCENARIOS):
    target = await start_local("A", write_config(tmp_path, capacity_x), tmp_path)
    try:
        params = SweepParams(
            levels=[callers],
            window_s=5.0,
            ramp_s=0.3,
            settle_s=0.2,
            client=ClientSettings(llm_ttft_ms=50, llm_tokens_per_s=200, turn_timeout_s=20),
        )
        results = await run_sweep([target], params, parse_scenarios(scenarios), tmp_path)
    finally:
        stop_local(target)
    return results["A"][0]


async def test_callers_hear_every_turn_without_gaps_when_the_engine_has_headroom(tmp_path):
    r = await sweep(tmp_path, capacity_x=50, callers=3)
    m = r.metrics
    assert m.turns >= 3 and m.errors == 0
    assert m.heard_gaps["audible"] == 0 and m.server_gaps["audible"] == 0
    assert m.ttfa_client_ms["p50"] > 0 and m.ttfa_server_ms["p50"] > 0
    # The client's TTFA includes the network and its own sending; it is never much below the server's.
    assert m.ttfa_client_ms["p50"] >= m.ttfa_server_ms["p50"] - 5
    for t in r.turns:
        if t["in_window"]:
            # What the caller heard is what the gateway says it played (to within a frame or two).
            assert abs(t["heard_audio_ms"] - t["played_ms_server"]) <= 40
    assert 'voxgate_engine_info{kind="simulated",vocoder="none"}' in r.scrape_after
    assert any(k.startswith("voxgate_turns_total") for k in r.server_deltas)
    lines = (tmp_path / "turns.jsonl").read_text().splitlines()
    assert len(lines) == len(r.turns)
    assert "audio.start" in (tmp_path / "events.jsonl").read_text()


async def test_an_overloaded_engine_is_heard_as_gaps_and_reported_by_the_server(tmp_path):
    # 1 audio-second per second shared by 3 callers: every turn starves.
    r = await sweep(tmp_path, capacity_x=1.0, callers=3, scenarios=SHORT)
    m = r.metrics
    assert m.heard_gaps["micro"] + m.heard_gaps["audible"] > 0
    assert m.server_gaps["by_cause"]["engine"]["micro"] + m.server_gaps["by_cause"]["engine"]["audible"] > 0
    assert m.heard_gaps["by_source"]["server"]["audible"] + m.heard_gaps["by_source"]["server"]["micro"] > 0


def test_cli_writes_the_run_folder_and_report(tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(SCENARIOS)
    args = argparse.Namespace(
        gateway=None,
        config=[write_config(tmp_path, 50)],
        ab=None,
        scenarios=str(scen),
        levels="2",
        window=2.0,
        seed=1,
        out=str(tmp_path / "run"),
        wav=True,
        api_key=None,
        ramp=0.2,
        settle=0.2,
        llm_ttft_ms=50.0,
        llm_tokens_per_s=200.0,
        plot=str(tmp_path / "ttfa.png"),
    )
    assert run_from_args(args) == 0
    drawn = assert_drawn(tmp_path / "ttfa.png", "loadtest")["runs"][0]["result"]  # --plot: TTFA and gaps per level
    assert [m["level"] for m in drawn["levels"]["A"]] == [2] and drawn["levels"]["A"][0]["ttfa_client_ms"]["p95"] > 0
    run = tmp_path / "run"
    for name in ("metrics.json", "env.json", "params_used.yaml", "turns.jsonl", "events.jsonl", "report.html"):
        assert (run / name).is_file(), name
    doc = json.loads((run / "metrics.json").read_text())
    assert doc["levels"]["A"][0]["level"] == 2
    env = json.loads((run / "env.json").read_text())
    assert env["scenarios"]["sha256"] and env["configs"]["A"]["sha256"]
    html = (run / "report.html").read_text()
    assert "<svg" in html and "<script" not in html and "<link" not in html and 'src="http' not in html
    assert list((run / "scrapes").glob("A_L2_*.prom"))
    assert list((run / "wav").glob("*.wav"))


async def test_the_stub_gateway_is_heard_gap_free_so_it_can_measure_the_client(tmp_path):
    target = await start_local("A", None, tmp_path)  # no config: the stub
    try:
        params = SweepParams(
            levels=[4],
            window_s=2.0,
            ramp_s=0.2,
            settle_s=0.2,
            client=ClientSettings(llm_ttft_ms=20, llm_tokens_per_s=400, turn_timeout_s=20),
        )
        r = (await run_sweep([target], params, parse_scenarios(SHORT), tmp_path))["A"][0]
    finally:
        stop_local(target)
    m = r.metrics
    assert m.turns >= 4 and m.errors == 0
    assert m.heard_gaps["micro"] + m.heard_gaps["audible"] == 0
    for t in r.turns:
        if t["in_window"]:
            assert t["heard_audio_ms"] == t["played_ms_server"]
    assert 'kind="stub"' in r.scrape_after


async def test_twilio_leg_callers_hear_media_frames_and_echo_marks(tmp_path):
    target = await start_local("A", write_config(tmp_path, 50), tmp_path)
    try:
        params = SweepParams(
            levels=[2],
            window_s=2.5,
            ramp_s=0.2,
            settle_s=0.2,
            client=ClientSettings(llm_ttft_ms=50, llm_tokens_per_s=200, turn_timeout_s=20, leg="twilio"),
        )
        r = (await run_sweep([target], params, parse_scenarios(SHORT), tmp_path))["A"][0]
    finally:
        stop_local(target)
    m = r.metrics
    assert m.turns >= 2 and m.errors == 0 and m.ttfa_server_ms["p50"] > 0
    for t in r.turns:
        if t["in_window"]:
            assert abs(t["heard_audio_ms"] - t["played_ms_server"]) <= 40
    events = (tmp_path / "events.jsonl").read_text()
    assert '"call.attached"' in events and '"call.mark"' in events  # the gateway got our played-mark echoes
    assert any(k.startswith("voxgate_frames_sent_total") and "twilio" in k for k in r.server_deltas)
