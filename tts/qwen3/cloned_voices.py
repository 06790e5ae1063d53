"""The engine's cloned voices: name -> prompt parts (+ the vocoder state after the reference).

A voice is added at run time (`Qwen3Engine.add_voice`, from config or `POST /v1/voices`);
its parts come from `VoiceCloner` (memory and disk cache). For an in-context voice the
official output is the joint decode of reference + generated codes with the reference's
samples cut off; a streaming engine gets the same samples by starting each request's
vocoder row from the state the reference codes leave behind (`primed`), decoded once per
voice on the vocoder lane, so a call never re-decodes its reference.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from tts.engine import EngineError, VoiceClone
from tts.qwen3.prompt import ClonePrompt, PromptError


@dataclass
class ClonedVoice:
    name: str
    kind: str  # "clone_icl" | "clone_xvector"
    clone: ClonePrompt
    ref_seconds: float
    source: str  # where its parts came from: computed | memory | disk
    prepare_s: float
    primed: object = None  # the vocoder state after the reference codes (ICL), made on first use

    def info(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "ref_seconds": round(self.ref_seconds, 3),
            "ref_frames": 0 if self.clone.ref_codes is None else int(self.clone.ref_codes.shape[0]),
            "source": self.source,
            "prepare_ms": round(self.prepare_s * 1000, 1),
        }


class ClonedVoices:
    def __init__(self, cloner):
        self.cloner = cloner
        self._lock = threading.Lock()
        self._voices: dict[str, ClonedVoice] = {}

    def add(self, voice: VoiceClone) -> ClonedVoice:
        """Blocking (encoders run here): call it off the event loop."""
        from tts.qwen3.voice_clone import load_reference_or_error

        t0 = time.perf_counter()
        try:
            if not voice.x_vector_only and not (voice.ref_text and voice.ref_text.strip()):
                raise PromptError(
                    "bad_voice", "in-context cloning needs the reference transcript (ref_text); or set x_vector_only"
                )
            ref = load_reference_or_error(voice.ref_audio)
            parts, source = self.cloner.parts(ref, icl=not voice.x_vector_only)
            clone = self.cloner.to_prompt(parts, None if voice.x_vector_only else voice.ref_text)
        except PromptError as e:
            raise EngineError(e.code, f"voice {voice.name!r}: {e.message}") from None
        cv = ClonedVoice(voice.name, voice.kind, clone, ref.duration_s, source, time.perf_counter() - t0)
        with self._lock:
            self._voices[voice.name] = cv
        return cv

    def remove(self, name: str) -> bool:
        with self._lock:
            return self._voices.pop(name, None) is not None

    def get(self, name: str | None) -> ClonedVoice:
        with self._lock:
            if name and name != "default":
                if name not in self._voices:
                    known = ", ".join(sorted(self._voices)) or "none yet (add one with POST /v1/voices)"
                    raise EngineError(
                        "unknown_voice", f"voice {name!r} is not a cloned voice of this engine; known: {known}"
                    )
                return self._voices[name]
            if not self._voices:
                raise EngineError(
                    "unknown_voice",
                    "this Base checkpoint speaks only cloned voices, and none "
                    "is registered (voices.NAME.ref_audio or POST /v1/voices)",
                )
            return next(iter(self._voices.values()))

    def names(self) -> list[str]:
        with self._lock:
            return list(self._voices)

    def infos(self) -> list[dict]:
        with self._lock:
            return [v.info() for v in self._voices.values()]


def prime_vocoder(vocoder, ref_codes, packet: int):
    """A one-row vocoder state after decoding the reference frames, in packets the backend serves."""
    import torch

    state = vocoder.new_state(1)
    codes = ref_codes.to(vocoder.device).unsqueeze(0)
    with torch.inference_mode():
        for i in range(0, codes.shape[1], packet):
            chunk = codes[:, i : i + packet]
            if chunk.shape[1] < packet:  # the tail in single frames: every backend serves packets of 1
                for j in range(chunk.shape[1]):
                    vocoder.decode_step(chunk[:, j : j + 1], state)
            else:
                vocoder.decode_step(chunk, state)
    return state
