"""Turn mode in the batched Qwen3 engine: one request's growing text track (host side).

The loop thread tokenises each piece of text as it comes (`tokenize`, `tokenize_end`: the turn tokenizer,
tts.qwen3.turn_text, outside any lock) and hands the ids over (`inbox`, `finish_asked`, under the scheduler's
lock); the scheduler drains them into the current segment and tells the step loop which new text-track rows to
write into the request's batch slot. Host state only (no torch), the scheduler's: the voice head's tensors
are the step loop's own (it reports their lengths, `Scheduler.head_built`).

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
        self.inbox: list[TextToken] = []  # ids tokenised on the loop thread, not yet taken by the scheduler
        # id -> (its text ends a clause, it starts a word): what a segment cut reads, decoded on the loop thread
        self.flags: dict[int, tuple[bool, bool]] = {}
        self.restart: dict[tuple, list[int]] = {}  # a word's ids -> its ids without its leading space
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
        # set once the voice head is built (`Scheduler.head_built`; before that the turn cannot be admitted)
        self.prefix: list[int] = []
        self.n_codec: int | None = None  # codec-track positions of the prefill
        self.head_len = 0  # voice-head positions
        self.rows_written = 0  # trailing rows in the batch slot
        self.eos_written = False

    @property
    def has_head(self) -> bool:
        return self.n_codec is not None

    def tokenize(self, piece: str) -> list[TextToken]:
        """Loop thread, no lock held: the ids `piece` makes stable (hand them over through `inbox`)."""
        return self._known(self.text.append(piece))

    def tokenize_end(self) -> list[TextToken]:
        """Loop thread, no lock held: the last ids once the text is complete."""
        return self._known(self.text.finish())

    def _known(self, tokens: list[TextToken]) -> list[TextToken]:
        for t in tokens:  # decoded here rather than under the lock
            self._flags(t.id)
        for end in {t.raw_end for t in tokens}:  # a word that may start a fresh segment, re-encoded without its space
            self._restart([t for t in tokens if t.raw_end == end])
        return tokens

    def _restart(self, word: list[TextToken]) -> list[int] | None:
        key = tuple(t.id for t in word)
        ids = self.restart.get(key)
        if ids is None:
            text = self._tok.decode(list(key))
            ids = self.restart[key] = self._tok.encode(text.lstrip()) if text[:1].isspace() and text.strip() else []
        return ids or None

    def _flags(self, token_id: int) -> tuple[bool, bool]:
        f = self.flags.get(token_id)
        if f is None:  # (under the lock only for the ids a cut re-encodes: the first word of a fresh segment)
            text = self._tok.decode([token_id])
            f = self.flags[token_id] = (text.rstrip().endswith(PUNCTUATION), text.startswith(" "))
        return f

    def drain(self) -> None:
        """Worker, under the lock: hand the ids that arrived to the current segment."""
        tokens, self.inbox = self.inbox, []
        self.carry += tokens
        if self.finish_asked and not self.text_done:
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
                n >= self.limit or (n >= self.limit // 2 and self._flags(self.body[-1])[0] and self._flags(tok.id)[1])
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
            ids = self._restart(first)  # made on the loop thread when the word came
            if ids is not None:
                self.carry[: len(first)] = [TextToken(i, first[0].raw_end) for i in ids]
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
