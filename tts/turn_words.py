"""Turn mode's word stage (pure Python, no model): text arrives piece by piece, whole words leave.

* the unfinished last word waits (the next piece may continue it);
* a word with a digit, or an abbreviation ("Dr.", "т.", "e.g."), waits for the next whole word,
  so a normaliser reads "3 000 рублей" or "5 km" together;
* each released stretch goes through the normaliser (optional), its edge whitespace kept, and the
  map from normalised offsets back to the raw text is kept (for `played_text`).

Used by the gateway (normalise, then append to the engine's turn) and by the Qwen3 turn tokenizer
(tts.qwen3.turn_text), which adds the BPE stage.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Callable

_DIGIT = re.compile(r"\d")
_ABBREVIATION = re.compile(r"^[^\W\d_]{1,3}\.$|\w\.\w")  # "Dr.", "т.", "e.g.", "U.S."
_WORD = re.compile(r"\S+")
MAX_HELD_WORDS = 6  # a run of numbers ("+7 999 123 45 67") is released after this many, held or not


@dataclass
class _Segment:  # a released stretch of raw text and its normalised form
    raw_start: int
    raw_end: int
    norm_start: int
    norm_end: int
    verbatim: bool  # normalised form == raw text (offsets map char by char)


def holds_next_word(word: str) -> bool:
    """A word the normaliser may read together with the next one."""
    return bool(_DIGIT.search(word) or _ABBREVIATION.search(word))


class TurnWords:
    """`append(piece)` / `finish()` -> the newly released normalised text (see the module doc)."""

    def __init__(self, normalize: Callable[[str], str] | None = None):
        self._normalize = normalize
        self.raw = ""  # everything appended
        self.spoken = ""  # everything released, normalised
        self._raw_done = 0
        self._segments: list[_Segment] = []
        self.finished = False

    def _release_point(self) -> int:
        """Raw offset up to which whole words can be released (the start of the first held word)."""
        if self.finished:
            return max(len(self.raw.rstrip()), self._raw_done)
        words = list(_WORD.finditer(self.raw, self._raw_done))
        if not words:
            return self._raw_done
        complete = words if self.raw[-1].isspace() else words[:-1]
        cut, held = self._raw_done, 0
        for i, m in enumerate(complete):
            if holds_next_word(m.group()) and held < MAX_HELD_WORDS:
                held += 1
                continue  # released together with the next whole word that does not hold
            held = 0
            cut = words[i + 1].start() if i + 1 < len(words) else len(self.raw)
        return cut

    def _release(self, end: int) -> str:
        if end <= self._raw_done:
            return ""
        raw = self.raw[self._raw_done : end]
        core = raw.strip()
        lead = raw[: len(raw) - len(raw.lstrip())]
        trail = raw[len(raw.rstrip()) :]
        said = self._normalize(core) if (self._normalize and core) else core
        if self._raw_done == 0 or not self.spoken:
            lead = ""  # the turn starts at its first word (as a whole-text prompt would be stripped)
        norm = unicodedata.normalize("NFC", lead + said + trail)
        start = len(self.spoken)
        self.spoken += norm
        self._segments.append(
            _Segment(self._raw_done, end, start, len(self.spoken), verbatim=norm == self.raw[self._raw_done : end])
        )
        self._raw_done = end
        return norm

    def append(self, piece: str) -> str:
        if self.finished:
            raise ValueError("the turn's text is finished")
        self.raw += piece
        return self._release(self._release_point())

    def finish(self) -> str:
        """The rest: the held word and numbers (trailing whitespace dropped)."""
        if self.finished:
            return ""
        self.finished = True
        return self._release(self._release_point())

    def raw_offset(self, spoken_end: int) -> int:
        """Raw text fully covered by the normalised text [0, spoken_end)."""
        for seg in self._segments:
            if seg.norm_start <= spoken_end <= seg.norm_end:
                if spoken_end == seg.norm_end:
                    return seg.raw_end
                if seg.verbatim:
                    return seg.raw_start + (spoken_end - seg.norm_start)
                return seg.raw_start
        return self._segments[-1].raw_end if self._segments else 0

    def raw_text(self, spoken_end: int) -> str:
        """The raw text the normalised text [0, spoken_end) speaks."""
        return self.raw[: self.raw_offset(spoken_end)].strip()
