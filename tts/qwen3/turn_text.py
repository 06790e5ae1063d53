"""Incremental text tokenisation for a turn: text arrives piece by piece (an LLM's tokens), and the
ids handed out never change when more text arrives.

Stages 1-2 (tts.turn_words): whole words only, a number or abbreviation held until the next word,
the optional normaliser. Stage 3 here: the Qwen2 pre-tokeniser splits text into pieces that BPE
encodes independently, and a piece can only change while it touches the end of the text, so every
piece but the last (and any that reaches the end) is encoded and released.

So the ids released for a text equal `TextTokenizer.encode` of the whole text (and what the
official prompt takes as the target text), whatever the piece boundaries were. Each id carries
the raw-text offset it covers, so the gateway can say which text the played frames spoke.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tts.qwen3.tokenizer import TextTokenizer
from tts.turn_words import TurnWords

PUNCTUATION = (".", "!", "?", ";", ":", ",", "…", "。", "！", "？", "，")  # a long turn is cut after one of these


@dataclass(frozen=True)
class TextToken:
    id: int
    raw_end: int  # the raw text [0, raw_end) is fully spoken once this token has been consumed


class TurnText:
    """One turn's text: `append(piece)` and `finish()` return the newly stable ids (see module doc)."""

    def __init__(self, tokenizer: TextTokenizer, normalize: Callable[[str], str] | None = None):
        self._tok = tokenizer
        self._pre = tokenizer.pre_tokenizer()
        self.words = TurnWords(normalize)
        self._norm_done = 0  # normalised text already encoded
        self.tokens: list[TextToken] = []  # every id released, in order

    @property
    def raw(self) -> str:
        return self.words.raw

    @property
    def finished(self) -> bool:
        return self.words.finished

    @property
    def _norm(self) -> str:
        return self.words.spoken

    # -- stage 3: BPE pieces -------------------------------------------------
    def _encode_stable(self) -> list[TextToken]:
        pending = self._norm[self._norm_done :]
        if self.finished:
            pending = pending.rstrip()  # no trailing blank token (a whole-text prompt has none)
        if not pending:
            return []
        pieces = self._pre(pending)
        if not self.finished:
            # a piece can still grow while it touches the end; the last one always may
            pieces = [stop for stop in pieces[:-1] if stop < len(pending)]
        if not pieces:
            return []
        released, offset = [], self._norm_done
        for stop in pieces:  # piece by piece, so each id knows where its text ends
            stop = self._norm_done + stop
            raw_end = self.words.raw_offset(stop)
            released += [TextToken(tid, raw_end) for tid in self._tok.encode(self._norm[offset:stop])]
            offset = stop
        self._norm_done = offset
        self.tokens += released
        return released

    # -- API -----------------------------------------------------------------
    def append(self, piece: str) -> list[TextToken]:
        self.words.append(piece)
        return self._encode_stable()

    def finish(self) -> list[TextToken]:
        """The rest: the held word, numbers and the last BPE piece."""
        if self.finished:
            return []
        self.words.finish()
        return self._encode_stable()

    def spoken_text(self, consumed: int) -> str:
        """The raw text the first `consumed` released ids speak."""
        if consumed <= 0 or not self.tokens:
            return ""
        return self.raw[: self.tokens[min(consumed, len(self.tokens)) - 1].raw_end].strip()
