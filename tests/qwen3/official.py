"""Helpers that run the official qwen-tts 0.1.1 (test and bench use only; never run-time code).

`write_official_tiny` writes a tiny checkpoint whose weights come from the official
classes' own random init (`save_pretrained`-style state dict); config.json is written
by us in the released layout because the official writer's config cannot be loaded back.
"""

from __future__ import annotations

import functools
import json
import os
import warnings


def import_official():
    """The official modeling module, or raise ImportError with the reason."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import qwen_tts  # noqa: F401  (its __init__ needs librosa, soundfile, sox, onnxruntime, torchaudio)
        from qwen_tts.core.models import configuration_qwen3_tts, modeling_qwen3_tts
    return configuration_qwen3_tts, modeling_qwen3_tts


def official_unavailable_reason() -> str | None:
    try:
        import_official()
    except Exception as e:  # any import failure means: skip, with the reason
        return f"official qwen-tts 0.1.1 not importable ({type(e).__name__}: {e}); run scripts/install_reference.sh"
    return None


def official_from_config_json(config_json: dict, seed: int | None = None):
    conf_mod, model_mod = import_official()
    import torch

    config = conf_mod.Qwen3TTSConfig(**config_json)
    config._attn_implementation = "eager"
    if seed is not None:
        torch.manual_seed(seed)
    model = model_mod.Qwen3TTSForConditionalGeneration(config)
    return model.float().eval()


def official_model(model_dir: str):
    """The official model class on our checkpoint files (config.json + model.safetensors)."""
    from safetensors.torch import load_file

    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        model = official_from_config_json(json.load(f))
    state = load_file(os.path.join(model_dir, "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return model


def write_official_tiny(
    model_dir: str, variant: str = "1b7", kind: str = "custom_voice", seed: int = 0, with_codec: bool = True
) -> None:
    """A tiny checkpoint whose weights the official classes initialised."""
    from safetensors.torch import save_file

    from tts.qwen3.tiny import tiny_config, write_codec, write_config_files, write_tokenizer

    os.makedirs(model_dir, exist_ok=True)
    codec = write_codec(model_dir, seed, reference=True) if with_codec else None
    codebook, groups = codec or (2048, 16)
    config = tiny_config(variant, kind, codebook, groups, write_tokenizer(model_dir))
    write_config_files(model_dir, config)
    model = official_from_config_json(config.to_json(), seed=seed)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(model_dir, "model.safetensors"), metadata={"format": "pt"})


def hf_tokenizer(model_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def official_generate(
    model,
    tokenizer,
    text: str,
    *,
    speaker: str | None,
    language: str,
    instruct: str | None = None,
    max_frames: int = 24,
    streaming_text: bool = False,
    record_logits: bool = False,
):
    """Greedy official generation; returns (codes [frames, G], list of raw codebook-0 logits per step)."""
    import torch

    def ids(s: str):
        return tokenizer(s, return_tensors="pt")["input_ids"]

    logits = []
    orig = model.talker.forward

    @functools.wraps(orig)  # transformers validates kwargs against forward's signature
    def recording_forward(*args, **kwargs):
        out = orig(*args, **kwargs)
        logits.append(out.logits[:, -1].detach().float().clone())
        return out

    if record_logits:
        model.talker.forward = recording_forward
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            codes, _ = model.generate(
                input_ids=[ids(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")],
                instruct_ids=[ids(f"<|im_start|>user\n{instruct}<|im_end|>\n") if instruct else None],
                languages=[language],
                speakers=[speaker],
                non_streaming_mode=not streaming_text,
                max_new_tokens=max_frames + 1,
                do_sample=False,
                subtalker_dosample=False,
                repetition_penalty=1.0,
            )
    finally:
        if record_logits:
            del model.talker.forward
    return codes[0], logits


@functools.lru_cache(maxsize=4)
def official_wrapper(model_dir: str):
    """The official `Qwen3TTSModel` wrapper (model + speech tokenizer) in float32, loaded once per folder."""
    import torch
    from qwen_tts import Qwen3TTSModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Qwen3TTSModel.from_pretrained(model_dir, dtype=torch.float32)


def official_clone_codes(
    model_dir: str,
    ref_audio: str,
    ref_text: str | None,
    text: str,
    *,
    language: str,
    x_vector_only: bool,
    max_frames: int = 24,
    streaming_text: bool = True,
):
    """Greedy codes of `generate_voice_clone`'s own steps (it returns only the waveform), its prompt
    item, and what it fed the talker: {"prefill": [L, D], "trailing": [N, D]}."""
    import torch

    w = official_wrapper(model_dir)
    fed = {}
    orig = w.model.talker.generate

    def recording_generate(*args, **kwargs):
        fed["prefill"] = kwargs["inputs_embeds"][0].detach().clone()
        fed["trailing"] = kwargs["trailing_text_hidden"][0].detach().clone()
        return orig(*args, **kwargs)

    w.model.talker.generate = recording_generate
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        items = w.create_voice_clone_prompt(ref_audio=ref_audio, ref_text=ref_text, x_vector_only_mode=x_vector_only)
        prompt = w._prompt_items_to_voice_clone_prompt(items)
        input_ids = w._tokenize_texts([w._build_assistant_text(text)])
        ref_ids = [w._tokenize_texts([w._build_ref_text(ref_text)])[0] if ref_text else None]
        codes, _ = w.model.generate(
            input_ids=input_ids,
            ref_ids=ref_ids,
            voice_clone_prompt=prompt,
            languages=[language],
            non_streaming_mode=not streaming_text,
            max_new_tokens=max_frames + 1,
            do_sample=False,
            subtalker_dosample=False,
            repetition_penalty=1.0,
        )
    del w.model.talker.generate
    return codes[0], items[0], fed
