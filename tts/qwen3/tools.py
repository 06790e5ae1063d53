"""`voxgate synth`, `make-tiny-model`, `encode-audio` and `speaker-embedding` (docs/engine.md)."""

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
    from tts.qwen3.generate import generate_codes
    from tts.qwen3.prompt import PromptError, build_prompt

    t_start = time.perf_counter()
    reference = None
    if getattr(args, "ref_audio", None):  # a bad reference is refused before any model loads
        from tts.qwen3.voice_clone import load_reference_or_error

        try:
            reference = load_reference_or_error(args.ref_audio)
        except PromptError as e:
            print(f"voxgate synth: {e.code}: {e.message}", file=sys.stderr)
            return 2
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
    clone = None
    ref_audio = getattr(args, "ref_audio", None)
    if cfg.tts_model_type == "base" and not ref_audio:
        print(
            "voxgate synth: unknown_voice: a Base checkpoint speaks cloned voices: pass --ref-audio WAV "
            "with --ref-text TEXT (or --x-vector-only)",
            file=sys.stderr,
        )
        return 2
    if ref_audio:
        try:
            clone = _clone_prompt(ckpt, args.model_dir, reference, args.ref_text, args.x_vector_only)
        except PromptError as e:
            print(f"voxgate synth: {e.code}: {e.message}", file=sys.stderr)
            return 2
    if cfg.tts_model_type == "custom_voice" and not speaker:
        speaker = sorted(cfg.talker.spk_id)[0]
        print(f"speaker: {speaker} (default; --speaker to choose)", file=sys.stderr)
    if getattr(args, "turn_mode", False):
        return _synth_turn(args, ckpt, text, speaker, language, clone, t_start)
    if getattr(args, "text_rate", None) is not None:
        print("voxgate synth: bad_args: --text-rate needs --turn-mode", file=sys.stderr)
        return 2
    try:
        # cloned voices default to generate_voice_clone's layout (streaming text), the rest to the CustomVoice one
        streaming = (not args.non_streaming_text) if clone is not None else args.streaming_text
        prompt = build_prompt(
            ckpt.model.talker,
            cfg,
            ckpt.tokenizer,
            text,
            speaker=speaker,
            language=language,
            instruct=None if clone is not None else args.instruct,
            clone=clone,
            streaming_text=streaming,
        )
    except PromptError as e:
        print(f"voxgate synth: {e.code}: {e.message}", file=sys.stderr)
        return 2
    max_frames = args.max_frames if args.max_frames is not None else gen.max_new_tokens - 1
    if max_frames < 1:
        print("voxgate synth: bad_args: --max-frames must be at least 1", file=sys.stderr)
        return 2
    settings = _settings(args, gen, max_frames)
    if args.seed is not None:
        torch.manual_seed(args.seed)
    t_loaded = time.perf_counter()
    result = generate_codes(ckpt.model, prompt, settings)
    t_gen = time.perf_counter()
    codes = result.codes
    pcm = _decode(args, ckpt, clone, codes)
    if pcm is None:
        return 2
    t_dec = time.perf_counter()
    write_wav(args.out, pcm, 24000)
    if args.codes_out:
        np.save(args.codes_out, codes.numpy().astype(np.int64))
    audio_s = len(pcm) / 24000
    wall = t_dec - t_loaded
    print(
        f"frames {len(codes)} ({'EOS' if result.stopped_by_eos else 'cap'}), audio {audio_s:.2f} s; "
        f"load {t_loaded - t_start:.2f} s, prefill {result.prefill_s * 1e3:.1f} ms, generate {result.decode_s:.2f} s, "
        f"decode {t_dec - t_gen:.2f} s, RTF {wall / audio_s if audio_s else float('nan'):.3f} -> {args.out}",
        file=sys.stderr,
    )
    return 0


def _settings(args, gen, max_frames: int):
    from tts.qwen3.generate import GenerationSettings

    greedy = bool(args.greedy) or not gen.do_sample
    return GenerationSettings(
        greedy=greedy,
        temperature=gen.temperature,
        top_k=gen.top_k,
        top_p=gen.top_p,
        repetition_penalty=1.0 if args.greedy else gen.repetition_penalty,
        subtalker_greedy=bool(args.greedy) or not gen.subtalker_dosample,
        subtalker_temperature=gen.subtalker_temperature,
        subtalker_top_k=gen.subtalker_top_k,
        subtalker_top_p=gen.subtalker_top_p,
        max_frames=max_frames,
        seed=args.seed,
    )


def _synth_turn(args, ckpt, text, speaker, language, clone, t_start) -> int:
    """`synth --turn-mode`: the text word by word into a TurnGenerator, paced by `--text-rate`."""
    import torch

    from tts.qwen3.prompt import PromptError, voice_head
    from tts.qwen3.turn import TurnError, TurnGenerator, run_paced, words

    if args.text_rate is not None and not args.text_rate > 0:
        print("voxgate synth: bad_args: --text-rate must be a positive number of tokens per second", file=sys.stderr)
        return 2
    if args.max_frames is not None and args.max_frames < 1:
        print("voxgate synth: bad_args: --max-frames must be at least 1", file=sys.stderr)
        return 2
    cfg = ckpt.config
    try:
        head = voice_head(
            ckpt.model.talker,
            cfg,
            ckpt.tokenizer,
            speaker=speaker,
            language=language,
            instruct=None if clone is not None else args.instruct,
            clone=clone,
        )
        gen = TurnGenerator(
            ckpt.model,
            ckpt.tokenizer,
            head,
            _settings(args, ckpt.generation, 0),
            max_positions=ckpt.generation.max_new_tokens + 512,
        )
    except (PromptError, TurnError) as e:
        print(f"voxgate synth: {e.code}: {e.message}", file=sys.stderr)
        return 2
    pieces = words(text)
    if not pieces:
        print("voxgate synth: bad_text: the text is empty", file=sys.stderr)
        return 2
    if args.seed is not None:
        torch.manual_seed(args.seed)
    t_loaded = time.perf_counter()
    run = run_paced(gen, pieces, args.text_rate, max_frames=args.max_frames)
    t_gen = time.perf_counter()
    pcm = _decode(args, ckpt, clone, run.codes)
    if pcm is None:
        return 2
    write_wav(args.out, pcm, 24000)
    if args.codes_out:
        np.save(args.codes_out, run.codes.numpy().astype(np.int64))
    first = f"{run.first_frame_s * 1e3:.0f} ms" if run.first_frame_s is not None else "none"
    print(
        f"turn mode: frames {len(run.codes)} ({', '.join(gen.stats.ended_by) or 'max-frames'}), "
        f"{gen.stats.segments} segment(s), audio {len(pcm) / 24000:.2f} s; {len(pieces)} words at "
        f"{args.text_rate or 'once'}/s, first frame {first} after the first word, {run.pauses} pauses "
        f"({run.paused_s:.2f} s waiting for text); load {t_loaded - t_start:.2f} s, generate {t_gen - t_loaded:.2f} s "
        f"-> {args.out}",
        file=sys.stderr,
    )
    return 0


def _decode(args, ckpt, clone, codes):
    """Codes -> float32 PCM (None after printing the error)."""
    import torch

    if len(codes):
        from tts.qwen3.codec import CodecError
        from tts.qwen3.codec.vocoder import build_vocoder

        try:
            vocoder = build_vocoder(getattr(args, "vocoder", "torch"), ckpt.codec, max_batch=1)
        except CodecError as e:
            print(f"voxgate synth: {e.code}: {e.message}", file=sys.stderr)
            return None
        joint = codes if clone is None or not clone.icl else torch.cat([clone.ref_codes.cpu(), codes])
        with torch.inference_mode():
            pcm = vocoder.decode(joint.unsqueeze(0).to(vocoder.device))[0].float().cpu().numpy()
        if joint is not codes:  # ICL: the official output is the joint decode minus the reference's share
            from tts.qwen3.prompt import icl_trim

            pcm = pcm[icl_trim(len(clone.ref_codes), len(joint), len(pcm)) :]
    else:
        pcm = np.zeros(0, dtype=np.float32)
    return pcm


def make_tiny_model_main(args) -> int:
    from tts.qwen3.tiny import make_tiny_model

    t0 = time.perf_counter()
    cfg = make_tiny_model(args.dir, variant=args.variant, kind=args.type, seed=args.seed)
    print(
        f"wrote tiny {cfg.tts_model_size} {cfg.tts_model_type} checkpoint to {args.dir} "
        f"in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    return 0


def ensure_tiny_model(model_dir: str | None = None) -> str:
    """A tiny CustomVoice checkpoint for `voxgate serve --model tiny`: made once, reused after."""
    import os

    from tts.qwen3.tiny import make_tiny_model

    model_dir = (
        model_dir
        or os.environ.get("VOXGATE_TINY_DIR")
        or os.path.join(os.path.expanduser("~"), ".cache", "voxgate", "tiny-qwen3-1b7-custom_voice")
    )
    if not os.path.isfile(os.path.join(model_dir, "speech_tokenizer", "model.safetensors")):
        make_tiny_model(model_dir, variant="1b7", kind="custom_voice", seed=0)
    return model_dir


def _clone_prompt(ckpt, model_dir: str, ref, ref_text: str | None, x_vector_only: bool):
    """A cloned voice's prompt parts from a decoded reference (PromptError `bad_voice`, `unsupported_voice`)."""
    from tts.qwen3.prompt import PromptError
    from tts.qwen3.voice_clone import VoiceCloner

    if ckpt.config.tts_model_type != "base":
        raise PromptError(
            "unsupported_voice", f"--ref-audio needs a Base checkpoint; {model_dir} is {ckpt.config.tts_model_type}"
        )
    if not x_vector_only and not (ref_text and ref_text.strip()):
        raise PromptError(
            "bad_voice", "in-context cloning needs --ref-text (the reference's transcript); or pass --x-vector-only"
        )
    return VoiceCloner(ckpt.model, ckpt.tokenizer, model_dir).prompt(ref, ref_text, x_vector_only)


def _speech_tokenizer_dir(model_dir: str) -> str:
    import os

    inner = os.path.join(model_dir, "speech_tokenizer")
    return inner if os.path.isdir(inner) else model_dir


def encode_audio_main(args) -> int:
    """WAV -> the speech tokenizer's codes [frames, 16] (int64 .npy), as the ICL prompt takes them."""
    from audio.reference import to_rate
    from tts.qwen3.codec import CodecError
    from tts.qwen3.codec.encoder import load_codec_encoder
    from tts.qwen3.prompt import PromptError
    from tts.qwen3.voice_clone import load_reference_or_error

    t0 = time.perf_counter()
    try:
        ref = load_reference_or_error(args.wav)
        encoder = load_codec_encoder(_speech_tokenizer_dir(args.model_dir), device=args.device)
    except (PromptError, CodecError) as e:
        print(f"voxgate encode-audio: {e.code}: {e.message}", file=sys.stderr)
        return 2
    codes = encoder.encode(to_rate(ref.samples, ref.sample_rate, encoder.config.sampling_rate)).cpu().numpy()
    np.save(args.codes_out, codes.astype(np.int64))
    print(
        f"{ref.duration_s:.2f} s at {ref.sample_rate} Hz -> {codes.shape[0]} frames x {codes.shape[1]} codebooks "
        f"in {time.perf_counter() - t0:.2f} s -> {args.codes_out}",
        file=sys.stderr,
    )
    return 0


def load_speaker_encoder(model_dir: str, device: str = "cpu", dtype: str = "float32"):
    """Only the `speaker_encoder.*` weights of a Base checkpoint (the talker stays on disk)."""
    import os

    from safetensors import safe_open

    from tts.qwen3.config import ConfigError, load_config
    from tts.qwen3.speaker_encoder import SpeakerEncoder
    from tts.qwen3.weights import parse_dtype

    cfg = load_config(model_dir)
    if not cfg.has_speaker_encoder:
        raise ConfigError(
            "unsupported_voice",
            f"{model_dir} is a {cfg.tts_model_type} checkpoint: it has no speaker encoder (Base checkpoints do)",
        )
    enc = SpeakerEncoder(cfg.speaker_encoder)
    prefix = "speaker_encoder."
    with safe_open(os.path.join(model_dir, "model.safetensors"), framework="pt", device="cpu") as f:
        state = {k[len(prefix) :]: f.get_tensor(k) for k in f.keys() if k.startswith(prefix)}
    try:
        enc.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ConfigError("bad_weights", f"{model_dir}: speaker encoder weights do not match the config: {e}") from None
    return enc.to(device=device, dtype=parse_dtype(dtype)).eval().requires_grad_(False)


def speaker_embedding_main(args) -> int:
    """WAV -> the speaker encoder's x-vector (float32 1-D .npy)."""
    from audio.reference import to_rate
    from tts.qwen3.config import ConfigError
    from tts.qwen3.prompt import PromptError
    from tts.qwen3.voice_clone import load_reference_or_error

    t0 = time.perf_counter()
    try:
        ref = load_reference_or_error(args.wav)
        enc = load_speaker_encoder(args.model_dir, args.device, args.dtype)
    except (PromptError, ConfigError) as e:
        print(f"voxgate speaker-embedding: {e.code}: {getattr(e, 'message', e)}", file=sys.stderr)
        return 2
    xvec = enc.embed(to_rate(ref.samples, ref.sample_rate, enc.sample_rate)).float().cpu().numpy()
    np.save(args.out, xvec.astype(np.float32))
    print(
        f"{ref.duration_s:.2f} s at {ref.sample_rate} Hz -> x-vector of {xvec.shape[0]} in "
        f"{time.perf_counter() - t0:.2f} s -> {args.out}",
        file=sys.stderr,
    )
    return 0
