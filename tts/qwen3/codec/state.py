"""Per-stream history of the streaming codec decoder.

A state is a batch of rows, one per stream. Row b holds everything the
decoder must remember about stream b between steps: how many codec frames it
has decoded (`frames`, which sets RoPE positions and which attention-cache
entries are real), the last `window - 1` keys and values of every attention
layer, and the left context of every causal (transposed) convolution. All
buffers have the batch on dim 0, so rows can be picked, stacked and written
back without knowing what the buffers mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from tts.qwen3.codec.config import CodecError
from tts.qwen3.staging import to_device

Rows = Sequence[int] | torch.Tensor


@dataclass
class StreamingCodecState:
    frames: torch.Tensor  # [B] int64, codec frames decoded so far per row
    buffers: list[torch.Tensor]  # each [B, ...]; slot order fixed by the decoder

    @property
    def batch_size(self) -> int:
        return int(self.frames.shape[0])

    @property
    def device(self) -> torch.device:
        return self.frames.device

    def check_codes(self, codes: torch.Tensor, num_quantizers: int) -> None:
        """Codes for the next step of every row must be [rows, frames, num_quantizers] (CodecError if not)."""
        if codes.dim() != 3 or codes.shape[2] != num_quantizers:
            raise CodecError("bad_codes", f"codes must be [batch, frames, {num_quantizers}], got {tuple(codes.shape)}")
        if codes.shape[0] != self.batch_size:
            raise CodecError("bad_codes", f"codes have {codes.shape[0]} rows, the state {self.batch_size}")

    def _index(self, rows: Rows) -> torch.Tensor:
        if isinstance(rows, torch.Tensor):
            return rows.to(self.device, torch.long, non_blocking=True)
        return to_device(rows, self.device, torch.long)  # pinned and non-blocking: a lane reset does not wait

    def select(self, rows: Rows) -> "StreamingCodecState":
        """A new state holding copies of the given rows, in that order."""
        idx = self._index(rows)
        return StreamingCodecState(
            frames=self.frames.index_select(0, idx),
            buffers=[b.index_select(0, idx) for b in self.buffers],
        )

    def assign(self, rows: Rows, other: "StreamingCodecState") -> None:
        """Write `other`'s rows into rows `rows` of this state, in place."""
        idx = self._index(rows)
        if other.batch_size != idx.numel() or len(other.buffers) != len(self.buffers):
            raise ValueError("assign: row count or layout does not match")
        self.frames.index_copy_(0, idx, other.frames)
        for mine, theirs in zip(self.buffers, other.buffers):
            mine.index_copy_(0, idx, theirs.to(mine.dtype))

    def reset(self, rows: Rows) -> None:
        """Make rows fresh streams again (a slot handed to a new stream), in place."""
        idx = self._index(rows)
        self.frames.index_fill_(0, idx, 0)
        for buf in self.buffers:
            buf.index_fill_(0, idx, 0)

    def split(self) -> list["StreamingCodecState"]:
        """One independent single-row state per row (contiguous copies)."""
        return [self.select([b]) for b in range(self.batch_size)]

    @classmethod
    def stack(cls, states: Sequence["StreamingCodecState"]) -> "StreamingCodecState":
        """Rows of all `states`, in order, as one batch (copies)."""
        if not states:
            raise ValueError("stack: no states")
        layout = len(states[0].buffers)
        if any(len(s.buffers) != layout for s in states):
            raise ValueError("stack: states come from different decoders")
        return cls(
            frames=torch.cat([s.frames for s in states]),
            buffers=[torch.cat([s.buffers[i] for s in states]) for i in range(layout)],
        )

    def clone(self) -> "StreamingCodecState":
        return StreamingCodecState(self.frames.clone(), [b.clone() for b in self.buffers])

    def copy_from(self, other: "StreamingCodecState") -> None:
        """Overwrite this state with `other` (same rows and layout), keeping this state's storage."""
        if other.batch_size != self.batch_size or len(other.buffers) != len(self.buffers):
            raise ValueError("copy_from: row count or layout does not match")
        self.frames.copy_(other.frames)
        for mine, theirs in zip(self.buffers, other.buffers):
            mine.copy_(theirs)
