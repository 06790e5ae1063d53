"""aiohttp's own refusals (no such route, wrong method, a body past the size cap, a plain GET on a
WebSocket route) become coded JSON errors like every other answer of the gateway.

aiohttp raises them as `web.HTTPException` with a plain-text body ("404: Not Found"); a client cannot
tell one refusal from another by a stable code. Responses below 400 (redirects) pass untouched.
"""

from __future__ import annotations

from aiohttp import web

from gateway import protocol as P
from gateway.core import CallCore

CODES = {404: P.NOT_FOUND, 405: P.METHOD_NOT_ALLOWED, 413: P.TOO_LARGE}
MESSAGES = {404: "no route for this path", 405: "this route does not take this method (Allow names those it does)"}
DROPPED_HEADERS = ("Content-Type", "Content-Length", "Content-Encoding", "Transfer-Encoding")


def coded(exc: web.HTTPException) -> web.Response:
    code = CODES.get(exc.status, P.BAD_REQUEST)
    text = (exc.text or "").strip()
    message = text if text and not text.startswith(f"{exc.status}:") else MESSAGES.get(exc.status, exc.reason)
    headers = {k: v for k, v in exc.headers.items() if k not in DROPPED_HEADERS}  # keeps 405's Allow
    return web.json_response(P.error_event(code, message), status=exc.status, headers=headers)


def coded_errors_middleware(core: CallCore):
    @web.middleware
    async def coded_errors(request: web.Request, handler):
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            core.metrics.errors.labels(code=CODES.get(exc.status, P.BAD_REQUEST)).inc()
            return coded(exc)

    return coded_errors
