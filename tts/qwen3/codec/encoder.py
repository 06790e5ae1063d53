"""The speech tokenizer's encoder (audio -> 16 codebooks at 12.5 Hz), for voice-clone references.

A port of the Mimi encoder that the official 12 Hz tokenizer wraps (transformers 4.57.3's
`MimiModel.encode`), loaded from the `encoder.*` keys of `speech_tokenizer/model.safetensors`:

    24 kHz mono -> SEANet (causal convs, zero left padding, strides 4·5·6·8, ELU, residual
    units) -> encoder transformer at 25 Hz (pre-LayerNorm, RoPE, GELU MLP, LayerScale, causal;
    the configured sliding window is not applied there, so neither here) -> stride-2 downsample
    conv (replicate padding) -> split RVQ (1 semantic + acoustic codebooks, nearest centroid by
    Euclidean distance) -> the first 16 codebooks, ceil(samples / 1920) frames.

The encoder always runs in float32: it runs once per voice, and its argmins decide codes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tts.qwen3.codec.config import CodecError

PREFIX = "encoder."


@dataclass(frozen=True)
class EncoderConfig:
    audio_channels: int = 1
    num_filters: int = 64
    kernel_size: int = 7
    last_kernel_size: int = 3
    residual_kernel_size: int = 3
    dilation_growth_rate: int = 2
    num_residual_layers: int = 1
    compress: int = 2
    upsampling_ratios: tuple[int, ...] = (8, 6, 5, 4)
    use_conv_shortcut: bool = False
    pad_mode: str = "constant"
    hidden_size: int = 512
    intermediate_size: int = 2048
    num_hidden_layers: int = 8
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: int = 64
    attention_bias: bool = False
    hidden_act: str = "gelu"
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    codebook_size: int = 2048
    codebook_dim: int = 256
    vector_quantization_hidden_dimension: int = 256
    num_quantizers: int = 32
    num_semantic_quantizers: int = 1
    frame_rate: float = 12.5
    sampling_rate: int = 24000
    valid_quantizers: int = 16  # encoder_valid_num_quantizers: codebooks the talker uses
    samples_per_frame: int = 1920  # encode_downsample_rate

    @property
    def hop(self) -> int:
        return math.prod(self.upsampling_ratios)

    @property
    def downsample_stride(self) -> int:
        return int(math.ceil(self.sampling_rate / self.hop) / self.frame_rate)

    @classmethod
    def from_dict(cls, raw: dict) -> "EncoderConfig":
        enc = raw.get("encoder_config")
        if not isinstance(enc, dict):
            raise CodecError(
                "bad_config",
                "speech tokenizer config.json has no encoder_config object "
                "(this checkpoint cannot encode reference audio)",
            )
        fields = {f: getattr(cls, f) for f in cls.__dataclass_fields__}
        kw = {}
        for name, default in fields.items():
            key = "_frame_rate" if name == "frame_rate" else name
            if key in enc:
                value = enc[key]
                if value is None:
                    continue
                kw[name] = tuple(int(v) for v in value) if isinstance(default, tuple) else type(default)(value)
        if enc.get("head_dim") is None and "hidden_size" in kw:
            kw["head_dim"] = kw["hidden_size"] // kw.get("num_attention_heads", cls.num_attention_heads)
        kw["valid_quantizers"] = int(raw.get("encoder_valid_num_quantizers", 16))
        kw["samples_per_frame"] = int(raw.get("encode_downsample_rate", 1920))
        cfg = cls(**kw)
        if cfg.use_conv_shortcut:
            raise CodecError("bad_config", "encoder use_conv_shortcut is not supported")
        if cfg.hidden_act != "gelu":
            raise CodecError("bad_config", f"encoder hidden_act {cfg.hidden_act!r} is not supported")
        if cfg.hop * cfg.downsample_stride != cfg.samples_per_frame:
            raise CodecError(
                "bad_config",
                f"encoder strides {cfg.upsampling_ratios} x {cfg.downsample_stride} do "
                f"not make {cfg.samples_per_frame} samples per frame",
            )
        if not cfg.num_semantic_quantizers < cfg.valid_quantizers <= cfg.num_quantizers:
            raise CodecError("bad_config", "encoder_valid_num_quantizers is out of range")
        return cfg


class CausalConv(nn.Module):
    """Conv1d padded on the left by (kernel - stride) and on the right to a whole last frame."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        stride: int = 1,
        dilation: int = 1,
        bias: bool = True,
        pad_mode: str = "constant",
    ):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, stride, dilation=dilation, bias=bias)
        self.stride = stride
        self.kernel = (kernel - 1) * dilation + 1
        self.padding_total = self.kernel - stride
        self.pad_mode = pad_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        frames = math.ceil((length - self.kernel + self.padding_total) / self.stride + 1) - 1
        extra = frames * self.stride + self.kernel - self.padding_total - length
        x = F.pad(x, (self.padding_total, extra), mode=self.pad_mode)
        return self.conv(x)


class ResnetBlock(nn.Module):
    def __init__(self, c: EncoderConfig, dim: int, dilation: int):
        super().__init__()
        hidden = dim // c.compress
        self.block = nn.ModuleList(
            [
                nn.ELU(),
                CausalConv(dim, hidden, c.residual_kernel_size, dilation=dilation, pad_mode=c.pad_mode),
                nn.ELU(),
                CausalConv(hidden, dim, 1, pad_mode=c.pad_mode),
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for layer in self.block:
            y = layer(y)
        return x + y


class SEANetEncoder(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        layers: list[nn.Module] = [CausalConv(c.audio_channels, c.num_filters, c.kernel_size, pad_mode=c.pad_mode)]
        width = c.num_filters
        for ratio in reversed(c.upsampling_ratios):
            for j in range(c.num_residual_layers):
                layers.append(ResnetBlock(c, width, c.dilation_growth_rate**j))
            layers += [nn.ELU(), CausalConv(width, width * 2, 2 * ratio, stride=ratio, pad_mode=c.pad_mode)]
            width *= 2
        layers += [nn.ELU(), CausalConv(width, c.hidden_size, c.last_kernel_size, pad_mode=c.pad_mode)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class LayerScale(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        b = c.attention_bias
        self.q_proj = nn.Linear(c.hidden_size, self.heads * self.head_dim, bias=b)
        self.k_proj = nn.Linear(c.hidden_size, self.kv_heads * self.head_dim, bias=b)
        self.v_proj = nn.Linear(c.hidden_size, self.kv_heads * self.head_dim, bias=b)
        self.o_proj = nn.Linear(self.heads * self.head_dim, c.hidden_size, bias=b)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        bsz, t, _ = x.shape
        q = self.q_proj(x).view(bsz, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        if self.kv_heads != self.heads:
            rep = self.heads // self.kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        return self.o_proj(y.transpose(1, 2).reshape(bsz, t, -1))


class MLP(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.fc1 = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.fc2 = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class TransformerLayer(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(c.hidden_size, eps=c.norm_eps)
        self.self_attn = Attention(c)
        self.self_attn_layer_scale = LayerScale(c.hidden_size)
        self.post_attention_layernorm = nn.LayerNorm(c.hidden_size, eps=c.norm_eps)
        self.mlp = MLP(c)
        self.mlp_layer_scale = LayerScale(c.hidden_size)

    def forward(self, x, cos, sin):
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class Transformer(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(c) for _ in range(c.num_hidden_layers))
        self.head_dim, self.theta = c.head_dim, c.rope_theta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.head_dim
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, d, 2, dtype=torch.int64).float().to(x.device) / d))
        pos = torch.arange(x.shape[1], device=x.device).float()
        freqs = torch.outer(pos, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype)[None, None], emb.sin().to(x.dtype)[None, None]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return x


class Codebook(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.register_buffer("initialized", torch.ones(1))
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embed_sum", torch.zeros(size, dim))
        self._embed: torch.Tensor | None = None

    @property
    def embed(self) -> torch.Tensor:
        if self._embed is None:
            self._embed = self.embed_sum / self.cluster_usage.clamp(min=1e-5)[:, None]
        return self._embed


class VQLayer(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.codebook = Codebook(size, dim)


class RVQ(nn.Module):
    def __init__(self, c: EncoderConfig, count: int):
        super().__init__()
        self.layers = nn.ModuleList(VQLayer(c.codebook_size, c.codebook_dim) for _ in range(count))
        vq = c.vector_quantization_hidden_dimension
        self.input_proj = nn.Conv1d(c.hidden_size, vq, 1, bias=False) if vq != c.hidden_size else None
        self.output_proj = nn.Conv1d(vq, c.hidden_size, 1, bias=False) if vq != c.hidden_size else None

    def encode(self, x: torch.Tensor, count: int) -> torch.Tensor:
        """x [B, hidden, T] -> codes [count, B, T]."""
        if self.input_proj is not None:
            x = self.input_proj(x)
        residual, out = x, []
        for layer in self.layers[:count]:
            embed = layer.codebook.embed
            flat = residual.permute(0, 2, 1)
            shape = flat.shape
            # the same cdist call as the reference: its matmul path and argmin ties follow the shape
            idx = torch.cdist(flat.reshape(-1, shape[-1])[None].float(), embed[None].float(), p=2)[0].argmin(-1)
            idx = idx.view(*shape[:-1])
            residual = residual - F.embedding(idx, embed).permute(0, 2, 1)
            out.append(idx)
        return torch.stack(out)


class SplitRVQ(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.semantic = c.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = RVQ(c, c.num_semantic_quantizers)
        self.acoustic_residual_vector_quantizer = RVQ(c, c.num_quantizers - c.num_semantic_quantizers)

    def encode(self, x: torch.Tensor, count: int) -> torch.Tensor:
        codes = self.semantic_residual_vector_quantizer.encode(x, self.semantic)
        acoustic = self.acoustic_residual_vector_quantizer.encode(x, count - self.semantic)
        return torch.cat([codes, acoustic])


class CodecEncoder(nn.Module):
    """Reference audio at 24 kHz -> codes [frames, valid_quantizers] (int64)."""

    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.config = c
        self.encoder = SEANetEncoder(c)
        self.encoder_transformer = Transformer(c)
        self.downsample = CausalConv(
            c.hidden_size, c.hidden_size, 2 * c.downsample_stride, stride=2, bias=False, pad_mode="replicate"
        )
        self.quantizer = SplitRVQ(c)

    @torch.inference_mode()
    def encode(self, wav_24k: np.ndarray | torch.Tensor) -> torch.Tensor:
        c = self.config
        x = torch.as_tensor(
            np.ascontiguousarray(wav_24k, dtype=np.float32) if isinstance(wav_24k, np.ndarray) else wav_24k,
            dtype=torch.float32,
        )
        n = x.shape[-1]
        x = x.view(1, 1, n).to(self.downsample.conv.weight.device)
        h = self.encoder(x)
        h = self.encoder_transformer(h.transpose(1, 2)).transpose(1, 2)
        h = self.downsample(h)
        codes = self.quantizer.encode(h, c.valid_quantizers).transpose(0, 1)[0]  # [K, T]
        frames = -(-n // c.samples_per_frame)
        return codes[:, :frames].transpose(0, 1).contiguous()


def load_codec_encoder(speech_tokenizer_dir: str | Path, device: str | torch.device = "cpu") -> CodecEncoder:
    """The `encoder.*` half of a 12 Hz speech tokenizer folder, in float32."""
    from safetensors import safe_open

    folder = Path(speech_tokenizer_dir)
    cfg_path, path = folder / "config.json", folder / "model.safetensors"
    for p in (cfg_path, path):
        if not p.is_file():
            raise CodecError("missing_file", f"{p} not found")
    try:
        raw = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CodecError("bad_config", f"cannot read {cfg_path}: {exc}") from exc
    config = EncoderConfig.from_dict(raw)
    model = CodecEncoder(config)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = {}
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            present = {k[len(PREFIX) :] for k in f.keys() if k.startswith(PREFIX)}
            missing, unexpected = sorted(set(expected) - present), sorted(present - set(expected))
            if missing or unexpected:
                raise CodecError(
                    "weights_mismatch",
                    f"{path} encoder weights do not match the config; "
                    f"missing {missing[:8]}, unexpected {unexpected[:8]}",
                )
            for name in expected:
                t = f.get_tensor(PREFIX + name)
                if tuple(t.shape) != expected[name]:
                    raise CodecError("weights_mismatch", f"{path}: {name} {tuple(t.shape)} != {expected[name]}")
                state[name] = t.to(torch.float32)
    except CodecError:
        raise
    except Exception as exc:  # a truncated or foreign file
        raise CodecError("bad_weights", f"cannot read {path}: {exc}") from exc
    model.load_state_dict(state, strict=True)
    return model.to(device).eval().requires_grad_(False)
