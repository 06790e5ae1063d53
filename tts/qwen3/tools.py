"""`voxgate synth` and `voxgate make-tiny-model` (DESIGN.md §3.7)."""

from __future__ import annotations

import sys
import time
import wave

import numpy as np


def write_wav(path: str, pcm: np.ndarray, sample_rate: int = 24000) -> None:
    """float32 mono in [-1, 1] -> 16-bit PCM WAV (stdlib only: runs on the bare GPU image)."""
    data = (np.clip(pcm, -1.0, 1.0) * 32767.0).round().astype("<i2")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(data.tobytes())


def synth_main(args) -> int:
    import torch

    from tts.qwen3.checkpoint import Checkpoint
    from tts.qwen3.config import ConfigError
    from tts.qwen3.generate import GenerationSettings, generate_codes
    from tts.qwen3.prompt import PromptError, build_prompt

    t_start = time.perf_counter()
    try:
        ckpt = Checkpoint.load(args.model_dir, device=args.device, dtype=args.dtype)
    except (ConfigError, ValueError) as e:
        print(f"voxgate synth: {getattr(e, 'code', 'bad_model')}: {e}", file=sys.stderr)
        return 2
    cfg, gen = ckpt.config, ckpt.generation
    text, language = args.text, args.language
    if args.normalize:
        from tts.frontend import prepare_text

        prepared = prepare_text(text, language)
        text = prepared.text
    speaker = args.speaker
    if cfg.tts_model_type == "custom_voice" and not speaker:
        speaker = sorted(cfg.talker.spk_id)[0]
        print(f"speaker: {speaker} (default; --speaker to choose)", file=sys.stderr)
    try:
        prompt = build_prompt(ckpt.model.talker, cfg, ckpt.tokenizer, text, speaker=speaker, language=language,
                              instruct=args.instruct, streaming_text=args.streaming_text)
    except PromptError as e:
        print(f"voxgate synth: {e.code}: {e.message}", file=sys.stderr)
        return 2
    max_frames = args.max_frames if args.max_frames is not None else gen.max_new_tokens - 1
    if max_frames < 1:
        print("voxgate synth: bad_args: --max-frames must be at least 1", file=sys.stderr)
        return 2
    greedy = bool(args.greedy) or not gen.do_sample
    settings = GenerationSettings(
        greedy=greedy, temperature=gen.temperature, top_k=gen.top_k, top_p=gen.top_p,
        repetition_penalty=1.0 if args.greedy else gen.repetition_penalty,
        subtalker_greedy=bool(args.greedy) or not gen.subtalker_dosample, subtalker_temperature=gen.subtalker_temperature,
        subtalker_top_k=gen.subtalker_top_k, subtalker_top_p=gen.subtalker_top_p, max_frames=max_frames, seed=args.seed)
    if args.seed is not None:
        torch.manual_seed(args.seed)
    t_loaded = time.perf_counter()
    result = generate_codes(ckpt.model, prompt, settings)
    t_gen = time.perf_counter()
    codes = result.codes
    if len(codes):
        from tts.qwen3.codec import CodecError
        from tts.qwen3.codec.vocoder import build_vocoder

        try:
            vocoder = build_vocoder(getattr(args, "vocoder", "torch"), ckpt.codec, max_batch=1)
        except CodecError as e:
            print(f"voxgate synth: {e.code}: {e.message}", file=sys.stderr)
            return 2
        with torch.inference_mode():
            pcm = vocoder.decode(codes.unsqueeze(0).to(vocoder.device))[0].float().cpu().numpy()
    else:
        pcm = np.zeros(0, dtype=np.float32)
    t_dec = time.perf_counter()
    write_wav(args.out, pcm, 24000)
    if args.codes_out:
        np.save(args.codes_out, codes.numpy().astype(np.int64))
    audio_s = len(pcm) / 24000
    wall = t_dec - t_loaded
    print(f"frames {len(codes)} ({'EOS' if result.stopped_by_eos else 'cap'}), audio {audio_s:.2f} s; "
          f"load {t_loaded - t_start:.2f} s, prefill {result.prefill_s * 1e3:.1f} ms, generate {result.decode_s:.2f} s, "
          f"decode {t_dec - t_gen:.2f} s, RTF {wall / audio_s if audio_s else float('nan'):.3f} -> {args.out}",
          file=sys.stderr)
    return 0


def make_tiny_model_main(args) -> int:
    from tts.qwen3.tiny import make_tiny_model

    t0 = time.perf_counter()
    cfg = make_tiny_model(args.dir, variant=args.variant, kind=args.type, seed=args.seed)
    print(f"wrote tiny {cfg.tts_model_size} {cfg.tts_model_type} checkpoint to {args.dir} "
          f"in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


def ensure_tiny_model(model_dir: str | None = None) -> str:
    """A tiny CustomVoice checkpoint for `voxgate serve --model tiny`: made once, reused after."""
    import os

    from tts.qwen3.tiny import make_tiny_model

    model_dir = model_dir or os.environ.get("VOXGATE_TINY_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "voxgate", "tiny-qwen3-1b7-custom_voice")
    if not os.path.isfile(os.path.join(model_dir, "speech_tokenizer", "model.safetensors")):
        make_tiny_model(model_dir, variant="1b7", kind="custom_voice", seed=0)
    return model_dir
