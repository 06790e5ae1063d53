"""`voxgate bench --ref-audio WAV`: what a cloned voice costs before its first audio.

For one reference recording, on a Base checkpoint (`--model-dir`) or the released shape with
random weights (`--random-weights 0.6b|1.7b`: random speaker encoder, codec encoder and
decoder, byte-level text tokenizer; the shapes, hence the costs, are the real ones):

* preparing the voice: computed (speaker encoder + codec encoder, and for in-context voices the
  reference decode that primes the vocoder row), with its parts from the disk cache (a restart),
  from the memory cache;
* TTFA of a short text: the voice's first request against later ones, and against an
  x-vector-only clone of the same recording;
* the prompt: positions prefilled per request, and how many of them are the same for every
  request of the voice (the only part a cross-request KV cache could reuse).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

TEXT = "Hello, how can I help you today?"
REPEATS = 5


def _random_base(size: str, device: str, dtype: str):
    from tts.qwen3.checkpoint import Checkpoint
    from tts.qwen3.codec import CodecConfig, random_codec_decoder
    from tts.qwen3.codec.encoder import CodecEncoder, EncoderConfig
    from tts.qwen3.config import GenerationDefaults, released_config
    from tts.qwen3.tiny import write_tokenizer
    from tts.qwen3.tokenizer import TextTokenizer
    from tts.qwen3.weights import random_model
    import torch

    config = released_config(size, "base")
    model = random_model(config, device, dtype, seed=0)
    encoder = CodecEncoder(EncoderConfig()).to(device).eval().requires_grad_(False)
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for name, p in encoder.named_parameters():
            p.copy_(
                torch.randn(p.shape, generator=g) * (0.02 if p.dim() > 1 else 0.0)
                + (1.0 if "scale" in name or "layernorm.weight" in name else 0.0)
            )
        for layer in [
            *encoder.quantizer.semantic_residual_vector_quantizer.layers,
            *encoder.quantizer.acoustic_residual_vector_quantizer.layers,
        ]:
            layer.codebook.embed_sum.copy_(torch.randn(layer.codebook.embed_sum.shape, generator=g))
    with tempfile.TemporaryDirectory() as d:
        write_tokenizer(d)
        tokenizer = TextTokenizer.from_dir(d)
    codec = random_codec_decoder(CodecConfig(), seed=0, device=device)
    return Checkpoint(config, model, tokenizer, GenerationDefaults(), codec, None, codec_encoder=encoder)


async def _ttfa(engine, voice: str) -> tuple[float, dict]:
    from tts.engine import SamplingSettings, SynthesisRequest

    t0 = time.monotonic()
    p0 = engine.timings["prefill"]
    stream = engine.synthesize(
        SynthesisRequest(text=TEXT, voice=voice, language="en", sampling=SamplingSettings(greedy=True))
    )
    job = engine._jobs[id(stream)]
    first = None
    async for chunk in stream:
        if first is None and len(chunk.pcm):
            first = time.monotonic() - t0
            stream.cancel()
            break
    return first, {
        "prefill_positions": job.prompt_len,
        "prefill_ms": round((engine.timings["prefill"] - p0) * 1e3, 1),
    }


async def clone_bench(args) -> dict:
    from tts.engine import VoiceClone
    from tts.qwen3.engine import EngineSettings, Qwen3Engine
    from tts.qwen3.prompt import codec_prefix

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    cache = tempfile.mkdtemp(prefix="voxgate-voice-cache-")
    settings = EngineSettings(
        model_dir=args.model_dir,
        device=device,
        dtype=dtype,
        max_batch=2,
        max_seq_len=1024,
        frames_base=8,
        frames_per_token=0.5,
        vocoder=getattr(args, "vocoder", "auto") or "auto",
        voice_cache_dir=cache,
    )
    t0 = time.monotonic()
    ckpt = _random_base(args.random_weights, device, dtype) if args.random_weights else None
    engine = Qwen3Engine(settings, checkpoint=ckpt)
    await engine.start()
    load_s = time.monotonic() - t0
    if not engine.can_clone:
        await engine.close()
        raise SystemExit("voxgate bench --ref-audio needs a Base checkpoint (or --random-weights)")
    with open(args.ref_audio, "rb") as f:
        audio = f.read()
    xvo = bool(args.x_vector_only)
    ref_text = args.ref_text or ("Hello, this is a reference recording of my voice." if not xvo else None)
    out: dict = {
        "engine": {
            "source": args.model_dir or f"random {args.random_weights} base",
            "device": device,
            "dtype": dtype,
            "load_s": round(load_s, 2),
            "threads": torch.get_num_threads(),
            "load_average_1m": round(os.getloadavg()[0], 1),
        },
        "mode": "x_vector" if xvo else "icl",
    }
    try:
        await _ttfa(engine, "default") if engine.voices() else None
        t = time.perf_counter()
        info = await engine.add_voice(VoiceClone("bench", audio, ref_text, xvo))
        prepare = {"computed_ms": round((time.perf_counter() - t) * 1e3, 1)}
        first, first_prompt = await _ttfa(engine, "bench")
        cached = [(await _ttfa(engine, "bench"))[0] for _ in range(REPEATS)]
        engine.remove_voice("bench")
        t = time.perf_counter()
        await engine.add_voice(VoiceClone("bench", audio, ref_text, xvo))
        prepare["memory_ms"] = round((time.perf_counter() - t) * 1e3, 1)
        engine._clones.cloner._memory.clear()  # as after a restart: only the disk cache is left
        t = time.perf_counter()
        again = await engine.add_voice(VoiceClone("bench", audio, ref_text, xvo))
        prepare["disk_ms"] = round((time.perf_counter() - t) * 1e3, 1)
        assert again["source"] == "disk"
        first_after_restart, _ = await _ttfa(engine, "bench")  # primes the vocoder row again
        await engine.add_voice(VoiceClone("bench_xv", audio, None, True))
        await _ttfa(engine, "bench_xv")
        xv = [(await _ttfa(engine, "bench_xv")) for _ in range(REPEATS)]
        cfg = engine._ckpt.config
        shared = 3 + len(codec_prefix(cfg, "english", None)) + 2  # role tokens, control, speaker row, pad
        out.update(
            {
                "ref_seconds": info["ref_seconds"],
                "ref_frames": info["ref_frames"],
                "prepare": prepare,
                "ttfa_ms": {
                    "first_use": round(first * 1e3, 1),
                    "cached_p50": round(statistics.median(cached) * 1e3, 1),
                    "after_restart_first": round(first_after_restart * 1e3, 1),
                    "x_vector_only_p50": round(statistics.median(x[0] for x in xv) * 1e3, 1),
                },
                "prompt": {
                    **first_prompt,
                    "x_vector_only_positions": xv[0][1]["prefill_positions"],
                    "x_vector_only_prefill_ms": xv[0][1]["prefill_ms"],
                    "shared_prefix_positions": shared,
                },
            }
        )
    finally:
        await engine.close()
    p, t = out["prepare"], out["ttfa_ms"]
    print(f"engine: {out['engine']['source']} on {device} {dtype}; loaded in {load_s:.1f} s")
    print(f"reference {out['ref_seconds']} s ({out['ref_frames']} frames), mode {out['mode']}")
    print(
        f"prepare voice (encoders; ICL also the reference decode that primes its vocoder row): computed "
        f"{p['computed_ms']} ms, parts from the disk cache {p['disk_ms']} ms, from memory {p['memory_ms']} ms"
    )
    print(
        f"TTFA '{TEXT}': first use {t['first_use']} ms, cached {t['cached_p50']} ms (p50 of {REPEATS}), "
        f"first after a restart {t['after_restart_first']} ms; x-vector only {t['x_vector_only_p50']} ms"
    )
    q = out["prompt"]
    print(
        f"prompt: {q['prefill_positions']} positions ({q['prefill_ms']} ms prefill) vs x-vector only "
        f"{q['x_vector_only_positions']} ({q['x_vector_only_prefill_ms']} ms); the same for every request of the "
        f"voice: the first {q['shared_prefix_positions']} (text enters the prompt after them)"
    )
    return out
