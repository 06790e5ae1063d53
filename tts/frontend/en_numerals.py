"""English number words, US style ('one hundred five', no 'and'), written for voxgate."""

from __future__ import annotations

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen"
).split()
_TENS = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty", 6: "sixty", 7: "seventy", 8: "eighty", 9: "ninety"}
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (10**3, "thousand"))
_ORDINAL_WORDS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
MAX = 10**15


def _below_hundred(n: int) -> str:
    if n < 20:
        return _ONES[n]
    t, u = divmod(n, 10)
    return _TENS[t] + (f"-{_ONES[u]}" if u else "")


def _below_thousand(n: int) -> str:
    h, rest = divmod(n, 100)
    words = [f"{_ONES[h]} hundred"] if h else []
    if rest or not words:
        words.append(_below_hundred(rest))
    return " ".join(words)


def cardinal(n: int) -> str:
    if n < 0:
        return "minus " + cardinal(-n)
    if n >= MAX:
        raise ValueError(f"{n} is too large to say as a number")
    words = []
    for value, name in _SCALES:
        count, n = divmod(n, value)
        if count:
            words.append(f"{_below_thousand(count)} {name}")
    if n or not words:
        words.append(_below_thousand(n))
    return " ".join(words)


def ordinal(n: int) -> str:
    words = cardinal(n)
    head, sep, last = words.rpartition(" ")
    first, hyphen, unit = last.rpartition("-")
    if unit in _ORDINAL_WORDS:
        unit = _ORDINAL_WORDS[unit]
    elif unit.endswith("y"):
        unit = unit[:-1] + "ieth"
    else:
        unit += "th"
    return head + sep + first + hyphen + unit


def year(n: int) -> str:
    """1995 -> 'nineteen ninety-five', 1900 -> 'nineteen hundred', 1905 -> 'nineteen oh five',
    2005 -> 'two thousand five', 2024 -> 'twenty twenty-four'."""
    if not 1000 <= n <= 9999 or 2000 <= n <= 2009 or n % 1000 == 0:
        return cardinal(n)
    hi, lo = divmod(n, 100)
    if lo == 0:
        return f"{_below_hundred(hi)} hundred"
    if lo < 10:
        return f"{_below_hundred(hi)} oh {_ONES[lo]}"
    return f"{_below_hundred(hi)} {_below_hundred(lo)}"
