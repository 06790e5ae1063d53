"""`voxgate loadtest`: arguments → gateways → sweep → run folder and report."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import wave
from dataclasses import asdict
from pathlib import Path

import yaml

from bench.loadtest.client import ClientSettings
from bench.loadtest.provenance import GpuMonitor, environment
from bench.loadtest.report import render_report, summary_rows
from bench.loadtest.runner import LevelResult, SweepParams, run_sweep
from bench.loadtest.scenarios import ScenarioError, load_scenarios
from bench.loadtest.servers import Target, start_local, stop_local, target_from_url
from bench.loadtest.stats import Slo, capacities

log = logging.getLogger("voxgate.loadtest")


def _levels(text: str) -> list[int]:
    try:
        levels = sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--levels must be comma-separated integers, not {text!r}") from None
    if not levels or levels[0] < 1:
        raise ValueError("--levels needs at least one level >= 1")
    return levels


def params_from_args(args) -> SweepParams:
    g = lambda name, default=None: getattr(args, name, default) if getattr(args, name, None) is not None else default  # noqa: E731
    client = ClientSettings(
        encoding=g("encoding", "pcm16"),
        sample_rate=int(g("sample_rate", 24000)),
        prebuffer_ms=float(g("client_prebuffer_ms", 60.0)),
        llm_ttft_ms=float(g("llm_ttft_ms", 300.0)),
        llm_tokens_per_s=float(g("llm_tokens_per_s", 40.0)),
        llm_jitter=float(g("llm_jitter", 0.2)),
        voice=g("voice"),
        api_key=g("api_key"),
        turn_timeout_s=float(g("turn_timeout", 60.0)),
        keep_audio=bool(g("wav", False)),
        leg=g("leg", "native"),
    )
    slo = Slo(
        ttfa_p95_ms=float(g("slo_ttfa_p95_ms", 800.0)),
        e2e_p95_ms=float(g("slo_e2e_p95_ms", 2000.0)),
        audible_per_turn=float(g("slo_audible_per_turn", 0.2)),
        error_rate=float(g("slo_error_rate", 0.01)),
        gaps_from=g("slo_gaps_from", "heard"),
    )
    return SweepParams(
        levels=_levels(args.levels),
        window_s=float(args.window),
        ramp_s=g("ramp"),
        settle_s=float(g("settle", 5.0)),
        seed=int(args.seed),
        client=client,
        slo=slo,
    )


def _wav_writer(folder: Path):
    folder.mkdir(parents=True, exist_ok=True)

    def write(name: str, pcm16: bytes, rate: int) -> None:
        with wave.open(str(folder / f"{name}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(rate)
            w.writeframes(pcm16)

    return write


def _print_level(r: LevelResult) -> None:
    m = r.metrics
    c = m.client
    print(
        f"[{m.label}] level {m.level:4d}: turns {m.turns:4d} err {m.errors:3d}  TTFA p95 {_f(m.ttfa_client_ms['p95'])} ms"
        f" (server {_f(m.ttfa_server_ms['p95'])})  E2E p95 {_f(m.e2e_ms['p95'])} ms  audible heard {m.heard_gaps['audible']}"
        f" / server {m.server_gaps['audible']}  micro {m.heard_gaps['micro']}/{m.server_gaps['micro']}  audio× {m.audio_x:.1f}"
        f"  client clock p99 {_f(c['lateness_ms']['p99'], 1)} ms cpu {c['cpu_pct_of_core']:.0f}%  SLO {'PASS' if m.slo['pass'] else 'fail'}",
        flush=True,
    )


def _f(x, nd: int = 0) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


async def _run(args, params: SweepParams, out: Path) -> int:
    scenarios = load_scenarios(args.scenarios)
    targets: list[Target] = []
    started: list[Target] = []
    configs = list(args.config or [])
    try:
        if args.gateway:
            targets.append(target_from_url("A", args.gateway))
            if args.ab:
                targets.append(target_from_url("B", args.ab))
        elif getattr(args, "stub", False):
            t = await start_local("A", None, out)  # measures the client: a server that costs almost nothing
            started.append(t)
            targets.append(t)
        else:
            if not configs:
                configs = ["configs/simulated.yaml"]
            for label, path in zip("ABCD", configs):
                t = await start_local(label, path, out)
                started.append(t)
                targets.append(t)
        env = environment(
            scenarios.path, {t.label: t.config_path for t in targets}, {t.label: t.ws_url for t in targets}
        )
        (out / "env.json").write_text(json.dumps(env, indent=2, ensure_ascii=False))
        params_doc = {
            "levels": params.levels,
            "window_s": params.window_s,
            "ramp_s": params.ramp_s
            if params.ramp_s is not None
            else {str(level): params.ramp_for(level) for level in params.levels},
            "settle_s": params.settle_s,
            "seed": params.seed,
            "client": asdict(params.client) | {"api_key": "***" if params.client.api_key else None},
            "slo": asdict(params.slo),
            "scenarios": {"path": scenarios.path, "sha256": scenarios.sha256, "calls": len(scenarios.calls)},
            "targets": {t.label: {"ws_url": t.ws_url, "config": t.config_path} for t in targets},
        }
        (out / "params_used.yaml").write_text(yaml.safe_dump(params_doc, sort_keys=False, allow_unicode=True))
        gpu = GpuMonitor(out)
        wav_sink = _wav_writer(out / "wav") if params.client.keep_audio else None
        if params.client.keep_audio and (params.client.encoding != "pcm16" or params.client.leg != "native"):
            print("voxgate loadtest: --wav needs the native leg with pcm16 output; no WAVs will be written")
            wav_sink = None
        try:
            results = await run_sweep(targets, params, scenarios, out, wav_sink, on_level=_print_level)
        finally:
            gpu.stop()
    finally:
        for t in started:
            stop_local(t)
    doc = {
        "params": params_doc,
        "targets": {t.label: {"ws_url": t.ws_url, "config": t.config_path} for t in targets},
        "capacities": {label: capacities([r.metrics for r in rs]) for label, rs in results.items()},
        "levels": {
            label: [
                r.metrics.as_dict() | {"server_deltas": r.server_deltas, "session_errors": r.session_errors[:50]}
                for r in rs
            ]
            for label, rs in results.items()
        },
        "worst_calls": {label: {str(r.metrics.level): r.worst_call for r in rs} for label, rs in results.items()},
    }
    doc["client_capacity"] = client_capacity(doc)
    (out / "metrics.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False))
    (out / "report.html").write_text(render_report(doc, env), encoding="utf-8")
    if getattr(args, "plot", None):
        from bench import plots

        plots.write_plot("loadtest", doc, args.plot, plots.command_line(argv=getattr(args, "argv", None)))
    print()
    for row in summary_rows(doc):
        print(row)
    print(f"\nrun folder: {out}\nreport: {out / 'report.html'}")
    return 0


def client_capacity(doc: dict) -> dict:
    """The most callers this client drove with its clock on time, and its CPU per caller."""
    best = None
    per_core = []
    slipped_at = None
    for rs in doc["levels"].values():
        for m in rs:
            c = m["client"]
            if c.get("callers_per_core_est"):
                per_core.append(c["callers_per_core_est"])
            if c.get("clock_slipped"):
                slipped_at = m["level"] if slipped_at is None else min(slipped_at, m["level"])
            elif best is None or m["level"] > best:
                best = m["level"]
    return {
        "max_level_clock_on_time": best,
        "first_level_clock_slipped": slipped_at,
        "callers_per_core_est_min": min(per_core) if per_core else None,
    }


def run_from_args(args) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        params = params_from_args(args)
    except ValueError as exc:
        print(f"voxgate loadtest: {exc}")
        return 2
    if getattr(args, "leg", "native") not in ("native", "twilio"):
        print("voxgate loadtest: --leg must be native or twilio")
        return 2
    if args.ab and not args.gateway:
        print("voxgate loadtest: --ab needs --gateway (or give --config twice)")
        return 2
    if args.gateway and args.config:
        print("voxgate loadtest: give either --gateway [--ab] or --config (once, or twice for A/B), not both")
        return 2
    if len(args.config or []) > 4:
        print("voxgate loadtest: at most 4 configs")
        return 2
    out = Path(args.out or time.strftime("runs/loadtest-%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        return asyncio.run(_run(args, params, out))
    except ScenarioError as exc:
        print(f"voxgate loadtest: {exc}")
        return 2
    except RuntimeError as exc:
        print(f"voxgate loadtest: {exc}")
        return 1
