"""Russian number words and noun agreement.

Number words come from our own tables (ru_numerals); noun forms from pymorphy3, imported
lazily: `tts/` must import on machines that have only torch and numpy.
Cases use pymorphy's grammemes: nomn gent datv accs ablt loct.
"""

from __future__ import annotations

import functools

from . import ru_numerals as numerals

CASES = ("nomn", "gent", "datv", "accs", "ablt", "loct")
_DIGITS = ("ноль", "один", "два", "три", "четыре", "пять", "шесть", "семь", "восемь", "девять")

# Counting forms that pymorphy's dictionary gives otherwise ("гигабайтов").
_GEN_PLURAL = {
    "гигабайт": "гигабайт",
    "мегабайт": "мегабайт",
    "килобайт": "килобайт",
    "терабайт": "терабайт",
    "мегабит": "мегабит",
    "гигабит": "гигабит",
    "килобит": "килобит",
    "грамм": "граммов",
    "килограмм": "килограммов",
    "миллиграмм": "миллиграммов",
    "ватт": "ватт",
    "киловатт": "киловатт",
    "вольт": "вольт",
    "ампер": "ампер",
}


_LOC2 = {"год"}  # "в году": the only locative-2 form our passes produce


@functools.lru_cache(maxsize=1)
def morph():
    """The pymorphy3 analyser, loaded once per process (about 0.15 s), or None if not installed."""
    try:
        import pymorphy3
    except ImportError:
        return None
    return pymorphy3.MorphAnalyzer()


def cardinal(n: int, case: str = "nomn", gender: str = "masc", animate: bool = False) -> str:
    if abs(n) >= numerals.MAX:
        return ("минус " if n < 0 else "") + " ".join(_DIGITS[int(d)] for d in str(abs(n)))
    return numerals.cardinal(n, case, gender if gender in ("masc", "femn", "neut") else "masc", animate)


def ordinal(n: int, case: str = "nomn", gender: str = "masc", plural: bool = False) -> str:
    if n >= numerals.MAX:
        return cardinal(n)
    return numerals.ordinal(n, case, gender if gender in ("masc", "femn", "neut") else "masc", plural)


_DENOMS = ("десят", "сот", "тысячн", "десятитысячн", "стотысячн", "миллионн")


_FRACTION_ENDINGS = {  # "целая", "десятая": adjectives that decline with the number before them
    "sing": {"nomn": "ая", "gent": "ой", "datv": "ой", "accs": "ую", "ablt": "ой", "loct": "ой"},
    "plur": {"nomn": "ых", "gent": "ых", "datv": "ым", "accs": "ых", "ablt": "ыми", "loct": "ых"},
}


def decimal(integer: str, fraction: str, case: str = "nomn") -> str:
    """'2', '5' -> 'две целых пять десятых' (fraction digits as written), declined in `case`."""
    whole = int(integer or "0")
    frac = int(fraction)
    k = min(len(fraction), len(_DENOMS))

    def part(n: int, stem: str) -> str:
        ending = _FRACTION_ENDINGS["sing" if _is_one(n) else "plur"][case]
        return f"{cardinal(n, case, 'femn')} {stem}{ending}"

    return f"{part(whole, 'цел')} {part(frac, _DENOMS[k - 1])}"


def one_and_half(gender: str, case: str = "nomn") -> str:
    """1,5 before a noun: полтора часа, полторы минуты, полутора часов."""
    if case in ("nomn", "accs"):
        return "полторы" if gender == "femn" else "полтора"
    return "полутора"


def _is_one(n: int) -> bool:
    return n % 10 == 1 and n % 100 != 11


def noun_number_for(n: int, case: str) -> tuple[str, str]:
    """The (case, number) a noun takes after the cardinal n in `case`: 5 -> (gent, plur)."""
    if _is_one(n):
        return case, "sing"
    if case in ("nomn", "accs"):
        return ("gent", "sing") if n % 10 in (2, 3, 4) and n % 100 not in (12, 13, 14) else ("gent", "plur")
    return case, "plur"


@functools.lru_cache(maxsize=4096)
def _lemma_parse(lemma: str):
    m = morph()
    if m is None:
        return None
    parses = m.parse(lemma)
    for p in parses:
        if "NOUN" in p.tag and p.normal_form == lemma:
            return p
    return parses[0]


@functools.lru_cache(maxsize=8192)
def inflect(lemma: str, case: str, number: str = "sing", after_in: bool = False) -> str:
    """`lemma` in the given case and number; `after_in` prefers 'году' over 'годе' after в/на."""
    if number == "plur" and case == "gent" and lemma in _GEN_PLURAL:
        return _GEN_PLURAL[lemma]
    p = _lemma_parse(lemma)
    if p is None:
        return lemma
    if after_in and case == "loct" and number == "sing" and lemma in _LOC2:
        loc2 = p.inflect({"loc2", "sing"})
        if loc2 is not None:
            return loc2.word
    form = p.inflect({case, number})
    return form.word if form is not None else lemma


def counted(n: int, lemma: str, case: str = "nomn", after_in: bool = False) -> str:
    """The noun that follows the cardinal n: (5, 'рубль') -> 'рублей'; an adjective before the
    noun ('квадратный метр') agrees: (2, ...) -> 'квадратных метра'."""
    c, number = noun_number_for(n, case)
    *adjectives, noun = lemma.split(" ")
    words = [
        inflect_adjective(
            a, c, "plur" if (c, number) == ("gent", "sing") and not _is_one(n) else number, gender_of(noun)
        )
        for a in adjectives
    ]
    return " ".join(words + [inflect(noun, c, number, after_in)])


@functools.lru_cache(maxsize=1024)
def inflect_adjective(lemma: str, case: str, number: str, gender: str) -> str:
    m = morph()
    if m is None:
        return lemma
    p = next((p for p in m.parse(lemma) if p.tag.POS == "ADJF"), None)
    if p is None:
        return lemma
    form = p.inflect({case, number} | ({gender} if number == "sing" else set()))
    return form.word if form is not None else lemma


_GENDER = {"евро": "masc", "кофе": "masc"}  # the dictionary says neuter; speech says "один евро"


def gender_of(lemma: str) -> str:
    if lemma in _GENDER:
        return _GENDER[lemma]
    p = _lemma_parse(lemma)
    if p is None:
        return "masc"
    for g in ("masc", "femn", "neut"):
        if g in p.tag:
            return g
    return "masc"


@functools.lru_cache(maxsize=8192)
def noun_readings(word: str) -> tuple[tuple[str, str, str, bool], ...]:
    """(case, number, gender, animate) readings of a word as a noun (or adjective), most likely first."""
    m = morph()
    if m is None:
        return ()
    out = []
    for p in m.parse(word):
        tag = p.tag
        if tag.POS not in ("NOUN", "ADJF", "NPRO") or tag.case is None:
            continue
        case = "loct" if tag.case in ("loc2", "loc1") else ("gent" if tag.case in ("gen2", "gen1") else tag.case)
        if case not in CASES:
            continue
        out.append((case, tag.number or "sing", tag.gender or "masc", tag.animacy == "anim"))
    return tuple(out)


@functools.lru_cache(maxsize=8192)
def is_adjective(word: str) -> bool:
    """Whether the likeliest reading of a word is an adjective or participle ("новых", "свободных")."""
    m = morph()
    if m is None:
        return False
    parses = m.parse(word)
    return bool(parses) and parses[0].tag.POS in ("ADJF", "PRTF")


def is_noun(word: str) -> bool:
    m = morph()
    return m is not None and any(p.tag.POS == "NOUN" and p.score > 0.2 for p in m.parse(word))
