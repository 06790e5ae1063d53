"""A sweep: for each concurrency level (and each gateway of an A/B run), ramp up
N callers, measure a sustained window, cool down; scrape /metrics around it.

Only turns whose caller's end of turn falls inside the window count. After
the window the callers go on (the load stays) until every counted turn has
been heard to its end, then all sessions end before the next level.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import aiohttp

from bench.loadtest.playback import FRAME_MS
from bench.loadtest.client import Caller, ClientClock, ClientSettings, LevelRun
from bench.loadtest.scenarios import ScenarioSet
from bench.loadtest.servers import Target, counter_deltas, scrape
from bench.loadtest.stats import LevelMetrics, Slo, level_metrics, percentile

log = logging.getLogger("voxgate.loadtest")


@dataclass
class SweepParams:
    levels: list[int]
    window_s: float = 30.0
    ramp_s: float | None = None  # None: 0.1 s per caller, at least 2 s, at most 10 s
    settle_s: float = 5.0  # after the ramp, before the window opens (in-flight load reaches steady state)
    pause_between_s: float = 1.0
    seed: int = 0
    client: ClientSettings = field(default_factory=ClientSettings)
    slo: Slo = field(default_factory=Slo)

    def ramp_for(self, level: int) -> float:
        return self.ramp_s if self.ramp_s is not None else max(2.0, min(10.0, 0.1 * level))


@dataclass
class LevelResult:
    metrics: LevelMetrics
    turns: list[dict]
    events: list[dict]
    session_errors: list[dict]
    worst_call: dict | None
    scrape_before: str
    scrape_after: str
    server_deltas: dict


def client_health(lateness_s, cpu_s: float, window_s: float, level: int) -> dict:
    lat_ms = [x * 1000.0 for x in lateness_s]
    cpu_frac = cpu_s / window_s if window_s else 0.0
    return {
        "ticks": len(lat_ms),
        "lateness_ms": {
            "p50": percentile(lat_ms, 50),
            "p99": percentile(lat_ms, 99),
            "max": max(lat_ms) if lat_ms else None,
        },
        "late_ticks_over_20ms": sum(x > 20.0 for x in lat_ms),
        "cpu_pct_of_core": 100.0 * cpu_frac,
        "callers_per_core_est": (level / cpu_frac) if cpu_frac > 0 else None,
        # The client's clock "slips" when ticks run more than a frame late: its own gaps would then be artefacts.
        "clock_slipped": bool(lat_ms) and percentile(lat_ms, 99) > 20.0,
        # Other work on the machine (a shared box) shows here.
        "loadavg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def mark_client_stalls(turns: list[dict], stalls: list[tuple[float, float]], prebuffer_s: float) -> None:
    """Flag heard gaps with late delivery that overlap a stall of this client's own loop.

    A stalled client reads frames late, so their arrival times (and the gap)
    may be the client's artefact rather than the gateway's.
    """
    for t in turns:
        for g in t.get("heard_gaps", []):
            if g["source"] == "server":
                continue
            start, end = g["t"] - prebuffer_s - 0.02, g["t"] + g["duration_ms"] / 1000.0
            g["client_stall"] = any(due <= end and due + late >= start for due, late in stalls)


async def run_level(
    target: Target,
    level: int,
    params: SweepParams,
    scenarios: ScenarioSet,
    t0: float,
    http: aiohttp.ClientSession,
    wav_sink: Callable[[str, bytes, int], None] | None = None,
) -> LevelResult:
    events: list[dict] = []
    before = await scrape(http, target)
    # A full GC pass over a big heap stalls the client's loop for 100+ ms and fakes delivery gaps:
    # freeze what exists, and keep the cyclic GC off while the level runs (frames are freed by refcount).
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        clock = ClientClock()
        clock.start()
        ramp = params.ramp_for(level)
        start = time.monotonic() + 0.2
        w0 = start + ramp + params.settle_s
        w1 = w0 + params.window_s
        run = LevelRun(level, target.label, t0, (w0, w1), events.append)
        tasks = []
        for i in range(level):
            seed = params.seed * 1_000_003 + level * 1009 + i  # same calls for A and B at a level
            caller = Caller(i, target.ws_url, scenarios.picker(seed), params.client, clock, run, seed)
            caller.wav_sink = wav_sink
            tasks.append(asyncio.get_running_loop().create_task(caller.live(start + ramp * i / level)))
        log.info("%s level %d: ramp %.1f s, window %.0f s", target.label, level, ramp, params.window_s)
        await asyncio.sleep(max(0.0, w0 - time.monotonic()))
        clock.recording = True
        cpu0 = time.process_time()
        await asyncio.sleep(max(0.0, w1 - time.monotonic()))
        cpu = time.process_time() - cpu0
        clock.recording = False
        # Cool-down: keep the load until every counted turn was heard (bounded by the turn timeout).
        limit = time.monotonic() + params.client.turn_timeout_s + 5.0
        while run.pending_in_window > 0 and time.monotonic() < limit:
            await asyncio.sleep(0.1)
        run.stop.set()
        done, pending = await asyncio.wait(tasks, timeout=3.0)
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await clock.stop()
    finally:
        gc.enable()
        gc.unfreeze()
    after = await scrape(http, target)
    turns = [asdict(t) for t in run.turns]
    mark_client_stalls(turns, [(due - t0, late) for due, late in clock.stalls], params.client.prebuffer_ms / 1000.0)
    in_window_errors = [e for e in run.session_errors if e["in_window"]]
    m = level_metrics(
        turns,
        level,
        params.window_s,
        label=target.label,
        audio_s=run.window_audio_frames * FRAME_MS / 1000.0,
        session_errors=len(in_window_errors),
        slo=params.slo,
        client=client_health(clock.lateness, cpu, params.window_s, level),
    )
    worst = run.worst
    if worst is not None:
        worst = {k: v for k, v in worst.items() if k != "badness"}
    return LevelResult(m, turns, events, run.session_errors, worst, before, after, counter_deltas(before, after))


async def run_sweep(
    targets: list[Target],
    params: SweepParams,
    scenarios: ScenarioSet,
    out: Path,
    wav_sink: Callable[[str, bytes, int], None] | None = None,
    on_level: Callable[[LevelResult], None] | None = None,
) -> dict[str, list[LevelResult]]:
    """Levels ascending; at each level every target in turn (A/B interleaved, so drift hits both alike)."""
    results: dict[str, list[LevelResult]] = {t.label: [] for t in targets}
    t0 = time.monotonic()
    scrapes = out / "scrapes"
    scrapes.mkdir(parents=True, exist_ok=True)
    with (
        open(out / "turns.jsonl", "w", encoding="utf-8") as turns_f,
        open(out / "events.jsonl", "w", encoding="utf-8") as events_f,
    ):
        async with aiohttp.ClientSession() as http:
            for level in params.levels:
                for target in targets:
                    r = await run_level(target, level, params, scenarios, t0, http, wav_sink)
                    results[target.label].append(r)
                    tag = f"{target.label}_L{level}"
                    (scrapes / f"{tag}_before.prom").write_text(r.scrape_before)
                    (scrapes / f"{tag}_after.prom").write_text(r.scrape_after)
                    for t in r.turns:
                        turns_f.write(json.dumps(t, ensure_ascii=False) + "\n")
                    for e in r.events:
                        events_f.write(json.dumps(e, ensure_ascii=False) + "\n")
                    turns_f.flush()
                    events_f.flush()
                    r.events.clear()  # written; keep memory flat over long sweeps
                    if on_level:
                        on_level(r)
                    await asyncio.sleep(params.pause_between_s)
    return results
