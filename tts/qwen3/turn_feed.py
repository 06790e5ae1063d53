"""Turn mode in the batched Qwen3 engine: one request's growing text track (host side).

The loop thread appends text (`inbox`, `finish_asked`, under the scheduler's lock); the scheduler drains
it through the turn tokenizer (tts.qwen3.turn_text) and tells the step loop which new text-track rows to
write into the request's batch slot. Host state only (no torch): the step loop keeps the voice head's
tensors here (`head`, `codec`, `pad`) but only it reads them.

The layout is tts.qwen3.turn's: a codec track C (`codec_bos`, then an in-context clone's
reference frames), a text track T = prefix (the clone's transcript) + body + `tts_eos`; the prefill
holds T[:len(C)], and frame f's step adds trailing row f = T[len(C) + f] (then `tts_pad`). A slot whose
next row has not arrived does not step (paused); end-of-speech is masked until the `tts_eos` row.

A turn longer than its slot has room for is cut as tts.qwen3.turn cuts it: after a clause's punctuation
once the segment holds half its room, else at the room; the segment ends there (its `tts_eos`
follows) and the rest continues in a fresh prompt on the same stream (`next_segment`).
"""

from __future__ import annotations

from tts.qwen3.turn_text import PUNCTUATION, TextToken, TurnText

NEVER = 1 << 30  # eos_at while the text is still coming


class TurnFeed:
    def __init__(self, tokenizer, normalize=None):
        self._tok = tokenizer
        self.text = TurnText(tokenizer, normalize)
        self.inbox: list[str] = []  # pieces from the loop thread, not yet tokenised
        self.finish_asked = False
        self.text_done = False  # the tokenizer flushed: no more tokens will come
        self.carry: list[TextToken] = []  # released tokens the current segment does not (yet) take
        self.body: list[int] = []  # the current segment's target text
        self.raw_ends: list[int] = []
        self.finished = False  # the current segment's text is complete (its tts_eos is known)
        self.cut = False  # the segment was cut: the turn continues in a fresh prompt
        self.segments = 1
        self.limit: int | None = None  # body tokens a segment has room for (set at its admission)
        self.frame0 = 0  # the stream's frames before this segment
        self.spoken_before = 0  # raw text offset the earlier segments spoke up to
        self.frame_raw: list[int] = []  # per frame of the stream: raw text offset its steps had consumed
        # set by the step loop when the voice head is built (before that the turn cannot be admitted)
        self.prefix: list[int] = []
        self.n_codec: int | None = None  # codec-track positions of the prefill
        self.head_len = 0  # voice-head positions
        self.codec = None  # torch.Tensor [n_c, D]
        self.head = None  # torch.Tensor [L, D]
        self.pad = None
        self.rows_written = 0  # trailing rows in the batch slot
        self.eos_written = False

    @property
    def has_head(self) -> bool:
        return self.n_codec is not None

    def drain(self) -> None:
        """Worker, under the lock: tokenise what arrived and hand it to the current segment."""
        pieces, self.inbox = self.inbox, []
        for piece in pieces:
            self.carry += self.text.append(piece)
        if self.finish_asked and not self.text_done:
            self.carry += self.text.finish()
            self.text_done = True
        if self.limit is not None:  # a segment takes text once its room is known (its voice head built)
            self._fill()

    def has_text(self) -> bool:
        return bool(self.body or self.carry or self.text_done)

    def fill(self) -> None:
        self._fill()

    def _fill(self) -> None:
        while self.carry and not self.finished:
            tok, n = self.carry[0], len(self.body)
            if self.limit is not None and (
                n >= self.limit
                or (
                    n >= self.limit // 2
                    and self._tok.decode(self.body[-1:]).rstrip().endswith(PUNCTUATION)
                    and self._tok.decode([tok.id]).startswith(" ")
                )
            ):
                self.finished = self.cut = True  # the rest goes to a fresh prompt
                return
            self.body.append(tok.id)
            self.raw_ends.append(tok.raw_end)
            self.carry.pop(0)
        if self.text_done and not self.carry:
            self.finished = True

    def has_next_segment(self) -> bool:
        return self.cut

    def next_segment(self, frames: int) -> None:
        """The segment ended after the stream's first `frames` frames: the rest of the text starts a fresh
        prompt (its first word without the space before it, as a whole-text prompt would start)."""
        self.spoken_before = self.raw_ends[-1] if self.raw_ends else self.spoken_before
        self.frame0 = frames
        self.body, self.raw_ends = [], []
        self.finished = self.cut = False
        self.rows_written, self.eos_written = 0, False
        self.segments += 1
        if self.carry:
            first = [t for t in self.carry if t.raw_end == self.carry[0].raw_end]
            text = self._tok.decode([t.id for t in first])
            if text[:1].isspace() and text.strip():
                self.carry[: len(first)] = [TextToken(i, first[0].raw_end) for i in self._tok.encode(text.lstrip())]
        self._fill()

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

    def note_frame(self, frames: int) -> None:
        """Worker: the stream made its `frames`-th frame; keep the raw text its steps had consumed."""
        k = frames - self.frame0  # frames of this segment
        n = max(0, min(len(self.body), self.n_codec + k - 1 - len(self.prefix)))
        self.frame_raw.append(self.raw_ends[n - 1] if n else self.spoken_before)

    def text_end(self, frames: int) -> int:
        """Raw text offset spoken once the stream's first `frames` frames have played."""
        if frames <= 0 or not self.frame_raw:
            return 0
        return self.frame_raw[min(frames, len(self.frame_raw)) - 1]
