"""Speech-tokenizer folders with random weights: tiny ones for tests, the real shape for benches.

`write_tiny_codec` writes `config.json` in the released layout (Mimi encoder
section included), `preprocessor_config.json` (the official loader reads a
feature extractor) and `model.safetensors` with both the `encoder.*` keys of
the official Mimi-based encoder and the `decoder.*` keys, so the official
`Qwen3TTSTokenizer.from_pretrained` loads the same folder. Codebooks are
random (the official default init leaves them at zero, and the waveform
would ignore the codes).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from tts.qwen3.codec.config import CodecConfig
from tts.qwen3.codec.decoder import CodecDecoder
from tts.qwen3.codec.layers import ConvNeXtBlock, ResidualUnit, SnakeBeta
from tts.qwen3.codec.transformer import LayerScale, RMSNorm

# The released speech_tokenizer/config.json (Qwen3-TTS-12Hz-*), decoder and encoder sections.
RELEASED_DECODER = {
    "attention_bias": False,
    "attention_dropout": 0.0,
    "latent_dim": 1024,
    "codebook_dim": 512,
    "codebook_size": 2048,
    "decoder_dim": 1536,
    "hidden_act": "silu",
    "hidden_size": 512,
    "intermediate_size": 1024,
    "layer_scale_initial_scale": 0.01,
    "max_position_embeddings": 8000,
    "head_dim": 64,
    "num_attention_heads": 16,
    "num_hidden_layers": 8,
    "num_key_value_heads": 16,
    "num_quantizers": 16,
    "num_semantic_quantizers": 1,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000,
    "semantic_codebook_size": 4096,
    "sliding_window": 72,
    "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2],
    "vector_quantization_hidden_dimension": 512,
}
RELEASED_ENCODER = {
    "_frame_rate": 12.5,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "audio_channels": 1,
    "codebook_dim": 256,
    "codebook_size": 2048,
    "compress": 2,
    "dilation_growth_rate": 2,
    "head_dim": 64,
    "hidden_act": "gelu",
    "hidden_size": 512,
    "initializer_range": 0.02,
    "intermediate_size": 2048,
    "kernel_size": 7,
    "last_kernel_size": 3,
    "layer_scale_initial_scale": 0.01,
    "max_position_embeddings": 8000,
    "norm_eps": 1e-05,
    "num_attention_heads": 8,
    "num_filters": 64,
    "num_hidden_layers": 8,
    "num_key_value_heads": 8,
    "num_quantizers": 32,
    "num_residual_layers": 1,
    "num_semantic_quantizers": 1,
    "pad_mode": "constant",
    "residual_kernel_size": 3,
    "rope_theta": 10000.0,
    "sampling_rate": 24000,
    "sliding_window": 250,
    "trim_right_ratio": 1.0,
    "upsample_groups": 512,
    "upsampling_ratios": [8, 6, 5, 4],
    "use_causal_conv": True,
    "use_conv_shortcut": False,
    "vector_quantization_hidden_dimension": 256,
}
# Tiny: the real structure (rates, kernels, 16 codebooks of 2048, the Mimi encoder
# layout) at small widths, and an attention window short enough to cross cheaply.
TINY_DECODER = {
    "latent_dim": 32,
    "codebook_dim": 16,
    "decoder_dim": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "head_dim": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "sliding_window": 8,
    "vector_quantization_hidden_dimension": 16,
}
TINY_ENCODER = {
    "codebook_dim": 8,
    "head_dim": 8,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_attention_heads": 2,
    "num_filters": 4,
    "num_hidden_layers": 1,
    "num_key_value_heads": 2,
    "sliding_window": 4,  # shorter than any reference: shows the window is not applied (as in transformers 4.57.3)
    "upsample_groups": 16,
    "vector_quantization_hidden_dimension": 8,
}
PREPROCESSOR_CONFIG = {
    "chunk_length_s": None,
    "feature_extractor_type": "EncodecFeatureExtractor",
    "feature_size": 1,
    "overlap": None,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": True,
    "sampling_rate": 24000,
}


def codec_config_dict(decoder_overrides: dict | None = None, encoder_overrides: dict | None = None) -> dict:
    """A speech_tokenizer/config.json in the released layout; defaults are the released sizes."""
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_valid_num_quantizers": 16,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": 1920,
        "encode_downsample_rate": 1920,
        "encoder_config": {**RELEASED_ENCODER, **(encoder_overrides or {})},
        "decoder_config": {**RELEASED_DECODER, **(decoder_overrides or {})},
        "transformers_version": "4.57.3",
    }


def mimi_encoder_shapes(enc: dict) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the official encoder's weights (MimiModel minus its decoder half)."""
    shapes: dict[str, tuple[int, ...]] = {}

    def conv(name: str, cout: int, cin: int, k: int, bias: bool = True) -> None:
        shapes[f"encoder.encoder.layers.{name}.weight"] = (cout, cin, k)
        if bias:
            shapes[f"encoder.encoder.layers.{name}.bias"] = (cout,)

    if enc["use_conv_shortcut"]:
        raise ValueError("use_conv_shortcut encoders are not generated")
    width, idx = enc["num_filters"], 0
    conv(f"{idx}.conv", width, enc["audio_channels"], enc["kernel_size"])
    idx += 1
    for ratio in reversed(enc["upsampling_ratios"]):
        for _ in range(enc["num_residual_layers"]):
            conv(f"{idx}.block.1.conv", width // enc["compress"], width, enc["residual_kernel_size"])
            conv(f"{idx}.block.3.conv", width, width // enc["compress"], 1)
            idx += 1
        idx += 1  # ELU
        conv(f"{idx}.conv", width * 2, width, 2 * ratio)
        idx += 1
        width *= 2
    idx += 1  # ELU
    conv(f"{idx}.conv", enc["hidden_size"], width, enc["last_kernel_size"])

    hidden, heads, kv = enc["hidden_size"], enc["num_attention_heads"], enc["num_key_value_heads"]
    head_dim = enc.get("head_dim") or hidden // heads
    for layer in range(enc["num_hidden_layers"]):
        p = f"encoder.encoder_transformer.layers.{layer}."
        for proj, rows, cols in (
            ("q", heads * head_dim, hidden),
            ("k", kv * head_dim, hidden),
            ("v", kv * head_dim, hidden),
            ("o", hidden, heads * head_dim),
        ):
            shapes[f"{p}self_attn.{proj}_proj.weight"] = (rows, cols)
            if enc["attention_bias"]:
                shapes[f"{p}self_attn.{proj}_proj.bias"] = (rows,)
        shapes[f"{p}mlp.fc1.weight"] = (enc["intermediate_size"], hidden)
        shapes[f"{p}mlp.fc2.weight"] = (hidden, enc["intermediate_size"])
        for norm in ("input_layernorm", "post_attention_layernorm"):
            shapes[f"{p}{norm}.weight"] = (hidden,)
            shapes[f"{p}{norm}.bias"] = (hidden,)
        shapes[f"{p}self_attn_layer_scale.scale"] = (hidden,)
        shapes[f"{p}mlp_layer_scale.scale"] = (hidden,)

    hop = math.prod(enc["upsampling_ratios"])
    encodec_rate = math.ceil(enc["sampling_rate"] / hop)
    stride = int(encodec_rate / enc["_frame_rate"])
    shapes["encoder.downsample.conv.weight"] = (hidden, hidden, 2 * stride)

    vq_dim, size, cb_dim = enc["vector_quantization_hidden_dimension"], enc["codebook_size"], enc["codebook_dim"]
    semantic = enc["num_semantic_quantizers"]
    for group, count in (("semantic", semantic), ("acoustic", enc["num_quantizers"] - semantic)):
        p = f"encoder.quantizer.{group}_residual_vector_quantizer."
        for i in range(count):
            shapes[f"{p}layers.{i}.codebook.initialized"] = (1,)
            shapes[f"{p}layers.{i}.codebook.cluster_usage"] = (size,)
            shapes[f"{p}layers.{i}.codebook.embed_sum"] = (size, cb_dim)
        if vq_dim != hidden:
            shapes[f"{p}input_proj.weight"] = (vq_dim, hidden, 1)
            shapes[f"{p}output_proj.weight"] = (hidden, vq_dim, 1)
    return shapes


def _random_encoder(enc: dict, gen: torch.Generator) -> dict[str, torch.Tensor]:
    out = {}
    for name, shape in mimi_encoder_shapes(enc).items():
        if name.endswith(("initialized", "cluster_usage")) or "layernorm.weight" in name:
            out[name] = torch.ones(shape)
        elif name.endswith(("layernorm.bias", "proj.bias", "conv.bias")):
            out[name] = torch.zeros(shape)
        elif name.endswith("scale"):
            out[name] = torch.full(shape, 0.01)
        else:
            fan_in = math.prod(shape[1:]) or 1
            out[name] = torch.randn(shape, generator=gen) / math.sqrt(fan_in)
    return out


@torch.no_grad()
def init_random_(decoder: CodecDecoder, seed: int = 0) -> CodecDecoder:
    """Random weights with a signal that depends on every part: codebooks, norms, scales, Snake."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    for module in decoder.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.ConvTranspose1d)):
            w = module.weight
            fan_in = w.shape[1] * w.shape[2] if w.dim() == 3 else w.shape[1]
            if isinstance(module, torch.nn.ConvTranspose1d):  # each output sums in_ch × kernel/stride taps
                fan_in = w.shape[0] * max(1, w.shape[2] // module.stride[0])
            elif isinstance(module, torch.nn.Conv1d) and module.groups > 1:
                fan_in = w.shape[2]
            w.copy_(rand(*w.shape) / math.sqrt(fan_in))
            if module.bias is not None:
                module.bias.copy_(0.1 * rand(*module.bias.shape))
        elif isinstance(module, SnakeBeta):
            module.alpha.copy_(0.2 * rand(*module.alpha.shape))
            module.beta.copy_(0.2 * rand(*module.beta.shape))
        elif isinstance(module, (RMSNorm, torch.nn.LayerNorm)):
            module.weight.copy_(1.0 + 0.1 * rand(*module.weight.shape))
            if getattr(module, "bias", None) is not None:
                module.bias.copy_(0.1 * rand(*module.bias.shape))
        elif isinstance(module, LayerScale):
            module.scale.copy_(0.3 + 0.1 * rand(*module.scale.shape))
        elif isinstance(module, ConvNeXtBlock):
            module.gamma.copy_(0.3 + 0.1 * rand(*module.gamma.shape))
    quantizer = decoder.quantizer
    for vq in (*quantizer.rvq_first.vq.layers, *quantizer.rvq_rest.vq.layers):
        book = vq._codebook
        book.cluster_usage.copy_(0.5 + torch.rand(book.cluster_usage.shape, generator=gen))
        book.embedding_sum.copy_(0.25 * rand(*book.embedding_sum.shape))  # the 16-entry sum near unit scale
    # Trained decoders keep activations near unit scale; random ones grow with every
    # residual unit and Snake offset. Damp the residual branches and the output so the
    # waveform stays mostly inside ±1 (the clamp would hide differences).
    for module in decoder.modules():
        if isinstance(module, ResidualUnit):
            module.conv2.conv.weight.mul_(0.2)
    decoder.decoder[-1].conv.weight.mul_(0.12)
    decoder.prepare()
    return decoder


def random_codec_decoder(
    config: CodecConfig,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    conv_dtype: torch.dtype = torch.float32,
) -> CodecDecoder:
    """A decoder of any shape (the released one: `CodecConfig()`) with random weights, no files."""
    decoder = init_random_(CodecDecoder(config), seed)
    decoder.to(device)
    decoder.set_precision(dtype, conv_dtype)
    return decoder.eval()


def write_tiny_codec(
    speech_tokenizer_dir: str | Path, seed: int = 0, decoder_overrides: dict | None = None, reference: bool = False
) -> Path:
    """Write a tiny random speech_tokenizer/ folder that both our loader and the official one accept.

    `reference` is accepted for callers that write "reference" checkpoints: the
    folder is the same either way, since the official loader reads these files
    as they are (the parity tests load one folder with both implementations).
    """
    folder = Path(speech_tokenizer_dir)
    folder.mkdir(parents=True, exist_ok=True)
    raw = codec_config_dict({**TINY_DECODER, **(decoder_overrides or {})}, TINY_ENCODER)
    decoder = init_random_(CodecDecoder(CodecConfig.from_dict(raw)), seed)
    tensors = {f"decoder.{k}": v.contiguous() for k, v in decoder.state_dict().items()}
    tensors.update(_random_encoder(raw["encoder_config"], torch.Generator().manual_seed(seed + 1)))
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    (folder / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG, indent=2) + "\n", encoding="utf-8")
    return folder
