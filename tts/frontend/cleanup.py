"""Text an LLM writes but nobody says: Markdown markers and emoji. Runs before the normalisers."""

from __future__ import annotations

import re

_EMOJI = re.compile(
    "[ \t]*[\U0001f000-\U0001faff\U00002600-\U000027bf\U0001f1e6-\U0001f1ff\u200d\ufe0f\u20e3\u2b50\u2b55\u231a-\u231b\u23e9-\u23fa]+"
)
_EMPHASIS = re.compile(r"(\*\*|__|\*|`+|~~)(?=\S)(.+?)(?<=\S)\1")
_LINE_MARKS = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|>[ \t]?|[-*•][ \t]+)", re.MULTILINE)


def strip_markup(text: str) -> str:
    """'**Важно:** см. `README`' -> 'Важно: см. README'; '- пункт' -> 'пункт'; emoji removed."""
    text = _EMOJI.sub("", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = _LINE_MARKS.sub("", text)
    return text
