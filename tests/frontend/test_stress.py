"""Russian stress with silero-stress: homographs, ё, formats, and torch's thread count left alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("silero_stress")

from tts.frontend import FrontendOptions, prepare_text  # noqa: E402
from tts.frontend.stress import add_stress  # noqa: E402


def test_homograph_zamok_by_context():
    out = add_stress("Старинный замок на горе. Повесьте замок на дверь.")
    assert "з+амок н" in out  # castle
    assert "зам+ок н" in out  # lock


def test_homograph_gotov_by_context():
    out = add_stress("Я уже готов. Он из готов.")
    assert "гот+ов" in out  # ready
    assert "г+отов" in out  # the Goths


def test_yo_is_restored():
    assert add_stress("Все ежи ели елку.") == "Всё еж+и +ели +ёлку."


def test_acute_format_puts_the_accent_after_the_vowel():
    out = add_stress("Повесьте замок.", fmt="acute")
    assert "замо\u0301к" in out
    assert "+" not in out


def test_one_vowel_words_are_unmarked_unless_asked():
    assert add_stress("Дом на горе.") == "Дом на гор+е."
    assert add_stress("Дом на горе.", single_vowel=True) == "Д+ом н+а гор+е."


def test_unknown_format_is_refused():
    with pytest.raises(ValueError):
        add_stress("Дом", fmt="caps")


def test_prepare_text_stresses_the_normalised_russian_only():
    opts = FrontendOptions(stress=True)
    ru = prepare_text("Замок на 3-м этаже.", "auto", opts)
    assert ru.normalized == "Замок на третьем этаже."
    assert ru.text == "Зам+ок на тр+етьем этаж+е."
    en = prepare_text("Lock on the 3rd floor.", "auto", opts)
    assert en.text == "Lock on the third floor."


def test_loading_the_model_leaves_torch_thread_count_unchanged():
    code = (
        "import torch; torch.set_num_threads(2); before = (torch.get_num_threads(), torch.get_num_interop_threads());"
        "from tts.frontend.stress import add_stress, is_loaded; assert not is_loaded();"
        "add_stress('Замок готов.'); assert is_loaded();"
        "print(before == (torch.get_num_threads(), torch.get_num_interop_threads()), torch.get_num_threads())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2]
    )
    assert out.stdout.split() == ["True", "2"], out.stderr


def test_without_the_homograph_model_homographs_stay_unmarked():
    out = add_stress("Повесьте замок на дверь.", homographs=False)
    assert "замок" in out  # left for the speech model to decide
    assert "Пов+есьте" in out


async def test_prepare_text_async_runs_stress_off_the_event_loop():
    import threading

    from tts.frontend import prepare_text_async
    from tts.frontend import stress as stress_mod

    seen = []
    real = stress_mod._load

    def spy():
        seen.append(threading.current_thread().name)
        return real()

    stress_mod._load = spy
    stress_mod._stressed.cache_clear()
    try:
        out = await prepare_text_async("Готов к 5 марта.", "ru", FrontendOptions(stress=True))
    finally:
        stress_mod._load = real
    assert out.text == "Гот+ов к п+ятому м+арта."
    assert out.normalized == "Готов к пятому марта."
    assert len(seen) == 1 and seen[0].startswith("silero-stress")
    plain = await prepare_text_async("Готов к 5 марта.", "ru", FrontendOptions())
    assert plain.text == "Готов к пятому марта."


def test_a_stress_from_the_lexicon_is_kept():
    opts = FrontendOptions(stress=True, lexicon={"ru": {"Ваганов": "Ваг+анов"}})
    assert prepare_text("Ваганов пришёл.", "ru", opts).text == "Ваг+анов приш+ёл."


def _stress_cases():
    from pathlib import Path

    rows = []
    for line in Path(__file__).with_name("stress_cases.tsv").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#") or line.startswith("input\t"):
            continue
        text, expected, note = line.split("\t")
        marks = [pytest.mark.xfail(strict=True, reason=note)] if note.startswith("known miss") else []
        rows.append(pytest.param(text, expected, id=note.replace(" ", "_")[:40], marks=marks))
    return rows


@pytest.mark.parametrize("text,expected", _stress_cases())
def test_stress_case_table(text, expected):
    assert add_stress(text) == expected
