"""The torch vocoder backend: `CodecDecoder` eager, or on CUDA replayed from captured graphs.

Graphs are captured at start, one per (batch bucket, packet length): buckets
1, 2, 4, … up to max_batch (and max_batch itself), packets as configured
(1, 2, 4). They share one memory pool and one static state of max_batch rows
(a bucket's graph works on its first rows), so memory is one slot state plus
the largest step's activations. A call copies its rows' state and codes into
the static tensors, replays the smallest bucket that holds them, and copies
the new state back (rows past B in the bucket decode leftovers: rows are
independent, and their output is dropped). A packet length without a graph
is split into captured ones (chunking never changes the output).
"""

from __future__ import annotations

import logging
from typing import Sequence

import torch

from tts.qwen3.codec.state import StreamingCodecState
from tts.qwen3.codec.vocoder_base import Vocoder, split_packet

log = logging.getLogger("voxgate.vocoder")


def batch_buckets(max_batch: int) -> list[int]:
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return out + [max_batch]


class TorchVocoder(Vocoder):
    kind = "torch"

    def __init__(
        self, decoder, max_batch: int = 64, packets: Sequence[int] = (1, 2, 4), cuda_graphs: bool | None = None
    ):
        specs = [(tuple(b.shape[1:]), b.dtype) for b in decoder.new_state(1).buffers]
        super().__init__(decoder.config, decoder.device, specs, max_batch, packets)
        self.decoder = decoder
        self.cuda_graphs = self.device.type == "cuda" if cuda_graphs is None else bool(cuda_graphs)
        if self.cuda_graphs and self.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        if self.cuda_graphs:
            self._capture_all()

    @property
    def name(self) -> str:
        return "torch-cuda-graphs" if self.cuda_graphs else f"torch-eager-{self.device.type}"

    def describe(self) -> dict:
        return {**super().describe(), "graphs": len(self._graphs)}

    def _step(self, codes: torch.Tensor, state: StreamingCodecState) -> torch.Tensor:
        if not self.cuda_graphs:
            return self.decoder.decode_step(codes, state)
        parts, start = [], 0
        for t in split_packet(codes.shape[1], self.packets):
            parts.append(self._replay(codes[:, start : start + t], state))
            start += t
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    # -- CUDA graphs ----------------------------------------------------------

    def _capture_all(self) -> None:
        q = self.config.num_quantizers
        self._static = self.decoder.new_state(self.max_batch)
        self._codes = {t: torch.zeros(self.max_batch, t, q, dtype=torch.long, device=self.device) for t in self.packets}
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(self.device)
        # Largest first: later (smaller) captures reuse the pool's blocks.
        for bucket in reversed(batch_buckets(self.max_batch)):
            for t in self.packets:
                view = self._view(bucket)
                codes = self._codes[t][:bucket]
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):  # warm-up outside capture (allocator, cuDNN plans)
                    for _ in range(2):
                        self.decoder.decode_step(codes, view)
                torch.cuda.current_stream(self.device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    pcm = self.decoder.decode_step(codes, view)
                self._graphs[(bucket, t)] = (graph, pcm)
        self._static.reset(list(range(self.max_batch)))
        log.info(
            "vocoder: captured %d CUDA graphs (buckets %s x packets %s)",
            len(self._graphs),
            batch_buckets(self.max_batch),
            self.packets,
        )

    def _view(self, rows: int) -> StreamingCodecState:
        return StreamingCodecState(self._static.frames[:rows], [b[:rows] for b in self._static.buffers])

    def _replay(self, codes: torch.Tensor, state: StreamingCodecState) -> torch.Tensor:
        b, t = codes.shape[0], codes.shape[1]
        bucket = next(x for x in batch_buckets(self.max_batch) if x >= b)
        graph, pcm = self._graphs[(bucket, t)]
        view = self._view(b)
        view.copy_from(state)
        self._codes[t][:b].copy_(codes)
        graph.replay()
        state.copy_from(view)
        return pcm[:b].clone()
