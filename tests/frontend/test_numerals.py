"""Our number words: spot checks of forms people get wrong, and num2words (LGPL, test-only) as an
oracle where it is right (inanimate cardinals, ordinals below 1000, US-style English)."""

from __future__ import annotations

import random
import re

import pytest

from tts.frontend import en_numerals as en
from tts.frontend import ru_numerals as ru


@pytest.mark.parametrize(
    "n,case,gender,animate,words",
    [
        (1500, "nomn", "masc", False, "тысяча пятьсот"),
        (1500, "gent", "masc", False, "тысячи пятисот"),
        (1000, "accs", "masc", False, "тысячу"),
        (21, "gent", "femn", False, "двадцати одной"),
        (2, "ablt", "masc", False, "двумя"),
        (300, "gent", "masc", False, "трёхсот"),
        (1_000_000, "nomn", "femn", False, "один миллион"),  # the number agrees with миллион, not the noun
        (1_000_001, "nomn", "femn", False, "один миллион одна"),
        (146_000_000, "nomn", "masc", False, "сто сорок шесть миллионов"),
        (2, "accs", "masc", True, "двух"),  # вижу двух котов
        (22, "accs", "masc", True, "двадцать два"),  # compound: вижу двадцать два кота
        (1, "accs", "neut", True, "одно"),  # вижу одно животное
        (1, "accs", "masc", True, "одного"),
        (-5, "nomn", "masc", False, "минус пять"),
    ],
)
def test_russian_cardinal_forms(n, case, gender, animate, words):
    assert ru.cardinal(n, case, gender, animate) == words


@pytest.mark.parametrize(
    "n,case,gender,plural,words",
    [
        (2024, "loct", "masc", False, "две тысячи двадцать четвёртом"),
        (3, "nomn", "femn", False, "третья"),
        (3, "gent", "masc", False, "третьего"),
        (1990, "loct", "masc", True, "тысяча девятьсот девяностых"),
        (2000, "loct", "masc", False, "двухтысячном"),
        (21000, "nomn", "masc", False, "двадцатиоднотысячный"),
        (100000, "nomn", "masc", False, "стотысячный"),
        (1_002_000, "nomn", "masc", False, "один миллион двухтысячный"),
        (40, "gent", "neut", False, "сорокового"),
        (2, "nomn", "masc", False, "второй"),
    ],
)
def test_russian_ordinal_forms(n, case, gender, plural, words):
    assert ru.ordinal(n, case, gender, plural) == words


def test_too_large_numbers_are_refused():
    with pytest.raises(ValueError):
        ru.cardinal(ru.MAX)
    with pytest.raises(ValueError):
        en.cardinal(en.MAX)


@pytest.mark.parametrize(
    "n,words",
    [
        (0, "zero"),
        (105, "one hundred five"),
        (12345, "twelve thousand three hundred forty-five"),
        (1_000_000, "one million"),
        (21, "twenty-one"),
    ],
)
def test_english_cardinals(n, words):
    assert en.cardinal(n) == words


@pytest.mark.parametrize(
    "n,words",
    [
        (1, "first"),
        (12, "twelfth"),
        (20, "twentieth"),
        (23, "twenty-third"),
        (100, "one hundredth"),
        (101, "one hundred first"),
    ],
)
def test_english_ordinals(n, words):
    assert en.ordinal(n) == words


@pytest.mark.parametrize(
    "n,words",
    [
        (1995, "nineteen ninety-five"),
        (1900, "nineteen hundred"),
        (1905, "nineteen oh five"),
        (2005, "two thousand five"),
        (2010, "twenty ten"),
        (2024, "twenty twenty-four"),
    ],
)
def test_english_years(n, words):
    assert en.year(n) == words


# ------------------------------------------------------------------ oracle
_N2W_CASE = {
    "nomn": "nominative",
    "gent": "genitive",
    "datv": "dative",
    "accs": "accusative",
    "ablt": "instrumental",
    "loct": "prepositional",
}
_N2W_GENDER = {"masc": "m", "femn": "f", "neut": "n"}


def _sample() -> list[int]:
    rng = random.Random(7)
    return list(range(0, 1200)) + [rng.randint(0, 999_999) for _ in range(400)]


def test_russian_cardinals_agree_with_num2words():
    num2words = pytest.importorskip("num2words").num2words
    for n in _sample():
        for case in _N2W_CASE:
            for gender in _N2W_GENDER:
                theirs = num2words(n, lang="ru", case=_N2W_CASE[case], gender=_N2W_GENDER[gender], animate=False)
                if 1000 <= n < 2000:
                    theirs = re.sub(r"^(одна|одной|одну) (?=тысяч)", "", theirs)
                assert ru.cardinal(n, case, gender) == theirs, (n, case, gender)


def test_russian_ordinals_below_a_thousand_agree_with_num2words():
    num2words = pytest.importorskip("num2words").num2words
    for n in range(0, 1000, 7):
        for case in _N2W_CASE:
            for gender in _N2W_GENDER:
                for plural in (False, True):
                    theirs = num2words(
                        n,
                        lang="ru",
                        to="ordinal",
                        case=_N2W_CASE[case],
                        gender=_N2W_GENDER[gender],
                        plural=plural,
                        animate=False,
                    )
                    assert ru.ordinal(n, case, gender, plural) == theirs, (n, case, gender, plural)


def test_english_numbers_agree_with_num2words_us_style():
    num2words = pytest.importorskip("num2words").num2words

    def us(words: str) -> str:
        return re.sub(r"\band\s+", "", words.replace(",", ""))

    rng = random.Random(3)
    for n in list(range(0, 1200)) + [rng.randint(0, 10**12) for _ in range(400)]:
        assert en.cardinal(n) == us(num2words(n, lang="en"))
        assert en.ordinal(n) == us(num2words(n, lang="en", to="ordinal"))
