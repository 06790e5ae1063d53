"""Sentence chunker for LLM token streams: pieces of any size in, text chunks out.

Interface used by the session: `Chunker(...)`, `push(piece) -> list[str]`,
`flush() -> list[str]` (end of turn). Chunks concatenate back to the input.
"""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]»]*\s")


class Chunker:
    def __init__(self, first_chunk_words: int = 6, max_chunk_chars: int = 250, min_chunk_chars: int = 1):
        self.first_chunk_words = first_chunk_words
        self.max_chunk_chars = max_chunk_chars
        self.min_chunk_chars = min_chunk_chars
        self._buf = ""
        self._emitted = 0

    def push(self, piece: str) -> list[str]:
        self._buf += piece
        out: list[str] = []
        while True:
            m = _SENTENCE_END.search(self._buf)
            if not m:
                break
            cut = m.end()
            out.append(self._buf[:cut])
            self._buf = self._buf[cut:]
        if len(self._buf) > self.max_chunk_chars:
            cut = self._buf.rfind(" ", 0, self.max_chunk_chars) + 1 or self.max_chunk_chars
            out.append(self._buf[:cut])
            self._buf = self._buf[cut:]
        out = [c for c in out if c.strip()]
        self._emitted += len(out)
        return out

    def flush(self) -> list[str]:
        rest, self._buf = self._buf, ""
        return [rest] if rest.strip() else []
