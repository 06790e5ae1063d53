"""Normalisation: the case table (tests/frontend/cases.tsv), language pick, lexicon, CLI."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tts.frontend import FrontendOptions, apply_lexicon, detect_language, normalize, prepare_text
from tts.frontend.cli import normalize_main

CASES_PATH = Path(__file__).with_name("cases.tsv")
HELDOUT_PATHS = [Path(__file__).with_name(f"cases_heldout{n}.tsv") for n in ("", "2", "3")]


def load_cases(path: Path = CASES_PATH) -> list[tuple[str, str, str, str]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#") or line.startswith("lang\t"):
            continue
        lang, category, text, expected = line.split("\t")
        rows.append((lang, category, text, expected))
    return rows


def canon(s: str) -> str:
    """Words only: lowercase, ё→е, punctuation and hyphens as spaces."""
    s = s.lower().replace("ё", "е")
    return " ".join(re.sub(r"[^\w+]+|_", " ", s).split())


CASES = load_cases()
HELDOUT = [case for path in HELDOUT_PATHS for case in load_cases(path)]


def test_case_table_is_large_enough():
    assert len(CASES) >= 150
    assert {lang for lang, *_ in CASES} == {"ru", "en"}


@pytest.mark.parametrize("lang,category,text,expected", CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_case_table(lang, category, text, expected):
    assert canon(normalize(text, lang)) == canon(expected)


@pytest.mark.parametrize(
    "lang,category,text,expected", HELDOUT, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(HELDOUT)]
)
def test_heldout_table(lang, category, text, expected):
    assert canon(normalize(text, lang)) == canon(expected)


# ------------------------------------------------------------------ punctuation survives
def test_sentence_punctuation_is_kept_for_prosody():
    assert normalize("Встреча в 10:30, потом обед.", "ru") == "Встреча в десять тридцать, потом обед."
    assert normalize("Ехать 3 ч. Потом отдых.", "ru") == "Ехать три часа. Потом отдых."


def test_abbreviation_before_a_name_does_not_end_the_sentence():
    assert normalize("Meet Dr. Smith.", "en") == "Meet doctor Smith."
    assert normalize("Парк им. Горького.", "ru") == "Парк имени Горького."
    assert normalize("Фрукты и т.д. Потом", "ru") == "Фрукты и так далее. Потом"


def test_text_without_numbers_is_unchanged():
    for text, lang in (("Привет, как дела?", "ru"), ("Hello there, how are you?", "en")):
        assert normalize(text, lang) == text


def test_other_languages_pass_through():
    assert normalize("Guten Tag 5", "de") == "Guten Tag 5"


# ------------------------------------------------------------------ language and lexicon
@pytest.mark.parametrize(
    "text,lang",
    [
        ("Привет", "ru"),
        ("Купил iPhone 15 Pro Max", "ru"),
        ("Hello 5", "en"),
        ("12345", "en"),
        ("你好", "zh"),
        ("こんにちは", "ja"),
        ("안녕하세요", "ko"),
    ],
)
def test_language_is_picked_by_script(text, lang):
    assert detect_language(text) == lang


def test_auto_language_picks_the_normaliser_per_chunk():
    assert prepare_text("Это 5 книг.").text == "Это пять книг."
    assert prepare_text("That is 5 books.").text == "That is five books."
    assert prepare_text("That is 5 books.").language == "en"


def test_lexicon_applies_before_normalisation():
    options = FrontendOptions(
        lexicon={"ru": {"ГИБДД": "гэ и бэ дэ дэ", "5G": "пять джи"}, "*": {"voxgate": "воксгейт"}}
    )
    out = prepare_text("Сеть 5G и ГИБДД, voxgate, 5 раз.", "ru", options)
    assert out.text == "Сеть пять джи и гэ и бэ дэ дэ, воксгейт, пять раз."


def test_lexicon_key_case():
    entries = {"IT": "ай ти", "wifi": "вай фай"}
    assert apply_lexicon("IT и it, WiFi и wifi", entries) == "ай ти и it, вай фай и вай фай"


def test_normalize_off_passes_text_through():
    assert prepare_text("Это 5 книг.", "ru", FrontendOptions(normalize=False)).text == "Это 5 книг."


# ------------------------------------------------------------------ CLI
def test_cli_prints_the_spoken_form(capsys):
    rc = normalize_main(argparse.Namespace(lang="ru", stress=False, text="Скидка 15% до 5 марта."))
    assert rc == 0
    assert capsys.readouterr().out.strip() == "Скидка пятнадцать процентов до пятого марта."


def test_cli_refuses_empty_text(capsys):
    assert normalize_main(argparse.Namespace(lang="auto", stress=False, text="  ")) == 2
    assert "empty_text" in capsys.readouterr().err


def test_voxgate_normalize_command_runs():
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "normalize", "--lang", "en", "It costs $20."],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "It costs twenty dollars."


def test_frontend_imports_without_its_heavy_dependencies():
    code = (
        "import sys, tts.frontend, tts.frontend.stress;"
        "bad = [m for m in ('num2words', 'pymorphy3', 'silero_stress', 'ru_normalizr') if m in sys.modules];"
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2]
    )
    assert out.stdout.strip() == "[]", out.stderr


# ------------------------------------------------------------------ robustness
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_ATOMS = [
    "5",
    "21",
    "3,5",
    "3.5",
    "10:30",
    "1990",
    "г.",
    "руб.",
    "₽",
    "$",
    "€",
    "%",
    "-",
    "–",
    "+",
    "/",
    "(",
    ":",
    ".",
    ",",
    "№",
    "°C",
    "км",
    "ч",
    "млн",
    "тыс.",
    "1-й",
    "XX",
    "в.",
    "в",
    "с",
    "до",
    "марта",
    "года",
    "книги",
    "Mr.",
    "5pm",
    "March",
    "1st",
    "USB",
    "СБП",
    "123-45-67",
    "+7",
    "800",
    "12.04.1961",
    "2024-03-05",
    "1/2",
    "=",
    "1,000",
    "12 345",
    "99999999999999999999",
    "0,0",
    "25:00",
    "31.13.2020",
    " ",
    "\n",
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_ATOMS), max_size=12).map(" ".join), st.sampled_from(["ru", "en"]))
def test_normalisers_never_raise(text, lang):
    assert isinstance(normalize(text, lang), str)


def test_a_normaliser_failure_speaks_the_text_as_written(monkeypatch, caplog):
    import tts.frontend as frontend

    def broken(text, lang):
        raise RuntimeError("bug")

    monkeypatch.setattr(frontend, "normalize", broken)
    assert frontend.prepare_text("Это 5 книг.", "ru").text == "Это 5 книг."
    assert "failed" in caplog.text


def test_very_long_numbers_are_read_digit_by_digit():
    assert normalize("Карта 12345678901234567", "ru").endswith(
        "один два три четыре пять шесть семь восемь девять ноль один два три четыре пять шесть семь"
    )


def test_markdown_and_emoji_are_not_spoken():
    out = prepare_text("**Важно:** оплатите до 5 марта 😊\n- пункт 1\n# Итог", "ru").text
    assert out == "Важно: оплатите до пятого марта\nпункт один\nИтог"
    assert (
        prepare_text("Use `pip` and *really* check 5*3 🎉.", "en").text == "Use pip and really check five times three."
    )


def test_years_in_headings_and_list_items_are_read_as_years():
    out = prepare_text(
        "# 2024 Roadmap\n- 1998: founded in Ohio\n- 2013 — first office\n1250 people signed up.", "en"
    ).text
    assert (
        out == "twenty twenty-four Roadmap\nnineteen ninety-eight: founded in Ohio\ntwenty thirteen — first office\n"
        "one thousand two hundred fifty people signed up."
    )
    assert normalize("From 1990 to 2010 prices doubled.", "en") == "From nineteen ninety to twenty ten prices doubled."
    assert (
        normalize("From 1500 to 2000 people came.", "en")
        == "From one thousand five hundred to two thousand people came."
    )


def test_a_chunk_without_letters_takes_the_fallback_language():
    assert detect_language("7.") == "en"
    assert prepare_text("7.", fallback_language="ru").text == "семь."
    assert prepare_text("7.", fallback_language="ru").language == "ru"
    assert prepare_text("Seven 7.", fallback_language="ru").language == "en"


def test_language_tags_are_reduced_to_the_language():
    assert prepare_text("Это 5 книг.", "ru-RU").text == "Это пять книг."
    assert prepare_text("That is 5 books.", "EN").language == "en"
