"""report.html: tables and inline SVG plots from metrics.json (no JS, no CDN)."""

from __future__ import annotations

import html
import json
import math

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
DASHES = ["", "6,3", "2,3"]


def _f(x, nd: int = 0) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    return f"{x:.{nd}f}"


def _e(s) -> str:
    return html.escape(str(s))


# ---------------------------------------------------------------- SVG
def line_chart(
    series: list[dict],
    title: str,
    xlabel: str,
    ylabel: str,
    hlines: list[tuple[float, str]] = (),
    width: int = 560,
    height: int = 300,
    marks: list[tuple[float, float]] = (),
) -> str:
    """series: {name, points [(x, y)], color, dash}; marks: shaded x spans."""
    pts = [p for s in series for p in s["points"] if p[1] is not None]
    if not pts:
        return f"<p><i>{_e(title)}: no data</i></p>"
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y1 = _nice(max([p[1] for p in pts] + [h for h, _ in hlines]) * 1.05)
    x1 = x1 if x1 > x0 else x0 + 1
    L, R, T, B = 60, 150, 28, 40
    pw, ph = width - L - R, height - T - B
    sx = lambda x: L + (x - x0) / (x1 - x0) * pw  # noqa: E731
    sy = lambda y: T + ph - (y / y1) * ph  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
        f'<text x="{L}" y="16" font-size="13" font-weight="bold">{_e(title)}</text>',
        f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
    ]
    for a, b in marks:
        out.append(
            f'<rect x="{sx(a):.1f}" y="{T}" width="{max(1.0, sx(b) - sx(a)):.1f}" height="{ph}" fill="#d62728" opacity="0.25"/>'
        )
    for i in range(5):
        yv = y1 * i / 4
        out.append(
            f'<line x1="{L}" x2="{L + pw}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" stroke="#eee"/>'
            f'<text x="{L - 4}" y="{sy(yv) + 4:.1f}" text-anchor="end">{yv:g}</text>'
        )
    xs = sorted({p[0] for p in pts}) if len({p[0] for p in pts}) <= 12 else [x0 + (x1 - x0) * i / 6 for i in range(7)]
    for xv in xs:
        out.append(f'<text x="{sx(xv):.1f}" y="{T + ph + 14}" text-anchor="middle">{xv:.0f}</text>')
    out.append(f'<text x="{L + pw / 2}" y="{height - 6}" text-anchor="middle">{_e(xlabel)}</text>')
    out.append(
        f'<text x="12" y="{T + ph / 2}" transform="rotate(-90 12 {T + ph / 2})" text-anchor="middle">{_e(ylabel)}</text>'
    )
    for h, name in hlines:
        out.append(
            f'<line x1="{L}" x2="{L + pw}" y1="{sy(h):.1f}" y2="{sy(h):.1f}" stroke="#000" stroke-dasharray="2,2"/>'
            f'<text x="{L + pw - 2}" y="{sy(h) - 3:.1f}" text-anchor="end">{_e(name)}</text>'
        )
    for k, s in enumerate(series):
        p = [(sx(x), sy(y)) for x, y in s["points"] if y is not None]
        if not p:
            continue
        d = " ".join(f"{x:.1f},{y:.1f}" for x, y in p)
        dash = f' stroke-dasharray="{s["dash"]}"' if s.get("dash") else ""
        out.append(f'<polyline points="{d}" fill="none" stroke="{s["color"]}" stroke-width="1.6"{dash}/>')
        if len(p) <= 20:
            out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{s["color"]}"/>' for x, y in p)
        ly = T + 12 + 14 * k
        out.append(
            f'<line x1="{L + pw + 8}" x2="{L + pw + 28}" y1="{ly - 4}" y2="{ly - 4}" stroke="{s["color"]}" stroke-width="2"{dash}/>'
            f'<text x="{L + pw + 32}" y="{ly}">{_e(s["name"])}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _nice(x: float) -> float:
    """The next 1, 2, 2.5 or 5 × 10^k at or above x, for round axis ticks."""
    if x <= 0:
        return 1.0
    k = 10 ** math.floor(math.log10(x))
    return next(m * k for m in (1, 2, 2.5, 5, 10) if m * k >= x)


def _downsample_min(values: list[int], n: int = 1200) -> list[tuple[int, int]]:
    """(index, min over the bucket): dips (near-underruns) survive downsampling."""
    if len(values) <= n:
        return list(enumerate(values))
    step = len(values) / n
    return [(int(i * step), min(values[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)])) for i in range(n)]


# ---------------------------------------------------------------- tables
def _table(headers: list[str], rows: list[list]) -> str:
    h = "".join(f"<th>{_e(x)}</th>" for x in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _slo_cell(m: dict) -> str:
    if m["slo"]["pass"]:
        return '<b class="ok">PASS</b>'
    failed = [k for k, v in m["slo"].items() if isinstance(v, dict) and not v["pass"]]
    return '<b class="bad">fail</b> <small>' + _e(", ".join(failed)) + "</small>"


def summary_rows(doc: dict) -> list[str]:
    """The plain-text summary table printed at the end of a run (and kept in notes)."""
    rows = []
    labels = list(doc["levels"])
    head = (
        f"{'target':<28} {'level':>5} {'turns':>5} {'err%':>5} {'TTFA p50/p95/p99 ms':>20} {'srv p95':>7} {'E2E p95':>7} "
        f"{'aud/100t':>8} {'srv aud/100t':>12} {'micro/100t':>10} {'%t aud':>6} {'gap p95/max':>12} {'audio×':>6} {'clk p99':>7} {'SLO':>4}"
    )
    rows.append(head)
    for label in labels:
        name = f"{label}: {doc['targets'][label].get('config') or doc['targets'][label]['ws_url']}"
        for m in doc["levels"][label]:
            t, h, s = m["ttfa_client_ms"], m["heard_gaps"], m["server_gaps"]
            rows.append(
                f"{name[:28]:<28} {m['level']:>5} {m['turns']:>5} {100 * m['error_rate']:>5.1f} "
                f"{_f(t['p50']):>6}/{_f(t['p95']):>6}/{_f(t['p99']):>6} {_f(m['ttfa_server_ms']['p95']):>7} {_f(m['e2e_ms']['p95']):>7} "
                f"{h['per_100_turns']['audible']:>8.1f} {s['per_100_turns']['audible']:>12.1f} {h['per_100_turns']['micro']:>10.1f} "
                f"{m['pct_turns_audible_heard']:>6.1f} {_f(h['duration_ms']['p95']):>5}/{_f(h['duration_ms']['max']):>6} {m['audio_x']:>6.1f} "
                f"{_f(((m.get('client') or {}).get('lateness_ms') or {}).get('p99'), 1):>7} {'PASS' if m['slo']['pass'] else 'fail':>4}"
            )
    for label in labels:
        c = doc["capacities"][label]
        rows.append(
            f"capacity {label}: SLO {c['slo']} (highest passing {c['slo_any']}), strict (zero audible gaps) {c['strict']} (highest {c['strict_any']}),"
            f" strict counting engine gaps only {c.get('strict_engine')} (highest {c.get('strict_engine_any')})"
        )
    cc = doc.get("client_capacity") or {}
    if cc:
        rows.append(
            f"client: clock on time up to {cc.get('max_level_clock_on_time')} callers; first slip at {cc.get('first_level_clock_slipped')};"
            f" ≈{_f(cc.get('callers_per_core_est_min'))} callers per core of client CPU"
        )
    return rows


def render_report(doc: dict, env: dict) -> str:
    labels = list(doc["levels"])
    slo = doc["params"]["slo"]
    parts = [
        f"""<!doctype html><html><head><meta charset="utf-8"><title>voxgate load test</title>
<style>body{{font-family:sans-serif;margin:24px;max-width:1400px}} table{{border-collapse:collapse;margin:8px 0 18px}}
td,th{{border:1px solid #ccc;padding:3px 7px;text-align:right;font-size:13px}} th{{background:#f3f3f3}} td:first-child{{text-align:left}}
.ok{{color:#2a7}} .bad{{color:#c22}} .plots{{display:flex;flex-wrap:wrap;gap:12px}} code,pre{{font-size:12px}}</style></head><body>
<h1>voxgate load test</h1>
<p>{_e(env.get("created_utc"))} · git {_e((env.get("git") or {}).get("commit", "?"))[:12]}{" (dirty)" if (env.get("git") or {}).get("dirty") else ""}
 · CPU {_e((env.get("cpu") or {}).get("model"))} × {_e((env.get("cpu") or {}).get("logical_cores"))} · GPU {_e(env.get("gpu") or "none")}
 · scenarios <code>{_e(env["scenarios"]["path"])}</code> sha256 <code>{_e(env["scenarios"]["sha256"][:16])}…</code>
 · window {doc["params"]["window_s"]:g} s per level, seed {doc["params"]["seed"]}</p>
<p>SLO (docs/concepts.md): TTFA p95 ≤ {slo["ttfa_p95_ms"]:g} ms, E2E first audio p95 ≤ {slo["e2e_p95_ms"]:g} ms,
audible gaps ≤ {slo["audible_per_turn"]:g} per turn (counted {_e(slo["gaps_from"])}), errors ≤ {100 * slo["error_rate"]:g} %.
<b>Strict capacity</b>: highest level with zero audible gaps. Gaps "heard" are measured by each simulated caller's own playback clock;
"server" are the gateway's <code>underrun</code> events.</p>"""
    ]

    # capacities
    rows = []
    for label in labels:
        c = doc["capacities"][label]
        t = doc["targets"][label]
        rows.append(
            [
                f"<b>{_e(label)}</b> {_e(t.get('config') or t['ws_url'])}",
                _f(c["slo"]),
                _f(c["slo_any"]),
                _f(c["strict"]),
                _f(c["strict_any"]),
                _f(c.get("strict_engine")),
                _f(c.get("strict_engine_any")),
            ]
        )
    parts.append(
        "<h2>Capacity</h2>"
        + _table(
            [
                "target",
                "SLO capacity",
                "highest passing",
                "strict capacity",
                "highest strict",
                "strict, engine gaps only",
                "highest strict (engine)",
            ],
            rows,
        )
        + "<p>Capacity = the highest level that passes with every lower level passing too; “highest” ignores failures below. "
        "“Engine gaps only” counts the audible gaps the gateway blames on late synthesis (cause <code>engine</code>), "
        "leaving out gaps from agent text that came too slowly (cause <code>text</code>).</p>"
    )
    cc = doc.get("client_capacity") or {}
    parts.append(
        f"<p>Load client: clock on time (tick lateness p99 ≤ 20 ms) up to <b>{_f(cc.get('max_level_clock_on_time'))}</b> callers;"
        f" first slip at {_f(cc.get('first_level_clock_slipped'))}; ≈{_f(cc.get('callers_per_core_est_min'))} callers per core of client CPU.</p>"
    )

    # summary side by side
    levels = sorted({m["level"] for rs in doc["levels"].values() for m in rs})
    by = {label: {m["level"]: m for m in doc["levels"][label]} for label in labels}
    head = ["level"]
    for label in labels:
        head += [
            f"{label} turns",
            f"{label} TTFA p95",
            f"{label} E2E p95",
            f"{label} audible/100t",
            f"{label} %turns audible",
            f"{label} SLO",
        ]
    rows = []
    for level in levels:
        row = [str(level)]
        for label in labels:
            m = by[label].get(level)
            if m is None:
                row += ["–"] * 6
                continue
            row += [
                str(m["turns"]),
                _f(m["ttfa_client_ms"]["p95"]),
                _f(m["e2e_ms"]["p95"]),
                _f(m["heard_gaps"]["per_100_turns"]["audible"], 1),
                _f(m["pct_turns_audible_heard"], 1),
                _slo_cell(m),
            ]
        rows.append(row)
    parts.append("<h2>Side by side</h2>" + _table(head, rows))

    # plots
    plots = []
    series = []
    for k, label in enumerate(labels):
        ms = doc["levels"][label]
        for j, q in enumerate(("p50", "p95", "p99")):
            series.append(
                {
                    "name": f"{label} {q}",
                    "color": COLORS[k % 4],
                    "dash": DASHES[j],
                    "points": [(m["level"], m["ttfa_client_ms"][q]) for m in ms],
                }
            )
    plots.append(
        line_chart(series, "TTFA (client) vs concurrency", "concurrent calls", "ms", [(slo["ttfa_p95_ms"], "SLO p95")])
    )
    series = []
    for k, label in enumerate(labels):
        ms = doc["levels"][label]
        series.append(
            {
                "name": f"{label} audible",
                "color": COLORS[k % 4],
                "dash": "",
                "points": [(m["level"], m["heard_gaps"]["per_100_turns"]["audible"]) for m in ms],
            }
        )
        series.append(
            {
                "name": f"{label} micro",
                "color": COLORS[k % 4],
                "dash": "6,3",
                "points": [(m["level"], m["heard_gaps"]["per_100_turns"]["micro"]) for m in ms],
            }
        )
        series.append(
            {
                "name": f"{label} srv audible",
                "color": COLORS[k % 4],
                "dash": "2,3",
                "points": [(m["level"], m["server_gaps"]["per_100_turns"]["audible"]) for m in ms],
            }
        )
    plots.append(
        line_chart(
            series,
            "Gaps per 100 turns vs concurrency (heard; server dotted)",
            "concurrent calls",
            "gaps / 100 turns",
            [(100 * slo["audible_per_turn"], "SLO audible")],
        )
    )
    series = [
        {
            "name": f"{label} E2E {q}",
            "color": COLORS[k % 4],
            "dash": DASHES[j],
            "points": [(m["level"], m["e2e_ms"][q]) for m in doc["levels"][label]],
        }
        for k, label in enumerate(labels)
        for j, q in enumerate(("p50", "p95"))
    ]
    plots.append(
        line_chart(series, "E2E first audio vs concurrency", "concurrent calls", "ms", [(slo["e2e_p95_ms"], "SLO p95")])
    )
    series = [
        {
            "name": f"{label} audio×",
            "color": COLORS[k % 4],
            "dash": "",
            "points": [(m["level"], m["audio_x"]) for m in doc["levels"][label]],
        }
        for k, label in enumerate(labels)
    ]
    plots.append(line_chart(series, "Audio produced: seconds per wall second", "concurrent calls", "audio ×"))
    parts.append('<h2>Plots</h2><div class="plots">' + "".join(plots) + "</div>")

    # worst call buffer level
    wparts = []
    for k, label in enumerate(labels):
        worst = None
        for lv, w in (doc.get("worst_calls") or {}).get(label, {}).items():
            if w and (worst is None or int(lv) > int(worst[0])):
                if (
                    worst is None
                    or any(g for t in w["turns"] for g in t["gaps"])
                    or not any(g for t in worst[1]["turns"] for g in t["gaps"])
                ):
                    worst = (lv, w)
        if worst is None:
            continue
        lv, w = worst
        fm = w["frame_ms"]
        pts = [(w["t_start"] + i * fm / 1000.0, v * fm) for i, v in _downsample_min(w["levels"])]
        marks = [(g["t"], g["t"] + g["duration_ms"] / 1000.0) for t in w["turns"] for g in t["gaps"]]
        wparts.append(
            line_chart(
                [{"name": f"{label} buffer", "color": COLORS[k % 4], "points": pts}],
                f"{label}, level {lv}: buffer of the worst call ({w['call_id']}, caller {w['caller']}); gaps shaded",
                "run time (s)",
                "buffered audio (ms)",
                width=900,
                marks=marks,
            )
        )
    if wparts:
        parts.append(
            "<h2>Worst call: the caller's buffer over time</h2><p>Frames buffered at the caller at each tick (minimum per plotted "
            "point, so dips survive). Silence frames the gateway sends inside its own underruns fill the buffer too: "
            "there the line stays up and the shading (heard gaps) shows the silence.</p>" + "".join(wparts)
        )

    # detail tables
    rows = []
    for label in labels:
        for m in doc["levels"][label]:
            h, s = m["heard_gaps"], m["server_gaps"]
            rows.append(
                [
                    f"{label} {m['level']}",
                    str(m["turns"]),
                    _f(h["per_100_turns"]["micro"], 1),
                    _f(h["per_100_turns"]["audible"], 1),
                    f"{h['by_source']['server']['micro']}/{h['by_source']['server']['audible']}",
                    f"{h['by_source']['delivery']['micro']}/{h['by_source']['delivery']['audible']}",
                    f"{h['by_source']['mixed']['micro']}/{h['by_source']['mixed']['audible']}",
                    _f(s["per_100_turns"]["micro"], 1),
                    _f(s["per_100_turns"]["audible"], 1),
                    f"{s['by_cause']['engine']['micro']}/{s['by_cause']['engine']['audible']}",
                    f"{s['by_cause']['text']['micro']}/{s['by_cause']['text']['audible']}",
                    _f(m["pct_turns_audible_heard"], 1),
                    _f(m["pct_turns_audible_server"], 1),
                    str(h.get("during_client_stall", 0)),
                ]
            )
    parts.append(
        "<h2>Gap scaling</h2><p>micro/audible counts; heard split by source (server silence frames, late delivery, mixed); "
        "server split by cause.</p>"
        + _table(
            [
                "target level",
                "turns",
                "heard micro/100t",
                "heard audible/100t",
                "heard server m/a",
                "heard delivery m/a",
                "heard mixed m/a",
                "server micro/100t",
                "server audible/100t",
                "server engine m/a",
                "server text m/a",
                "% turns audible (heard)",
                "% turns audible (server)",
                "heard gaps during a client stall",
            ],
            rows,
        )
    )
    rows = []
    for label in labels:
        for m in doc["levels"][label]:
            h, s = m["heard_gaps"]["duration_ms"], m["server_gaps"]["duration_ms"]
            rows.append(
                [
                    f"{label} {m['level']}",
                    _f(h["p50"]),
                    _f(h["p95"]),
                    _f(h["max"]),
                    _f(m["heard_gaps"]["total_ms"]),
                    _f(s["p50"]),
                    _f(s["p95"]),
                    _f(s["max"]),
                    _f(m["server_gaps"]["total_ms"]),
                ]
            )
    parts.append(
        "<h2>Gap durations (ms)</h2>"
        + _table(
            [
                "target level",
                "heard p50",
                "heard p95",
                "heard max",
                "heard total",
                "server p50",
                "server p95",
                "server max",
                "server total",
            ],
            rows,
        )
    )
    rows = []
    for label in labels:
        for m in doc["levels"][label]:
            t, sv, e = m["ttfa_client_ms"], m["ttfa_server_ms"], m["e2e_ms"]
            rows.append(
                [
                    f"{label} {m['level']}",
                    str(m["turns"]),
                    f"{m['errors']} ({100 * m['error_rate']:.1f} %)",
                    _f(t["p50"]),
                    _f(t["p95"]),
                    _f(t["p99"]),
                    _f(sv["p50"]),
                    _f(sv["p95"]),
                    _f(sv["p99"]),
                    _f(e["p50"]),
                    _f(e["p95"]),
                    _f(e["p99"]),
                    _f(m["audio_x"], 2),
                    _slo_cell(m),
                ]
            )
    parts.append(
        "<h2>Latency and throughput</h2>"
        + _table(
            [
                "target level",
                "turns",
                "errors",
                "TTFA p50",
                "TTFA p95",
                "TTFA p99",
                "server p50",
                "server p95",
                "server p99",
                "E2E p50",
                "E2E p95",
                "E2E p99",
                "audio×",
                "SLO",
            ],
            rows,
        )
    )
    rows = []
    for label in labels:
        for m in doc["levels"][label]:
            c = m.get("client") or {}
            if "ticks" not in c:
                continue
            rows.append(
                [
                    f"{label} {m['level']}",
                    str(c["ticks"]),
                    _f(c["lateness_ms"]["p50"], 2),
                    _f(c["lateness_ms"]["p99"], 1),
                    _f(c["lateness_ms"]["max"], 1),
                    str(c["late_ticks_over_20ms"]),
                    _f(c["cpu_pct_of_core"]),
                    _f(c["callers_per_core_est"]),
                    '<b class="bad">slipped</b>' if c["clock_slipped"] else "on time",
                    _f(c.get("loadavg_1m"), 2),
                ]
            )
    parts.append(
        "<h2>Load client health</h2><p>If the client's own clock slips, its heard gaps include its own artefacts.</p>"
        + _table(
            [
                "target level",
                "ticks",
                "lateness p50 ms",
                "p99 ms",
                "max ms",
                "ticks > 20 ms late",
                "client CPU % of a core",
                "callers/core est.",
                "clock",
                "machine load (1 min)",
            ],
            rows,
        )
    )

    # server counters and per-level SLO detail
    det = []
    for label in labels:
        for m in doc["levels"][label]:
            checks = "".join(
                f"<li>{_e(k)}: {_f(v['value'], 3)} (limit {v['limit']:g}) {'✓' if v['pass'] else '✗'}</li>"
                for k, v in m["slo"].items()
                if isinstance(v, dict)
            )
            deltas = "\n".join(f"{k} {v:g}" for k, v in sorted(m.get("server_deltas", {}).items()))
            errs = m.get("session_errors") or []
            det.append(
                f"<details><summary>{_e(label)} level {m['level']}: SLO {'PASS' if m['slo']['pass'] else 'fail'}, "
                f"{len(errs)} session errors</summary><ul>{checks}</ul><p>Server /metrics changes over the level "
                f"(counters: delta; gauges: value after):</p><pre>{_e(deltas)}</pre>"
                + (f"<pre>{_e(json.dumps(errs[:10], ensure_ascii=False, indent=1))}</pre>" if errs else "")
                + "</details>"
            )
    parts.append("<h2>Per-level detail</h2>" + "".join(det))
    cfgs = "".join(
        f"<h3>{_e(label)}: <code>{_e(c['path'])}</code> sha256 {_e(c['sha256'][:16])}…</h3><pre>{_e(c['text'])}</pre>"
        for label, c in (env.get("configs") or {}).items()
    )
    parts.append(
        "<h2>Provenance</h2>"
        + cfgs
        + f"<pre>{_e(json.dumps({k: env[k] for k in ('versions', 'cpu', 'python', 'platform') if k in env}, indent=1))}</pre>"
    )
    parts.append("</body></html>")
    return "\n".join(parts)


# ---------------------------------------------------------------- re-render a run folder
def rederive(doc: dict, slo_overrides: dict | None = None) -> dict:
    """Recompute SLO verdicts and capacities of a metrics.json (e.g. with other thresholds)."""
    from dataclasses import fields

    from bench.loadtest.stats import LevelMetrics, Slo, capacities, slo_verdict

    slo = Slo(**(doc["params"]["slo"] | (slo_overrides or {})))
    doc["params"]["slo"] = slo.__dict__.copy()
    names = {f.name for f in fields(LevelMetrics)}
    for label, levels in doc["levels"].items():
        objs = []
        for m in levels:
            obj = LevelMetrics(**{k: v for k, v in m.items() if k in names})
            m["slo"] = obj.slo = slo_verdict(obj, slo)
            objs.append(obj)
        doc["capacities"][label] = capacities(objs)
    return doc


def main(argv: list[str] | None = None) -> int:
    import argparse
    from pathlib import Path

    p = argparse.ArgumentParser(
        description="re-render report.html of a load-test run folder (optionally with other SLO thresholds)"
    )
    p.add_argument("run")
    p.add_argument("--slo-ttfa-p95-ms", type=float)
    p.add_argument("--slo-e2e-p95-ms", type=float)
    p.add_argument("--slo-audible-per-turn", type=float)
    p.add_argument("--slo-error-rate", type=float)
    p.add_argument("--slo-gaps-from", choices=["heard", "server"])
    p.add_argument("--out", help="write here instead of RUN/report.html")
    a = p.parse_args(argv)
    run = Path(a.run)
    doc = json.loads((run / "metrics.json").read_text())
    env = json.loads((run / "env.json").read_text())
    overrides: dict = {}
    for key, attr in (
        ("ttfa_p95_ms", "slo_ttfa_p95_ms"),
        ("e2e_p95_ms", "slo_e2e_p95_ms"),
        ("audible_per_turn", "slo_audible_per_turn"),
        ("error_rate", "slo_error_rate"),
        ("gaps_from", "slo_gaps_from"),
    ):
        if getattr(a, attr) is not None:
            overrides[key] = getattr(a, attr)
    doc = rederive(doc, overrides)
    (Path(a.out) if a.out else run / "report.html").write_text(render_report(doc, env), encoding="utf-8")
    for row in summary_rows(doc):
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
