"""GET /v1/voices: the configured voices, the default one and the languages `session.start` takes."""

from __future__ import annotations

from aiohttp import web

from gateway.config import Config

LANGUAGES = ["auto", "en", "ru", "de", "fr", "es", "it", "pt", "zh", "ja", "ko"]


def routes(config: Config) -> list[web.RouteDef]:
    async def voices(request: web.Request) -> web.Response:
        listed = [{"name": name, "language": v.language, "speaker": v.speaker, "instruct": v.instruct, "aliases": v.aliases} for name, v in config.voices.items()]
        return web.json_response({"default": config.default_voice_name, "voices": listed, "languages": LANGUAGES})

    return [web.get("/v1/voices", voices)]
