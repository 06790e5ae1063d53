"""The load study's topology, measured: a gateway in front of an OpenAI-compatible speech server
(`engine.kind: openai-speech`) side by side with a gateway on voxgate's own engine wire (`engine.kind: remote`),
both on the same engine, in one run.

    python -m bench.speech_server_study --levels 10,20,40 --window 10 --out runs/speech_study
    python -m bench.speech_server_study --model-dir ~/.cache/voxgate/tiny-qwen3-1b7-custom_voice ...

Upstreams (started here, one process each): `voxgate serve` (its `POST /v1/audio/speech` is the speech server)
and `voxgate engine` (ipc socket), both with the same engine (SimulatedEngine by default, or a Qwen3 checkpoint
with --model-dir). Then per level, A then B: `voxgate loadtest` against one gateway (sentence mode, two chunks
in flight), the gateway's and its upstream's CPU taken from /proc around it. Prints one table and writes
`study.json` and the table as Markdown text in `table.txt` to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import yaml

from bench.loadtest.servers import cpu_seconds, free_port, start_local, stop_local

ROOT = Path(__file__).resolve().parents[1]
SIMULATED = {"first_packet_ms": 60, "capacity_x": 50, "ms_per_char": 70, "stream_rtf": 0.1}


def engine_section(model_dir: str | None) -> dict:
    if model_dir:
        return {"engine": {"kind": "qwen3", "model_dir": model_dir, "dtype": "float32", "device": "cpu"}}
    return {"engine": {"kind": "simulated"}, "simulated": SIMULATED}


def write(path: Path, doc: dict) -> str:
    path.write_text(yaml.safe_dump(doc))
    return str(path)


async def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{url}: the process exited ({proc.returncode}); see {log}")
            try:
                async with http.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} not ready in {timeout:.0f} s; see {log}")


def spawn(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as f:
        return subprocess.Popen(
            cmd,
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
            env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
        )


def level_row(label: str, kind: str, level: int, metrics: dict, gw_cpu: float, up_cpu: float, wall: float) -> dict:
    m = metrics["levels"]["A"][0]
    return {
        "target": label,
        "engine": kind,
        "level": level,
        "turns": m["turns"],
        "error_pct": round(100 * m["error_rate"], 2),
        "ttfa_p50_ms": m["ttfa_client_ms"]["p50"],
        "ttfa_p95_ms": m["ttfa_client_ms"]["p95"],
        "micro_per_100t": m["heard_gaps"]["per_100_turns"]["micro"],
        "audible_per_100t": m["heard_gaps"]["per_100_turns"]["audible"],
        "srv_micro_per_100t": m["server_gaps"]["per_100_turns"]["micro"],
        "srv_audible_per_100t": m["server_gaps"]["per_100_turns"]["audible"],
        "heard_gaps_in_client_stalls": m["heard_gaps"]["during_client_stall"],  # the load client's own clock was late
        "gateway_cpu_s": round(gw_cpu, 2),
        "gateway_cpu_pct": round(100 * gw_cpu / wall, 1),
        "upstream_cpu_pct": round(100 * up_cpu / wall, 1),
        "seconds": round(wall, 1),
    }


async def main(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = engine_section(args.model_dir)
    speech_port, engine_http = free_port(), free_port()
    sock = f"ipc://{out.resolve()}/engine.sock"
    speech_cfg = write(out / "speech_server.yaml", {"server": {"max_sessions": 2000}, **engine})
    engine_cfg = write(out / "engine.yaml", engine)
    speech = spawn(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--config",
            speech_cfg,
            "--host",
            "127.0.0.1",
            "--port",
            str(speech_port),
            "--log-level",
            "WARNING",
        ],
        out / "speech_server.log",
    )
    eng = spawn(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "engine",
            "--config",
            engine_cfg,
            "--listen",
            sock,
            "--http-port",
            str(engine_http),
        ],
        out / "engine.log",
    )
    targets = []
    try:
        await wait_http(f"http://127.0.0.1:{speech_port}/readyz", speech, out / "speech_server.log")
        await wait_http(f"http://127.0.0.1:{engine_http}/readyz", eng, out / "engine.log")
        common = {"server": {"max_sessions": 1000}, "playout": {"prebuffer_ms": 60}, "chunker": {"mode": "sentence"}}
        cfg_a = write(
            out / "gateway_openai_speech.yaml",
            {**common, "engine": {"kind": "openai-speech", "endpoints": [f"http://127.0.0.1:{speech_port}/v1"]}},
        )
        cfg_b = write(out / "gateway_remote.yaml", {**common, "engine": {"kind": "remote", "endpoints": [sock]}})
        a = await start_local("A", cfg_a, out)
        b = await start_local("B", cfg_b, out)
        targets = [(a, "openai-speech", speech), (b, "remote", eng)]
        rows = []
        load0 = os.getloadavg()
        for level in [int(x) for x in args.levels.split(",")]:
            for target, kind, upstream in targets:
                run_dir = out / f"{kind}_{level}"
                g0, u0, t0 = cpu_seconds(target.process.pid), cpu_seconds(upstream.pid), time.monotonic()
                cmd = [
                    sys.executable,
                    "-m",
                    "gateway.cli",
                    "loadtest",
                    "--gateway",
                    target.ws_url,
                    "--levels",
                    str(level),
                    "--window",
                    str(args.window),
                    "--settle",
                    str(args.settle),
                    "--seed",
                    str(args.seed),
                    "--out",
                    str(run_dir),
                ]
                done = await asyncio.to_thread(subprocess.run, cmd, cwd=ROOT, capture_output=True, text=True)
                wall = time.monotonic() - t0
                if done.returncode != 0:
                    raise RuntimeError(f"loadtest {kind} {level} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
                g1, u1 = cpu_seconds(target.process.pid), cpu_seconds(upstream.pid)
                metrics = json.loads((run_dir / "metrics.json").read_text())
                row = level_row(target.label, kind, level, metrics, g1 - g0, u1 - u0, wall)
                rows.append(row)
                print(format_row(row), flush=True)
        doc = {
            "command": " ".join([sys.executable, "-m", "bench.speech_server_study"] + sys.argv[1:]),
            "engine": engine,
            "window_s": args.window,
            "loadavg_before": load0,
            "loadavg_after": os.getloadavg(),
            "cpus": os.cpu_count(),
            "rows": rows,
        }
        (out / "study.json").write_text(json.dumps(doc, indent=1))
        (out / "table.txt").write_text(markdown(doc))  # Markdown text
        print(markdown(doc))
        return 0
    finally:
        for target, _, _ in targets:
            stop_local(target)
        for proc in (speech, eng):
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


HEAD = (
    "engine",
    "level",
    "turns",
    "err%",
    "TTFA p50",
    "TTFA p95",
    "micro/100t heard (how many in client stalls)",
    "audible/100t heard",
    "server micro/audible per 100t",
    "gateway CPU s (% of a core)",
    "upstream CPU %",
)


def format_row(r: dict) -> str:
    return (
        f"{r['engine']:<14} {r['level']:>5} {r['turns']:>5} {r['error_pct']:>5} {r['ttfa_p50_ms'] or 0:>8.0f} {r['ttfa_p95_ms'] or 0:>8.0f} "
        f"{r['micro_per_100t']:>8.1f} ({r['heard_gaps_in_client_stalls']}) {r['audible_per_100t']:>8.1f} "
        f"{r['srv_micro_per_100t']:>6.1f}/{r['srv_audible_per_100t']:<6.1f} {r['gateway_cpu_s']:>7} ({r['gateway_cpu_pct']}) "
        f"{r['upstream_cpu_pct']:>8}"
    )


def markdown(doc: dict) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in doc["rows"]:
        lines.append(
            f"| {r['engine']} | {r['level']} | {r['turns']} | {r['error_pct']} | {r['ttfa_p50_ms'] or 0:.0f} | "
            f"{r['ttfa_p95_ms'] or 0:.0f} | {r['micro_per_100t']:.1f} ({r['heard_gaps_in_client_stalls']}) | "
            f"{r['audible_per_100t']:.1f} | {r['srv_micro_per_100t']:.1f} / {r['srv_audible_per_100t']:.1f} | "
            f"{r['gateway_cpu_s']} ({r['gateway_cpu_pct']}) | {r['upstream_cpu_pct']} |"
        )
    lines.append("")
    lines.append(
        f"window {doc['window_s']} s per level; {doc['cpus']} CPUs; load average before "
        f"{', '.join(f'{x:.2f}' for x in doc['loadavg_before'])}, after {', '.join(f'{x:.2f}' for x in doc['loadavg_after'])}; "
        "CPU % = CPU seconds over the level's whole run (ramp, settle, window, cool-down) / its wall time, 100 = one core"
    )
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--levels", default="10,20,40")
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("--settle", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--model-dir", default=None, help="a Qwen3-TTS checkpoint for both upstreams (default: SimulatedEngine)"
    )
    p.add_argument("--out", default="runs/speech_server_study")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
