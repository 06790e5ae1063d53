"""The long fuzz run: many cases per entry against one `voxgate serve` process, with a healthy call beside it.

    python -m bench.fuzz --cases 2000 --seed 1 --json-output fuzz.json

Prints, per entry, how many cases were tried and what came back (outcome
kinds and counts); then the failures (first few per entry), whether the
process lived, the unhandled errors in its log, and the healthy call's
gaps and frame lateness next to the server's own clock lateness.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

from hypothesis import HealthCheck, Phase, given, seed, settings

from bench.fuzz import cases as C
from bench.fuzz.healthy import HealthyCall
from bench.fuzz.server import GatewayProcess, histogram_quantile

STRATEGIES = {
    "ws": (C.ws_cases, lambda gw, c: C.run_ws(gw.ws, c)),
    "control": (C.control_cases, lambda gw, c: C.run_control(gw.ws, c)),
    "twilio": (C.twilio_cases, lambda gw, c: C.run_twilio(gw.ws, c)),
    "audiosocket": (C.audiosocket_cases, lambda gw, c: C.run_audiosocket(gw.ws, gw.audiosocket_port, c)),
    "http": (C.http_requests(), lambda gw, c: C.run_http(gw.port, c)),
    "webrtc": (C.sdp_offers(), lambda gw, c: C.run_webrtc_offer(gw.port, c)),
    "static": (C.static_requests(), lambda gw, c: C.run_static(gw.port, c)),
    "wires": (C.wire_cases, lambda gw, c: C.run_wire(gw.ws, c)),
    "sip": (C.sip_cases(), lambda gw, c: C.run_sip(gw.sip_port, c)),
}


def fuzz_entry(gw: GatewayProcess, entry: str, n: int, seed_value: int) -> dict:
    strategy, run = STRATEGIES[entry]
    outcomes: collections.Counter = collections.Counter()
    failures: list[dict] = []
    t0 = time.monotonic()

    @seed(seed_value)
    @settings(
        max_examples=n, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
    )
    @given(strategy)
    def one(case):
        out = run(gw, case)
        outcomes[out.kind if out.ok else "FAIL " + out.kind] += 1
        if not out.ok and len(failures) < 5:
            failures.append({"outcome": out.kind, "detail": out.detail[:500], "case": repr(case)[:800]})

    one()
    crashes = gw.crashes_in(gw.new_log())
    return {
        "cases": sum(outcomes.values()),
        "seconds": round(time.monotonic() - t0, 1),
        "outcomes": dict(outcomes.most_common()),
        "failures": sum(v for k, v in outcomes.items() if k.startswith("FAIL")),
        "failure_examples": failures,
        "log_crashes": len(crashes),
        "log_crash_examples": crashes[:2],
        "alive_after": gw.alive(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cases",
        type=int,
        default=1000,
        help="cases per entry (WebRTC offers: a tenth, each one builds a peer connection)",
    )
    ap.add_argument("--entries", default=",".join(STRATEGIES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-output")
    args = ap.parse_args(argv)
    gw = GatewayProcess(max_sessions=2000).start()
    gw.new_log()
    healthy = HealthyCall(gw.ws).start()
    time.sleep(1.0)
    before = gw.metrics()
    report: dict = {"entries": {}, "seed": args.seed}
    try:
        for entry in args.entries.split(","):
            if entry == "sip" and gw.sip_port is None:
                print("         sip: skipped (aiosipua is not installed: pip install 'voxgate[sip]')", flush=True)
                continue
            n = max(1, args.cases // 10) if entry == "webrtc" else args.cases
            r = report["entries"][entry] = fuzz_entry(gw, entry, n, args.seed)
            print(
                f"{entry:>12}: {r['cases']:>6} cases in {r['seconds']:>6} s, {r['failures']} failed, "
                f"{r['log_crashes']} log tracebacks; outcomes {json.dumps(r['outcomes'])}",
                flush=True,
            )
            for f in r["failure_examples"]:
                print(f"    FAIL {f['outcome']}: {f['detail']}\n         case {f['case'][:300]}")
            if not gw.alive():
                print("the gateway process died")
                break
        after = gw.metrics()
        report["healthy_call"] = healthy.stop()
        report["server_clock_lateness_p99_ms"] = round(
            1000 * histogram_quantile(before, after, "voxgate_clock_lateness_seconds", 0.99), 2
        )
        report["alive"] = gw.alive() and gw.healthy()
        report["total_cases"] = sum(r["cases"] for r in report["entries"].values())
        report["total_failures"] = sum(r["failures"] for r in report["entries"].values())
        h = report["healthy_call"]
        print(
            f"total {report['total_cases']} cases, {report['total_failures']} failed; gateway alive: {report['alive']}"
        )
        print(
            f"healthy call: {h['turns']} turns, {h['frames']} frames, {h['audible_gaps']} audible / {h['micro_gaps']} micro gaps, "
            f"frame lateness p50 {h['lateness_p50_ms']} ms p99 {h['lateness_p99_ms']} ms max {h['lateness_max_ms']} ms (alone before the fuzzing: p99 {h['quiet_lateness_p99_ms']} ms)"
            f"{'; FAILED: ' + h['failure'] if h['failure'] else ''}; server clock lateness p99 {report['server_clock_lateness_p99_ms']} ms"
        )
    finally:
        gw.stop()
    if args.json_output:
        with open(args.json_output, "w") as f:
            json.dump(report, f, indent=2)
    ok = (
        report.get("alive")
        and not report.get("total_failures")
        and report.get("healthy_call", {}).get("audible_gaps", 1) == 0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
