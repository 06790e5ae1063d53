"""Text an LLM writes but nobody says: Markdown markers and emoji. Runs before the normalisers."""

from __future__ import annotations

import re

_EMOJI = re.compile(
    "[ \t]*[\U0001F000-\U0001FAFF\U00002600-\U000027BF\U0001F1E6-\U0001F1FF\u200d\ufe0f\u20e3\u2B50\u2B55\u231A-\u231B\u23E9-\u23FA]+"
)
_EMPHASIS = re.compile(r"(\*\*|__|\*|`+|~~)(?=\S)(.+?)(?<=\S)\1")
_LINE_MARKS = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|>[ \t]?|[-*•][ \t]+)", re.MULTILINE)


def strip_markup(text: str) -> str:
    """'**Важно:** см. `README`' -> 'Важно: см. README'; '- пункт' -> 'пункт'; emoji removed."""
    text = _EMOJI.sub("", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = _LINE_MARKS.sub("", text)
    return text
