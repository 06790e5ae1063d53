"""The 12 Hz codec decoder: codes [B, T, 16] → 24 kHz waveform [B, T·1920].

RVQ sum → causal conv → sliding-window transformer → 2× (transposed conv ×2
+ ConvNeXt) → causal conv → 4 SnakeBeta upsampling blocks → SnakeBeta →
1-channel conv → clamp ±1. There is one code path: `decode_step` runs a
chunk of frames against a per-stream state; `decode` is `decode_step` on a
fresh state (in chunks, which changes nothing but peak memory).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import torch
from torch import nn

from tts.qwen3.codec.config import CodecConfig, CodecError
from tts.qwen3.codec.layers import CausalConv1d, CausalConvTranspose1d, ConvNeXtBlock, DecoderBlock, SnakeBeta
from tts.qwen3.codec.quantizer import SplitResidualVectorQuantizer
from tts.qwen3.codec.state import StreamingCodecState
from tts.qwen3.codec.transformer import SlidingWindowTransformer

OFFLINE_CHUNK_FRAMES = 300  # bounds peak activation memory only; output is chunking-invariant


class CodecDecoder(nn.Module):
    def __init__(self, config: CodecConfig):
        super().__init__()
        cfg = self.config = config
        self.quantizer = SplitResidualVectorQuantizer(cfg.num_quantizers, cfg.codebook_size, cfg.codebook_dim)
        self.pre_conv = CausalConv1d(cfg.codebook_dim, cfg.latent_dim, kernel_size=3)
        self.pre_transformer = SlidingWindowTransformer(cfg)
        self.upsample = nn.ModuleList(
            nn.ModuleList([CausalConvTranspose1d(cfg.latent_dim, cfg.latent_dim, f, f), ConvNeXtBlock(cfg.latent_dim)])
            for f in cfg.upsampling_ratios
        )
        blocks = [
            DecoderBlock(cfg.decoder_dim // 2**i, cfg.decoder_dim // 2 ** (i + 1), rate)
            for i, rate in enumerate(cfg.upsample_rates)
        ]
        self.decoder = nn.ModuleList(
            [
                CausalConv1d(cfg.latent_dim, cfg.decoder_dim, kernel_size=7),
                *blocks,
                SnakeBeta(cfg.output_dim),
                CausalConv1d(cfg.output_dim, 1, kernel_size=7),
            ]
        )
        slot = 0
        for module in self._stateful():
            module.slot = slot
            slot += len(module.state_specs())

    def _stateful(self) -> Iterator[nn.Module]:
        return (m for m in self.modules() if hasattr(m, "state_specs") and m.state_specs())

    # -- precision and set-up -------------------------------------------------

    def set_precision(self, dtype: torch.dtype = torch.float32, conv_dtype: torch.dtype = torch.float32) -> None:
        """The 12.5 Hz part (RVQ projections, pre-conv, transformer) in `dtype`; the
        upsampling convolutions in `conv_dtype`; SnakeBeta and codebook statistics always fp32."""
        for name, param in self.named_parameters():
            owner = self.get_submodule(name.rsplit(".", 1)[0])
            if isinstance(owner, SnakeBeta) or "._codebook." in name:
                target = torch.float32
            elif name.startswith(("upsample.", "decoder.")):
                target = conv_dtype
            else:
                target = dtype
            param.data = param.data.to(target)
        self.prepare()

    def prepare(self) -> None:
        """Derive what checkpoints do not store (lookup tables, RoPE frequencies, folded
        Snake and polyphase weights); call again after changing parameters."""
        with torch.no_grad():
            self.quantizer.prepare(self.pre_conv.conv.weight.dtype)
            self.pre_transformer.prepare()
            for module in self.modules():
                if isinstance(module, (CausalConvTranspose1d, SnakeBeta)):
                    module.prepare()

    @property
    def device(self) -> torch.device:
        return self.pre_conv.conv.weight.device

    @property
    def conv_dtype(self) -> torch.dtype:
        return self.decoder[0].conv.weight.dtype

    # -- streaming ------------------------------------------------------------

    def new_state(self, batch_size: int) -> StreamingCodecState:
        """History of `batch_size` fresh streams (zeros = the official left padding)."""
        device = self.device
        buffers = [
            torch.zeros((batch_size, *shape), dtype=dtype, device=device)
            for module in self._stateful()
            for shape, dtype in module.state_specs()
        ]
        return StreamingCodecState(torch.zeros(batch_size, dtype=torch.long, device=device), buffers)

    @torch.no_grad()
    def decode_step(
        self, codes: torch.Tensor, state: StreamingCodecState, rows: Sequence[int] | torch.Tensor | None = None
    ) -> torch.Tensor:
        """Decode the next t frames of every row: codes [B, t, Q] → float32 [B, t·samples_per_frame].

        Advances `state` in place (its tensors keep their storage). With `rows`,
        only those rows of a larger slot state are stepped (codes row i
        continues state row rows[i]); the others are left as they are. Codes are
        clamped into the codebook (no host sync; an out-of-range id must not
        crash a device shared by other streams).
        """
        if rows is not None:
            sub = state.select(rows)
            wav = self.decode_step(codes, sub)
            state.assign(rows, sub)
            return wav
        state.check_codes(codes, self.config.num_quantizers)
        b, t, _ = codes.shape
        if t == 0:
            return torch.zeros(b, 0, device=self.device)
        codes = codes.to(self.device, torch.long, non_blocking=True)  # on the device already: no copy
        wav, buffers = self.step(codes, state.frames, list(state.buffers))
        # In place: a state's tensors keep their storage across steps (CUDA graphs, slot views).
        for kept, new in zip(state.buffers, buffers):
            kept.copy_(new)
        state.frames.add_(t)
        return wav

    def step(
        self, codes: torch.Tensor, frames: torch.Tensor, buffers: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The pure streaming step (what the ONNX export traces): codes [B, t, Q] int64, frames [B]
        decoded so far, the state buffers → (float32 [B, t·samples_per_frame], the new buffers).
        Nothing is written in place; `buffers` is a list this call may rebind entries of."""
        codes = codes.clamp(0, self.config.codebook_size - 1)
        x = self.quantizer(codes)
        x = self.pre_conv(x.transpose(1, 2), buffers).transpose(1, 2)
        x = self.pre_transformer(x, frames, buffers)
        x = x.transpose(1, 2).to(self.conv_dtype)
        for stage in self.upsample:
            for layer in stage:
                x = layer(x, buffers)
        for layer in self.decoder:
            x = layer(x, buffers)
        return x[:, 0].float().clamp(-1.0, 1.0), buffers

    def decode_streams(self, codes: torch.Tensor, states: Sequence[StreamingCodecState]) -> torch.Tensor:
        """One batched step for several independent streams, each with its own state object.

        Row i of `codes` continues `states[i]` (single- or multi-row states, rows
        in order); every state object is advanced in place.
        """
        batch = StreamingCodecState.stack(states)
        wav = self.decode_step(codes, batch)
        start = 0
        for state in states:
            rows = list(range(start, start + state.batch_size))
            state.copy_from(batch.select(rows))
            start += state.batch_size
        return wav

    # -- offline --------------------------------------------------------------

    @torch.no_grad()
    def decode(self, codes: torch.Tensor, chunk_frames: int = OFFLINE_CHUNK_FRAMES) -> torch.Tensor:
        """codes [B, T, Q] (every id in 0..codebook_size-1) → float32 waveform [B, T·samples_per_frame]."""
        cfg = self.config
        if codes.dim() != 3 or codes.shape[2] != cfg.num_quantizers:
            raise CodecError(
                "bad_codes", f"codes must be [batch, frames, {cfg.num_quantizers}], got {tuple(codes.shape)}"
            )
        if codes.dtype.is_floating_point or codes.dtype == torch.bool:
            raise CodecError("bad_codes", f"codes must be integers, got {codes.dtype}")
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= cfg.codebook_size):
            raise CodecError("bad_codes", f"codes must lie in 0..{cfg.codebook_size - 1}")
        state = self.new_state(codes.shape[0])
        pieces = [
            self.decode_step(codes[:, s : s + chunk_frames], state) for s in range(0, codes.shape[1], chunk_frames)
        ]
        if not pieces:
            return torch.zeros(codes.shape[0], 0, device=self.device)
        return torch.cat(pieces, dim=1)
