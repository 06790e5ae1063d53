"""English text to spoken words: numbers (US style, no 'and'), ordinals, dates and years,
times, money, percentages, phone numbers, ranges, units, abbreviations, acronyms.

Number words come from en_numerals; the passes run most specific first.
"""

from __future__ import annotations

import re

from . import en_numerals as numerals

_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTH_ABBR = {m[:3]: m for m in _MONTHS} | {"sept": "september"}
_MONTH_RE = r"(?:" + "|".join(_MONTHS + sorted(_MONTH_ABBR, key=len, reverse=True)) + r")\.?"
_NUM = r"\d{1,3}(?:,\d{3})+(?!\d)|\d+"


def cardinal(n: int) -> str:
    if n < 0:
        return "minus " + cardinal(-n)
    if n >= numerals.MAX:  # ids and card numbers: digit by digit
        return _digits(str(n))
    return numerals.cardinal(n)


def ordinal(n: int) -> str:
    return cardinal(n) if n >= numerals.MAX else numerals.ordinal(n)


def year(n: int) -> str:
    return numerals.year(n)


def _to_int(num: str) -> int:
    return int(num.replace(",", ""))


def decimal(num: str) -> str:
    whole, _, frac = num.replace(",", "").partition(".")
    words = cardinal(int(whole or "0"))
    if frac:
        words += " point " + " ".join(_DIGITS[int(d)] for d in frac)
    return words


_DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def _digits(g: str) -> str:
    return " ".join(_DIGITS[int(d)] for d in g)


def _month(word: str) -> str:
    w = word.lower().rstrip(".")
    return _MONTH_ABBR.get(w, w)


def _stop(s: str, end: int, token: str) -> str:
    if token.endswith(".") and re.match(r"\s*(?:$|[A-Z\"])", s[end:]):
        return "."
    return ""


# ------------------------------------------------------------------ passes
def _phones(s: str) -> str:
    def nanp(m: re.Match) -> str:
        lead, area, mid, last = m.groups()
        parts = []
        if lead:
            parts.append(("plus " if lead.startswith("+") else "") + _digits(re.sub(r"\D", "", lead)))
        area_words = (
            cardinal(int(area)) if lead and area in ("800", "888", "877", "866", "855", "844") else _digits(area)
        )
        parts += [area_words, _digits(mid), _digits(last)]
        return ", ".join(parts)

    s = re.sub(r"(?<![\w+])(\+?1[\s.-]?)?\(?(\d{3})\)?[\s.-](\d{3})[\s.-](\d{4})(?!\d)", nanp, s)
    s = re.sub(
        r"(?<![\w+])(\+?\d{1,3})[\s-]\(?(\d{3})\)?[\s-](\d{3})[\s-](\d{2})[\s-](\d{2})(?!\d)",
        lambda m: (
            ("plus " if m.group(1).startswith("+") else "")
            + ", ".join(_digits(g) for g in re.findall(r"\d+", m.group(0)))
        ),
        s,
    )  # +7 800 200-00-00
    s = re.sub(
        r"(?<![\w+])\+(\d{1,3})[\s-]\(?(\d{1,4})\)?(?:[\s-](\d{2,4}))+(?!\d)",
        lambda m: "plus " + ", ".join(_digits(g) for g in re.findall(r"\d+", m.group(0))),
        s,
    )
    return re.sub(r"(?<![\d-])(\d{3})-(\d{4})(?![\d-])", lambda m: f"{_digits(m.group(1))}, {_digits(m.group(2))}", s)


def _dates(s: str) -> str:
    s = re.sub(  # US order: 3/14/1990
        r"(?<![\d/])(\d{1,2})/(\d{1,2})/(\d{4})(?![\d/])",
        lambda m: (
            f"{_MONTHS[int(m.group(1)) - 1].capitalize()} {ordinal(int(m.group(2)))}, {year(int(m.group(3)))}"
            if 1 <= int(m.group(1)) <= 12 and 1 <= int(m.group(2)) <= 31
            else m.group(0)
        ),
        s,
    )
    s = re.sub(
        r"(?<![\d-])(\d{4})-(\d{2})-(\d{2})(?![\d-])",
        lambda m: (
            f"{_MONTHS[int(m.group(2)) - 1]} {ordinal(int(m.group(3)))} {year(int(m.group(1)))}"
            if 1 <= int(m.group(2)) <= 12
            else m.group(0)
        ),
        s,
    )

    # March 5, 2024 / March 5th / Jan 15
    def month_day(m: re.Match) -> str:
        words = f"{_month(m.group(1)).capitalize()} {ordinal(int(m.group(2)))}"
        if m.group(4):  # "April 12 or 13", "May 3-5"
            link = "to" if m.group(3).strip() in ("-", "–", "—") else m.group(3).strip()
            words += f" {link} {ordinal(int(m.group(4)))}"
        return words + (f", {year(int(m.group(5)))}" if m.group(5) else "")

    s = re.sub(
        rf"\b({_MONTH_RE})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b"
        rf"(?:(\s+(?:or|and|to|through)\s+|\s*[-–—]\s*)(\d{{1,2}})(?:st|nd|rd|th)?\b)?(?:,?\s+(\d{{4}}))?",
        month_day,
        s,
        flags=re.IGNORECASE,
    )

    # 5 March 2024 / 5th of March
    def day_month(m: re.Match) -> str:
        the = "" if re.search(r"(?i)\bthe\s*$", s[: m.start()]) else "the "
        words = f"{the}{ordinal(int(m.group(1)))} of {_month(m.group(2)).capitalize()}"
        return words + (f", {year(int(m.group(3)))}" if m.group(3) else "")

    return re.sub(
        rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_RE})(?:,?\s+(\d{{4}}))?\b",
        day_month,
        s,
        flags=re.IGNORECASE,
    )


_YEAR = r"(1[1-9]\d\d|20\d\d)(?![\d,.]?\d)"
# After these a four-digit number is a year unless a unit or percent follows: "during 1968 protests spread".
_SURE_YEAR_WORDS = (
    r"since|until|till|during|circa|c\.|born|before|after|year|early|late|mid|copyright|©|spring|summer"
    r"|fall|autumn|winter|" + "|".join(_MONTHS)
)
# After these it is a year unless a count follows: "in 1990 we moved", "by 2030", but "in 1250 meters", "of 2000 users".
_YEAR_WORDS = r"in|by|from|of|to|for|around|through|throughout"
# Words ending in s that are not plurals: a count ("1250 votes") is a plural noun or a unit.
_NOT_PLURAL = frozenset(
    "was has is this his its as us thus plus always perhaps towards afterwards across unless less "
    "besides whereas yes whereas does goes alas".split()
)
_IRREGULAR_PLURALS = frozenset("people men women children persons folks feet teeth mice geese staff cattle".split())


def _counted_after(s: str, end: int, n: int, strict: bool) -> bool:
    """Whether what follows the number at s[:end] makes it a count: a unit or %, or (unless `strict` is off for a
    likely year, 1900-2099) a plural noun in lowercase."""
    rest = s[end:]
    if re.match(rf"\s*(?:%|(?:{_UNIT_RE})(?![A-Za-z]))", rest):
        return True
    m = re.match(r"\s+([a-z]+)\b", rest)
    if not m:
        return False
    word = m.group(1)
    plural = word in _IRREGULAR_PLURALS or (
        len(word) > 3 and word.endswith("s") and word not in _NOT_PLURAL and not word.endswith(("ss", "us", "is"))
    )
    return plural and (strict or not 1900 <= n <= 2099)


def _years(s: str) -> str:
    s = re.sub(r"\b(1[1-9]|20)(\d)0s\b", lambda m: _decade(int(m.group(1) + m.group(2) + "0")), s)
    s = re.sub(r"(?<![\d$£€])'?([2-9])0s\b", lambda m: _decade_word(int(m.group(1))), s)
    s = re.sub(
        r"(?<![\d,.])(1[1-9]\d\d|20\d\d)\s*[-–—]\s*(1[1-9]\d\d|20\d\d)(?!\d|[,.]\d)",
        lambda m: f"{year(int(m.group(1)))} to {year(int(m.group(2)))}",
        s,
    )

    def pair(m: re.Match) -> str:  # "from 1990 to 2000 prices doubled", "between 2010 and 2015"; a count in both
        a, b = int(m.group(2)), int(m.group(4))
        if _counted_after(s, m.end(), b, strict=not (1900 <= a <= 2099 and 1900 <= b <= 2099)):
            return f"{m.group(1)} {cardinal(a)} {m.group(3)} {cardinal(b)}"  # "from 1500 to 2000 people"
        return f"{m.group(1)} {year(a)} {m.group(3)} {year(b)}"

    s = re.sub(rf"(?i)\b(between|from)\s+{_YEAR}\s+(and|to|until|through)\s+{_YEAR}", pair, s)

    def after_word(m: re.Match) -> str:
        sure = re.fullmatch(_SURE_YEAR_WORDS, m.group(1), re.IGNORECASE) is not None
        n = int(m.group(2))
        if re.match(r"\s*%", s[m.end() :]) if sure else _counted_after(s, m.end(), n, strict=False):
            return m.group(0)
        return f"{m.group(1)} {year(n)}"

    s = re.sub(rf"(?i)(?<![\w.])({_SURE_YEAR_WORDS}|{_YEAR_WORDS})\s+{_YEAR}", after_word, s)

    # at the start of a sentence, a heading or a list item, unless a count follows: "1990 was a good year",
    # "2024 Roadmap", "1998: founded"; but "1250 people signed up"
    def at_start(m: re.Match) -> str:
        n = int(m.group(1))
        return m.group(0) if _counted_after(s, m.end(), n, strict=True) else year(n)

    s = re.sub(rf"(?:(?<=^)|(?<=\n)|(?<=[.!?]\s)){_YEAR}", at_start, s)
    # a bare four-digit number ending a clause is most often a year: "The year was 1999."
    s = re.sub(r"(?<![\d,.$£€#\w])(1[5-9]\d\d|20\d\d)(?=\s*(?:[.!?;]|$))", lambda m: year(int(m.group(1))), s)
    return re.sub(r"(?<![\w'])'(\d\d)\b(?!s)", lambda m: _two_digit_year(m.group(1)), s)  # '98


def _two_digit_year(yy: str) -> str:
    return f"oh {cardinal(int(yy))}" if yy.startswith("0") else cardinal(int(yy))


_DECADES = {
    2: "twenties",
    3: "thirties",
    4: "forties",
    5: "fifties",
    6: "sixties",
    7: "seventies",
    8: "eighties",
    9: "nineties",
}


def _decade_word(tens: int) -> str:
    return _DECADES[tens]


def _decade(n: int) -> str:
    """1990 -> 'nineteen nineties', 2000 -> 'two thousands'."""
    if n % 100 == 0:
        return year(n) + "s" if n % 1000 else "two thousands"
    century = year(n - n % 100).replace(" hundred", "")
    return f"{century} {_DECADES[(n % 100) // 10]}"


def _times(s: str) -> str:
    def time(m: re.Match) -> str:
        h, mi, ampm = int(m.group(1)), m.group(2), m.group(3)
        suffix = f" {ampm[0].lower()} m" if ampm else ""
        if not mi or mi == "00":
            if ampm:
                return f"{cardinal(h)}{suffix}{_stop(s, m.end(), m.group(0))}"
            return f"{cardinal(h)} o'clock" if h <= 12 else f"{cardinal(h)} hundred"
        minutes = cardinal(int(mi)) if int(mi) >= 10 else f"oh {cardinal(int(mi))}"
        return f"{cardinal(h)} {minutes}{suffix}{_stop(s, m.end(), m.group(0)) if ampm else ''}"

    s = re.sub(r"(?<![\d:])([01]?\d|2[0-3]):([0-5]\d)(?:\s?([ap])\.?m\.?(?![a-z]))?(?![\d:])", time, s, flags=re.I)
    s = re.sub(
        r"(?<![\d:.,])(1[0-2]|0?[1-9])\s*[-–—]\s*(?=(?:1[0-2]|0?[1-9])\s?[ap]\.?m\b)",
        lambda m: f"{cardinal(int(m.group(1)))} to ",
        s,
        flags=re.I,
    )  # 8-10 pm
    s = re.sub(r"(?<![\d:.,])(1[0-2]|0?[1-9])()\s?([ap])\.?m\b\.?", time, s, flags=re.I)
    return re.sub(r"\b([ap] m)\s*[-–—]\s*(?=[a-z]+\b)", r"\1 to ", s)  # 9am-5pm


_CURRENCIES = {
    "$": ("dollar", "cent"),
    "usd": ("dollar", "cent"),
    "€": ("euro", "cent"),
    "eur": ("euro", "cent"),
    "£": ("pound", "penny"),
    "gbp": ("pound", "penny"),
    "₽": ("ruble", "kopeck"),
    "rub": ("ruble", "kopeck"),
    "руб.": ("ruble", "kopeck"),
    "¥": ("yuan", "fen"),
}
_SCALE = r"thousand|million|billion|trillion|k|m|bn"
_SCALE_WORDS = {"k": "thousand", "m": "million", "bn": "billion"}


def _plural(noun: str, n: float) -> str:
    if n == 1:
        return noun
    return {"penny": "pence", "yuan": "yuan", "fen": "fen"}.get(noun, noun + "s")


def _money_words(num: str, cur: str, scale: str | None) -> str:
    unit, sub = _CURRENCIES[cur.lower()]
    if scale:
        scale = _SCALE_WORDS.get(scale.lower(), scale.lower())
        return f"{decimal(num)} {scale} {_plural(unit, 2)}"
    whole, _, frac = num.replace(",", "").partition(".")
    n = int(whole or "0")
    cents = int(frac[:2].ljust(2, "0")) if frac else 0
    parts = []
    if n or not cents:
        parts.append(f"{cardinal(n)} {_plural(unit, n)}")
    if cents:
        parts.append(f"{cardinal(cents)} {_plural(sub, cents)}")
    return " and ".join(parts)


def _money(s: str) -> str:
    amount = rf"(?:{_NUM})(?:\.\d+)?"
    s = re.sub(  # $5-10: five to ten dollars
        rf"([$€£₽¥])\s?({amount})\s*[-–—]\s*[$€£₽¥]?\s?({amount})(?:\s?({_SCALE})\b)?",
        lambda m: f"{decimal(m.group(2))} to {_money_words(m.group(3), m.group(1), m.group(4))}",
        s,
        flags=re.I,
    )
    s = re.sub(
        rf"([$€£₽¥])\s?({amount})(?:\s?({_SCALE})\b)?",
        lambda m: _money_words(m.group(2), m.group(1), m.group(3)),
        s,
        flags=re.I,
    )
    return re.sub(
        rf"(?<![\d.,])({amount})\s?(?:({_SCALE})\s)?(₽|руб\.|USD|EUR|GBP|RUB)(?![A-Za-z])",
        lambda m: _money_words(m.group(1), m.group(3), m.group(2)),
        s,
    )


_UNITS = {
    "km/h": ("kilometer", " per hour"),
    "mph": ("mile", " per hour"),
    "°C": ("degree", " Celsius"),
    "°F": ("degree", " Fahrenheit"),
    "°": ("degree", ""),
    "%": ("percent", ""),
    "km": ("kilometer", ""),
    "cm": ("centimeter", ""),
    "mm": ("millimeter", ""),
    "m": ("meter", ""),
    "kg": ("kilogram", ""),
    "mg": ("milligram", ""),
    "g": ("gram", ""),
    "lbs": ("pound", ""),
    "lb": ("pound", ""),
    "oz": ("ounce", ""),
    "mi": ("mile", ""),
    "ft": ("foot", ""),
    "GB": ("gigabyte", ""),
    "MB": ("megabyte", ""),
    "KB": ("kilobyte", ""),
    "TB": ("terabyte", ""),
    "ms": ("millisecond", ""),
    "sec": ("second", ""),
    "secs": ("second", ""),
    "min": ("minute", ""),
    "mins": ("minute", ""),
    "hr": ("hour", ""),
    "hrs": ("hour", ""),
    "h": ("hour", ""),
    "ml": ("milliliter", ""),
    "l": ("liter", ""),
    "L": ("liter", ""),
    "kW": ("kilowatt", ""),
    "W": ("watt", ""),
    "Mbps": ("megabit", " per second"),
    "GHz": ("gigahertz", ""),
    "MHz": ("megahertz", ""),
    "sq ft": ("square foot", ""),
    "sq. ft.": ("square foot", ""),
    "sq m": ("square meter", ""),
    "m²": ("square meter", ""),
    "ft²": ("square foot", ""),
    "pts": ("point", ""),
    "pcs": ("piece", ""),
}
_UNIT_RE = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))


def _units(s: str) -> str:
    def spoken(num: str) -> str:
        return decimal(num) if "." in num else cardinal(_to_int(num))

    def unit(m: re.Match) -> str:
        num, u = m.group("num"), m.group("unit")
        noun, tail = _UNITS[u]
        value = float(num.replace(",", ""))
        if noun == "percent" or noun.endswith("hertz"):
            plural = noun
        elif noun.endswith("foot"):
            plural = noun if value == 1 else noun[:-4] + "feet"
        else:
            plural = _plural(noun, value)
        words = spoken(num)
        if m.group("first"):  # "50-60%": fifty to sixty percent
            words = f"{spoken(m.group('first'))} to {words}"
        return f"{words} {plural}{tail}{_stop(s, m.end(), m.group(0))}"

    num = rf"(?:{_NUM})(?:\.\d+)?"
    return re.sub(
        rf"(?<![\d.,])(?:(?P<first>{num})\s*[-–—]\s*)?(?P<num>{num})\s?(?P<unit>{_UNIT_RE})\.?(?![A-Za-z\d])", unit, s
    )


def _ordinals(s: str) -> str:
    return re.sub(r"(?<![\d.,])(\d+)(st|nd|rd|th)\b", lambda m: ordinal(int(m.group(1))), s, flags=re.I)


_FRACTIONS = {(1, 2): "one half", (1, 4): "one quarter", (3, 4): "three quarters"}


def _fractions(s: str) -> str:
    s = re.sub(r"(?<![\d/])24/7(?![\d/])", "twenty-four seven", s)
    s = re.sub(
        r"(?<![\d/.])(\d+\.\d+)/(\d+)(?![\d/])",
        lambda m: f"{decimal(m.group(1))} out of {cardinal(int(m.group(2)))}",
        s,
    )

    def frac(m: re.Match) -> str:
        a, b = int(m.group(1)), int(m.group(2))
        if (a, b) in _FRACTIONS:
            return _FRACTIONS[(a, b)]
        den = ordinal(b) if b != 2 else "half"
        return f"{cardinal(a)} {den}{'s' if a != 1 else ''}".replace("halfs", "halves")

    return re.sub(r"(?<![\d/.])(\d{1,2})/(\d{1,2})(?![\d/])", frac, s)


def _ranges(s: str) -> str:
    return re.sub(
        rf"(?<![\d.,:])({_NUM})\s*[-–—]\s*({_NUM})(?![\d:]|[.,]\d|-)",
        lambda m: f"{cardinal(_to_int(m.group(1)))} to {cardinal(_to_int(m.group(2)))}",
        s,
    )


def _signs_and_math(s: str) -> str:
    s = re.sub(r"(?:(?<=^)|(?<=[\s(]))[-−](?=\d)", "minus ", s)
    s = re.sub(r"(?<=\d)\+(?=\s|$|[.,!?])", " plus", s)  # 100+ customers
    s = re.sub(r"(?<![\d:])(\d{1,2}):(\d{1,2})(?![\d:])", r"\1 to \2", s)  # 1:1, 16:9 (times went first)
    # 1.2M users, 5B views (but "221B Baker Street" is a house)
    s = re.sub(
        r"(?<![\d.])(\d+\.\d+|\d+(?=[MB]\s+[a-z]))([MB])\b",
        lambda m: f"{m.group(1)} {'million' if m.group(2) == 'M' else 'billion'}",
        s,
    )
    s = re.sub(r"(?<=[\d\s])=(?=[\s\d])", " equals ", s)
    s = re.sub(r"(?<=\d)\s+\+\s+(?=\d)", " plus ", s)
    s = re.sub(r"(?<=\d)\s*[×*]\s*(?=\d)", " times ", s)
    s = re.sub(r"(?<=\d)\s*x\s*(?=\d)", " by ", s)  # 30x40: dimensions
    s = re.sub(r"(?<=\d)x\b", " times", s)  # 3x cheaper
    s = re.sub(r"#\s?(?=\d)", "number ", s)
    return re.sub(r"\bNo\.\s?(?=\d)", "number ", s)


_SAID_AS_DIGITS = {"911", "999", "112", "411"}  # emergency and service numbers


def _numbers(s: str) -> str:
    said = "|".join(sorted(_SAID_AS_DIGITS))
    s = re.sub(rf"(?<![\d.,])({said})(?![\d.,]\d|\d)", lambda m: _digits(m.group(1)), s)
    s = re.sub(
        r"(?<![\d.])(\d+(?:\.\d+){2,})(?![\d.]\d)",  # versions: 3.11.2
        lambda m: " point ".join(cardinal(int(p)) for p in m.group(1).split(".")),
        s,
    )
    s = re.sub(r"(?<![\d.,])(\d+(?:,\d{3})*)\.(\d+)(?![\d.]\d)", lambda m: decimal(m.group(0)), s)

    def card(m: re.Match) -> str:
        glued = " " if re.match(r"[A-Za-z]", s[m.end() : m.end() + 1]) else ""  # "221B"
        return cardinal(_to_int(m.group(1))) + glued

    return re.sub(rf"(?<![\d.])({_NUM})", card, s)


# (pattern, words, may end a sentence)
_ABBR = [
    (r"\bMr\.", "mister", False),
    (r"\bMrs\.", "missus", False),
    (r"\bMs\.", "miz", False),
    (r"\bDr\.", "doctor", False),
    (r"\bProf\.", "professor", False),
    (r"\bJr\.", "junior", True),
    (r"\bSr\.", "senior", True),
    (r"\be\.g\.", "for example", False),
    (r"\bi\.e\.", "that is", False),
    (r"\betc\.", "et cetera", True),
    (r"\bvs\.?(?=\s)", "versus", False),
    (r"\bapprox\.", "approximately", False),
    (r"\bInc\.", "incorporated", True),
    (r"\bLtd\.", "limited", True),
    (r"\bAve\.", "avenue", True),
    (r"\bRd\.", "road", True),
    (r"\bSt\.(?=\s+[A-Z])", "saint", False),
    (r"\bSt\.", "street", True),
    (r"\bU\.S\.A\.", "U S A", True),
    (r"\bU\.S\.", "U S", True),
    (r"\bU\.K\.", "U K", True),
    (r"\ba\.m\.", "a m", True),
    (r"\bp\.m\.", "p m", True),
]
# Acronyms said as words; others of two to five capitals are spelled.
_ACRONYM_WORDS = {
    "NASA",
    "NATO",
    "UNESCO",
    "UNICEF",
    "COVID",
    "LASER",
    "RADAR",
    "FIFA",
    "OPEC",
    "GIF",
    "JPEG",
    "PIN",
    "SIM",
    "AIDS",
    "ASCII",
    "IKEA",
    "SCUBA",
    "NAFTA",
    "OK",
    "I",
    "A",
}


_WEEKDAYS = {
    "Mon": "Monday",
    "Tue": "Tuesday",
    "Tues": "Tuesday",
    "Wed": "Wednesday",
    "Thu": "Thursday",
    "Thur": "Thursday",
    "Thurs": "Thursday",
    "Fri": "Friday",
    "Sat": "Saturday",
    "Sun": "Sunday",
}
_WEEKDAY_RE = "|".join(sorted(_WEEKDAYS, key=len, reverse=True))


def _weekdays(s: str) -> str:
    s = re.sub(
        rf"\b({_WEEKDAY_RE})\.?\s*[-–—]\s*({_WEEKDAY_RE})\b\.?",
        lambda m: f"{_WEEKDAYS[m.group(1)]} to {_WEEKDAYS[m.group(2)]}",
        s,
    )
    return re.sub(rf"\b({_WEEKDAY_RE})\.?(?=,|\s+\d)", lambda m: _WEEKDAYS[m.group(1)], s)


def _abbreviations(s: str) -> str:
    for pat, words, final in _ABBR:
        s = re.sub(pat, lambda m, w=words, f=final: w + (_stop(s, m.end(), m.group(0)) if f else ""), s)

    def acronym(m: re.Match) -> str:
        w = m.group(1)
        if w == "OK":
            return "okay"
        if w in _ACRONYM_WORDS:
            return w.lower() if len(w) > 1 else w
        return " ".join(w)

    return re.sub(r"(?<![A-Za-z'])([A-Z]{2,5})(?![A-Za-z'])", acronym, s)


_DIGIT_CODE = r"(?i)(\b(?:code|pin|password|passcode|otp|cvv|cvc)\b(?:\s+is)?[\s:#\-\"]*)(\d{3,8})\b"
_TLD_EN = {"io": "I O", "ai": "A I", "us": "U S", "uk": "U K", "ru": "R U"}


def _codes_and_addresses(s: str) -> str:
    """Codes digit by digit; e-mail and web addresses with 'at' and 'dot'."""
    s = re.sub(_DIGIT_CODE, lambda m: m.group(1) + _digits(m.group(2)), s)

    def domain(d: str) -> str:
        parts = d.lower().split(".")
        return " dot ".join(_TLD_EN.get(p, p) if i == len(parts) - 1 else p for i, p in enumerate(parts))

    s = re.sub(
        r"\b([\w.+-]+)@([\w-]+(?:\.[\w-]+)+)\b",
        lambda m: f"{m.group(1).replace('.', ' dot ')} at {domain(m.group(2))}",
        s,
    )
    s = re.sub(
        r"\b(?:https?://)?(www\.)?((?:[\w-]+\.)+(?:com|org|net|io|ai|us|uk|ru|dev|app|co))\b(/\S*)?",
        lambda m: ("w w w dot " if m.group(1) else "") + domain(m.group(2)),
        s,
    )
    return re.sub(
        r"\bQ([1-4])\s+(20\d\d|19\d\d)\b", lambda m: f"Q {cardinal(int(m.group(1)))} {year(int(m.group(2)))}", s
    )


def normalize_en(text: str) -> str:
    s = re.sub(r"[\u00a0\u202f\u2009]", " ", text).replace("−", "-")
    s = _codes_and_addresses(s)
    s = re.sub(r"~\s?(?=[$€£]?\d)", "about ", s)
    s = re.sub(r"(?:(?<=^)|(?<=\s))<\s?(?=[$€£]?\d)", "less than ", s)
    s = re.sub(r"(?:(?<=^)|(?<=\s))>\s?(?=[$€£]?\d)", "more than ", s)
    s = _weekdays(s)
    s = _phones(s)
    s = _dates(s)
    s = _years(s)
    s = _times(s)
    s = re.sub(r"(?:(?<=^)|(?<=[\s(]))[-−](?=[$€£]?\d)", "minus ", s)
    s = _money(s)
    s = _units(s)
    s = _ordinals(s)
    s = _fractions(s)
    s = _signs_and_math(s)
    s = _ranges(s)
    s = _numbers(s)
    s = _abbreviations(s)
    return re.sub(r"[ \t]{2,}", " ", s).strip()
