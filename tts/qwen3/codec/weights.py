"""Load the codec decoder from `speech_tokenizer/model.safetensors` by the official names.

Only `decoder.*` keys are read (the `encoder.*` half serves voice cloning);
the file is memory-mapped and tensors are materialised straight into the
model built on the meta device.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from tts.qwen3.codec.config import CodecConfig, CodecError
from tts.qwen3.codec.decoder import CodecDecoder

PREFIX = "decoder."


def _listing(names: list[str], limit: int = 12) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", … ({len(names) - limit} more)" if len(names) > limit else "")


def load_codec_decoder(
    speech_tokenizer_dir: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    conv_dtype: torch.dtype = torch.float32,
) -> CodecDecoder:
    """Build the decoder of a 12 Hz speech tokenizer folder.

    `dtype` applies to the 12.5 Hz part; the upsampling convolutions use
    `conv_dtype` (fp32 unless asked otherwise) and SnakeBeta is always fp32.
    """
    folder = Path(speech_tokenizer_dir)
    config = CodecConfig.from_dir(folder)
    path = folder / "model.safetensors"
    if not path.is_file():
        raise CodecError("missing_file", f"{path} not found")
    with torch.device("meta"):
        model = CodecDecoder(config)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    tensors: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            present = [k[len(PREFIX) :] for k in f.keys() if k.startswith(PREFIX)]
            missing = sorted(set(expected) - set(present))
            unexpected = sorted(set(present) - set(expected))
            if missing or unexpected:
                parts = [f"missing {len(missing)}: {_listing(missing)}"] if missing else []
                parts += [f"unexpected {len(unexpected)}: {_listing(unexpected)}"] if unexpected else []
                raise CodecError(
                    "weights_mismatch", f"{path} decoder weights do not match the config; " + "; ".join(parts)
                )
            wrong = []
            for name in present:
                tensor = f.get_tensor(PREFIX + name)
                if tuple(tensor.shape) != expected[name]:
                    wrong.append(f"{name} {tuple(tensor.shape)} != {expected[name]}")
                tensors[name] = tensor
    except CodecError:
        raise
    except Exception as exc:  # a truncated or foreign file
        raise CodecError("bad_weights", f"cannot read {path}: {exc}") from exc
    if wrong:
        raise CodecError("weights_mismatch", f"{path} decoder shapes differ from the config: {_listing(wrong)}")
    model.load_state_dict({k: v.to(device, torch.float32) for k, v in tensors.items()}, strict=True, assign=True)
    # Derived (non-persistent) buffers are still on meta: give them storage; prepare() fills them.
    for module in model.modules():
        for name, buf in module._buffers.items():
            if buf is not None and buf.is_meta:
                module._buffers[name] = torch.empty(0, device=device)
    model.set_precision(dtype, conv_dtype)
    return model.eval()
