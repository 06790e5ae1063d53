"""What a speech server's HTTP answer says besides the audio: its error message (read from at most a few KiB of
body), whether its body is the raw PCM asked for, and the sample rate it states."""

from __future__ import annotations

import json

ERROR_BODY_LIMIT = 4096  # bytes of an error answer read for its message; the rest is never read
SHOWN_BYTES = 32  # of a body that is not audio: how many first bytes the log shows

# The Content-Type of a streamed raw s16le body, as vLLM-Omni 0.30 ("audio/pcm"), SGLang-Omni 0.1.9 ("audio/pcm",
# its rate in X-Sample-Rate) and voxgate send it; parameters (`;rate=24000`) are allowed. Not `audio/L16`: that
# is big-endian (RFC 2586), and played as little-endian it is noise.
PCM_TYPE = "audio/pcm"


async def capped_body(resp, limit: int = ERROR_BODY_LIMIT) -> bytes:
    """At most `limit` bytes of the body: a server's error page must not cost more than that to read."""
    body = b""
    while len(body) < limit:
        part = await resp.content.read(limit - len(body))
        if not part:
            break
        body += part
    return body


async def error_text(resp) -> str:
    """The server's error message: OpenAI's `{"error": {"message"}}`, FastAPI's `{"detail"}`, or the text."""
    try:
        text = (await capped_body(resp)).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - the body is only for the message
        return resp.reason or ""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
        if body.get("detail"):
            return str(body["detail"])[:500]
        if body.get("message"):
            return str(body["message"])[:500]
    return text.strip()[:500]


def not_pcm(headers) -> str | None:
    """None when the answer's Content-Type is raw PCM (any parameters, such as a rate), else the type it is."""
    content_type = headers.get("Content-Type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    return None if media == PCM_TYPE else (content_type or "no Content-Type")


def stated_rate(headers) -> int | None:
    """The sample rate a response states (`audio/pcm;rate=24000`, `X-Sample-Rate`), if any."""
    for name in ("X-Sample-Rate", "X-Audio-Sample-Rate"):
        if headers.get(name, "").isdigit():
            return int(headers[name])
    for part in headers.get("Content-Type", "").split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() in ("rate", "samplerate", "sample_rate") and value.isdigit():
            return int(value)
    return None
