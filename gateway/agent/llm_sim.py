"""A stand-in for an agent's LLM: streams a known reply as token-like pieces.

Used by the gateway's built-in agent when `llm.kind: simulated`, by the load
tester's callers and by demos. It models only timing — a time to first token
and a steady token rate — so load tests measure the gateway, not a model.
Dependency-free on purpose (stdlib only).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from typing import AsyncIterator

# A "token" here is a word with its leading whitespace, or a run of punctuation:
# close enough to BPE pieces for pacing, and the pieces concatenate back to the text.
_PIECE = re.compile(r"\s*[\w'’-]+|\s*[^\w\s]+|\s+")


def split_pieces(text: str, max_piece_chars: int = 8) -> list[str]:
    """Cut `text` into token-like pieces; long words are cut every `max_piece_chars` characters.

    `"".join(split_pieces(t)) == t` always holds.
    """
    pieces: list[str] = []
    for m in _PIECE.finditer(text):
        piece = m.group(0)
        while len(piece) > max_piece_chars:
            pieces.append(piece[:max_piece_chars])
            piece = piece[max_piece_chars:]
        if piece:
            pieces.append(piece)
    return pieces


class LlmSimulator:
    """Streams a reply at an LLM's pace: `ttft_ms`, then `tokens_per_s`.

    With `jitter` > 0 the time to first token and each token interval vary by
    up to that relative amount (uniform), drawn from a RNG seeded by `seed`,
    so a run with the same seed paces the same way. The schedule is absolute:
    a late wake-up is caught up, never carried into the following pieces.
    """

    def __init__(
        self,
        ttft_ms: float = 300.0,
        tokens_per_s: float = 40.0,
        seed: int | None = None,
        jitter: float = 0.0,
        max_piece_chars: int = 8,
    ):
        if ttft_ms < 0:
            raise ValueError("ttft_ms must be >= 0")
        if tokens_per_s <= 0:
            raise ValueError("tokens_per_s must be > 0")
        if not 0.0 <= jitter < 1.0:
            raise ValueError("jitter must be in [0, 1)")
        self.ttft_ms = float(ttft_ms)
        self.tokens_per_s = float(tokens_per_s)
        self.jitter = float(jitter)
        self.max_piece_chars = max_piece_chars
        self._rng = random.Random(seed)

    def _vary(self, value: float) -> float:
        if self.jitter == 0.0:
            return value
        return value * (1.0 + self._rng.uniform(-self.jitter, self.jitter))

    def schedule(self, reply_text: str) -> list[tuple[float, str]]:
        """(offset in seconds from the request, piece) for every piece of the reply."""
        out: list[tuple[float, str]] = []
        t = self._vary(self.ttft_ms) / 1000.0
        interval = 1.0 / self.tokens_per_s
        for i, piece in enumerate(split_pieces(reply_text, self.max_piece_chars)):
            if i:
                t += self._vary(interval)
            out.append((t, piece))
        return out

    async def stream(self, reply_text: str) -> AsyncIterator[str]:
        """Yield the reply's pieces at the simulated pace (the first after the time to first token)."""
        start = time.monotonic()
        for offset, piece in self.schedule(reply_text):
            delay = start + offset - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            yield piece
