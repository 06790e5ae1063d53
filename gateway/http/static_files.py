"""The demo page's files under /static/, served by exact name from a list made once at start.

The request's path never reaches the file system: a name is looked up among the files the directory held
when the gateway started, so no length, character, encoded slash, dot segment or NUL byte can make the
operating system refuse it (aiohttp's own static route let "file name too long" escape as a 500) or
reach outside the directory. Anything not on the list is a coded 404.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from aiohttp import web

from gateway import protocol as P


class StaticFiles:
    def __init__(self, directory: Path):
        self.files = {p.name: p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        # dot segments and extra slashes resolve as a browser would ("./demo.js", "a/../demo.js"); still a lookup only
        name = posixpath.normpath("/" + request.match_info.get("name", "")).lstrip("/")
        path = self.files.get(name)
        if path is None:
            return web.json_response(P.error_event(P.NOT_FOUND, "no such file on the demo page"), status=404)
        return web.FileResponse(path)

    def route(self, prefix: str = "/static") -> web.RouteDef:
        return web.get(prefix + "/{name:.*}", self.handle)
