"""Per-level statistics, SLO verdicts and capacities (docs/concepts.md).

Pure functions over turn records (one dict per turn, as in turns.jsonl), so
the numbers in a report can be recomputed from the run folder and tested on
crafted records.

Definitions:
* TTFA (client) = first audio frame received − first text sent;
  TTFA (server) = the gateway's `audio.start.ttfa_ms`.
* E2E first audio = first audio frame received − the caller's end of turn.
* Heard gaps come from the caller's playback (bench/loadtest/playback.py),
  split by source (`server`: silence frames the gateway sent inside an
  utterance, `delivery`: frames that arrived too late for the caller's
  clock); server gaps are the gateway's `underrun` events, split by cause
  (`engine`, `text`). Micro < 200 ms ≤ audible.
* Percentiles interpolate linearly between order statistics (numpy's default).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence


@dataclass
class Slo:
    """Thresholds of docs/concepts.md (the seed study's defaults)."""

    ttfa_p95_ms: float = 800.0
    e2e_p95_ms: float = 2000.0
    audible_per_turn: float = 0.2
    error_rate: float = 0.01
    gaps_from: str = "heard"  # heard (the caller's playback) | server (underrun events)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear interpolation; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _pcts(values: Sequence[float]) -> dict:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


def _gap_table(gaps: list[dict], split: str, splits: Iterable[str], turns: int) -> dict:
    per = 100.0 / turns if turns else 0.0
    out: dict = {
        "micro": sum(g["kind"] == "micro" for g in gaps),
        "audible": sum(g["kind"] == "audible" for g in gaps),
    }
    out["per_100_turns"] = {"micro": out["micro"] * per, "audible": out["audible"] * per}
    out["by_" + split] = {
        s: {
            "micro": sum(g["kind"] == "micro" and g[split] == s for g in gaps),
            "audible": sum(g["kind"] == "audible" and g[split] == s for g in gaps),
        }
        for s in splits
    }
    # Late-delivery gaps that overlap a stall of the load client itself (suspect, not the gateway's).
    out["during_client_stall"] = sum(1 for g in gaps if g.get("client_stall"))
    durations = [g["duration_ms"] for g in gaps]
    out["duration_ms"] = {
        "p50": percentile(durations, 50),
        "p95": percentile(durations, 95),
        "max": max(durations) if durations else None,
    }
    out["total_ms"] = sum(durations)
    return out


@dataclass
class LevelMetrics:
    level: int
    label: str
    window_s: float
    turns: int
    errors: int
    error_rate: float
    ttfa_client_ms: dict
    ttfa_server_ms: dict
    e2e_ms: dict
    heard_gaps: dict
    server_gaps: dict
    pct_turns_audible_heard: float
    pct_turns_audible_server: float
    audio_s: float
    audio_x: float
    client: dict = field(default_factory=dict)  # the load client's own health (clock lateness, CPU)
    slo: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def level_metrics(
    turns: list[dict],
    level: int,
    window_s: float,
    label: str = "",
    audio_s: float | None = None,
    session_errors: int = 0,
    slo: Slo | None = None,
    client: dict | None = None,
) -> LevelMetrics:
    """Aggregate the in-window turns of one level.

    `audio_s` is the audio received during the window (seconds); when not
    given, the heard audio of the turns is used. `session_errors` counts
    failures outside any turn (refused or dropped sessions) as errors.
    """
    turns = [t for t in turns if t.get("in_window", True)]
    n = len(turns)
    errors = sum(1 for t in turns if t.get("error")) + session_errors
    ok = [t for t in turns if not t.get("error")]
    ttfa_c = [t["ttfa_client_ms"] for t in ok if t.get("ttfa_client_ms") is not None]
    ttfa_s = [t["ttfa_server_ms"] for t in ok if t.get("ttfa_server_ms") is not None]
    e2e = [t["e2e_ms"] for t in ok if t.get("e2e_ms") is not None]
    heard = [g for t in turns for g in t.get("heard_gaps", [])]
    server = [g for t in turns for g in t.get("server_gaps", [])]
    counted = n if n else 0
    heard_tab = _gap_table(heard, "source", ("server", "delivery", "mixed"), counted)
    server_tab = _gap_table(server, "cause", ("engine", "text"), counted)
    pct_h = 100.0 * sum(any(g["kind"] == "audible" for g in t.get("heard_gaps", [])) for t in turns) / n if n else 0.0
    pct_s = 100.0 * sum(any(g["kind"] == "audible" for g in t.get("server_gaps", [])) for t in turns) / n if n else 0.0
    if audio_s is None:
        audio_s = sum(t.get("heard_audio_ms", 0.0) for t in turns) / 1000.0
    m = LevelMetrics(
        level=level,
        label=label,
        window_s=window_s,
        turns=n,
        errors=errors,
        error_rate=errors / (n + session_errors) if (n + session_errors) else 0.0,
        ttfa_client_ms=_pcts(ttfa_c),
        ttfa_server_ms=_pcts(ttfa_s),
        e2e_ms=_pcts(e2e),
        heard_gaps=heard_tab,
        server_gaps=server_tab,
        pct_turns_audible_heard=pct_h,
        pct_turns_audible_server=pct_s,
        audio_s=audio_s,
        audio_x=audio_s / window_s if window_s > 0 else 0.0,
        client=dict(client or {}),
    )
    m.slo = slo_verdict(m, slo or Slo())
    return m


def slo_verdict(m: LevelMetrics, slo: Slo) -> dict:
    gaps = m.heard_gaps if slo.gaps_from == "heard" else m.server_gaps
    audible_per_turn = gaps["audible"] / m.turns if m.turns else math.inf
    checks = {
        "ttfa_p95_ms": (m.ttfa_client_ms["p95"], slo.ttfa_p95_ms),
        "e2e_p95_ms": (m.e2e_ms["p95"], slo.e2e_p95_ms),
        "audible_per_turn": (audible_per_turn, slo.audible_per_turn),
        "error_rate": (m.error_rate, slo.error_rate),
    }
    out = {k: {"value": v, "limit": lim, "pass": v is not None and v <= lim} for k, (v, lim) in checks.items()}
    out["pass"] = m.turns > 0 and all(c["pass"] for c in out.values())
    out["zero_audible"] = m.turns > 0 and gaps["audible"] == 0 and m.errors == 0
    # The engine's share: no audible gap the gateway blames on late synthesis.
    out["zero_audible_engine"] = m.turns > 0 and m.server_gaps["by_cause"]["engine"]["audible"] == 0 and m.errors == 0
    return out


def capacities(levels: list[LevelMetrics]) -> dict:
    """SLO capacity and strict capacity over a sweep.

    Each is the highest level such that it and every lower level pass
    (a sweep that fails at 40 and passes at 60 is noise, not capacity);
    `*_any` gives the highest passing level regardless, to show such noise.
    `strict_engine` counts only audible gaps the gateway attributes to the
    engine (cause `engine`), leaving out gaps from slow agent text.
    """
    out = {}
    ordered = sorted(levels, key=lambda m: m.level)
    for name, key in (("slo", "pass"), ("strict", "zero_audible"), ("strict_engine", "zero_audible_engine")):
        cap = None
        for m in ordered:
            if not m.slo[key]:
                break
            cap = m.level
        passing = [m.level for m in ordered if m.slo[key]]
        out[name] = cap
        out[name + "_any"] = max(passing) if passing else None
    return out
