"""The aligner's text side: which words it times, and the monotonic fix-up of its raw timestamps.

Words are the whitespace-separated tokens of the text with everything but letters, digits and
the apostrophe removed (tokens left empty are not timed); CJK ideographs are words of their own.
This is the official splitter for every language but Japanese and Korean, which it segments with
nagisa / soynlp dictionaries that are not ported: for those the same rule applies.

Each word gets two timestamp slots (start, end). The official fix-up keeps the longest
non-decreasing subsequence of the predicted times and replaces the rest: runs of at most two by
the nearer kept neighbour, longer runs by a linear ramp between the kept values on either side.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

TIMESTAMP = "<timestamp>"


@dataclass(frozen=True)
class Word:
    text: str  # what the aligner sees (cleaned)
    char_start: int  # the whitespace token of the original text it came from
    char_end: int


def _kept(ch: str) -> bool:
    return ch == "'" or unicodedata.category(ch)[0] in "LN"


def _cjk(ch: str) -> bool:
    o = ord(ch)
    return (
        0x4E00 <= o <= 0x9FFF
        or 0x3400 <= o <= 0x4DBF
        or 0x20000 <= o <= 0x2A6DF
        or 0x2A700 <= o <= 0x2B73F
        or 0x2B740 <= o <= 0x2B81F
        or 0x2B820 <= o <= 0x2CEAF
        or 0xF900 <= o <= 0xFAFF
    )


def split_words(text: str) -> list[Word]:
    words: list[Word] = []
    pos = 0
    for token in text.split():
        start = text.index(token, pos)
        pos = start + len(token)
        cleaned = "".join(ch for ch in token if _kept(ch))
        buf = ""
        for ch in cleaned:
            if _cjk(ch):
                if buf:
                    words.append(Word(buf, start, pos))
                    buf = ""
                words.append(Word(ch, start, pos))
            else:
                buf += ch
        if buf:
            words.append(Word(buf, start, pos))
    return words


def _longest_non_decreasing(values: list[float]) -> list[bool]:
    """Which entries form the longest non-decreasing subsequence (the earliest-ending one on ties, as the
    official O(n^2) search picks it)."""
    n = len(values)
    length, parent = [1] * n, [-1] * n
    for i in range(1, n):
        for j in range(i):
            if values[j] <= values[i] and length[j] + 1 > length[i]:
                length[i], parent[i] = length[j] + 1, j
    kept = [False] * n
    i = length.index(max(length)) if n else -1
    while i != -1:
        kept[i] = True
        i = parent[i]
    return kept


def fix_timestamps(values: list[float]) -> list[int]:
    """Raw per-slot times (ms) -> non-decreasing times (ms), the official `fix_timestamp`."""
    kept = _longest_non_decreasing(values)
    out = list(values)
    n, i = len(values), 0
    while i < n:
        if kept[i]:
            i += 1
            continue
        j = i
        while j < n and not kept[j]:
            j += 1
        left = next((out[k] for k in range(i - 1, -1, -1) if kept[k]), None)
        right = next((values[k] for k in range(j, n) if kept[k]), None)
        for k in range(i, j):
            if left is None or right is None:
                out[k] = right if left is None else left
            elif j - i <= 2:
                out[k] = left if (k - (i - 1)) <= (j - k) else right
            else:
                out[k] = left + (right - left) / (j - i + 1) * (k - i + 1)
        i = j
    return [int(v) for v in out]
