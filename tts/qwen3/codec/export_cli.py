"""`voxgate export-vocoder`: a checkpoint's codec decoder → one streaming-step ONNX file."""

from __future__ import annotations

import sys
import time
from pathlib import Path


def speech_tokenizer_dir(model_dir: str) -> Path:
    """A checkpoint root (with speech_tokenizer/) or the speech_tokenizer/ folder itself."""
    root = Path(model_dir)
    return root / "speech_tokenizer" if (root / "speech_tokenizer" / "config.json").is_file() else root


def export_vocoder_main(args) -> int:
    from tts.qwen3.codec import CodecConfig, CodecError, load_codec_decoder, random_codec_decoder
    from tts.qwen3.codec.onnx_export import export_onnx

    t0 = time.perf_counter()
    try:
        if args.random_weights:
            decoder = random_codec_decoder(CodecConfig(), seed=0)
        else:
            decoder = load_codec_decoder(speech_tokenizer_dir(args.model_dir))
        info = export_onnx(decoder, args.out, precision=args.precision, max_batch=args.max_batch)
    except CodecError as e:
        print(f"voxgate export-vocoder: {e.code}: {e.message}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"voxgate export-vocoder: io_error: {e}", file=sys.stderr)
        return 2
    print(
        f"wrote {info['path']}: opset {info['opset']}, {info['bytes'] / 1e6:.1f} MB, {info['precision']}, "
        f"{info['nodes']} nodes, {info['state_tensors']} state tensors, max batch {info['max_batch']}, "
        f"sha256 {info['sha256'][:16]}…, onnx.checker ok, {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    return 0
