"""A voxgate synthesis request as the JSON body of `POST {base}/audio/speech`.

vLLM-Omni (and SGLang-Omni, which follows it) take OpenAI's fields plus Qwen3-TTS's own: `voice`,
`language` as a name (`English`, `Auto`), `instructions`, `task_type` (CustomVoice | VoiceDesign | Base) and
`ref_audio` (a URL or a base64 data URI) with `ref_text` for Base voice clones. voxgate's own route takes
ISO 639-1 codes (`en`, `auto`) and knows cloned voices by name (uploaded to it with `POST /v1/voices`).
"""

from __future__ import annotations

import base64

from tts.engine import SynthesisRequest, VoiceClone

# ISO 639-1 → the language names Qwen3-TTS servers take
LANGUAGE_NAMES = {
    "auto": "Auto",
    "en": "English",
    "ru": "Russian",
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "it": "Italian",
    "pt": "Portuguese",
    "zh": "Chinese",
    "ja": "Japanese",
    "ko": "Korean",
}
DEFAULT_VOICE = "default"  # voxgate's name for "the server's own default voice": no `voice` field is sent


def speech_body(
    request: SynthesisRequest,
    *,
    flavour: str,
    model: str | None,
    sample_rate: int,
    task_type: str | None,
    clone: VoiceClone | None,
) -> dict:
    """The JSON body for one text chunk, streamed back as raw 16-bit PCM."""
    body: dict = {"input": request.text, "response_format": "pcm", "stream": True, "stream_format": "audio"}
    if model:
        body["model"] = model
    elif flavour == "voxgate":
        body["model"] = "voxgate"  # its route requires one; any name works
    if flavour != "voxgate":
        body["sample_rate"] = sample_rate
    voice = request.voice
    if flavour == "voxgate":
        body["language"] = request.language
        if voice and voice != DEFAULT_VOICE:
            body["voice"] = voice
    else:
        body["language"] = LANGUAGE_NAMES.get(request.language, request.language)
        if clone is not None:
            body["task_type"] = "Base"
            body["ref_audio"] = "data:audio/wav;base64," + base64.b64encode(clone.ref_audio).decode("ascii")
            if clone.x_vector_only:
                body["x_vector_only_mode"] = True
            elif clone.ref_text:
                body["ref_text"] = clone.ref_text
        elif voice and voice != DEFAULT_VOICE:
            body["voice"] = voice
        if task_type and clone is None:
            body["task_type"] = task_type
    if request.instruct:
        body["instructions"] = request.instruct
    return body


def voice_names(listing) -> set[str] | None:
    """Voice names from a voices route's JSON: vLLM-Omni's `{"voices": [...], "uploaded_voices": [...]}`,
    voxgate's `{"voices": [{"name": …}, …]}`, or a bare list; None when the answer has no list."""
    lists = []
    if isinstance(listing, list):
        lists.append(listing)
    elif isinstance(listing, dict):
        for key in ("voices", "uploaded_voices", "data"):
            if isinstance(listing.get(key), list):
                lists.append(listing[key])
    if not lists:
        return None
    names: set[str] = set()
    for items in lists:
        for item in items:
            if isinstance(item, str):
                names.add(item)
            elif isinstance(item, dict):
                for key in ("name", "id", "voice", "voice_id"):
                    if isinstance(item.get(key), str):
                        names.add(item[key])
                        break
                for alias in item.get("aliases") or []:
                    if isinstance(alias, str):
                        names.add(alias)
    return names
