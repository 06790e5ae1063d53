"""How many paced sessions one gateway process holds before its own pacing slips.

Starts `voxgate serve` as a subprocess with the SimulatedEngine at RTF 0.1 per
stream and a shared capacity far above the load (so the engine is never the
bottleneck), drives N native-protocol sessions from a client process (each speaks
a turn of ~5 s, pauses 1 s like a caller, repeats), and reads the server's own
numbers from /metrics: how late each 20 ms clock tick ran (p50/p99, from the
histogram), ticks dropped after stalls, and underruns. A level "holds" when the
tick lateness p99 stays within one frame (20 ms) and there are no underruns.
The callers come from bench/capacity_client.py, a process of its own that
costs 9-16 µs a frame, so one core drives 1,000+ calls.

    python -m bench.gateway_capacity --levels 50,100,200,300 --window 15
    python -m bench.gateway_capacity --workers 1,2 --levels 300,600 --window 15

`--workers 1,2` runs `voxgate serve --workers N` (N processes on one port,
SO_REUSEPORT, beside a redis-server the bench starts) for each N with the same
client, reads every worker's own /metrics and CPU, and prints the runs side by
side: sessions held, p99 lateness, server CPU per frame.

`--pin` fixes the placement (CPU affinity, inherited by every child): the
gateway processes on all CPUs but the last, the load client, redis-server and
the bench itself on the last one (`--pin 0:1` spells it out: gateway CPUs,
then client CPUs). On a 2-core box that is one worker alone on core 0 against
two workers sharing core 0, with the client never on their core: what is left
between the two is the software's own per-process cost, not the box's. Each
run also reports the gateway processes' CPU while no call is up (`idle cpu %`,
over `--idle-s`): the fixed cost a second worker adds whatever the load.
`--rounds N` runs the worker counts alternately N times and compares CPU per
frame within each round (median and range of the paired ratios): on a VM
whose speed drifts ±20 % within minutes, one run of each decides nothing.

    python -m bench.gateway_capacity --workers 1,2 --levels 300,600 --window 10 --rounds 3 --pin

`--leg sip` calls in over direct SIP instead (bench/sip_callers.py: an INVITE and an RTP socket per call, the
agent's turns on /v1/control): the same levels and numbers for SIP sessions, frames being RTP packets. A SIP
call sends RTP all the time (silence between turns), a WebSocket call only inside utterances.

    python -m bench.gateway_capacity --leg sip --levels 50,100,200 --window 10

`--leg sip --srtp` runs every level twice, against two gateways one after the other: plain RTP as above, then
the same callers over one TLS connection with SDES SRTP (`sip.transports: [tls]`, `sip.srtp: required`, a
self-signed certificate made for the run: bench/tls_cert.py), every packet protected and unprotected on both
sides. Side by side, per level: CPU per frame with SRTP against plain RTP (`--rounds N` alternates them N times).

    python -m bench.gateway_capacity --leg sip --srtp --levels 50,100 --window 8 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import websockets

from bench import plots, tls_cert
from bench.capacity_client import TURN_TEXTS, ClientStats
from bench.loadtest.servers import cpu_seconds, free_port

WORD_TIMINGS = False  # --word-timings: the lean client's callers ask for audio.words

CONFIG = """
server: {{host: 127.0.0.1, port: {port}, max_sessions: 5000, limits: {{idle_timeout_s: 600}}}}
engine: {{kind: simulated}}
simulated: {{first_packet_ms: 60, capacity_x: 100000, ms_per_char: 70, stream_rtf: 0.1, max_queued: 100000}}
playout: {{prebuffer_ms: 60}}
"""
# the callers are one trunk on 127.0.0.1 starting calls every 5 ms: their INVITE rate is the point, not a flood
SIP_CONFIG = """sip: {{port: {sip_port}, host: 127.0.0.1, allow: [127.0.0.1], invites_per_source_per_s: 1000,
  rtp_ports: "20000-29999"{srtp}}}
telephony: {{unknown_call_timeout_s: 30}}
"""
# `--srtp`: the same calls over TLS only (the callers' one connection, as a trunk's), SDES SRTP required
SRTP_SIP = """, transports: [tls], srtp: required,
  tls: {{port: {tls_port}, cert_file: '{cert}', key_file: '{key}'}}"""


def scrape(port: int) -> str:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{port}/metrics", timeout=60
    ) as r:  # an overloaded gateway answers late
        return r.read().decode()


def metric_values(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def lateness_quantiles(before: str, after: str) -> tuple[float, float, float, int]:
    """p50, p99 (ms, bucket-interpolated), share of ticks later than 20 ms, and tick count over the window."""
    b = metric_values(before, "voxgate_clock_lateness_seconds_bucket")
    a = metric_values(after, "voxgate_clock_lateness_seconds_bucket")
    buckets = []
    for key, value in a.items():
        le = re.search(r'le="([^"]+)"', key).group(1)
        buckets.append((float("inf") if le == "+Inf" else float(le), value - b.get(key, 0.0)))
    buckets.sort()
    total = buckets[-1][1]
    if total <= 0:
        return float("nan"), float("nan"), float("nan"), 0

    def q(p: float) -> float:
        target, prev_le, prev_n = p * total, 0.0, 0.0
        for le, n in buckets:
            if n >= target:
                if le == float("inf"):
                    return prev_le * 1000
                frac = (target - prev_n) / max(n - prev_n, 1e-9)
                return (prev_le + frac * (le - prev_le)) * 1000
            prev_le, prev_n = le, n
        return prev_le * 1000

    over_20 = total - dict(buckets)[0.02]
    return q(0.5), q(0.99), over_20 / total, int(total)


def _by_label(before: str, after: str, name: str, label: str) -> dict[str, int]:
    """How much counter `name` grew between two scrapes, by the value of its `label` (only those that grew)."""
    grown: dict[str, int] = {}
    b = metric_values(before, name)
    for key, value in metric_values(after, name).items():
        found = re.search(label + r'="([^"]*)"', key)
        if found and not key.startswith(name + "_created") and value - b.get(key, 0.0):
            grown[found.group(1)] = grown.get(found.group(1), 0) + int(value - b.get(key, 0.0))
    return grown


def counter_sum(text: str, name: str, label_filter: str = "") -> float:
    return sum(
        v for k, v in metric_values(text, name).items() if not k.startswith(name + "_created") and label_filter in k
    )


async def ws_caller(url: str, stop: asyncio.Event, stats: ClientStats, rng: random.Random) -> None:
    """The old client (`--client websockets`): a coroutine and the `websockets` library per call."""
    try:
        async with websockets.connect(url, max_size=None, compression=None) as ws:
            stats.connected += 1
            await ws.send(json.dumps({"type": "session.start", "output": {"encoding": "mulaw", "sample_rate": 8000}}))
            await asyncio.sleep(rng.random())  # spread the turn starts
            n = 0
            while not stop.is_set():
                n += 1
                await ws.send(
                    json.dumps({"type": "text", "turn_id": f"t{n}", "text": rng.choice(TURN_TEXTS), "final": True})
                )
                while True:
                    msg = await ws.recv()
                    if isinstance(msg, bytes):
                        stats.frames += 1
                        continue
                    m = json.loads(msg)
                    if m["type"] == "turn.done":
                        stats.turns += 1
                        break
                    if m["type"] == "error":
                        stats.error(str(m.get("code")))
                await asyncio.sleep(1.0)
            await ws.send(json.dumps({"type": "session.end"}))
    except (OSError, websockets.WebSocketException):
        if not stop.is_set():
            stats.disconnects += 1


class LoadHandle:
    """The callers of one level: `counters()` (frames, client CPU seconds, …) and `end()`."""

    def __init__(self, counters, end):
        self.counters, self.end = counters, end


def parse_pin(spec: str | None, cpus: list[int]) -> tuple[set[int], set[int]] | None:
    """`--pin` → (gateway CPUs, client CPUs); 'auto': all but the last CPU for the gateways, the last for the client."""
    if spec is None:
        return None
    if spec == "auto":
        if len(cpus) < 2:
            raise SystemExit(
                f"--pin needs 2+ CPUs to keep the client off the gateways' cores; this process may use {cpus}"
            )
        return set(cpus[:-1]), {cpus[-1]}
    try:
        gw, _, cl = spec.partition(":")
        placement = {int(c) for c in gw.split(",")}, {int(c) for c in cl.split(",")}
    except ValueError:
        raise SystemExit(f"--pin takes GATEWAY_CPUS:CLIENT_CPUS (e.g. 0:1 or 0,1:2), not {spec!r}") from None
    bad = (placement[0] | placement[1]) - set(cpus)
    if bad or not placement[0] or not placement[1]:
        raise SystemExit(f"--pin {spec}: CPUs {sorted(bad) or 'missing'} are not among this process's {cpus}")
    return placement


def _pinned(cpus: set[int] | None):
    """A preexec_fn that runs the child (and whatever it starts) on `cpus`."""
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


async def start_load(
    client: str,
    port: int,
    n: int,
    read_interval_ms: float = 50.0,
    cpus: set[int] | None = None,
    sip_args: list[str] | None = None,
) -> LoadHandle:
    """N callers, 5 ms apart: `lean` in a process of its own (bench/capacity_client.py), `websockets` in this one;
    with `sip_args` (where to call, how: `Gateways.sip_args`), SIP callers in a process of their own
    (bench/sip_callers.py)."""
    if sip_args is not None:
        cmd = [sys.executable, "-m", "bench.sip_callers", "--port", str(port), *sip_args]
        cmd += ["--sessions", str(n), "--seed", str(n)]
    else:
        cmd = [
            sys.executable,
            "-m",
            "bench.capacity_client",
            "--port",
            str(port),
            "--sessions",
            str(n),
            "--seed",
            str(n),
            "--read-interval-ms",
            str(read_interval_ms),
            *(["--word-timings"] if WORD_TIMINGS else []),
        ]
    if client == "websockets" and sip_args is None:
        stop, stats, rng = asyncio.Event(), ClientStats(), random.Random(n)
        tasks = []
        for _ in range(n):
            tasks.append(asyncio.create_task(ws_caller(f"ws://127.0.0.1:{port}/v1/ws", stop, stats, rng)))
            await asyncio.sleep(0.005)

        async def ws_counters() -> dict:
            return {**dataclasses.asdict(stats), "cpu_s": time.process_time()}

        async def ws_end() -> dict:
            stop.set()
            await asyncio.wait(tasks, timeout=15)
            return await ws_counters()

        return LoadHandle(ws_counters, ws_end)
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, preexec_fn=_pinned(cpus)
    )

    async def ask(cmd: bytes) -> dict:
        proc.stdin.write(cmd + b"\n")
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        if not line:
            raise RuntimeError(f"the load client exited ({await proc.wait()})")
        return json.loads(line)

    async def lean_end() -> dict:
        final = await ask(b"stop")
        await proc.wait()
        return final

    await asyncio.sleep(n * 0.005)  # its own ramp: 5 ms between connects
    return LoadHandle(lambda: ask(b"stats"), lean_end)


def _sum_metrics(texts: list[str]) -> str:
    """Several nodes' /metrics as one: the same series added up (histogram buckets and counters both add)."""
    totals: dict[str, float] = {}
    for text in texts:
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                try:
                    totals[key] = totals.get(key, 0.0) + float(value)
                except ValueError:
                    pass
    return "\n".join(f"{k} {v!r}" for k, v in totals.items())


def cpu_total(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def cpu_split(pids: list[int]) -> tuple[float, float]:
    """(utime + stime, stime) of these processes, one read each: all their CPU, and the kernel's part of it
    (on loopback mostly each send's delivery to the receiving socket)."""
    total = kernel = 0
    for pid in pids:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
        kernel += int(fields[12])
    hz = os.sysconf("SC_CLK_TCK")
    return total / hz, kernel / hz


def preemptions(pids: list[int]) -> int:
    """Involuntary context switches of every thread of these processes: how often the box took a core away from them."""
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    total += next(int(line.split()[1]) for line in f if line.startswith("nonvoluntary_ctxt_switches"))
            except (OSError, StopIteration):
                pass  # a thread that ended meanwhile
    return total


async def run_level(
    port: int,
    nodes: list[tuple[int, int]],
    n: int,
    window: float,
    warmup: float,
    client: str = "lean",
    client_cpus: set[int] | None = None,
    sip_args: list[str] | None = None,
) -> dict:
    """One level: N callers on `port` (or SIP calls as `sip_args` say: `Gateways.sip_args`); `nodes` are the
    gateway processes behind it, (own metrics port, pid)."""
    start = _sum_metrics([scrape(mport) for mport, _ in nodes])  # the RTP drops are counted over the whole level
    load = await start_load(
        client, port, n, float(os.environ.get("VOXGATE_BENCH_READ_INTERVAL_MS", "50")), client_cpus, sip_args
    )
    await asyncio.sleep(warmup)
    pids = [pid for _, pid in nodes]

    async def snapshot():
        counters = await load.counters()
        cpu, kernel = cpu_split(pids)
        return (
            _sum_metrics([scrape(mport) for mport, _ in nodes]),
            counters["frames"],
            time.monotonic(),
            cpu,
            counters["cpu_s"],
            preemptions(pids),
            kernel,
        )

    before, f0, t0, c0, k0, p0, s0 = await snapshot()
    await asyncio.sleep(window)
    after, f1, t1, c1, k1, p1, s1 = await snapshot()
    stats = await load.end()
    end = _sum_metrics([scrape(mport) for mport, _ in nodes])
    p50, p99, over, ticks = lateness_quantiles(before, after)
    underruns = counter_sum(after, "voxgate_underruns_total") - counter_sum(before, "voxgate_underruns_total")
    # engine/text: audio came late; clock: our own clock stalled (a skipped tick is a gap at every talking call);
    # network: the client read too slowly and frames were skipped
    by_cause = _by_label(before, after, "voxgate_underruns_total", "cause")
    skipped = counter_sum(after, "voxgate_clock_skipped_ticks_total") - counter_sum(
        before, "voxgate_clock_skipped_ticks_total"
    )
    dropped = counter_sum(after, "voxgate_frames_dropped_total") - counter_sum(before, "voxgate_frames_dropped_total")
    frames, secs = f1 - f0, t1 - t0
    tick_cpu = counter_sum(after, "voxgate_clock_tick_cpu_seconds_total") - counter_sum(
        before, "voxgate_clock_tick_cpu_seconds_total"
    )
    call_ticks = counter_sum(after, "voxgate_clock_member_ticks_total") - counter_sum(
        before, "voxgate_clock_member_ticks_total"
    )

    def gc_delta(name: str, generation: int) -> float:
        flt = f'generation="{generation}"'
        return counter_sum(after, name, flt) - counter_sum(before, name, flt)

    full_gcs = int(gc_delta("voxgate_gc_collections_total", 2))
    return {
        "sessions": n,
        "leg": "sip" if sip_args is not None else "ws",
        "workers": len(nodes),
        "client": client,
        "connected": stats["connected"],
        "ticks": ticks,
        "lateness_p50_ms": round(p50, 2),
        "lateness_p99_ms": round(p99, 2),
        "ticks_over_20ms_pct": round(100 * over, 3),
        "skipped_ticks": int(skipped),
        "underruns": int(underruns),
        "underruns_by_cause": by_cause,
        "frames_dropped": int(dropped),
        "frames_per_s_received": round(frames / secs, 1),
        "server_cpu_pct": round(100 * (c1 - c0) / secs, 1),  # all workers together: 100 = one core
        "server_cpu_us_per_frame": round(1e6 * (c1 - c0) / max(frames, 1), 1),
        "server_kernel_pct_of_cpu": round(100 * (s1 - s0) / max(c1 - c0, 1e-9), 1),  # the kernel's share of it (sends)
        # of which inside the clock's ticks (the per-frame path: playout, encoding, the send), apart from the engine,
        # the text path, the doors and the idle loop
        "tick_cpu_us_per_frame": round(1e6 * tick_cpu / max(frames, 1), 1),
        "tick_cpu_us_per_call_tick": round(1e6 * tick_cpu / max(call_ticks, 1), 2),
        "server_preemptions_per_s": round((p1 - p0) / secs, 1),  # all workers: the core taken away mid-run (contention)
        "client_cpu_pct": round(
            100 * (k1 - k0) / secs, 1
        ),  # this process (the load client); near 100 = it is the limit
        "client_cpu_us_per_frame": round(1e6 * (k1 - k0) / max(frames, 1), 1),
        # full collections traverse every object the calls keep: their pauses stall the clock (all workers together)
        "gc_full_collections": full_gcs,
        "gc_full_pause_ms_mean": round(1000 * gc_delta("voxgate_gc_pause_seconds_total", 2) / max(full_gcs, 1), 1),
        "gc_young_pause_ms_per_s": round(
            1000
            * (gc_delta("voxgate_gc_pause_seconds_total", 0) + gc_delta("voxgate_gc_pause_seconds_total", 1))
            / secs,
            2,
        ),
        "errors": stats["errors"],
        "error_codes": stats["error_codes"],
        "disconnects": stats["disconnects"],
        # SIP: inbound RTP the gateway dropped (strict RTP; srtp_auth etc.: SRTP that did not authenticate) from the
        # level's first call to its last, of the packets the callers sent; and the SRTP calls the callers keyed and
        # the gateway's packets they could not authenticate (a gateway sending plain RTP to an SRTP call shows here)
        "rtp_dropped_by_reason": _by_label(start, end, "voxgate_rtp_dropped_total", "reason"),
        "gateway_errors_by_code": _by_label(start, end, "voxgate_errors_total", "code"),  # refusals and error events
        "rtp_sent": stats.get("rtp_sent", 0),
        "srtp_calls": stats.get("srtp_calls", 0),
        "srtp_undecrypted": stats.get("undecrypted", 0),
        "holds": p99 <= 20.0 and underruns == 0 and skipped == 0 and stats["connected"] == n,
    }


BENCH_SECRET_ENV = "VOXGATE_BENCH_CLUSTER_SECRET"  # the workers' hop secret (cluster.secret_env), made per run


class Gateways:
    """The server side of a run: one `voxgate serve`, or `voxgate serve --workers N` (beside a redis-server of its own)."""

    def __init__(
        self,
        workers: int | None,
        redis_url: str | None = None,
        cpus: set[int] | None = None,
        sip: bool = False,
        srtp: bool = False,
    ):
        """`sip`: calls come over SIP (`sip_args` says how the callers reach it); `srtp`: over TLS only, with
        `sip.srtp: required` (a certificate made for the run in `cert_dir`)."""
        self.port = free_port()
        self.sip_port = free_port() if sip else None
        self.nodes: list[tuple[int, int]] = []  # (own HTTP port: its /metrics, pid), one per gateway process
        self.cert_dir, self.sip_args = None, None
        cfg = CONFIG.format(port=self.port) + (
            f"cluster: {{redis_url: '{redis_url}', secret_env: {BENCH_SECRET_ENV}}}\n" if workers else ""
        )
        if sip and srtp:
            self.cert_dir = tempfile.mkdtemp(prefix="voxgate-bench-tls-")
            cert, key = tls_cert.self_signed(Path(self.cert_dir))
            tls_port = free_port()
            cfg += SIP_CONFIG.format(
                sip_port=self.sip_port, srtp=SRTP_SIP.format(tls_port=tls_port, cert=cert, key=key)
            )
            self.sip_args = ["--tls-port", str(tls_port), "--ca-file", str(cert), "--srtp"]
        elif sip:
            cfg += SIP_CONFIG.format(sip_port=self.sip_port, srtp="")
            self.sip_args = ["--sip-port", str(self.sip_port)]
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(cfg)
            self.cfg_path = f.name
        cmd = [sys.executable, "-m", "gateway.cli", "serve", "--config", self.cfg_path, "--log-level", "WARNING"]
        if workers:
            cmd += ["--workers", str(workers)]
        env = {**os.environ, BENCH_SECRET_ENV: os.environ.get(BENCH_SECRET_ENV) or secrets.token_hex(16)}
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE if workers else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=_pinned(cpus),
            env=env,
        )  # the workers inherit it
        try:
            if workers:
                while len(self.nodes) < workers:  # each worker prints its own address once it serves
                    line = self.proc.stdout.readline()
                    if not line:
                        raise RuntimeError(f"voxgate serve --workers {workers} exited ({self.proc.wait()})")
                    m = re.search(r"own address http://[^:]+:(\d+) \(pid (\d+)\)", line)
                    if m:
                        self.nodes.append((int(m.group(1)), int(m.group(2))))
                threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # keep the pipe drained
            else:
                self.nodes = [(self.port, self.proc.pid)]
            for _, pid in self.nodes:
                if cpus and os.sched_getaffinity(pid) != cpus:
                    raise RuntimeError(
                        f"gateway pid {pid} runs on CPUs {sorted(os.sched_getaffinity(pid))}, not the pinned {sorted(cpus)}"
                    )
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.1)
        except BaseException:  # a gateway that started must not outlive a failed start (it would load the next runs)
            self._kill()
            self._remove_files()
            raise

    def idle_cpu_pct(self, seconds: float) -> float:
        """The gateway processes' CPU with no call up (100 = one core): their fixed cost (clock, heartbeats, loop)."""
        pids = [pid for _, pid in self.nodes]
        c0, t0 = cpu_total(pids), time.monotonic()
        time.sleep(seconds)
        return round(100 * (cpu_total(pids) - c0) / (time.monotonic() - t0), 2)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # seen once after an overloaded level: keep the run's numbers, say so
            print(f"voxgate serve (pid {self.proc.pid}) did not stop within 60 s of SIGTERM: killed", flush=True)
            self._kill()
        self._remove_files()

    def _remove_files(self) -> None:
        os.unlink(self.cfg_path)
        if self.cert_dir:
            shutil.rmtree(self.cert_dir, ignore_errors=True)

    def _kill(self) -> None:
        """SIGKILL to the parent and every worker it started (a killed parent leaves its workers running)."""
        for _, pid in self.nodes:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.kill()
        self.proc.wait()


class RedisServer:
    def __init__(self, cpus: set[int] | None = None):
        if shutil.which("redis-server") is None:
            raise SystemExit(
                "--workers needs redis-server (the workers are nodes of one call plane): apt-get install redis-server"
            )
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="voxgate-bench-redis-")
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_pinned(cpus),
        )
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


HEADER = (
    f"{'workers':>7} {'sessions':>8} {'late p50':>9} {'late p99':>9} {'>20ms %':>8} {'skipped':>8} {'underruns':>9} {'dropped':>8} "
    f"{'frames/s':>9} {'cpu %':>6} {'us/frame':>8} {'tick us/f':>9} {'kernel %':>8} {'preempt/s':>9} {'client %':>8} {'full gc':>7} {'gc ms':>6} {'holds':>6} {'media':>6}"
)


def print_row(row: dict) -> None:
    print(
        f"{row['workers']:>7} {row['sessions']:>8} {row['lateness_p50_ms']:>9} {row['lateness_p99_ms']:>9} {row['ticks_over_20ms_pct']:>8} "
        f"{row['skipped_ticks']:>8} {row['underruns']:>9} {row['frames_dropped']:>8} {row['frames_per_s_received']:>9} "
        f"{row['server_cpu_pct']:>6} {row['server_cpu_us_per_frame']:>8} {row['tick_cpu_us_per_frame']:>9} {row['server_kernel_pct_of_cpu']:>8} {row['server_preemptions_per_s']:>9} {row['client_cpu_pct']:>8} {row['gc_full_collections']:>7} "
        f"{row['gc_full_pause_ms_mean']:>6} {str(row['holds']):>6} {row.get('media') or '-':>6}",
        flush=True,
    )


def _median(values: list[float]) -> float:
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


MEDIA_NAMES = {"plain": "plain RTP", "srtp": "SRTP"}


def setup_name(key: str, value) -> str:
    """A compared setup's name: `1 worker`, `2 workers` (--workers), `plain RTP`, `SRTP` (--srtp)."""
    if key == "media":
        return MEDIA_NAMES[value]
    return f"{value} worker{'s' if value > 1 else ''}"


def side_by_side(rows: list[dict], values: list, key: str = "workers") -> None:
    """Per level: each setup's p99, CPU per frame and holds (medians over the rounds; holds: in every round), the
    setups being worker counts (`key` workers) or plain RTP and SRTP (`key` media); and the last setup's CPU per
    frame against the first's, paired within each round (so the machine's drift between rounds cancels): the
    median of the rounds' ratios, their range in brackets, and the median of the rounds' differences in µs."""
    rounds = sorted({r.get("round", 0) for r in rows})
    first = setup_name(key, values[0])
    print(
        f"\nside by side (same levels, same callers{f', {len(rounds)} rounds alternating, medians' if len(rounds) > 1 else ''}): "
        "p99 ms / server µs per frame / holds; CPU per frame against the first (all of it, and inside the clock's ticks)"
    )
    print(
        f"{'sessions':>8} "
        + " ".join(f"{setup_name(key, v):>26}" for v in values)
        + f" {'µs/frame vs ' + first:>26} {'tick µs/frame vs ' + first:>26} {'µs/frame more':>14}"
    )
    for level in sorted({r["sessions"] for r in rows}):
        at = [r for r in rows if r["sessions"] == level]
        cells = []
        for v in values:
            mine = [r for r in at if r[key] == v]
            cells.append(
                f"{_median([r['lateness_p99_ms'] for r in mine]):>8.2f} / {_median([r['server_cpu_us_per_frame'] for r in mine]):>6.1f} / "
                f"{str(all(r['holds'] for r in mine)):>5}"
                if mine
                else f"{'-':>26}"
            )

        def paired(metric: str) -> list[tuple[float, float]]:
            """(first, last) values of `metric` in each round that ran both."""
            pairs = []
            for rnd in rounds:
                by_v = {r[key]: r for r in at if r.get("round", 0) == rnd}
                a, b = by_v.get(values[0]), by_v.get(values[-1])
                if a and b and a[metric] > 0:
                    pairs.append((a[metric], b[metric]))
            return pairs if len(values) > 1 else []

        def vs_first(metric: str) -> str:
            ratios = [100 * (b / a - 1) for a, b in paired(metric)]
            if not ratios:
                return ""
            spread = f" ({min(ratios):+.1f}..{max(ratios):+.1f})" if len(ratios) > 1 else ""
            return f"{_median(ratios):+.1f} %{spread}"

        more = [b - a for a, b in paired("server_cpu_us_per_frame")]
        print(
            f"{level:>8} " + " ".join(f"{c:>26}" for c in cells) + f" {vs_first('server_cpu_us_per_frame'):>26}"
            f" {vs_first('tick_cpu_us_per_frame'):>26} {f'{_median(more):+.1f} µs' if more else '':>14}"
        )
    for v in values:
        held = [
            lv
            for lv in sorted({r["sessions"] for r in rows})
            if all(r["holds"] for r in rows if r[key] == v and r["sessions"] == lv)
            and any(r[key] == v and r["sessions"] == lv for r in rows)
        ]
        print(f"{setup_name(key, v)}: holds up to {max(held) if held else 0} paced sessions")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="50,100,200,300")
    ap.add_argument("--window", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument(
        "--client",
        default="lean",
        choices=["lean", "websockets"],
        help="lean: bench/capacity_client.py (default); websockets: the old coroutine-per-call client",
    )
    ap.add_argument(
        "--workers",
        help="comma-separated worker counts (e.g. 1,2): `voxgate serve --workers N` behind one port, "
        "beside a redis-server this bench starts; default: one plain `voxgate serve`",
    )
    ap.add_argument(
        "--pin",
        nargs="?",
        const="auto",
        metavar="GATEWAY_CPUS:CLIENT_CPUS",
        help="CPU affinity: the gateway processes on GATEWAY_CPUS, the load client, redis-server and this bench on "
        "CLIENT_CPUS (bare --pin: all CPUs but the last, then the last); default: no pinning",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every worker count this many times, alternating (1,2,1,2,…): CPU per frame is compared within "
        "each round, so a machine whose speed drifts between runs does not decide the comparison",
    )
    ap.add_argument(
        "--idle-s", type=float, default=3.0, help="seconds of idle gateway CPU measured before the levels (0: none)"
    )
    ap.add_argument(
        "--leg",
        default="ws",
        choices=["ws", "sip"],
        help="ws: native WebSocket callers (default); sip: direct SIP calls with RTP",
    )
    ap.add_argument(
        "--srtp",
        action="store_true",
        help="with --leg sip: every level with plain RTP (UDP signalling), then with SDES SRTP (TLS signalling, "
        "sip.srtp: required, a certificate made for the run), and the two side by side: SRTP's CPU per frame",
    )
    ap.add_argument("--json-output")
    ap.add_argument("--word-timings", action="store_true", help="every caller asks for audio.words (lean client)")
    ap.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw sessions against p99 lateness and CPU per frame into FILE "
        "(.png or .svg), the run's data beside it as FILE.json (bench/plots.py)",
    )
    args = ap.parse_args(argv)
    global WORD_TIMINGS
    WORD_TIMINGS = args.word_timings
    if args.plot:
        try:
            plots.check_target(args.plot, (args.json_output,))
        except plots.PlotError as e:
            ap.error(str(e))
    if args.leg == "sip" and (args.workers or args.client != "lean"):
        raise SystemExit("--leg sip runs one `voxgate serve` with its own callers (no --workers, no --client)")
    if args.srtp and args.leg != "sip":
        raise SystemExit("--srtp compares SIP calls with plain RTP and SRTP: it needs --leg sip")
    if args.srtp and args.plot:
        raise SystemExit("--plot draws one line per worker count: it would merge --srtp's plain and SRTP levels")
    if args.srtp and shutil.which("openssl") is None:
        raise SystemExit("--srtp makes a TLS certificate with the openssl command: apt-get install openssl")
    levels = [int(x) for x in args.levels.split(",")]
    worker_counts = [int(x) for x in args.workers.split(",")] if args.workers else [None]
    # what a run compares: worker counts (--workers), plain RTP against SRTP (--srtp), or one setup
    key, setups = ("media", ["plain", "srtp"]) if args.srtp else ("workers", worker_counts)
    placement = parse_pin(args.pin, sorted(os.sched_getaffinity(0)))
    gateway_cpus, client_cpus = placement if placement else (None, None)
    if placement:
        print(
            f"pinned: gateway processes on CPUs {sorted(gateway_cpus)}, load client, redis-server and bench on {sorted(client_cpus)}"
        )
        os.sched_setaffinity(0, client_cpus)  # this process: the /metrics scrapes
    redis = RedisServer(client_cpus) if args.workers else None
    rows, idle = [], {}
    try:
        print(HEADER, flush=True)
        for rnd in range(max(1, args.rounds)):
            for setup in setups:
                workers = setup if key == "workers" else None
                media = setup if key == "media" else ("plain" if args.leg == "sip" else None)
                gateways = Gateways(
                    workers, redis.url if redis else None, gateway_cpus, args.leg == "sip", media == "srtp"
                )
                try:
                    if args.idle_s > 0 and rnd == 0:
                        time.sleep(1.0)  # past start-up
                        idle[setup or 1] = gateways.idle_cpu_pct(args.idle_s)
                    for level in levels:
                        row = asyncio.run(
                            run_level(
                                gateways.port,
                                gateways.nodes,
                                level,
                                args.window,
                                args.warmup,
                                args.client,
                                client_cpus,
                                gateways.sip_args,
                            )
                        )
                        row.update(pin=args.pin, idle_cpu_pct=idle.get(setup or 1), round=rnd, media=media)
                        rows.append(row)
                        print_row(row)
                        if level != levels[-1]:
                            time.sleep(2)  # let the last level's calls end before the next starts
                finally:
                    gateways.close()
    finally:
        if redis:
            redis.close()
    for row in rows:
        if row["underruns_by_cause"]:
            print(
                f"underruns at {row['sessions']} ({row['workers']} workers) by cause: "
                + ", ".join(f"{k} {v}" for k, v in row["underruns_by_cause"].items())
            )
        if row["rtp_dropped_by_reason"] or row["srtp_undecrypted"]:
            print(
                f"RTP dropped at {row['sessions']} ({MEDIA_NAMES.get(row['media'], row['media'])}): by the gateway "
                + (", ".join(f"{k} {v}" for k, v in row["rtp_dropped_by_reason"].items()) or "none")
                + f"; the callers could not authenticate {row['srtp_undecrypted']} of its packets"
            )
    if idle:
        print(
            "gateway CPU with no call up: " + ", ".join(f"{setup_name(key, s or 1)} {pct} %" for s, pct in idle.items())
        )
    if args.workers or args.srtp:
        side_by_side(rows, setups, key)
    else:
        held = [r["sessions"] for r in rows if r["holds"]]
        print(
            f"holds up to {max(held) if held else 0} paced {'SIP' if args.leg == 'sip' else 'WebSocket'} sessions (cpu count {os.cpu_count()})"
        )
    result = {
        "levels": rows,
        "cpu_count": os.cpu_count(),
        "workers": worker_counts if args.workers else None,
        "media": setups if args.srtp else None,
        "pin": args.pin,
        "idle_cpu_pct": idle,
    }
    if args.json_output:
        with open(args.json_output, "w") as f:
            json.dump(result, f, indent=2)
    if args.plot:
        plots.write_plot("capacity", result, args.plot, plots.command_line("bench.gateway_capacity", argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
