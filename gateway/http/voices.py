"""Voices over HTTP: `GET /v1/voices` (every voice with its kind), `POST /v1/voices` (clone one from a
reference recording; multipart: name, audio, optional ref_text, x_vector_only, language) and
`DELETE /v1/voices/NAME` (uploaded voices only). Changes need the API key when keys are set."""

from __future__ import annotations

from aiohttp import web

from gateway import protocol as P
from gateway.core import CallCore
from gateway.core.voice_store import VoiceError, VoiceStore
from gateway.cluster.plane import ClusterUnavailable
from gateway.legs.accept import admit, unauthorized_response, unavailable_response

LANGUAGES = ["auto", "en", "ru", "de", "fr", "es", "it", "pt", "zh", "ja", "ko"]
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def _error(err: VoiceError) -> web.Response:
    return web.json_response(P.error_event(err.code, err.message), status=err.status)


async def _read_form(request: web.Request, limit: int) -> dict[str, bytes]:
    """The multipart fields, the whole body held to `limit` bytes (413 beyond it)."""
    if not request.content_type.startswith("multipart/"):
        raise VoiceError("bad_message", "send multipart/form-data with the fields name, audio, ref_text, x_vector_only")
    if request.content_length is not None and request.content_length > limit:
        raise VoiceError("too_large", f"the upload exceeds server.voice_upload_max_bytes ({limit} bytes)", 413)
    fields: dict[str, bytes] = {}
    total = 0
    reader = await request.multipart()
    async for part in reader:
        chunks = []
        while chunk := await part.read_chunk(65536):
            total += len(chunk)
            if total > limit:
                raise VoiceError("too_large", f"the upload exceeds server.voice_upload_max_bytes ({limit} bytes)", 413)
            chunks.append(chunk)
        if part.name:
            fields[part.name] = b"".join(chunks)
    return fields


def routes(core: CallCore, store: VoiceStore) -> list[web.RouteDef]:
    config = core.config

    async def list_voices(request: web.Request) -> web.Response:
        if store.plane is not None:  # the same list on every node: the plane's uploads, read now
            try:
                await store.sync()
            except ClusterUnavailable:
                pass  # this node's last view of them
        return web.json_response(
            {
                "default": config.default_voice_name,
                "voices": store.listing(),
                "languages": LANGUAGES,
                "can_clone": core.engine.can_clone,
            }
        )

    async def add_voice(request: web.Request) -> web.Response:
        try:
            if await admit(core, request) is not None:
                return unauthorized_response()
        except ClusterUnavailable as exc:
            return unavailable_response(exc)
        try:
            form = await _read_form(request, config.server.voice_upload_max_bytes)
            text = lambda key: form.get(key, b"").decode("utf-8", "replace").strip()  # noqa: E731
            if "audio" not in form or not form["audio"]:
                raise VoiceError(
                    "bad_message",
                    "the audio field (the reference recording: WAV, MP3, M4A, Ogg, WebM or FLAC) is missing",
                )
            flag = text("x_vector_only").lower()
            if flag not in _TRUE + _FALSE:
                raise VoiceError("bad_message", f"x_vector_only must be true or false, not {flag!r}")
            info = await store.add(
                text("name"), form["audio"], text("ref_text") or None, flag in _TRUE, text("language") or "auto"
            )
        except VoiceError as err:
            core.metrics.errors.labels(code=err.code).inc()
            return _error(err)
        return web.json_response(info, status=201)

    async def delete_voice(request: web.Request) -> web.Response:
        try:
            if await admit(core, request) is not None:
                return unauthorized_response()
        except ClusterUnavailable as exc:
            return unavailable_response(exc)
        try:
            await store.remove(request.match_info["name"])
        except VoiceError as err:
            return _error(err)
        return web.json_response({"deleted": request.match_info["name"]})

    return [
        web.get("/v1/voices", list_voices),
        web.post("/v1/voices", add_voice),
        web.delete("/v1/voices/{name}", delete_voice),
    ]
