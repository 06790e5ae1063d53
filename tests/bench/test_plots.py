"""Benchmark pictures: each bench's `--plot` path on tiny input, the checked-in pictures against their data, and
docs/benchmarks.md against the files it names."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from bench import plots

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "benchmarks"
PAGE = ROOT / "docs" / "benchmarks.md"


def assert_drawn(picture: Path, kind: str, runs: int = 1) -> dict:
    """A bench's --plot output: the picture, its data beside it, and the picture drawn from exactly that data."""
    data = json.loads(picture.with_suffix(".json").read_text())
    assert data["figure"] == kind and len(data["runs"]) == runs
    for run in data["runs"]:
        assert run["command"] and run["machine"] and run["load"] and run["date"]
    assert picture.stat().st_size > 5000
    assert plots.embedded_hash(picture) == plots.data_hash(data)
    return data


# ------------------------------------------------------------------ each bench's plot path, tiny
def test_vocoder_bench_plots_a_tiny_run(tmp_path):
    from bench import vocoder_bench

    out = tmp_path / "voc.png"
    assert (
        vocoder_bench.main(
            [
                "--shape",
                "tiny",
                "--backends",
                "torch",
                "--batches",
                "1",
                "--steps",
                "1,2",
                "--reps",
                "1",
                "--plot",
                str(out),
            ]
        )
        == 0
    )
    data = assert_drawn(out, "vocoder")
    assert data["runs"][0]["command"].startswith("python -m bench.vocoder_bench --shape tiny")
    assert [(r["batch"], r["step_frames"]) for r in data["runs"][0]["result"]["rows"]] == [(1, 1), (1, 2)]


def test_voxgate_bench_reference_result_plots(tmp_path):
    """`voxgate bench --reference --plot`: the result shape engine_bench writes (the official run itself needs
    qwen-tts and minutes; tests/qwen3 covers it), slimmed to what the picture needs."""
    level = {"audio_x": 20.0, "ttfa_p50_ms": 12.0, "audio_per_cpu_s": 9.0, "rtf": 0.05, "keeps_up": True}
    result = {
        "engine": {"source": "/tmp/tiny", "device": "cpu", "dtype": "float32", "frames": 100, "memory": {}},
        "stages": [{"label": "short"}],
        "levels": [],
        "reference": {
            "ours": [{**level, "concurrency": 1}, {**level, "concurrency": 16, "audio_x": 80.0}],
            "official": [
                {"concurrency": 1, "audio_x": 4.0, "threads": 1},
                {"concurrency": 16, "audio_x": 16.0, "threads": 1},
            ],
            "official_runs": [],
            "audio_x_ratio_ours_over_official": {"1": 5.0, "16": 5.0},
            "audio_per_cpu_s_ratio_ours_over_official": {"1": 4.2, "16": 3.1},
        },
    }
    out = tmp_path / "ref.svg"
    plots.write_plot("reference", result, out, "voxgate bench --reference")
    data = assert_drawn(out, "reference")
    kept = data["runs"][0]["result"]
    assert "stages" not in kept and "rtf" not in kept["reference"]["ours"][0]  # only what the picture draws
    assert kept["reference"]["audio_x_ratio_ours_over_official"] == {"1": 5.0, "16": 5.0}


def test_barge_in_probe_rows_plot(tmp_path):
    """tests/voice/probe_barge_in.py --plot: its rows (the probe itself takes minutes of espeak-ng calls)."""
    rows = [
        {
            "leg": leg,
            "trials": 2,
            "missed": m,
            "latency_p50_ms": p,
            "latency_p95_ms": p + 20,
            "noise_s": 6,
            "false_speech_starts": 0,
            "false_barge_ins": 0,
        }
        for leg, m, p in (("twilio", 0, 330.0), ("native", 1, 280.0))
    ]
    out = tmp_path / "barge.png"
    plots.write_plot(
        "barge_in",
        {"config": {"barge_in": "defaults, mode vad"}, "results": rows},
        out,
        "python -m tests.voice.probe_barge_in",
    )
    assert [r["leg"] for r in assert_drawn(out, "barge_in")["runs"][0]["result"]["results"]] == ["twilio", "native"]


def test_runs_of_one_figure_combine_and_different_figures_do_not(tmp_path, capsys):
    for rate in (2, 40):
        summary = {"first_audio_ms_p50": 1000 / rate, "first_audio_ms_max": 1000 / rate, "gaps_per_turn": 0.0}
        plots.write_plot(
            "turn_mode",
            {"llm_rate": rate, "sentence": summary, "turn": summary, "rows": {}},
            tmp_path / f"r{rate}.png",
            f"voxgate bench --turn-mode --llm-rate {rate}",
            label=f"{rate} words/s",
        )
    out = tmp_path / "modes.png"
    assert (
        plots.main(["--from", str(tmp_path / "r2.json"), "--from", str(tmp_path / "r40.json"), "--out", str(out)]) == 0
    )
    assert [r["label"] for r in assert_drawn(out, "turn_mode", runs=2)["runs"]] == ["2 words/s", "40 words/s"]
    shutil.copy(DOCS / "barge-in.json", tmp_path / "other.json")
    assert (
        plots.main(["--from", str(tmp_path / "r2.json"), "--from", str(tmp_path / "other.json"), "--out", str(out)])
        == 2
    )
    assert "different figures" in capsys.readouterr().err
    assert plots.main(["--from", str(tmp_path / "r2.json"), "--out", str(tmp_path / "x.jpg")]) == 2
    assert ".png or .svg" in capsys.readouterr().err


def test_a_plot_that_cannot_be_drawn_fails_before_the_bench_runs(tmp_path, capsys):
    from gateway.cli import main as voxgate

    # no model, no run: the bad target is refused first (a bench of minutes must not end in a plotting error)
    assert voxgate(["bench", "--random-weights", "0.6b", "--reference", "--plot", str(tmp_path / "no" / "x.png")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert voxgate(["bench", "--random-weights", "0.6b", "--plot", str(tmp_path / "x.png")]) == 2
    assert "--reference or --turn-mode" in capsys.readouterr().err
    # the picture's data file must not overwrite the bench's own --json-output
    from bench import vocoder_bench

    with pytest.raises(SystemExit):
        vocoder_bench.main(
            ["--shape", "tiny", "--json-output", str(tmp_path / "v.json"), "--plot", str(tmp_path / "v.png")]
        )
    assert "also writes" in capsys.readouterr().err
    assert not (tmp_path / "v.json").exists()


# ------------------------------------------------------------------ the checked-in pictures and the page
def checked_in() -> list[Path]:
    return sorted(DOCS.glob("*.json"))


def test_every_checked_in_picture_is_drawn_from_its_data_file(tmp_path):
    """A picture redrawn from its data file carries that data's hash and has the same size as the checked-in one,
    so editing a data file without redrawing (python -m bench.plots --all docs/benchmarks) fails here."""
    from PIL import Image

    assert len(checked_in()) >= 6
    assert {p.stem for p in DOCS.glob("*.png")} == {p.stem for p in checked_in()}  # no picture without its data
    for data_path in checked_in():
        data = json.loads(data_path.read_text())
        for run in data["runs"]:
            assert run["date"] and run["machine"] and run["load"] and run["command"], (data_path.name, run["label"])
        picture = data_path.with_suffix(".png")
        assert plots.embedded_hash(picture) == plots.data_hash(data), (
            f"{picture.name} is not drawn from {data_path.name}"
        )
        fresh = plots.draw(plots.load_data(data_path), tmp_path / picture.name)
        with Image.open(picture) as old, Image.open(fresh) as new:
            assert old.size == new.size, picture.name
        assert plots.embedded_hash(fresh) == plots.embedded_hash(picture)


def test_the_hash_check_sees_a_changed_number(tmp_path):
    data = plots.load_data(DOCS / "capacity.json")
    data["runs"][0]["result"]["levels"][0]["lateness_p99_ms"] += 1.0
    assert plots.data_hash(data) != plots.embedded_hash(DOCS / "capacity.png")


def test_the_benchmarks_page_shows_every_picture_and_names_only_files_that_exist():
    text = PAGE.read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    assert {Path(i).name for i in images} >= {p.with_suffix(".png").name for p in checked_in()}
    assert len(images) >= 6
    for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text):  # every relative link and image
        if not re.match(r"[a-z]+://", target):
            assert (PAGE.parent / target).exists(), f"docs/benchmarks.md links {target}, which does not exist"
    for name in re.findall(r"docs/benchmarks/[\w.-]+", text):  # files named in commands
        assert (ROOT / name).exists(), name
    # every picture has its command under it: `--plot docs/benchmarks/X.png` or a redraw into it
    for data_path in checked_in():
        assert f"docs/benchmarks/{data_path.stem}.png" in text, data_path.stem


@pytest.mark.parametrize("kind", sorted(plots.FIGURES))
def test_every_figure_kind_has_a_checked_in_example(kind):
    assert kind in {json.loads(p.read_text())["figure"] for p in checked_in()}


def test_the_pages_voxgate_commands_parse():
    """Every voxgate command the page shows (`voxgate bench … --plot`, `voxgate loadtest …`, the full record's) parses
    with today's CLI: a renamed flag fails here."""
    from gateway.cli import build_parser

    lines, commands = PAGE.read_text().splitlines(), []
    for i, line in enumerate(lines):
        if re.match(r"\s{4,}(\w+=\S+ )*(\.venv/bin/)?voxgate ", line):
            text, j = line.strip(), i
            while text.endswith("\\"):
                j += 1
                text = text[:-1] + " " + lines[j].strip()
            commands.append(text)
    assert sum("--plot docs/benchmarks/" in c for c in commands) >= 3
    for command in commands:
        command = re.sub(r"\s\[[^\]]*\]", "", re.sub(r"\s+#.*$", "", command)).rstrip(
            "& "
        )  # [--optional …], comments, &
        words = [w for w in shlex.split(command) if not re.match(r"\w+=", w)]
        build_parser().parse_args(words[1:])  # SystemExit on an unknown flag


def test_vad_bench_plots_a_tiny_run(tmp_path):
    from bench import vad_bench

    out = tmp_path / "vad.png"
    assert vad_bench.main(["--calls", "2", "--seconds", "0.5", "--backend", "webrtc", "--plot", str(out)]) == 0
    (row,) = assert_drawn(out, "vad")["runs"][0]["result"]["results"]
    assert row["backend"] == "webrtc" and row["calls"] == 2 and row["cpu_ms_per_call_s"] > 0


def test_the_pages_python_bench_commands_name_flags_their_tool_has():
    """`python -m bench.x --flag …` on the page: each flag is one the tool's source defines (its argparse), so a
    renamed flag fails here without running the bench."""
    checked, lines = 0, PAGE.read_text().splitlines()
    for i, line in enumerate(lines):
        while line.endswith("\\") and i + 1 < len(lines):  # continuation lines
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        m = re.match(
            r"\s{4,}(?:\w+=\S+ )*(?:nice -n \d+ )?(?:PYTHONPATH=\S+ )?(?:\.venv/bin/)?python (?:-m (\S+)|(\S+\.py))(.*)",
            line,
        )
        if not m:
            continue
        source = ROOT / (m.group(2) or m.group(1).replace(".", "/") + ".py")
        if not source.is_file():
            source = source.with_suffix("") / "__main__.py"  # a package run with -m
        assert source.is_file(), f"docs/benchmarks.md runs {m.group(1) or m.group(2)}, which does not exist"
        text = "".join(
            p.read_text() for p in ([source] if source.name != "__main__.py" else source.parent.glob("*.py"))
        )
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", m.group(3)):
            assert f'"{flag}"' in text, f"{source.relative_to(ROOT)} has no {flag} (docs/benchmarks.md: {line.strip()})"
        checked += 1
    assert checked >= 15
