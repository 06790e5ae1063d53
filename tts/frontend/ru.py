"""Russian text to spoken words: numbers with case and gender agreement, dates, times, money,
percentages, phone numbers, ranges, units, abbreviations, Latin words.

One pass per kind of token, most specific first (a phone number before a range, a date
before a decimal); each pass writes words, so later passes no longer see its digits.
A number takes its case from the preposition before it and the noun after it (pymorphy3
parses the noun); where neither tells, the nominative.
"""

from __future__ import annotations

import re

from . import latin
from .ru_words import (
    CASES,
    cardinal,
    is_adjective,
    one_and_half,
    counted,
    decimal,
    gender_of,
    inflect,
    noun_readings,
    noun_number_for,
    ordinal,
)

_SP = r"[ \u00a0\u202f]"
_NUM = r"\d{1,3}(?:[ \u00a0\u202f]\d{3})+(?!\d)|\d+"  # 146 000 000 or 1500
_L = r"А-Яа-яЁё"

# Cases a preposition (or a quantity word) asks of the number after it, most likely first.
_PREP_CASES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        [
            "без",
            "до",
            "из",
            "от",
            "у",
            "около",
            "после",
            "для",
            "кроме",
            "вокруг",
            "среди",
            "против",
            "вместо",
            "возле",
            "свыше",
            "более",
            "менее",
            "больше",
            "меньше",
            "нет",
            "порядка",
            "из-за",
            "течение",
            "ради",
            "мимо",
        ],
        ("gent",),
    ),
    **dict.fromkeys(["к", "ко", "благодаря", "согласно"], ("datv",)),
    "по": ("datv", "accs"),
    **dict.fromkeys(["в", "во", "на"], ("accs", "loct")),
    "за": ("accs", "ablt"),
    **dict.fromkeys(["про", "через", "сквозь"], ("accs",)),
    **dict.fromkeys(["под", "подо"], ("ablt", "accs")),
    **dict.fromkeys(["над", "перед", "между"], ("ablt",)),
    **dict.fromkeys(["с", "со"], ("gent", "ablt")),
    **dict.fromkeys(["о", "об", "при"], ("loct",)),
}
_DEFAULT_ORDER = ("nomn", "accs", "gent", "datv", "ablt", "loct")
_DATE_NOMINATIVE = {
    "сегодня",
    "завтра",
    "вчера",
    "послезавтра",
    "это",
    "был",
    "была",
    "было",
    "будет",
    "наступило",
    "наступит",
    "дата",
    "число",
}
_MONTHS = [
    "января",
    "февраля",
    "марта",
    "апреля",
    "мая",
    "июня",
    "июля",
    "августа",
    "сентября",
    "октября",
    "ноября",
    "декабря",
]
_MONTH_RE = "|".join(_MONTHS)


# ------------------------------------------------------------------ context
def _prev(s: str, pos: int) -> tuple[str, str]:
    """The word before pos (lowercased) and the characters between it and pos; a sign the
    signs pass wrote ("до минус 10") is looked past to the preposition."""
    head = s[:pos]
    for _ in range(3):
        m = re.search(r"([\w-]+)([^\w]*)$", head)
        if not m:
            return "", head
        if m.group(1).lower() in ("минус", "плюс") and not m.group(2).strip():
            head = head[: m.start()]
            continue
        return m.group(1).lower(), m.group(2)
    return "", head


def _prep_cases(s: str, pos: int) -> tuple[str, ...] | None:
    word, between = _prev(s, pos)
    if between.strip(" \u00a0"):
        return None  # punctuation between: the word before does not govern the number
    return _PREP_CASES.get(word)


def _next_word(s: str, pos: int) -> str:
    m = re.match(rf"{_SP}*([{_L}]+)", s[pos:])
    return m.group(1).lower() if m else ""


def _noun_after(s: str, pos: int) -> str:
    """The noun the number counts, past up to two adjectives ("2 новых сообщения" -> сообщения)."""
    words = re.match(rf"(?:{_SP}*([{_L}]+))?(?:{_SP}+([{_L}]+))?(?:{_SP}+([{_L}]+))?", s[pos:])
    found = [w.lower() for w in words.groups() if w] if words else []
    for w in found:
        if not is_adjective(w):
            return w
    return found[0] if found else ""


def _to_int(num: str) -> int:
    return int(re.sub(r"\D", "", num))


def _choose(cands: list[str], preps: tuple[str, ...] | None) -> str | None:
    order = preps or _DEFAULT_ORDER
    for c in order:
        if c in cands:
            return c
    return cands[0] if cands else None


def _stop(s: str, end: int, token: str) -> str:
    """'.' when an abbreviation's period also ended the sentence (end of text or a capital next)."""
    if token.endswith(".") and re.match(r"\s*(?:$|[A-ZА-ЯЁ«\"])", s[end:]):
        return "."
    return ""


def _agree(n: int, s: str, start: int, end: int) -> tuple[str, str, bool]:
    """(case, gender, animate) of the cardinal n at s[start:end] from the preposition and the next noun."""
    preps = _prep_cases(s, start)
    nxt = _noun_after(s, end)
    readings = noun_readings(nxt) if nxt else ()
    cands: list[tuple[str, str, bool]] = []
    one = n % 10 == 1 and n % 100 != 11
    for c in CASES:
        want = noun_number_for(n, c)
        for rc, rn, rg, anim in readings:
            if (rc, rn) == want:
                # "на 2 персоны": a noun in the genitive singular takes the inanimate form of the number
                cands.append((c, rg, anim and (one or rn == "plur")))
                break
    if cands:
        # the noun's form outweighs a preposition that may govern another word ("в течение 2 дней")
        case = _choose([c for c, _, _ in cands], preps)
        g, anim = next((g, a) for c, g, a in cands if c == case)
        return case, g, anim
    return (preps[0] if preps else "nomn"), "masc", False


# ------------------------------------------------------------------ passes
def _phones(s: str) -> str:
    def groups(*gs: str) -> str:
        return ", ".join(_digits_group(g) for g in gs if g)

    def ru_phone(m: re.Match) -> str:
        lead = "плюс семь" if m.group(1) == "+7" else cardinal(int(m.group(1)))
        return lead + ", " + groups(*m.groups()[1:])

    s = re.sub(r"(?<![\w+])(\+7|8|7)[\s-]?\(?(\d{3})\)?[\s-]?(\d{3})[\s-]?(\d{2})[\s-]?(\d{2})(?!\d)", ru_phone, s)
    s = re.sub(
        r"(?<![\w+])\+(\d{1,3})[\s-]?\(?(\d{2,4})\)?[\s-]?(\d{2,4})[\s-]?(\d{2,4})(?:[\s-]?(\d{2,4}))?(?!\d)",
        lambda m: "плюс " + cardinal(int(m.group(1))) + ", " + groups(*m.groups()[1:]),
        s,
    )
    return re.sub(r"(?<![\d-])(\d{3})-(\d{2})-(\d{2})(?![\d-])", lambda m: groups(*m.groups()), s)


def _digits_group(g: str) -> str:
    """'005' -> 'ноль ноль пять': leading zeros are spoken."""
    zeros = len(g) - len(g.lstrip("0"))
    rest = g[zeros:]
    return " ".join(["ноль"] * zeros + ([cardinal(int(rest))] if rest else []))


def _date_case(s: str, pos: int) -> str:
    word, between = _prev(s, pos)
    preps = _prep_cases(s, pos)
    if preps:
        return "accs" if word in ("по", "на", "в", "во", "за", "через", "про") else preps[0]
    if ":" in between or word in _DATE_NOMINATIVE:
        return "nomn"
    return "gent"  # "доставка 5 марта": the date as a circumstance


def _year_gent(y: str) -> str:
    return f"{ordinal(int(y), 'gent')} года"


def _dates(s: str) -> str:
    def numeric(m: re.Match) -> str:
        d, mo, y = int(m.group(1)), int(m.group(2)), m.group(3)
        if not (1 <= d <= 31 and 1 <= mo <= 12):
            return m.group(0)
        y = y if len(y) == 4 else "20" + y
        return f"{ordinal(d, _date_case(s, m.start()), 'neut')} {_MONTHS[mo - 1]} {_year_gent(y)}"

    s = re.sub(r"(?<![\d.])(\d{1,2})\.(\d{1,2})\.(\d{4}|\d{2})(?!\d|\.\d)(?:\s*г\.)?", numeric, s)

    def day_month(m: re.Match) -> str:
        d, mo = int(m.group(2)), int(m.group(3))
        if not (1 <= d <= 31 and 1 <= mo <= 12):
            return m.group(0)
        return f"{m.group(1)}{ordinal(d, _date_case(s, m.start(2)), 'neut')} {_MONTHS[mo - 1]}"

    # "до 31.12": a day and a month (a decimal is written with a comma in Russian)
    s = re.sub(r"(?i)(\b(?:до|с|со|по|к|от|на|после|около)\s+)(\d{1,2})\.(\d{2})(?![\d]|\.\d)", day_month, s)

    def worded(m: re.Match) -> str:
        first, link, day, month, year = m.groups()
        out = ""
        case = _date_case(s, m.start())
        if first:
            out = ordinal(int(first), case, "neut")
            link_word = link.strip()
            if link_word in ("по",):
                case = "accs"
            elif link_word == "до":
                case = "gent"
            out += f" {link_word} " if link_word.isalpha() else "-"
        out += f"{ordinal(int(day), case, 'neut')} {month}"
        if year:
            out += " " + _year_gent(year)
        return out

    return re.sub(
        rf"(?<!\d)(?:(\d{{1,2}})(\s*(?:по|до|и)\s+|\s*[-–—]\s*))?(\d{{1,2}}){_SP}+({_MONTH_RE})"
        rf"(?:{_SP}+(\d{{4}})(?:{_SP}*(?:г\.|года|г(?![{_L}])))?)?",
        worded,
        s,
    )


_YEAR_NOUN = r"годами|годам|годах|годов|годом|годы|году|года|годе|год"
# the forms of "год" after a year: case -> number, the likelier case first
_YEAR_FORMS = {
    "год": {"nomn": "sing", "accs": "sing"},
    "года": {"gent": "sing"},
    "году": {"loct": "sing", "datv": "sing"},
    "годом": {"ablt": "sing"},
    "годе": {"loct": "sing"},
    "годы": {"nomn": "plur", "accs": "plur"},
    "годов": {"gent": "plur"},
    "годам": {"datv": "plur"},
    "годами": {"ablt": "plur"},
    "годах": {"loct": "plur"},
}


def _years(s: str) -> str:
    def year_case(noun: str, pos: int) -> tuple[str, str]:
        preps = _prep_cases(s, pos)
        if not noun.startswith("год"):  # г. / гг.: the case comes from the preposition alone
            plural = "plur" if noun.startswith("гг") else "sing"
            if preps:
                case = "loct" if preps[0] == "accs" and _prev(s, pos)[0] in ("в", "во") else preps[0]
            else:
                case = "nomn"
            return case, plural
        cands = _YEAR_FORMS[noun]
        case = _choose(list(cands), preps) or next(iter(cands))
        return case, cands[case]

    def year_noun(noun: str, case: str, number: str, pos: int) -> str:
        if noun.startswith("г") and not noun.startswith("год"):
            return inflect("год", case, number, after_in=_prev(s, pos)[0] in ("в", "во", "на"))
        return noun

    def year_range(m: re.Match) -> str:
        a, b, noun = m.groups()
        case, number = year_case(noun, m.start())
        return (
            f"{ordinal(int(a), case)} — {ordinal(int(b), case)} "
            f"{year_noun(noun, case, number, m.start())}{_stop(s, m.end(), noun)}"
        )

    s = re.sub(rf"(?<!\d)(\d{{4}})\s*[-–—]\s*(\d{{4}})\s*(гг\.|г\.|{_YEAR_NOUN})(?![{_L}])", year_range, s)

    def year(m: re.Match) -> str:
        y, noun = m.groups()
        if noun.startswith("г") and not noun.startswith("год") and not 1000 <= int(y) <= 2100:
            return m.group(0)  # "100 г": grams, the units pass reads it
        if noun.startswith("год") and not (len(y) == 4 or (len(y) == 3 and _prep_cases(s, m.start()))):
            return m.group(0)  # "21 год": a count of years, not a year
        case, number = year_case(noun, m.start())
        return f"{ordinal(int(y), case)} {year_noun(noun, case, number, m.start())}{_stop(s, m.end(), noun)}"

    return re.sub(rf"(?<![\d.,])(\d{{1,4}}){_SP}*(гг\.|г\.|г(?![{_L}])|(?:{_YEAR_NOUN})(?![{_L}]))", year, s)


def _times(s: str) -> str:
    def time(m: re.Match) -> str:
        h, mi = int(m.group(1)), int(m.group(2))
        word, _ = _prev(s, m.start())
        preps = _prep_cases(s, m.start())
        case = "accs" if word in ("в", "во", "на", "через", "за") else (preps[0] if preps else "nomn")
        if mi == 0:
            return f"{cardinal(h, case)} {counted(h, 'час', case)}"
        minutes = cardinal(mi, case, "femn")
        return f"{cardinal(h, case)} {'ноль ' + minutes if mi < 10 else minutes}"

    # "10:00–16:00" without a preposition: "с десяти часов до шестнадцати часов"
    t = r"(?:[01]?\d|2[0-3]):[0-5]\d"
    s = re.sub(
        rf"(?<![\d.:])({t})\s*[-–—]\s*({t})(?![\d:])",
        lambda m: m.group(0) if _prep_cases(s, m.start()) else f"с {m.group(1)} до {m.group(2)}",
        s,
    )
    return re.sub(r"(?<![\d.:])([01]?\d|2[0-3]):([0-5]\d)(?![\d:])", time, s)


def _signs(s: str) -> str:
    s = re.sub(r"(?:(?<=^)|(?<=[\s(]))[-−](?=\d)", "минус ", s)
    return re.sub(r"(?:(?<=^)|(?<=[\s(]))\+(?=\d)", "плюс ", s)


_CURRENCY = {
    "₽": "рубль",
    "руб": "рубль",
    "р": "рубль",
    "rub": "рубль",
    "$": "доллар",
    "usd": "доллар",
    "долл": "доллар",
    "€": "евро",
    "eur": "евро",
    "£": "фунт",
    "gbp": "фунт",
    "коп": "копейка",
    "¥": "юань",
    "cny": "юань",
}
_SUBUNIT = {"рубль": "копейка", "доллар": "цент", "евро": "цент", "фунт": "пенс", "юань": "фэнь"}
_MULT = {"тыс": "тысяча", "млн": "миллион", "млрд": "миллиард", "трлн": "триллион"}
_MULT_RE = r"тыс\.?|млн\.?|млрд\.?|трлн\.?"
_CUR_AFTER = r"₽|руб\.?|р\.|коп\.?|\$|€|£|¥|USD|EUR|RUB|GBP|CNY|долл\.?"
_AMOUNT = rf"(?:{_NUM})(?:[.,]\d+)?"


def _amount(num: str, case: str, unit: str | None, mult: str | None) -> str:
    """Words for an amount of money (unit: a currency lemma) or a plain count with a multiplier."""
    whole, _, frac = re.sub(rf"{_SP}", "", num).replace(",", ".").partition(".")
    n = int(whole)
    if mult:
        mult_lemma = _MULT[mult.rstrip(".")]
        g = gender_of(mult_lemma)
        if frac:
            if frac == "5" and n:  # "0,5 млн": no half of nothing, ноль целых пять десятых
                head = ("полторы" if g == "femn" else "полтора") if n == 1 else f"{cardinal(n, case, g)} с половиной"
            else:
                head = decimal(whole, frac, case)
            words = f"{head} {inflect(mult_lemma, 'gent', 'sing')}"
        else:
            words = f"{cardinal(n, case, g)} {counted(n, mult_lemma, case)}"
        return words + (f" {inflect(unit, 'gent', 'plur')}" if unit else "")
    if unit is None:
        return decimal(whole, frac, case) if frac else cardinal(n, case)
    g = gender_of(unit)
    cents = int(frac[:2].ljust(2, "0")) if frac else 0
    sub = _SUBUNIT.get(unit, "копейка")
    parts = []
    if n or not cents:
        parts.append(f"{cardinal(n, case, g)} {counted(n, unit, case)}")
    if cents:
        parts.append(f"{cardinal(cents, case, gender_of(sub))} {counted(cents, sub, case)}")
    return " ".join(parts)


def _count_case(s: str, pos: int) -> str:
    word, _ = _prev(s, pos)
    preps = _prep_cases(s, pos)
    if not preps:
        return "nomn"
    return "accs" if word in ("в", "во", "на", "за", "через", "про", "по", "под") else preps[0]


def _money(s: str) -> str:
    def before(m: re.Match) -> str:
        sign, num, mult = m.groups()
        words = _amount(num, _count_case(s, m.start()), _CURRENCY[sign.lower()], mult)
        return words + _stop(s, m.end(), m.group(0))

    s = re.sub(rf"([$€£₽¥])\s?({_AMOUNT})(?:\s?({_MULT_RE})(?![{_L}]))?", before, s)

    def after(m: re.Match) -> str:
        num, mult, cur = m.groups()
        unit = _CURRENCY[cur.rstrip(".").lower()]
        return _amount(num, _count_case(s, m.start()), unit, mult) + _stop(s, m.end(), cur)

    s = re.sub(rf"(?<![\d.,])({_AMOUNT}){_SP}?(?:({_MULT_RE}){_SP}?)?({_CUR_AFTER})(?![{_L}\w])", after, s)

    def bare_mult(m: re.Match) -> str:
        num, mult = m.groups()
        return _amount(num, _count_case(s, m.start()), None, mult) + _stop(s, m.end(), mult)

    return re.sub(rf"(?<![\d.,])({_AMOUNT}){_SP}?({_MULT_RE})(?![{_L}])", bare_mult, s)


# unit -> (lemma, words after it)
_UNITS = {
    "км/ч": ("километр", " в час"),
    "м/с": ("метр", " в секунду"),
    "Мбит/с": ("мегабит", " в секунду"),
    "Гбит/с": ("гигабит", " в секунду"),
    "°C": ("градус", " цельсия"),
    "°С": ("градус", " цельсия"),
    "°F": ("градус", " фаренгейта"),
    "°": ("градус", ""),
    "%": ("процент", ""),
    "км": ("километр", ""),
    "м": ("метр", ""),
    "см": ("сантиметр", ""),
    "мм": ("миллиметр", ""),
    "кг": ("килограмм", ""),
    "г": ("грамм", ""),
    "мг": ("миллиграмм", ""),
    "л": ("литр", ""),
    "мл": ("миллилитр", ""),
    "ч": ("час", ""),
    "мин": ("минута", ""),
    "сек": ("секунда", ""),
    "мс": ("миллисекунда", ""),
    "ГБ": ("гигабайт", ""),
    "Гб": ("гигабайт", ""),
    "МБ": ("мегабайт", ""),
    "Мб": ("мегабайт", ""),
    "КБ": ("килобайт", ""),
    "Кб": ("килобайт", ""),
    "ТБ": ("терабайт", ""),
    "шт": ("штука", ""),
    "кВт": ("киловатт", ""),
    "Вт": ("ватт", ""),
    "га": ("гектар", ""),
    "т": ("тонна", ""),
    "м²": ("квадратный метр", ""),
    "м2": ("квадратный метр", ""),
    "кв. м": ("квадратный метр", ""),
    "км²": ("квадратный километр", ""),
    "м³": ("кубический метр", ""),
}
_UNIT_RE = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))


def _units(s: str) -> str:
    def unit(m: re.Match) -> str:
        num, num2, u, dot = m.group(1), m.group(2), m.group(3), m.group(4) or ""
        lemma, tail = _UNITS[u]
        word, _ = _prev(s, m.start())
        case = _count_case(s, m.start())
        if word in ("в", "во") and re.match(r"\s*от\b", s[m.end() :]):
            case = "loct"  # "в 5 км от центра"
        g = gender_of(lemma)
        stop = _stop(s, m.end(), u + dot) if dot else ""
        last = num2 or num
        if num2 is None and re.fullmatch(r"1[.,]5", num):  # "1,5 ч": полтора часа
            noun = counted(2, lemma, case) if case in ("nomn", "accs") else counted(5, lemma, case)
            return f"{one_and_half(g, case)} {noun}{tail}{stop}"
        head = f"{_amount(num, case, None, None) if ',' in num or '.' in num else cardinal(_to_int(num), case, g)}"
        if num2:
            head += "-" + (
                _amount(num2, case, None, None) if "," in num2 or "." in num2 else cardinal(_to_int(num2), case, g)
            )
        if "," in last or "." in last:
            noun = inflect(lemma, "gent", "sing")
        else:
            noun = counted(_to_int(last), lemma, case, after_in=False)
        return f"{head} {noun}{tail}{stop}"

    return re.sub(
        rf"(?<![\d.,])({_AMOUNT})(?:\s*[-–—]\s*({_AMOUNT}))?{_SP}?({_UNIT_RE})(\.)?(?![{_L}A-Za-z\d])", unit, s
    )


_ORD_SUFFIX = r"ыми|ого|ому|ая|ое|ой|ую|ые|ых|ым|ий|ый|ом|ей|го|му|ми|й|я|е|м|х|ю"


def _ordinal_by_suffix(n: int, suffix: str, s: str, start: int, end: int) -> str:
    forms = []
    for case in _DEFAULT_ORDER[:2] + ("ablt", "gent", "datv", "loct"):
        for gender in ("masc", "femn", "neut"):
            for plural in (False, True):
                if plural and gender != "masc":
                    continue
                w = ordinal(n, case, gender, plural)
                if w.endswith(suffix):
                    forms.append((case, gender, "plur" if plural else "sing", w))
    if not forms:
        return ordinal(n)
    nxt = _next_word(s, end)
    preps = _prep_cases(s, start)
    for rc, rn, rg, _ in noun_readings(nxt) if nxt else ():
        for case, gender, number, w in forms:
            if case == rc and number == rn and (number == "plur" or gender == rg) and (not preps or case in preps):
                return w
    if preps:
        for p in preps:
            for case, _, _, w in forms:
                if case == p:
                    return w
    return forms[0][3]


def _cardinal_by_suffix(n: int, suffix: str, s: str, start: int) -> str | None:
    """ "5-ти", "2-мя", "2-х": a cardinal with its ending written out, or None if none fits."""
    if suffix == "х" and not (n % 10 in (2, 3, 4) and n % 100 not in (12, 13, 14)):
        return None  # "90-х": a decade, an ordinal
    forms = [(case, cardinal(n, case)) for case in CASES]
    fitting = [(case, w) for case, w in forms if w.endswith(suffix)]
    if not fitting:
        return None
    preps = _prep_cases(s, start) or ()
    return next((w for case, w in fitting if case in preps), fitting[0][1])


def _ordinals(s: str) -> str:
    def ordinal_or_cardinal(m: re.Match) -> str:
        n, suffix = int(m.group(1)), m.group(2)
        if suffix in ("ти", "ми", "мя", "х"):
            words = _cardinal_by_suffix(n, suffix, s, m.start())
            if words:
                return words
        return _ordinal_by_suffix(n, suffix, s, m.start(), m.end())

    return re.sub(rf"(?<![\d.,])(\d+)-({_ORD_SUFFIX}|ти|мя)(?![{_L}])", ordinal_or_cardinal, s)


_ROMAN = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def _roman_value(r: str) -> int:
    total = 0
    for a, b in zip(r, r[1:] + " "):
        v = _ROMAN[a]
        total += -v if b != " " and _ROMAN[b] > v else v
    return total


def _romans(s: str) -> str:
    def roman(m: re.Match) -> str:
        r, noun = m.group(1), m.group(2)
        n = _roman_value(r)
        preps = _prep_cases(s, m.start())
        after_in = _prev(s, m.start())[0] in ("в", "во", "на")
        if noun in ("в.", "вв."):
            case = "loct" if after_in else (preps[0] if preps else "nomn")
            number = "plur" if noun == "вв." else "sing"
            return f"{ordinal(n, case, 'masc', number == 'plur')} {inflect('век', case, number, after_in)}{_stop(s, m.end(), noun)}"
        for rc, rn, rg, _ in noun_readings(noun.lower()):
            if not preps or rc in preps:
                return f"{ordinal(n, rc, rg, rn == 'plur')} {noun}"
        return m.group(0)

    return re.sub(
        rf"(?<![\w])(M{{0,3}}(?:CM|CD|D?C{{0,3}})(?:XC|XL|L?X{{0,3}})(?:IX|IV|V?I{{0,3}}))(?<=\w){_SP}+(вв\.|в\.|[{_L}]+)",
        roman,
        s,
    )


def _fractions(s: str) -> str:
    s = re.sub(r"(?<![\d/])24/7(?![\d/])", "двадцать четыре на семь", s)

    def frac(m: re.Match) -> str:
        a, b = int(m.group(1)), int(m.group(2))
        case = _count_case(s, m.start())
        num = cardinal(a, case, "femn")
        one = a % 10 == 1 and a % 100 != 11
        den_case = case if one or case not in ("nomn", "accs") else "gent"
        den = ordinal(b, den_case, "femn", not one)
        return f"{num} {den}"

    return re.sub(r"(?<![\d/.])(\d{1,3})/(\d{1,3})(?![\d/])", frac, s)


def _math(s: str) -> str:
    s = re.sub(r"(?<=[\d\s])=(?=[\s\d])", " равно ", s)
    s = re.sub(r"(?<=\d)\s+\+\s+(?=\d)", " плюс ", s)
    s = re.sub(r"(?<=\d)\s*[×x*]\s*(?=\d)", " на ", s)
    return s


def _ranges(s: str) -> str:
    def rng(m: re.Match) -> str:
        a, b = _to_int(m.group(1)), _to_int(m.group(2))
        case, g, anim = _agree(b, s, m.start(), m.end())
        return f"{cardinal(a, case, g, anim)}-{cardinal(b, case, g, anim)}"

    return re.sub(rf"(?<![\d.,:])({_NUM})\s*[-–—]\s*({_NUM})(?![\d:]|[.,]\d)", rng, s)


def _decimals(s: str) -> str:
    def dec(m: re.Match) -> str:
        case = _count_case(s, m.start()) if _prep_cases(s, m.start()) else "nomn"
        if m.group(2) == "5" and int(m.group(1)):  # "2,5 рубля": два с половиной; "0,5" stays ноль целых пять десятых
            noun = _noun_after(s, m.end())
            readings = noun_readings(noun) if noun else ()
            if readings and not is_adjective(noun):
                gender = readings[0][2]
                if m.group(1) == "1":
                    return one_and_half(gender, case)  # "1,5 года": полтора года
                return f"{cardinal(int(m.group(1)), case, gender)} с половиной"  # "2,5 рубля"
        return decimal(m.group(1), m.group(2), case)

    return re.sub(r"(?<![\d.,])(\d+)[.,](\d+)(?![\d.,]\d)", dec, s)


def _cardinals(s: str) -> str:
    def card(m: re.Match) -> str:
        n = _to_int(m.group(0))
        case, g, anim = _agree(n, s, m.start(), m.end())
        glued = " " if re.match(r"[^\W\d_]", s[m.end() : m.end() + 1]) else ""  # "221Б", "5G"
        return cardinal(n, case, g, anim) + glued

    return re.sub(rf"(?<![\d])(?:{_NUM})", card, s)


# ------------------------------------------------------------------ abbreviations
# (pattern, words, may end a sentence)
_ABBR_FIXED = [
    (r"т\.\s?е\.", "то есть", False),
    (r"т\.\s?д\.", "так далее", True),
    (r"т\.\s?п\.", "тому подобное", True),
    (r"т\.\s?к\.", "так как", False),
    (r"т\.\s?н\.", "так называемый", False),
    (r"н\.\s?э\.", "нашей эры", True),
    (r"(?<=\bи )др\.", "другие", True),
    (r"напр\.", "например", False),
    (r"см\.", "смотри", False),
    (r"им\.", "имени", False),
    (r"тел\.", "телефон", False),
    (r"г-н", "господин", False),
    (r"г-жа", "госпожа", False),
    (r"тыс\.", "тысяч", True),
    (r"млн\.?", "миллионов", True),
    (r"млрд\.?", "миллиардов", True),
    (r"руб\.", "рублей", True),
    (r"коп\.", "копеек", True),
]
# Place abbreviations, inflected by the preposition before them ("на ул." -> "на улице").
_ABBR_PLACE = {
    "ул.": "улица",
    "д.": "дом",
    "кв.": "квартира",
    "г.": "город",
    "пр-т": "проспект",
    "просп.": "проспект",
    "пер.": "переулок",
    "обл.": "область",
    "р-н": "район",
    "корп.": "корпус",
    "пл.": "площадь",
    "эт.": "этаж",
}


def _abbreviations(s: str) -> str:
    for pat, words, final in _ABBR_FIXED:
        s = re.sub(
            rf"(?<![{_L}\w]){pat}", lambda m, w=words, f=final: w + (_stop(s, m.end(), m.group(0)) if f else ""), s
        )

    def place(m: re.Match) -> str:
        abbr = m.group(1)
        lemma = _ABBR_PLACE[abbr.lower()]
        word, _ = _prev(s, m.start())
        preps = _prep_cases(s, m.start())
        if not preps:
            case = "nomn"
        elif word in ("в", "во", "на", "о", "об", "при"):
            case = "loct"
        else:
            case = preps[0]
        return inflect(lemma, case, "sing", after_in=word in ("в", "во", "на"))

    alts = "|".join(re.escape(a) for a in sorted(_ABBR_PLACE, key=len, reverse=True))
    # д., кв., г. only before a number or a capitalised name: "г. Москва", "д. 5"
    s = re.sub(rf"(?<![{_L}\w])({alts})(?=\s*(?:\d|[А-ЯЁ]|[{_L}]+\s))", place, s, flags=re.IGNORECASE)
    s = re.sub(r"№\s*", "номер ", s)
    s = re.sub(r"§\s*", "параграф ", s)
    return s


_RU_LETTERS = {
    "Б": "бэ",
    "В": "вэ",
    "Г": "гэ",
    "Д": "дэ",
    "Ж": "жэ",
    "З": "зэ",
    "Й": "й",
    "К": "ка",
    "Л": "эл",
    "М": "эм",
    "Н": "эн",
    "П": "пэ",
    "Р": "эр",
    "С": "эс",
    "Т": "тэ",
    "Ф": "эф",
    "Х": "ха",
    "Ц": "цэ",
    "Ч": "че",
    "Ш": "ша",
    "Щ": "ща",
    "Ъ": "твёрдый знак",
    "Ь": "мягкий знак",
}
_RU_VOWELS = set("АЕЁИОУЫЭЮЯ")


def _is_spelled(word: str) -> bool:
    """Whether a Cyrillic acronym is said letter by letter (СБП, ГИБДД, ИНН) or as a word (ЕГЭ, МИД, ГОСТ)."""
    vowels = [ch in _RU_VOWELS for ch in word]
    if not any(vowels) or len(set(word)) < len(word):
        return True
    if any(a and b for a, b in zip(vowels, vowels[1:])):
        return True  # ОАО
    return len(word) <= 3 and not vowels[0] and not vowels[1]  # США, СНГ


def _cyrillic_acronyms(s: str) -> str:
    def acronym(m: re.Match) -> str:
        w = m.group(1)
        if not _is_spelled(w):
            return w.lower()
        return " ".join(_RU_LETTERS.get(ch, ch.lower()) for ch in w)

    return re.sub(rf"(?<![{_L}\w])([А-ЯЁ]{{2,5}})(?![{_L}\w])", acronym, s)


_DIGIT_WORDS = ("ноль", "один", "два", "три", "четыре", "пять", "шесть", "семь", "восемь", "девять")


def _codes(s: str) -> str:
    """Codes and passwords are read digit by digit: "код: 4821" -> "четыре восемь два один"."""
    return re.sub(
        r"(?i)(\b(?:код|кода|коду|кодом|пароль|пароля|пин|pin|pin-код|пин-код|cvv|cvc)\b[\s:\-—«\"]*)(\d{3,8})\b",
        lambda m: m.group(1) + " ".join(_DIGIT_WORDS[int(d)] for d in m.group(2)),
        s,
    )


_PER = {
    "мес": "месяц",
    "месяц": "месяц",
    "год": "год",
    "г": "год",
    "день": "день",
    "сут": "сутки",
    "сутки": "сутки",
    "ч": "час",
    "час": "час",
    "нед": "неделю",
    "неделю": "неделю",
    "шт": "штуку",
    "чел": "человека",
    "ночь": "ночь",
    "мин": "минуту",
    "кг": "килограмм",
}


def _per(s: str) -> str:
    """ "500 рублей/мес." -> "500 рублей в месяц" (за штуку, за человека, за килограмм)."""

    def per(m: re.Match) -> str:
        word = _PER[m.group(1).lower()]
        prep = "за" if word in ("штуку", "человека", "килограмм") else "в"
        return f" {prep} {word}" + _stop(s, m.end(), m.group(0))

    alts = "|".join(sorted(_PER, key=len, reverse=True))
    return re.sub(rf"(?<=[{_L}\d.])\s?/\s?({alts})\.?(?![{_L}])", per, s)


_TLD = {"ru": "ру", "com": "ком", "org": "орг", "net": "нет", "рф": "рф", "io": "ай оу", "su": "эс ю"}


def _emails_and_urls(s: str) -> str:
    def domain(d: str) -> str:
        parts = d.lower().split(".")
        return " точка ".join(_TLD.get(p, p) if i == len(parts) - 1 else p for i, p in enumerate(parts))

    s = re.sub(
        r"\b([\w.+-]+)@([\w-]+(?:\.[\w-]+)+)\b",
        lambda m: f"{m.group(1).replace('.', ' точка ')} собака {domain(m.group(2))}",
        s,
    )
    return re.sub(
        r"\b(?:https?://)?(www\.)?((?:[\w-]+\.)+(?:ru|com|org|net|рф|io|su))\b(/\S*)?",
        lambda m: ("вэ вэ вэ точка " if m.group(1) else "") + domain(m.group(2)),
        s,
    )


_WEEKDAYS_RU = {
    "пн": ("понедельник", "понедельника"),
    "вт": ("вторник", "вторника"),
    "ср": ("среда", "среды"),
    "чт": ("четверг", "четверга"),
    "пт": ("пятница", "пятницы"),
    "сб": ("суббота", "субботы"),
    "вс": ("воскресенье", "воскресенья"),
}
_WEEKDAY_ACC = {"среда": "среду", "пятница": "пятницу", "суббота": "субботу"}


def _weekdays(s: str) -> str:
    """ "Пн–Пт" -> "с понедельника по пятницу"; "Сб, Вс" -> "суббота, воскресенье" (capitalised only)."""
    alts = "Пн|Вт|Ср|Чт|Пт|Сб|Вс"

    def span(m: re.Match) -> str:
        a, b = _WEEKDAYS_RU[m.group(1).lower()], _WEEKDAYS_RU[m.group(2).lower()]
        return f"с {a[1]} по {_WEEKDAY_ACC.get(b[0], b[0])}"

    s = re.sub(rf"(?<![{_L}])({alts})\.?\s*[-–—]\s*({alts})(?![{_L}])\.?", span, s)
    return re.sub(rf"(?<![{_L}])({alts})(?=,|\s*:|\s+\d)", lambda m: _WEEKDAYS_RU[m.group(1).lower()][0], s)


def _symbols(s: str) -> str:
    s = re.sub(r"~\s?(?=[$€£₽]?\d)", "около ", s)
    s = re.sub(r"(?:(?<=^)|(?<=\s))<\s?(?=[$€£₽]?\d)", "меньше ", s)
    s = re.sub(r"(?:(?<=^)|(?<=\s))>\s?(?=[$€£₽]?\d)", "больше ", s)
    s = re.sub(r"(?<=\d)\+(?=\s|$|[.,!?])", " плюс", s)  # 18+
    return re.sub(r"(?<![\d/.,])(\d+[.,]\d+)/(\d+)(?![\d/])", r"\1 из \2", s)  # рейтинг 4,5/5


def _versions(s: str) -> str:
    """ "3.11.2" -> "три точка одиннадцать точка два" (after the dates pass took 05.03.2024)."""
    return re.sub(
        r"(?<![\d.])(\d+(?:\.\d+){2,})(?![\d.]\d)",
        lambda m: " точка ".join(cardinal(int(p)) for p in m.group(1).split(".")),
        s,
    )


def normalize_ru(text: str) -> str:
    s = re.sub(r"[\u00a0\u202f\u2009]", " ", text)
    s = s.replace("−", "-")
    s = _emails_and_urls(s)
    s = _codes(s)
    s = _symbols(s)
    s = _weekdays(s)
    s = _phones(s)
    s = _dates(s)
    s = _versions(s)
    s = _years(s)
    s = _times(s)
    s = _signs(s)
    s = _money(s)
    s = _units(s)
    s = _per(s)
    s = _ordinals(s)
    s = _romans(s)
    s = _fractions(s)
    s = _math(s)
    s = _ranges(s)
    s = _decimals(s)
    s = _cardinals(s)
    s = _abbreviations(s)
    s = latin.latin_in_russian(s)
    s = _cyrillic_acronyms(s)
    return re.sub(r"[ \t]{2,}", " ", s).strip()
