"""Prefill prompts for CustomVoice (speaker + language, dialects), VoiceDesign (instruction)
and Base (voice clone: x-vector only, or in-context with the reference's codes and
transcript), in the official layout.

A prompt is three tensors: the prefill embeddings [L, D]; the text track that is added
to the talker input at each generated frame [N, D] (empty in the non-streaming layout);
and the `tts_pad` embedding that follows it once the text is used up.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tts.qwen3.staging import to_device

from tts.qwen3.config import ModelConfig
from tts.qwen3.model import Talker
from tts.qwen3.tokenizer import TextTokenizer

# Our API speaks ISO 639-1; the checkpoint names languages in English.
ISO_LANGUAGES = {
    "zh": "chinese",
    "en": "english",
    "de": "german",
    "it": "italian",
    "pt": "portuguese",
    "es": "spanish",
    "ja": "japanese",
    "ko": "korean",
    "fr": "french",
    "ru": "russian",
}


class PromptError(ValueError):
    """A request the checkpoint cannot speak (unknown speaker or language, missing voice)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Prompt:
    prefill: torch.Tensor  # [L, D]
    trailing_text: torch.Tensor  # [N, D], added to frames 0..N-1 of the talker input
    pad: torch.Tensor  # [D], the text track after the trailing text
    text_tokens: int  # number of text tokens spoken (for frame caps)


@dataclass(frozen=True)
class ClonePrompt:
    """A cloned voice's prompt parts, computed once per voice (see tts.qwen3.voice_clone).

    `xvector` is the speaker encoder's output [D]; in ICL mode `ref_codes` holds the
    reference audio's frames [T, G] and `ref_ids` its transcript's token ids (the text
    between `<|im_start|>assistant\\n` and `<|im_end|>\\n`, tokenised on its own).
    """

    xvector: torch.Tensor
    ref_codes: torch.Tensor | None = None
    ref_ids: tuple[int, ...] | None = None

    @property
    def icl(self) -> bool:
        return self.ref_codes is not None


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def ref_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def ref_text_ids(tokenizer: TextTokenizer, text: str) -> tuple[int, ...]:
    """The reference transcript's ids as the official ICL prompt takes them ([3:-2] of its own turn)."""
    ids = tokenizer.encode(ref_text(text))
    if len(ids) <= 5:
        raise PromptError("bad_text", "the reference transcript is empty after tokenisation")
    return tuple(ids[3:-2])


def icl_trim(ref_frames: int, total_frames: int, samples: int) -> int:
    """Samples the official ICL output drops from the joint decode of reference + generated codes.

    Computed in floating point exactly as the official code does; for some lengths it keeps
    one sample of the reference's end."""
    return int(ref_frames / max(total_frames, 1) * samples)


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


def language_name(config: ModelConfig, language: str | None) -> str:
    """'auto', an ISO code or a checkpoint language name -> the checkpoint's name (or 'auto')."""
    lang = (language or "auto").strip().lower()
    if lang == "auto":
        return lang
    lang = ISO_LANGUAGES.get(lang, lang)
    names = config.talker.codec_language_id
    if lang not in names or lang.endswith("_dialect"):
        allowed = ["auto"] + sorted(n for n in names if not n.endswith("_dialect"))
        raise PromptError(
            "unsupported_language", f"language {language!r} is not supported; use one of {', '.join(allowed)}"
        )
    return lang


def codec_prefix(config: ModelConfig, language: str, speaker: str | None) -> list[int]:
    """The codec control track before the speaker slot: think tags and language."""
    t = config.talker
    lang_id = None if language == "auto" else t.codec_language_id[language]
    if speaker and language in ("chinese", "auto") and speaker in t.spk_is_dialect:
        lang_id = t.codec_language_id[t.spk_is_dialect[speaker]]  # dialect speakers override
    if lang_id is None:
        return [t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id]
    return [t.codec_think_id, t.codec_think_bos_id, lang_id, t.codec_think_eos_id]


@dataclass
class VoiceHead:
    """The prompt before any target text: the instruction (VoiceDesign), role tokens and the codec
    control track summed with the text track's pads and `tts_bos`; then what the text-carrying part
    needs. Shared by the whole-text prompts and turn mode (tts.qwen3.turn)."""

    parts: list  # [L_i, D] tensors, in order
    bos_codec: torch.Tensor  # [1, D]: codec_bos, the codec track's first text-carrying position
    pad: torch.Tensor  # [D] tts_pad
    eos: torch.Tensor  # [D] tts_eos
    clone: ClonePrompt | None


@torch.no_grad()
def voice_head(
    talker: Talker,
    config: ModelConfig,
    tokenizer: TextTokenizer,
    *,
    speaker: str | None = None,
    language: str | None = "auto",
    instruct: str | None = None,
    xvector: torch.Tensor | None = None,
    clone: ClonePrompt | None = None,
    role_ids: list[int] | None = None,
) -> VoiceHead:
    t = config.talker
    device = talker.codec_head.weight.device
    lang = language_name(config, language)
    spk = speaker.strip().lower() if speaker else None
    kind = config.tts_model_type
    if spk and spk not in t.spk_id:
        known = ", ".join(sorted(t.spk_id)) or "none (this checkpoint has no named speakers)"
        raise PromptError("unknown_voice", f"speaker {speaker!r} is not in this checkpoint; known: {known}")
    if kind == "custom_voice" and not spk:
        raise PromptError("unknown_voice", "a CustomVoice checkpoint needs a speaker")
    if clone is not None:
        xvector = clone.xvector
    if kind == "base" and xvector is None:
        raise PromptError("unknown_voice", "a Base checkpoint needs a speaker x-vector (voice clone prompt)")
    if instruct and config.tts_model_size == "0b6":
        instruct = None  # the official 0.6B path drops instructions

    def ids(seq: list[int]) -> torch.Tensor:
        return to_device(seq, device, torch.long)  # pinned, non-blocking: a pageable copy would wait

    bos_e, eos_e, pad_e = talker.embed_text(
        ids([config.tts_bos_token_id, config.tts_eos_token_id, config.tts_pad_token_id])
    )
    parts: list[torch.Tensor] = []
    if instruct:
        parts.append(talker.embed_text(ids(tokenizer.encode(instruct_text(instruct)))))
    role = role_ids if role_ids is not None else tokenizer.encode(assistant_text(""))[:3]
    parts.append(talker.embed_text(ids(role)))  # <|im_start|>assistant\n

    codec = talker.embed_codec(ids(codec_prefix(config, lang, spk)))
    speaker_rows = []
    if spk:
        speaker_rows = [talker.embed_codec(ids([t.spk_id[spk]]))]
    elif xvector is not None:
        speaker_rows = [xvector.to(device=device, dtype=codec.dtype).view(1, -1)]
    codec = torch.cat([codec, *speaker_rows, talker.embed_codec(ids([t.codec_pad_id, t.codec_bos_id]))])
    n = codec.shape[0]
    text_track = torch.cat([pad_e.expand(n - 2, -1), bos_e.view(1, -1)])
    parts.append(text_track + codec[:-1])
    return VoiceHead(parts=parts, bos_codec=codec[-1:], pad=pad_e, eos=eos_e, clone=clone)


def text_tokens(tokenizer: TextTokenizer, text: str) -> list[int]:
    """The whole turn's ids; the target text is [3:-5] (between the role tokens and the closing template)."""
    tokens = tokenizer.encode(assistant_text(text))
    if len(tokens) < 9:
        raise PromptError("bad_text", "text is empty after tokenisation")
    return tokens


@torch.no_grad()
def build_prompt(
    talker: Talker,
    config: ModelConfig,
    tokenizer: TextTokenizer,
    text: str,
    *,
    speaker: str | None = None,
    language: str | None = "auto",
    instruct: str | None = None,
    xvector: torch.Tensor | None = None,
    clone: ClonePrompt | None = None,
    streaming_text: bool = False,
) -> Prompt:
    t = config.talker
    device = talker.codec_head.weight.device
    tokens = text_tokens(tokenizer, text)
    body = tokens[3:-5]
    head = voice_head(
        talker,
        config,
        tokenizer,
        speaker=speaker,
        language=language,
        instruct=instruct,
        xvector=xvector,
        clone=clone,
        role_ids=tokens[:3],
    )
    parts, bos_codec, pad_e, eos_e = list(head.parts), head.bos_codec, head.pad, head.eos

    def ids(seq: list[int]) -> torch.Tensor:
        return to_device(seq, device, torch.long)  # pinned, non-blocking: a pageable copy would wait

    if clone is not None and clone.icl:
        return _icl_prompt(talker, config, parts, clone, body, pad_e, eos_e, bos_codec, streaming_text, ids)
    if streaming_text:
        parts.append(talker.embed_text(ids(body[:1])) + bos_codec)
        trailing = torch.cat([talker.embed_text(ids(body[1:])), eos_e.view(1, -1)])
    else:
        spoken = torch.cat([talker.embed_text(ids(body)), eos_e.view(1, -1)])
        parts.append(spoken + talker.embed_codec(ids([t.codec_pad_id] * spoken.shape[0])))
        parts.append(pad_e.view(1, -1) + bos_codec)
        trailing = pad_e.new_zeros((0, pad_e.shape[-1]))
    return Prompt(prefill=torch.cat(parts), trailing_text=trailing, pad=pad_e, text_tokens=len(body))


def _icl_prompt(
    talker: Talker,
    config: ModelConfig,
    parts: list[torch.Tensor],
    clone: ClonePrompt,
    body: list[int],
    pad_e: torch.Tensor,
    eos_e: torch.Tensor,
    bos_codec: torch.Tensor,
    streaming_text: bool,
    ids,
) -> Prompt:
    """The in-context part: reference transcript + target text on the text track, codec_bos and the
    reference frames on the codec track (official `generate_icl_prompt`)."""
    t = config.talker
    codes = clone.ref_codes.to(device=bos_codec.device)
    text = torch.cat([talker.embed_text(ids(list(clone.ref_ids) + body)), eos_e.view(1, -1)])
    codec = torch.cat([bos_codec, talker.embed_frame(codes)])
    n_text, n_codec = text.shape[0], codec.shape[0]
    empty = pad_e.new_zeros((0, pad_e.shape[-1]))
    if not streaming_text:
        parts.append(text + talker.embed_codec(ids([t.codec_pad_id] * n_text)))
        parts.append(codec + pad_e.view(1, -1))
        trailing = empty
    elif n_text > n_codec:
        parts.append(text[:n_codec] + codec)
        trailing = text[n_codec:]
    else:
        parts.append(torch.cat([text, pad_e.expand(n_codec - n_text, -1)]) + codec)
        trailing = empty
    return Prompt(prefill=torch.cat(parts), trailing_text=trailing, pad=pad_e, text_tokens=len(body))
