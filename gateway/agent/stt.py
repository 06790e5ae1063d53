"""Speech to text for the caller's utterances over an OpenAI-compatible `/v1/audio/transcriptions`.

whisper.cpp's server, faster-whisper servers and vLLM all speak it: a
multipart POST with the audio file (`file`), `model`, optional `language`
and `response_format=json`, answered by `{"text": "…"}`. Each utterance the
VAD detected goes out as a 16 kHz mono WAV. Every failure (connection,
timeout, HTTP status, a body that is not the expected JSON) becomes an
`SttError` carrying the stable code `stt_error`, which the session reports
as an error event: the call goes on.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import wave

import aiohttp
import numpy as np

log = logging.getLogger("voxgate.stt")

STT_ERROR = "stt_error"
MAX_ERROR_BODY = 300  # characters of a failing server's answer quoted in the error


class SttError(Exception):
    code = STT_ERROR

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class UtteranceBuffer:
    """The last `keep_s` of one call's 16 kHz caller audio, addressable by absolute sample index.

    The VAD dates speech by sample index (onset and end); once an utterance
    has ended, `cut(start, end)` returns its audio.
    """

    def __init__(self, keep_s: float = 35.0, sample_rate: int = 16000):
        self.sample_rate = sample_rate
        self._ring = np.zeros(int(keep_s * sample_rate), np.int16)
        self.samples = 0  # total pushed: the index one past the newest sample

    def push(self, pcm: np.ndarray) -> None:
        pcm = np.asarray(pcm)
        if pcm.dtype != np.int16:
            pcm = np.clip(pcm * 32768.0, -32768, 32767).astype(np.int16)
        n, size = len(pcm), len(self._ring)
        if n >= size:
            pcm, self.samples = pcm[-size:], self.samples + n - size
            n = size
        at = self.samples % size
        first = min(n, size - at)
        self._ring[at : at + first] = pcm[:first]
        self._ring[: n - first] = pcm[first:]
        self.samples += n

    def cut(self, start: int, end: int) -> np.ndarray:
        size = len(self._ring)
        start = max(start, self.samples - size, 0)
        end = min(end, self.samples)
        if end <= start:
            return np.zeros(0, np.int16)
        idx = np.arange(start, end) % size
        return self._ring[idx]


def wav_bytes(pcm: np.ndarray, sample_rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(np.asarray(pcm, dtype="<i2").tobytes())
    return buf.getvalue()


class TranscriptionClient:
    """One client per gateway; `transcribe` is safe to call from many sessions at once."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        language: str | None = None,
        timeout_s: float = 15.0,
    ):
        self.url = base_url.rstrip("/") + "/audio/transcriptions"
        self.model = model
        self.api_key_env = api_key_env
        self.language = language
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http: aiohttp.ClientSession | None = None
        self.requests = 0
        self.failures = 0

    @classmethod
    def from_config(cls, stt) -> "TranscriptionClient | None":
        if stt.kind == "off":
            return None
        return cls(stt.base_url, stt.model, stt.api_key_env, stt.language, stt.timeout_s)

    def _headers(self) -> dict:
        if not self.api_key_env:
            return {}
        key = os.environ.get(self.api_key_env)
        if not key:
            raise SttError(f"stt.api_key_env names {self.api_key_env!r}, which is not set")
        return {"Authorization": f"Bearer {key}"}

    async def transcribe(self, pcm: np.ndarray, sample_rate: int = 16000, language: str | None = None) -> str:
        """The transcript of one utterance (int16 mono); raises SttError on any failure."""
        self.requests += 1
        try:
            return await self._post(pcm, sample_rate, language or self.language)
        except SttError:
            self.failures += 1
            raise

    async def _post(self, pcm: np.ndarray, sample_rate: int, language: str | None) -> str:
        headers = self._headers()
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=self.timeout)
        form = aiohttp.FormData()
        form.add_field("file", wav_bytes(pcm, sample_rate), filename="utterance.wav", content_type="audio/wav")
        form.add_field("model", self.model)
        form.add_field("response_format", "json")
        if language and language != "auto":
            form.add_field("language", language)
        try:
            async with self._http.post(self.url, data=form, headers=headers) as resp:
                body = await resp.text()
                if resp.status != 200:
                    raise SttError(f"transcription server answered HTTP {resp.status}: {body[:MAX_ERROR_BODY]}")
        except SttError:
            raise
        except asyncio.TimeoutError:
            raise SttError(f"transcription server did not answer within {self.timeout.total:g} s") from None
        except aiohttp.ClientError as exc:
            raise SttError(f"transcription request to {self.url} failed: {exc}") from None
        try:
            data = json.loads(body)
        except ValueError:
            raise SttError(f"transcription server sent no JSON: {body[:MAX_ERROR_BODY]!r}") from None
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise SttError(f"transcription answer has no string 'text': {body[:MAX_ERROR_BODY]!r}")
        return data["text"].strip()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
