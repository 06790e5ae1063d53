"""Turn mode in the batched Qwen3 engine: one request's growing text track (host side).

The loop thread appends text (`put`, `finish`, under the engine's lock); the worker drains it through
the turn tokenizer (tts.qwen3.turn_text) and writes the new text-track rows into the request's batch
slot. The layout is tts.qwen3.turn's: a codec track C (`codec_bos`, then an in-context clone's
reference frames), a text track T = prefix (the clone's transcript) + body + `tts_eos`; the prefill
holds T[:len(C)], and frame f's step adds trailing row f = T[len(C) + f] (then `tts_pad`). A slot whose
next row has not arrived does not step (paused); end-of-speech is masked until the `tts_eos` row.
"""

from __future__ import annotations

import torch

from tts.qwen3.turn_text import TurnText

NEVER = 1 << 30  # eos_at while the text is still coming


class TurnFeed:
    def __init__(self, tokenizer, normalize=None):
        self.text = TurnText(tokenizer, normalize)
        self.inbox: list[str] = []  # pieces from the loop thread, not yet tokenised
        self.finish_asked = False
        self.body: list[int] = []
        self.raw_ends: list[int] = []
        self.finished = False  # every body token is known (the tokenizer flushed)
        self.truncated = 0  # tokens dropped past the slot's room (counted, logged by the engine)
        self.limit: int | None = None  # body tokens the slot has room for (set at admission)
        # set when the prompt is built
        self.prefix: list[int] = []
        self.codec: torch.Tensor | None = None  # [n_c, D]
        self.head: torch.Tensor | None = None  # [L, D]
        self.rows_written = 0  # trailing rows in the batch slot
        self.eos_written = False

    @property
    def n_codec(self) -> int:
        return self.codec.shape[0]

    def drain(self) -> None:
        """Worker, under the lock: tokenise what arrived."""
        pieces, self.inbox = self.inbox, []
        new = []
        for piece in pieces:
            new += self.text.append(piece)
        if self.finish_asked and not self.finished:
            new += self.text.finish()
            self.finished = True
        for tok in new:
            if self.limit is not None and len(self.body) >= self.limit:
                self.truncated += 1
                continue
            self.body.append(tok.id)
            self.raw_ends.append(tok.raw_end)

    def track(self, eos_id: int) -> list[int]:
        """T as known now (with `tts_eos` once finished)."""
        return self.prefix + self.body + ([eos_id] if self.finished else [])

    def can_prefill(self) -> bool:
        """T[:len(C)] is known (and a turn has at least one word, or is finished)."""
        known = len(self.prefix) + len(self.body)
        return (self.finished or bool(self.body)) and (self.finished or known >= self.n_codec)

    def eos_row(self) -> int:
        """Trailing-row index of `tts_eos` (the frame from which end-of-speech is allowed); NEVER before finish."""
        if not self.finished:
            return NEVER
        return max(0, len(self.prefix) + len(self.body) - self.n_codec)

    def consumed(self, frames: int) -> int:
        """Body tokens fed by the steps that made the first `frames` frames."""
        if frames <= 0:
            return 0
        return max(0, min(len(self.body), self.n_codec + frames - 1 - len(self.prefix)))

    def text_end(self, frames: int) -> int:
        """Raw text offset spoken once the first `frames` frames have played."""
        n = self.consumed(frames)
        return self.raw_ends[n - 1] if n else 0
