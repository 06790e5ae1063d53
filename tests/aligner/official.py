"""Runs the official Qwen3ForcedAligner of qwen-asr 0.0.6 (tests only; run-time code never imports it)."""

from __future__ import annotations

import warnings


def official_unavailable_reason() -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from qwen_asr.inference.qwen3_forced_aligner import Qwen3ForcedAligner  # noqa: F401
    except Exception as e:  # any import failure means: skip, with the reason
        return f"official qwen-asr 0.0.6 not importable ({type(e).__name__}: {e}); run scripts/install_reference.sh"
    return None


def load(model_dir: str):
    import torch
    from qwen_asr.inference.qwen3_forced_aligner import Qwen3ForcedAligner

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Qwen3ForcedAligner.from_pretrained(model_dir, dtype=torch.float32)


def align_with_logits(aligner, audios, texts, language: str = "English"):
    """The official `align`, plus the logits and input ids it argmaxed (the same steps, in its order)."""
    import torch
    from qwen_asr.inference.utils import normalize_audios

    with torch.inference_mode():
        results = aligner.align(audio=audios, text=texts, language=language)
        prompts = [aligner.aligner_processor.encode_timestamp(t, language)[1] for t in texts]
        inputs = aligner.processor(text=prompts, audio=normalize_audios(audios), return_tensors="pt", padding=True)
        inputs = inputs.to(aligner.model.device).to(aligner.model.dtype)
        logits = aligner.model.thinker(**inputs).logits
    return results, logits, inputs["input_ids"], inputs["attention_mask"]
