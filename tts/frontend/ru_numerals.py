"""Russian numerals in every case and gender, written for voxgate (no dependency).

`cardinal(1500, "gent")` -> "тысячи пятисот"; `ordinal(2024, "loct")` -> "две тысячи двадцать
четвёртом". Cases are pymorphy's grammemes: nomn gent datv accs ablt loct. A compound
cardinal declines every word; in an ordinal only the last word is ordinal. A leading
"одна тысяча" is said "тысяча".
"""

from __future__ import annotations

_CASES = ("nomn", "gent", "datv", "accs", "ablt", "loct")


def _row(words: str) -> dict[str, str]:
    return dict(zip(_CASES, words.split()))


# 0..19 in each case (accusative: the inanimate form; 1 and 2 by gender below)
_UNITS = [
    _row("ноль ноля нолю ноль нолём ноле"),
    None,  # один: by gender
    None,  # два: by gender
    _row("три трёх трём три тремя трёх"),
    _row("четыре четырёх четырём четыре четырьмя четырёх"),
] + [
    _row(f"{n} {s}и {s}и {n} {i} {s}и")
    for n, s, i in (
        ("пять", "пят", "пятью"),
        ("шесть", "шест", "шестью"),
        ("семь", "сем", "семью"),
        ("восемь", "восьм", "восемью"),
        ("девять", "девят", "девятью"),
        ("десять", "десят", "десятью"),
        ("одиннадцать", "одиннадцат", "одиннадцатью"),
        ("двенадцать", "двенадцат", "двенадцатью"),
        ("тринадцать", "тринадцат", "тринадцатью"),
        ("четырнадцать", "четырнадцат", "четырнадцатью"),
        ("пятнадцать", "пятнадцат", "пятнадцатью"),
        ("шестнадцать", "шестнадцат", "шестнадцатью"),
        ("семнадцать", "семнадцат", "семнадцатью"),
        ("восемнадцать", "восемнадцат", "восемнадцатью"),
        ("девятнадцать", "девятнадцат", "девятнадцатью"),
    )
]
_ONE = {
    "masc": _row("один одного одному один одним одном"),
    "femn": _row("одна одной одной одну одной одной"),
    "neut": _row("одно одного одному одно одним одном"),
}
_TWO = {
    "masc": _row("два двух двум два двумя двух"),
    "femn": _row("две двух двум две двумя двух"),
    "neut": _row("два двух двум два двумя двух"),
}
_TENS = {
    2: _row("двадцать двадцати двадцати двадцать двадцатью двадцати"),
    3: _row("тридцать тридцати тридцати тридцать тридцатью тридцати"),
    4: _row("сорок сорока сорока сорок сорока сорока"),
    5: _row("пятьдесят пятидесяти пятидесяти пятьдесят пятьюдесятью пятидесяти"),
    6: _row("шестьдесят шестидесяти шестидесяти шестьдесят шестьюдесятью шестидесяти"),
    7: _row("семьдесят семидесяти семидесяти семьдесят семьюдесятью семидесяти"),
    8: _row("восемьдесят восьмидесяти восьмидесяти восемьдесят восемьюдесятью восьмидесяти"),
    9: _row("девяносто девяноста девяноста девяносто девяноста девяноста"),
}
_HUNDREDS = {
    1: _row("сто ста ста сто ста ста"),
    2: _row("двести двухсот двумстам двести двумястами двухстах"),
    3: _row("триста трёхсот трёмстам триста тремястами трёхстах"),
    4: _row("четыреста четырёхсот четырёмстам четыреста четырьмястами четырёхстах"),
    5: _row("пятьсот пятисот пятистам пятьсот пятьюстами пятистах"),
    6: _row("шестьсот шестисот шестистам шестьсот шестьюстами шестистах"),
    7: _row("семьсот семисот семистам семьсот семьюстами семистах"),
    8: _row("восемьсот восьмисот восьмистам восемьсот восемьюстами восьмистах"),
    9: _row("девятьсот девятисот девятистам девятьсот девятьюстами девятистах"),
}
# scale nouns: (gender, singular forms, plural forms)
_SCALES = [
    (
        10**12,
        "masc",
        _row("триллион триллиона триллиону триллион триллионом триллионе"),
        _row("триллионы триллионов триллионам триллионы триллионами триллионах"),
    ),
    (
        10**9,
        "masc",
        _row("миллиард миллиарда миллиарду миллиард миллиардом миллиарде"),
        _row("миллиарды миллиардов миллиардам миллиарды миллиардами миллиардах"),
    ),
    (
        10**6,
        "masc",
        _row("миллион миллиона миллиону миллион миллионом миллионе"),
        _row("миллионы миллионов миллионам миллионы миллионами миллионах"),
    ),
    (
        10**3,
        "femn",
        _row("тысяча тысячи тысяче тысячу тысячей тысяче"),
        _row("тысячи тысяч тысячам тысячи тысячами тысячах"),
    ),
]
MAX = 10**15


def _is_one(n: int) -> bool:
    return n % 10 == 1 and n % 100 != 11


def _is_few(n: int) -> bool:
    return n % 10 in (2, 3, 4) and n % 100 not in (12, 13, 14)


def _below_thousand(n: int, case: str, gender: str, animate: bool) -> list[str]:
    words = []
    h, rest = divmod(n, 100)
    if h:
        words.append(_HUNDREDS[h][case])
    if rest >= 20:
        t, rest = divmod(rest, 10)
        words.append(_TENS[t][case])
    if rest or not words:
        words.append(_unit(rest, case, gender, animate and n < 5 or animate and rest == 1))
    return words


def _unit(n: int, case: str, gender: str, animate: bool) -> str:
    if n == 1:
        forms = _ONE[gender]
        return forms["gent"] if animate and case == "accs" and gender == "masc" else forms[case]
    if n == 2:
        forms = _TWO[gender]
    else:
        forms = _UNITS[n]
    if animate and case == "accs" and n in (2, 3, 4):
        return forms["gent"]
    return forms[case]


def _scale_noun(count: int, case: str, sing: dict[str, str], plur: dict[str, str]) -> str:
    if _is_one(count):
        return sing[case]
    if case in ("nomn", "accs"):
        return sing["gent"] if _is_few(count) else plur["gent"]
    return plur[case]


def cardinal(n: int, case: str = "nomn", gender: str = "masc", animate: bool = False) -> str:
    """Words for the integer n (|n| < 10**15) in the given case and gender."""
    if n < 0:
        return "минус " + cardinal(-n, case, gender, animate)
    if n >= MAX:
        raise ValueError(f"{n} is too large to say as a number")
    words: list[str] = []
    for value, scale_gender, sing, plur in _SCALES:
        count, n = divmod(n, value)
        if count:
            group = _below_thousand(count, case, scale_gender, False)
            if count == 1 and value == 1000 and not words:
                group = []  # "тысяча пятьсот", not "одна тысяча пятьсот"
            words += group + [_scale_noun(count, case, sing, plur)]
    if n or not words:
        words += _below_thousand(n, case, gender, animate)
    return " ".join(words)


# ordinal stems: (stem, stressed ending?) — второй/шестой take -ой, the rest -ый; третий is soft
_ORD_UNITS = {
    0: ("нулев", True),
    1: ("перв", False),
    2: ("втор", True),
    3: ("трет", None),
    4: ("четвёрт", False),
    5: ("пят", False),
    6: ("шест", True),
    7: ("седьм", True),
    8: ("восьм", True),
    9: ("девят", False),
    10: ("десят", False),
    11: ("одиннадцат", False),
    12: ("двенадцат", False),
    13: ("тринадцат", False),
    14: ("четырнадцат", False),
    15: ("пятнадцат", False),
    16: ("шестнадцат", False),
    17: ("семнадцат", False),
    18: ("восемнадцат", False),
    19: ("девятнадцат", False),
}
_ORD_TENS = {
    2: ("двадцат", False),
    3: ("тридцат", False),
    4: ("сороков", True),
    5: ("пятидесят", False),
    6: ("шестидесят", False),
    7: ("семидесят", False),
    8: ("восьмидесят", False),
    9: ("девяност", False),
}
_ORD_HUNDREDS = {
    1: "сот",
    2: "двухсот",
    3: "трёхсот",
    4: "четырёхсот",
    5: "пятисот",
    6: "шестисот",
    7: "семисот",
    8: "восьмисот",
    9: "девятисот",
}
_ORD_SCALES = {10**3: "тысячн", 10**6: "миллионн", 10**9: "миллиардн", 10**12: "триллионн"}

_HARD = {
    "masc": _row("ый ого ому ый ым ом"),
    "femn": _row("ая ой ой ую ой ой"),
    "neut": _row("ое ого ому ое ым ом"),
    "plur": _row("ые ых ым ые ыми ых"),
}
_SOFT = {  # третий
    "masc": _row("ий ьего ьему ий ьим ьем"),
    "femn": _row("ья ьей ьей ью ьей ьей"),
    "neut": _row("ье ьего ьему ье ьим ьем"),
    "plur": _row("ьи ьих ьим ьи ьими ьих"),
}


def _ending(stressed: bool | None, case: str, gender: str, plural: bool) -> str:
    key = "plur" if plural else gender
    if stressed is None:
        return _SOFT[key][case]
    ending = _HARD[key][case]
    if stressed and ending == "ый":
        return "ой"
    return ending


def _fused_count(count: int) -> str:
    """The count fused into a round ordinal: 2000 -> 'двух' + 'тысячный', 300000 -> 'трёхсот'."""
    if count == 1:
        return ""
    words = _below_thousand(count, "gent", "masc", False)
    fused = {"одного": "одно", "ста": "сто", "девяноста": "девяносто"}  # the rest fuse in the genitive
    return "".join(fused.get(w, w) for w in words)


def ordinal(n: int, case: str = "nomn", gender: str = "masc", plural: bool = False) -> str:
    """Words for the ordinal of n ('двадцать первом'); accusative in the inanimate form."""
    if n < 0:
        return "минус " + ordinal(-n, case, gender, plural)
    if n >= MAX:
        raise ValueError(f"{n} is too large to say as an ordinal")
    if n == 0:
        stem, stressed = _ORD_UNITS[0]
        return stem + _ending(stressed, case, gender, plural)
    # the last non-zero part becomes the ordinal; everything before it stays a nominative cardinal
    for value in (10**12, 10**9, 10**6, 10**3):
        if n % value == 0:
            count, head = n // value % 1000, n - n % (value * 1000)
            prefix = cardinal(head) + " " if head else ""
            return prefix + _fused_count(count) + _ORD_SCALES[value] + _ending(False, case, gender, plural)
    head, low = n - n % 100, n % 100
    if low == 0:
        h = n // 100 % 10
        head = n - n % 1000
        stem, stressed = _ORD_HUNDREDS[h], False
    elif low < 20:
        stem, stressed = _ORD_UNITS[low]
    elif low % 10 == 0:
        stem, stressed = _ORD_TENS[low // 10]
    else:
        head = n - n % 10
        stem, stressed = _ORD_UNITS[low % 10]
    prefix = cardinal(head) + " " if head else ""
    return prefix + stem + _ending(stressed, case, gender, plural)
