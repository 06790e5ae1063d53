"""What a speech server's HTTP answer says besides the audio: its error message, and the sample rate it states."""

from __future__ import annotations

import json


async def error_text(resp) -> str:
    """The server's error message: OpenAI's `{"error": {"message"}}`, FastAPI's `{"detail"}`, or the text."""
    try:
        text = await resp.text()
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
