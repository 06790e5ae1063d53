"""`voxgate bench --remote`: one checkpoint served in this process and as its own process, side by side.

The in-process `Qwen3Engine` and the same settings in a child process (bench/engine_child.py: the
`tts.service` server `voxgate engine` uses), reached through a `RemoteEngine` over `--remote-transport`
(tcp: loopback with CURVE, as between two machines; ipc: a Unix socket, as `engine.isolate`). Levels run
interleaved (local c, remote c, ...) `--remote-repeats` times so both sides see the same machine; each
level reports audio x (audio seconds per wall second), first audio p50/p95 and whether every stream kept
up, and the remote side also wire messages per engine step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time

from bench.engine_runs import TEXTS, _percentile, _Run, _settings


async def _level(engine, c: int, sampling) -> dict:
    from tts.engine import SynthesisRequest

    texts = [list(TEXTS.values())[i % 3] for i in range(c)]
    t0 = time.monotonic()
    runs = [
        _Run(
            engine.synthesize(
                SynthesisRequest(
                    text=t,
                    voice="default",
                    language="en",
                    sampling=sampling,
                    deadline=time.monotonic() + 0.2,
                    tag=f"bench{i}/t/0",
                )
            )
        )
        for i, t in enumerate(texts)
    ]
    await asyncio.gather(*[r.consume() for r in runs])
    wall = time.monotonic() - t0
    audio = sum(r.audio_s for r in runs)
    ttfa = [r.ttfa_s * 1e3 for r in runs]
    return {
        "concurrency": c,
        "audio_s": round(audio, 3),
        "wall_s": round(wall, 3),
        "audio_x": round(audio / wall, 3),
        "ttfa_p50_ms": round(_percentile(ttfa, 0.5), 1),
        "ttfa_p95_ms": round(_percentile(ttfa, 0.95), 1),
        "keeps_up": all(r.keeps_up() for r in runs),
    }


def _link_counts(remote) -> dict:
    link = remote.links[0]
    stats = link.load.stats
    return {
        "packets_msgs": link.counters["packets_in"],
        "ops_msgs": link.counters["ops_out"],
        "steps": stats.get("steps", 0.0),
        "vocoder_calls": stats.get("vocoder_calls", 0.0),
    }


async def _settled(remote, beat_s: float) -> dict:
    await asyncio.sleep(beat_s)  # the engine's next load report carries its counters after the level
    return _link_counts(remote)


def _spawn(settings, listen: str, heartbeat_s: float, env: dict, default_switch: bool) -> tuple[subprocess.Popen, str]:
    data = {k: v for k, v in dataclasses.asdict(settings).items()}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.engine_child",
            "--settings",
            json.dumps(data),
            "--listen",
            listen,
            "--heartbeat-s",
            str(heartbeat_s),
        ]
        + (["--default-switch-interval"] if default_switch else []),
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stdout.readline().split()
    if not line or line[0] != "ready":
        proc.kill()
        raise SystemExit(f"the engine child did not start (exit {proc.wait()})")
    return proc, line[1]


async def remote_bench(args) -> dict:
    from tts.engine import SamplingSettings
    from tts.qwen3.engine import Qwen3Engine
    from tts.service.remote import RemoteEngine

    levels = [int(x) for x in (args.concurrency or "1,16").split(",")]
    repeats = int(getattr(args, "remote_repeats", 2) or 2)
    settings = _settings(args, args.max_batch or max(levels))
    sampling = SamplingSettings(greedy=True)  # the same work on both sides
    env = dict(os.environ)
    tmp = tempfile.mkdtemp(prefix="voxgate-bench-")
    if args.remote_transport == "tcp":
        env.setdefault("VOXGATE_ENGINE_SECRET", secrets.token_hex(16))
        listen = "tcp://127.0.0.1:0"
    else:
        listen = f"ipc://{tmp}/engine.sock"
    secret = env.get("VOXGATE_ENGINE_SECRET", "").encode() or None
    beat_s = 0.4
    default_switch = getattr(args, "remote_switch_interval", "fast") == "default"
    proc, endpoint = _spawn(settings, listen, beat_s, env, default_switch)
    local = Qwen3Engine(settings)
    await local.start()
    remote = RemoteEngine([endpoint], secret=secret, connect_timeout_s=60)
    await remote.start()
    print(
        f"engine: {args.model_dir or args.random_weights} on {settings.device} {settings.dtype}, max_batch "
        f"{settings.max_batch}; local threads {local.cpu_threads}; remote child pid {proc.pid} over {endpoint}"
    )
    runs: list[dict] = []
    try:
        for engine in (local, remote):
            await _level(engine, 1, sampling)  # warm-up
        for rep in range(repeats):
            for c in levels:
                for side, engine in (("local", local), ("remote", remote)):
                    before = _link_counts(remote) if side == "remote" else None
                    r = {"side": side, "repeat": rep, **await _level(engine, c, sampling)}
                    if side == "remote":
                        after = await _settled(remote, beat_s)
                        steps = after["steps"] - before["steps"]
                        vcalls = after["vocoder_calls"] - before["vocoder_calls"]
                        r["packets_msgs"] = after["packets_msgs"] - before["packets_msgs"]
                        r["engine_steps"] = steps
                        r["vocoder_calls"] = vcalls
                        r["packets_msgs_per_vocoder_call"] = round(r["packets_msgs"] / vcalls, 3) if vcalls else None
                        r["ops_msgs"] = after["ops_msgs"] - before["ops_msgs"]
                    runs.append(r)
                    print(
                        f"{side:>6} c={c:<3} audio x {r['audio_x']:6.2f}  first audio p50 {r['ttfa_p50_ms']:7.1f} ms "
                        f"p95 {r['ttfa_p95_ms']:7.1f} ms  keeps up {r['keeps_up']}"
                        + (
                            f"  packets msgs/vocoder call {r['packets_msgs_per_vocoder_call']}"
                            if side == "remote"
                            else ""
                        )
                    )
    finally:
        await remote.close()
        await local.close()
        proc.terminate()
        proc.wait(30)
    summary = {}
    for c in levels:
        pairs = [
            (a, b)
            for a in runs
            for b in runs
            if a["side"] == "local"
            and b["side"] == "remote"
            and a["concurrency"] == b["concurrency"] == c
            and a["repeat"] == b["repeat"]
        ]
        ratio = [b["audio_x"] / a["audio_x"] for a, b in pairs]
        added = [b["ttfa_p50_ms"] - a["ttfa_p50_ms"] for a, b in pairs]
        best_local = max(a["audio_x"] for a, _ in pairs)
        best_remote = max(b["audio_x"] for _, b in pairs)
        summary[str(c)] = {
            "audio_x_ratio_per_repeat": [round(x, 3) for x in ratio],
            "audio_x_ratio_best_of": round(best_remote / best_local, 3),
            "added_first_audio_p50_ms_per_repeat": [round(x, 1) for x in added],
            "added_first_audio_p50_ms_median": round(statistics.median(added), 1),
        }
        print(
            f"c={c}: remote/local audio x {summary[str(c)]['audio_x_ratio_per_repeat']} (best of each: "
            f"{summary[str(c)]['audio_x_ratio_best_of']}); first audio p50 added "
            f"{summary[str(c)]['added_first_audio_p50_ms_per_repeat']} ms"
        )
    return {
        "engine": {
            "source": args.model_dir or args.random_weights,
            "device": settings.device,
            "dtype": settings.dtype,
            "max_batch": settings.max_batch,
            "frames": args.frames,
            "transport": args.remote_transport,
            "engine_switch_interval": "python default (5 ms)" if default_switch else "0.5 ms",
        },
        "runs": runs,
        "summary": summary,
    }
