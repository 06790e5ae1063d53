"""The vocoder interface every backend implements, and the helpers backends share.

Apart from `vocoder.py` (the factory that picks a backend) so that backends import
this module, never the factory that imports them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch

from tts.qwen3.codec.config import CodecConfig, CodecError
from tts.qwen3.codec.state import StreamingCodecState


class Vocoder:
    """Base: checks, row selection and offline decode around a backend's `_step`."""

    kind = "?"

    def __init__(
        self,
        config: CodecConfig,
        device: torch.device,
        state_specs: list[tuple[tuple[int, ...], torch.dtype]],
        max_batch: int,
        packets: Sequence[int],
    ):
        self.config = config
        self.device = torch.device(device)
        self.state_specs = state_specs
        self.max_batch = int(max_batch)
        # 1 is always there: any frame count splits into captured packet sizes (graphs, TensorRT profiles)
        self.packets = tuple(sorted({1, *(int(p) for p in packets)}))
        if self.packets[0] < 1 or self.max_batch < 1:
            raise CodecError(
                "vocoder_unavailable", f"packets must be >= 1 and max_batch >= 1, got {packets}, {max_batch}"
            )

    @property
    def name(self) -> str:
        return self.kind

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.name,
            "device": str(self.device),
            "max_batch": self.max_batch,
            "packets": list(self.packets),
        }

    def new_state(self, batch_size: int) -> StreamingCodecState:
        """Fresh streams (zeros = the official left padding) in this backend's layout and device."""
        buffers = [
            torch.zeros((batch_size, *shape), dtype=dtype, device=self.device) for shape, dtype in self.state_specs
        ]
        return StreamingCodecState(torch.zeros(batch_size, dtype=torch.long, device=self.device), buffers)

    @torch.no_grad()
    def decode_step(
        self, codes: torch.Tensor, state: StreamingCodecState, rows: Sequence[int] | torch.Tensor | None = None
    ) -> torch.Tensor:
        """Decode the next t frames of every row: codes [B, t, Q] → float32 [B, t·samples_per_frame].
        With `rows`, row i of `codes` continues state row rows[i] and only those rows advance."""
        if rows is not None:
            sub = state.select(rows)
            wav = self.decode_step(codes, sub)
            state.assign(rows, sub)
            return wav
        state.check_codes(codes, self.config.num_quantizers)
        if len(state.buffers) != len(self.state_specs):
            raise CodecError("bad_state", "the state was made by a different decoder layout")
        b, t, _ = codes.shape
        if t == 0:
            return torch.zeros(b, 0, device=self.device)
        codes = codes.to(self.device, torch.long, non_blocking=True)  # on the device already: no copy
        if b > self.max_batch:  # more rows than the backend was built for: in pieces (rows are independent)
            parts = []
            for s in range(0, b, self.max_batch):
                rows_ = list(range(s, min(b, s + self.max_batch)))
                parts.append(self.decode_step(codes[s : s + self.max_batch], state, rows=rows_))
            return torch.cat(parts)
        return self._step(codes, state)

    def _step(self, codes: torch.Tensor, state: StreamingCodecState) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, codes: torch.Tensor, chunk_frames: int | None = None) -> torch.Tensor:
        """Offline decode through this backend (fresh state, packets of the largest size)."""
        chunk = chunk_frames or max(self.packets)
        state = self.new_state(codes.shape[0])
        pieces = [self.decode_step(codes[:, s : s + chunk], state) for s in range(0, codes.shape[1], chunk)]
        return torch.cat(pieces, dim=1) if pieces else torch.zeros(codes.shape[0], 0, device=self.device)


def split_packet(t: int, packets: Sequence[int]) -> list[int]:
    """t frames as a sum of packet sizes, largest first (chunking never changes the output)."""
    out, left = [], t
    for p in sorted(packets, reverse=True):
        while left >= p:
            out.append(p)
            left -= p
    if left:
        raise ValueError(f"{t} frames cannot be made of packets {tuple(packets)}")
    return out


def default_cache_dir() -> Path:
    root = os.environ.get("VOXGATE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "voxgate")
    return Path(root) / "vocoder"
