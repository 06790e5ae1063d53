"""Benchmark pictures: a bench's results as a data file, and the plot drawn from that file.

A bench run with `--plot FILE.png` (or `.svg`) writes FILE.json beside it (what was measured, in the
bench's own JSON shape, with the command, the machine, its load and the time) and draws FILE.png from
that file. The same code redraws checked-in data, or several runs as one picture (the picture's data always
lands beside it, so every picture can be redrawn and checked on its own):

    python -m bench.plots --from docs/benchmarks/capacity.json --out docs/benchmarks/capacity.png
    python -m bench.plots --from rate2.json --from rate8.json --out turn-modes.png   # runs side by side
    python -m bench.plots --all docs/benchmarks                                       # every X.json -> X.png

A data file is `{"figure": KIND, "runs": [{"label", "date", "machine", "load", "command", "result"}]}`.
FIGURES maps each KIND to two functions: `slim` keeps the part of a bench's result its picture needs
(so a data file stays small) and `panels` turns the runs into panels of series. A picture carries the
SHA-256 of the data it was drawn from in its Description, so a test can tell a picture that no longer
matches its data.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

SUFFIXES = (".png", ".svg")
HASH_PREFIX = "voxgate data sha256 "
HOLD_MS = 20.0  # one 20 ms frame: the capacity bench's line between holding and slipping


class PlotError(ValueError):
    """A picture that cannot be drawn: bad target, unknown figure, data without what it needs."""


# ------------------------------------------------------------------ runs and data files
def data_hash(data: dict) -> str:
    """SHA-256 of the data in a canonical form (key order and whitespace do not count)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def check_target(out: str | os.PathLike, other_outputs: tuple = ()) -> Path:
    """Fail before a long bench run, not after: a .png/.svg path in an existing folder, its data file not one of
    the bench's other outputs (`--json-output`), and matplotlib."""
    path = Path(out)
    if path.suffix.lower() not in SUFFIXES:
        raise PlotError(f"--plot {out}: the picture must end in .png or .svg (its data goes beside it as .json)")
    if not path.parent.is_dir():
        raise PlotError(f"--plot {out}: folder {path.parent} does not exist")
    data_path = path.with_suffix(".json").resolve()
    for other in other_outputs:
        if other and Path(other).resolve() == data_path:
            raise PlotError(
                f"--plot {out} writes its data to {path.with_suffix('.json')}, which the bench also writes: "
                "give the picture or that output another name"
            )
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError("--plot needs matplotlib: pip install -e '.[soak]'") from None
    return path


def command_line(module: str | None = None, argv: list[str] | None = None) -> str:
    """The bench's command as a user would type it: `python -m MODULE ARGV…`, or `voxgate ARGV…` for the CLI's
    subcommands (however it was launched); ARGV defaults to this process's arguments."""
    prog = f"python -m {module}" if module else "voxgate"
    return " ".join([prog, *map(shlex.quote, sys.argv[1:] if argv is None else argv)])


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def new_run(result: dict, command: str, label: str | None = None) -> dict:
    """One run: the result and where it came from (now, this machine, its load average now)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return {
        "label": label or date,
        "date": date,
        "machine": f"{cpus} CPUs ({_cpu_model()}), {platform.system()}",
        "load": f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) at the end",
        "command": command,
        "result": result,
    }


def figure_data(kind: str, runs: list[dict]) -> dict:
    if kind not in FIGURES:
        raise PlotError(f"unknown figure {kind!r} (known: {', '.join(sorted(FIGURES))})")
    slim = FIGURES[kind][0]
    return {"figure": kind, "runs": [{**run, "result": slim(run["result"])} for run in runs]}


def write_plot(kind: str, result: dict, out: str | os.PathLike, command: str, label: str | None = None) -> Path:
    """What a bench's `--plot FILE` does: FILE's data (.json beside it) from this run, then FILE from that data."""
    out = check_target(out)
    data = figure_data(kind, [new_run(result, command, label)])
    data_path = out.with_suffix(".json")
    data_path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    draw(data, out)
    print(f"plot: {out} (data: {data_path})")
    return out


def load_data(*paths: str | os.PathLike) -> dict:
    """One or more data files of one figure kind as one (their runs in order)."""
    docs = []
    for p in paths:
        try:
            docs.append(json.loads(Path(p).read_text(encoding="utf-8")))
        except (OSError, ValueError) as e:
            raise PlotError(f"{p}: not a readable data file ({e})") from None
    kinds = {d.get("figure") for d in docs}
    if len(kinds) != 1:
        raise PlotError(
            f"{', '.join(map(str, paths))}: data of different figures ({', '.join(map(str, kinds))}) make no one picture"
        )
    return {"figure": kinds.pop(), "runs": [run for d in docs for run in d.get("runs", [])]}


def embedded_hash(picture: str | os.PathLike) -> str | None:
    """The data hash a picture was drawn from (PNG text chunk or SVG <dc:description>), or None."""
    path = Path(picture)
    if path.suffix.lower() == ".svg":
        text = path.read_text(encoding="utf-8")
        start = text.find(HASH_PREFIX)
        return text[start + len(HASH_PREFIX) : start + len(HASH_PREFIX) + 64] if start >= 0 else None
    from PIL import Image  # matplotlib's own dependency

    with Image.open(path) as im:
        desc = im.text.get("Description", "")
    return desc[len(HASH_PREFIX) :] if desc.startswith(HASH_PREFIX) else None


# ------------------------------------------------------------------ drawing
def draw(data: dict, out: str | os.PathLike) -> Path:
    """Draw `data` into `out` (.png or .svg), the data's hash in the picture's metadata."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    if data.get("figure") not in FIGURES:
        raise PlotError(f"unknown figure {data.get('figure')!r} (known: {', '.join(sorted(FIGURES))})")
    if not data.get("runs"):
        raise PlotError(f"{data['figure']}: no runs to draw")
    spec = FIGURES[data["figure"]][1](data["runs"])
    panels = spec["panels"]
    footer = _footer(data["runs"])
    footer_in = 0.13 * (footer.count("\n") + 1) + 0.1  # inches under the panels for the provenance lines
    height = 4.4 + footer_in
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), height), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        _draw_panel(ax, panel)
    fig.suptitle(spec["title"], fontsize=12)
    fig.text(0.01, 0.05 / height, footer, fontsize=7, color="#555", va="bottom")
    fig.tight_layout(rect=(0, footer_in / height, 1, 1 - 0.3 / height))
    meta = {"Description": HASH_PREFIX + data_hash(data)}
    if out.suffix.lower() == ".png":
        meta["Software"] = "voxgate bench.plots"  # not matplotlib's version: the same data draws the same file
    else:
        meta["Date"] = None  # no timestamp in the SVG either
    with plt.rc_context({"svg.hashsalt": "voxgate"}):  # an SVG's element ids from the data, not random
        fig.savefig(out, dpi=100, metadata=meta)
    plt.close(fig)
    return out


def _footer(runs: list[dict]) -> str:
    """Where the numbers come from: the machine once if all runs share it, then each run's date and load."""
    machines = list(dict.fromkeys(r.get("machine", "?") for r in runs))
    lines = [f"machine: {machines[0]}"] if len(machines) == 1 else []
    for r in runs[:6]:
        where = f", {r.get('machine', '?')}" if len(machines) > 1 else ""
        date = r.get("date", "?")
        line = f"{'' if date.startswith(r['label']) else r['label'] + ': '}{date}{where}, {r.get('load', '?')}"
        if line not in lines:
            lines.append(line)
    if len(runs) > 6:
        lines.append(f"… and {len(runs) - 6} more runs (the data file lists each with its command)")
    return "\n".join(lines)


def _draw_panel(ax, panel: dict) -> None:
    series = panel["series"]
    if panel.get("kind") == "bars":
        cats = panel["categories"]
        width = 0.8 / max(len(series), 1)
        for i, s in enumerate(series):
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(cats))]
            ys = [float("nan") if v is None else v for v in s["y"]]
            bars = ax.bar(xs, ys, width * 0.95, label=s["label"])
            if panel.get("bar_labels"):
                ax.bar_label(bars, fmt=panel["bar_labels"], fontsize=7, padding=1)
        ax.set_xticks(range(len(cats)), cats, rotation=panel.get("rotate", 0), fontsize=8)
    else:
        cats = panel.get("categories")
        for s in series:
            xs = [cats.index(x) for x in s["x"]] if cats else s["x"]
            pts = [(x, y) for x, y in zip(xs, s["y"]) if y is not None]
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                s.get("style", "o-"),
                label=s["label"],
                markersize=4,
                color=s.get("color"),
            )
        xs = sorted({x for s in series for x in s["x"]})
        if not cats and not panel.get("x_log") and 0 < len(xs) <= 12:
            ax.set_xticks(xs, [f"{x:g}" for x in xs])  # the measured levels themselves
        if cats:
            ax.set_xticks(
                range(len(cats)),
                cats,
                rotation=panel.get("rotate", 0),
                fontsize=7,
                ha="right" if panel.get("rotate") else "center",
            )
        if panel.get("x_log"):
            from matplotlib.ticker import NullFormatter

            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks(
                sorted({x for s in series for x in s["x"]}),
                [f"{x:g}" for x in sorted({x for s in series for x in s["x"]})],
            )
    if panel.get("y_log"):
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    for y, text in panel.get("hlines", []):
        ax.axhline(y, color="#c22", linestyle="--", linewidth=1)
        ax.annotate(text, (0.01, y), xycoords=("axes fraction", "data"), fontsize=7, color="#c22", va="bottom")
    ax.set_title(panel.get("title", ""), fontsize=10)
    ax.set_xlabel(panel.get("x_label", ""))
    ax.set_ylabel(panel.get("y_label", ""))
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=7)


# ------------------------------------------------------------------ the figures, one per bench
def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _label(run: dict, part: str, runs: list[dict]) -> str:
    """A series' name: the part alone for a single run, with the run's label when runs are compared."""
    return f"{run['label']}: {part}" if len(runs) > 1 and part else (run["label"] if len(runs) > 1 else part)


CAPACITY_KEYS = (
    "sessions",
    "workers",
    "pin",
    "round",
    "lateness_p50_ms",
    "lateness_p99_ms",
    "ticks_over_20ms_pct",
    "skipped_ticks",
    "underruns",
    "frames_per_s_received",
    "server_cpu_pct",
    "server_cpu_us_per_frame",
    "tick_cpu_us_per_frame",
    "holds",
)


def _slim_capacity(result: dict) -> dict:
    """bench/gateway_capacity.py --json-output: its levels, the columns the picture and tables use."""
    return {
        "workers": result.get("workers"),
        "cpu_count": result.get("cpu_count"),
        "levels": [{k: row[k] for k in CAPACITY_KEYS if k in row} for row in result["levels"]],
    }


def _capacity(runs: list[dict]) -> dict:
    p99, cpu = [], []
    for run in runs:
        groups: dict[tuple, list[dict]] = {}
        for row in run["result"]["levels"]:
            groups.setdefault(
                (row.get("workers", 1) if run["result"].get("workers") else None, row.get("pin")), []
            ).append(row)
        for (workers, pin), rows in groups.items():
            part = ", ".join(
                p
                for p in (
                    f"{workers} worker{'s' if workers > 1 else ''}" if workers else "",
                    "pinned" if pin else ("unpinned" if workers else ""),
                )
                if p
            )
            levels = sorted({r["sessions"] for r in rows})
            name = _label(run, part, runs) or "one process"
            style = "s--" if pin else "o-"
            p99.append(
                {
                    "label": name,
                    "style": style,
                    "x": levels,
                    "y": [_median([r["lateness_p99_ms"] for r in rows if r["sessions"] == lv]) for lv in levels],
                }
            )
            cpu.append(
                {
                    "label": name,
                    "style": style,
                    "x": levels,
                    "y": [
                        _median([r.get("server_cpu_us_per_frame") for r in rows if r["sessions"] == lv])
                        for lv in levels
                    ],
                }
            )
    return {
        "title": "Gateway pacing capacity: paced sessions against the clock's lateness (SimulatedEngine, RTF 0.1)",
        "panels": [
            {
                "title": "tick lateness p99 (a level holds at ≤ 20 ms, no underruns)",
                "series": p99,
                "y_log": True,
                "x_label": "paced sessions (native WS, μ-law 8 kHz)",
                "y_label": "clock tick lateness p99 (ms)",
                "hlines": [(HOLD_MS, "one frame, 20 ms")],
            },
            {
                "title": "server CPU per audio frame (all workers)",
                "series": cpu,
                "x_label": "paced sessions",
                "y_label": "µs of server CPU per frame sent",
            },
        ],
    }


def _slim_loadtest(doc: dict) -> dict:
    """`voxgate loadtest` metrics.json: per target its config and, per level, TTFA, E2E and audible gaps."""
    out = {
        "targets": {k: {"config": v.get("config"), "ws_url": v.get("ws_url")} for k, v in doc["targets"].items()},
        "levels": {},
    }
    for label, levels in doc["levels"].items():
        keep = []
        for m in levels:
            keep.append(
                {
                    "level": m["level"],
                    "turns": m.get("turns"),
                    "ttfa_client_ms": m["ttfa_client_ms"],
                    "e2e_ms": {"p95": (m.get("e2e_ms") or {}).get("p95")},
                    "heard_gaps": {"per_100_turns": {"audible": m["heard_gaps"]["per_100_turns"]["audible"]}},
                    "slo": {"pass": (m.get("slo") or {}).get("pass")},
                }
            )
        out["levels"][label] = keep
    if "capacities" in doc:
        out["capacities"] = doc["capacities"]
    return out


def _loadtest(runs: list[dict]) -> dict:
    ttfa, gaps = [], []
    for run in runs:
        doc = run["result"]
        for label, levels in doc["levels"].items():
            cfg = (
                (doc["targets"].get(label) or {}).get("config")
                or (doc["targets"].get(label) or {}).get("ws_url")
                or label
            )
            name, color = _label(run, Path(str(cfg)).stem, runs), f"C{len(gaps) % 10}"
            levels = [
                m for m in levels if m.get("turns") is None or m["turns"] > 0
            ]  # a level without a turn measured nothing
            xs = [m["level"] for m in levels]
            ttfa.append(
                {"label": f"{name} p95", "color": color, "x": xs, "y": [m["ttfa_client_ms"].get("p95") for m in levels]}
            )
            if any(m["ttfa_client_ms"].get("p50") is not None for m in levels):
                ttfa.append(
                    {
                        "label": f"{name} p50",
                        "style": "^:",
                        "color": color,
                        "x": xs,
                        "y": [m["ttfa_client_ms"].get("p50") for m in levels],
                    }
                )
            gaps.append(
                {
                    "label": name,
                    "color": color,
                    "x": xs,
                    "y": [m["heard_gaps"]["per_100_turns"]["audible"] for m in levels],
                }
            )
    return {
        "title": "Time to first audio against concurrent callers (voxgate loadtest, simulated LLM)",
        "panels": [
            {
                "title": "first audio at the caller, from the LLM's first token",
                "series": ttfa,
                "y_log": True,
                "x_label": "concurrent callers",
                "y_label": "TTFA (ms)",
                "hlines": [(800.0, "SLO: p95 ≤ 800 ms")],
            },
            {
                "title": "audible gaps the callers heard",
                "series": gaps,
                "x_label": "concurrent callers",
                "y_label": "audible gaps per 100 turns",
            },
        ],
    }


def _slim_turn_mode(result: dict) -> dict:
    """`voxgate bench --turn-mode --json-output`: the rate and each mode's summary (not every turn's row)."""
    return {k: result[k] for k in ("llm_rate", "device", "frames_per_token", "sentence", "turn") if k in result}


def _turn_mode(runs: list[dict]) -> dict:
    runs = sorted(runs, key=lambda r: r["result"]["llm_rate"])
    rates = [r["result"]["llm_rate"] for r in runs]
    first, pauses = [], []
    for mode in ("sentence", "turn"):
        first.append(
            {"label": f"{mode} mode", "x": rates, "y": [r["result"][mode]["first_audio_ms_p50"] for r in runs]}
        )
        pauses.append({"label": f"{mode} mode", "x": rates, "y": [r["result"][mode]["gaps_per_turn"] for r in runs]})
    return {
        "title": "Turn mode against sentence mode, an LLM feeding words at a given rate (Qwen3Engine, tiny checkpoint)",
        "panels": [
            {
                "title": "first audio from the first token (p50)",
                "series": first,
                "x_log": True,
                "y_log": True,
                "x_label": "LLM rate (words per second)",
                "y_label": "first audio (ms)",
            },
            {
                "title": "audible pauses a caller would hear",
                "series": pauses,
                "x_log": True,
                "x_label": "LLM rate (words per second)",
                "y_label": "pauses per turn",
            },
        ],
    }


LEVEL_KEYS = ("concurrency", "audio_x", "ttfa_p50_ms", "audio_per_cpu_s", "threads")


def _slim_reference(result: dict) -> dict:
    """`voxgate bench --reference --json-output`: ours and the official per concurrency, and the ratios."""
    ref = result["reference"]
    return {
        "engine": {k: result.get("engine", {}).get(k) for k in ("source", "device", "dtype", "frames")},
        "reference": {
            "ours": [{k: r[k] for k in LEVEL_KEYS if k in r} for r in ref["ours"]],
            "official": [{k: r[k] for k in LEVEL_KEYS if k in r} for r in ref["official"]],
            "audio_x_ratio_ours_over_official": ref["audio_x_ratio_ours_over_official"],
            "audio_per_cpu_s_ratio_ours_over_official": ref.get("audio_per_cpu_s_ratio_ours_over_official", {}),
        },
    }


def _reference(runs: list[dict]) -> dict:
    headline = next((r for r in runs if r.get("headline")), runs[-1])  # the bars: the run marked so, or the last
    head = headline["result"]["reference"]
    cats = [f"c={r['concurrency']}" for r in head["ours"]]
    bars = [
        {"label": "voxgate (Qwen3Engine)", "y": [r["audio_x"] for r in head["ours"]]},
        {"label": "official qwen-tts", "y": [r["audio_x"] for r in head["official"]]},
    ]
    levels = sorted(
        {c for run in runs for c in run["result"]["reference"]["audio_x_ratio_ours_over_official"]}, key=int
    )
    labels = [run["label"] for run in runs]
    ratios = [
        {
            "label": f"c={c}",
            "x": labels,
            "y": [run["result"]["reference"]["audio_x_ratio_ours_over_official"].get(c) for run in runs],
        }
        for c in levels
    ]
    return {
        "title": "The engine against the official implementation (CPU, tiny checkpoint written by the official classes)",
        "panels": [
            {
                "title": f"audio seconds per wall second, {headline['label']}",
                "kind": "bars",
                "categories": cats,
                "series": bars,
                "y_log": True,
                "bar_labels": "%.3g",
                "x_label": "concurrent streams",
                "y_label": "audio×",
            },
            {
                "title": "ours / official, audio× (each run)",
                "categories": labels,
                "series": ratios,
                "rotate": 30,
                "y_label": "ratio",
                "hlines": [(1.0, "as fast as the official"), (3.0, "3× target")],
            },
        ],
    }


VOCODER_KEYS = ("shape", "backend", "batch", "step_frames", "ms_per_frame", "cpu_ms_per_frame", "audio_x")


def _slim_vocoder(result: dict) -> dict:
    """bench/vocoder_bench.py --json-output: its rows and threads."""
    return {
        "device": result.get("device"),
        "threads": result.get("threads"),
        "rows": [{k: r[k] for k in VOCODER_KEYS if k in r} for r in result["rows"]],
    }


def _vocoder(runs: list[dict]) -> dict:
    cells = []
    for run in runs:
        for r in run["result"]["rows"]:
            cell = f"batch {r['batch']}\npacket {r['step_frames']}"
            if cell not in cells:
                cells.append(cell)
    cpu, speed = [], []
    for run in runs:
        rows = run["result"]["rows"]
        for backend in dict.fromkeys(r["backend"] for r in rows):
            by_cell = {f"batch {r['batch']}\npacket {r['step_frames']}": r for r in rows if r["backend"] == backend}
            name = _label(run, backend, runs)
            cpu.append({"label": name, "y": [(by_cell.get(c) or {}).get("cpu_ms_per_frame") for c in cells]})
            speed.append({"label": name, "y": [(by_cell.get(c) or {}).get("audio_x") for c in cells]})
    return {
        "title": "Vocoder backends side by side (codec decoder, streaming, CPU)",
        "panels": [
            {
                "title": "process CPU per stream-frame (lower is better)",
                "kind": "bars",
                "categories": cells,
                "series": cpu,
                "y_label": "CPU ms per 80 ms frame",
            },
            {
                "title": "audio seconds per wall second (higher is better)",
                "kind": "bars",
                "categories": cells,
                "series": speed,
                "y_label": "audio×",
            },
        ],
    }


BARGE_KEYS = (
    "leg",
    "trials",
    "missed",
    "latency_p50_ms",
    "latency_p95_ms",
    "noise_s",
    "false_speech_starts",
    "false_barge_ins",
)


def _slim_barge_in(result: dict) -> dict:
    """tests/voice/probe_barge_in.py --out: one row per leg."""
    return {
        "config": result.get("config"),
        "results": [{k: r[k] for k in BARGE_KEYS if k in r} for r in result["results"]],
    }


def _barge_in(runs: list[dict]) -> dict:
    legs = list(dict.fromkeys(r["leg"] for run in runs for r in run["result"]["results"]))
    lat, false = [], []
    for run in runs:
        by_leg = {r["leg"]: r for r in run["result"]["results"]}
        for q in ("p50", "p95"):
            lat.append(
                {"label": _label(run, q, runs), "y": [(by_leg.get(leg) or {}).get(f"latency_{q}_ms") for leg in legs]}
            )
        false.append(
            {
                "label": _label(run, "false barge-ins", runs),
                "y": [(by_leg.get(leg) or {}).get("false_barge_ins") for leg in legs],
            }
        )
        false.append(
            {
                "label": _label(run, "missed barge-ins", runs),
                "y": [(by_leg.get(leg) or {}).get("missed") for leg in legs],
            }
        )
    names = [
        f"{leg}\nmissed {sum((next((r for r in run['result']['results'] if r['leg'] == leg), {}).get('missed') or 0) for run in runs)}"
        for leg in legs
    ]
    return {
        "title": "Barge-in by voice: caller speech onset to the agent's silence, per leg (VAD defaults)",
        "panels": [
            {
                "title": "latency (speech onset → first silent frame at the caller)",
                "kind": "bars",
                "categories": names,
                "series": lat,
                "bar_labels": "%.0f",
                "y_label": "ms",
                "hlines": [(250.0, "min_speech_ms: 250 ms of speech by design")],
            },
            {
                "title": "misses on speech, false barge-ins on noise and tones",
                "kind": "bars",
                "categories": legs,
                "series": false,
                "y_label": "count",
            },
        ],
    }


VAD_KEYS = ("backend", "calls", "seconds", "cpu_ms_per_call_s", "cores_at_n", "pass_ms_p50", "pass_ms_p95", "window_ms")


def _slim_vad(result: dict) -> dict:
    """bench/vad_bench.py --out: one row per backend and call count."""
    return {"results": [{k: r[k] for k in VAD_KEYS if k in r} for r in result["results"]]}


def _vad(runs: list[dict]) -> dict:
    cost, passes = [], []
    for run in runs:
        rows = run["result"]["results"]
        for backend in dict.fromkeys(r["backend"] for r in rows):
            mine = sorted((r for r in rows if r["backend"] == backend), key=lambda r: r["calls"])
            name, color = _label(run, backend, runs), f"C{len(cost) % 10}"
            xs = [r["calls"] for r in mine]
            cost.append({"label": name, "color": color, "x": xs, "y": [r["cpu_ms_per_call_s"] for r in mine]})
            passes.append({"label": f"{name} p95", "color": color, "x": xs, "y": [r.get("pass_ms_p95") for r in mine]})
            passes.append(
                {
                    "label": f"{name} p50",
                    "style": "^:",
                    "color": color,
                    "x": xs,
                    "y": [r.get("pass_ms_p50") for r in mine],
                }
            )
    windows = {r["backend"]: r["window_ms"] for run in runs for r in run["result"]["results"] if r.get("window_ms")}
    window_line = (
        [(min(windows.values()), " / ".join(f"{w:g} ms ({b})" for b, w in windows.items()) + " window")]
        if windows
        else []
    )
    return {
        "title": "The caller's voice: VAD cost per call, one batched pass for every call's window",
        "panels": [
            {
                "title": "CPU per second of one call's audio",
                "series": cost,
                "x_label": "concurrent calls",
                "y_label": "CPU ms per call-second",
            },
            {
                "title": "one pass for all calls (must stay under the window)",
                "series": passes,
                "y_log": True,
                "x_label": "concurrent calls",
                "y_label": "pass wall time (ms)",
                "hlines": window_line,
            },
        ],
    }


FIGURES = {
    "capacity": (_slim_capacity, _capacity),
    "loadtest": (_slim_loadtest, _loadtest),
    "turn_mode": (_slim_turn_mode, _turn_mode),
    "reference": (_slim_reference, _reference),
    "vocoder": (_slim_vocoder, _vocoder),
    "barge_in": (_slim_barge_in, _barge_in),
    "vad": (_slim_vad, _vad),
}


# ------------------------------------------------------------------ command line
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--from",
        dest="sources",
        action="append",
        default=[],
        metavar="DATA.json",
        help="a data file a bench wrote with --plot (repeat it to draw several runs of one figure as one)",
    )
    ap.add_argument("--out", help="the picture, .png or .svg (with --from)")
    ap.add_argument("--all", metavar="DIR", help="redraw every DIR/X.json as DIR/X.png")
    args = ap.parse_args(argv)
    try:
        if args.all:
            if args.sources or args.out:
                raise PlotError("--all DIR redraws a folder; give either it or --from/--out")
            drawn = sorted(Path(args.all).glob("*.json"))
            if not drawn:
                raise PlotError(f"--all {args.all}: no data files (*.json) there")
            for path in drawn:
                draw(load_data(path), path.with_suffix(".png"))
                print(f"{path.with_suffix('.png')} (from {path})")
            return 0
        if not args.sources or not args.out:
            raise PlotError("give --from DATA.json [--from …] and --out FILE.png, or --all DIR")
        out = check_target(args.out)
        data = load_data(*args.sources)
        beside = out.with_suffix(".json")
        if [Path(s).resolve() for s in args.sources] != [beside.resolve()]:  # the picture's own data beside it,
            beside.write_text(
                json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
            )  # so it redraws alone
        draw(data, out)
        print(f"{out} (from {', '.join(args.sources)})")
        return 0
    except PlotError as e:
        print(f"bench.plots: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
