"""Outbound calls: `POST /v1/calls` through one of the gateway's `sip.trunks` (docs/sip.md, "Outbound calls").

The HTTP request runs in a worker thread with the standard library's `urllib` (the client depends on
`websockets` only); the gateway answers at once with the call's id, before the far end rings.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

from voxgate_client.session import VoxgateError, _auth


def calls_url(url: str) -> str:
    """`http(s)://host:port[/prefix]`, `ws(s)://…` or a `…/v1/…` URL → the gateway's `…/v1/calls`."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in ("http", "https"):
        raise ValueError(f"the gateway URL must be http(s):// or ws(s)://, not {url!r}")
    prefix = parts.path.split("/v1/", 1)[0].rstrip("/")
    return urlunsplit((scheme, parts.netloc, prefix + "/v1/calls", "", ""))


async def place_call(
    url: str,
    to: str,
    *,
    trunk: str,
    from_: str | None = None,
    headers: dict[str, str] | None = None,
    ring_timeout_s: float | None = None,
    api_key: str | None = None,
    timeout: float = 10.0,
) -> str:
    """Places a call to `to` (a SIP URI or an E.164 number) through `trunk`; returns its call id at once.

    Attach to it with `Session.attach(url, call_id)` (or use `Session.dial`, which does both). A refusal
    raises `VoxgateError` with the gateway's code and `status` the HTTP status: 400 `bad_message` /
    `bad_json` (the message names the field), 401 `unauthorized`, 503 `at_capacity` or `shutting_down`,
    404 `not_found` (a gateway without the SIP leg); `connection_failed` when the gateway cannot be reached."""
    body: dict = {"to": to, "trunk": trunk}
    for key, value in (("from", from_), ("headers", headers), ("ring_timeout_s", ring_timeout_s)):
        if value is not None:
            body[key] = value
    target = calls_url(url)
    status, raw = await asyncio.to_thread(_post, target, body, _auth(api_key), timeout)
    try:
        answer = json.loads(raw or b"{}")
    except ValueError:
        answer = {}
    if status == 201 and isinstance(answer, dict) and isinstance(answer.get("call_id"), str):
        return answer["call_id"]
    if not isinstance(answer, dict):
        answer = {}
    code = answer.get("code") or {401: "unauthorized", 404: "not_found"}.get(status, f"http_{status}")
    raise VoxgateError(code, answer.get("message") or f"POST {target} answered {status}", status=status)


def _post(url: str, body: dict, headers: dict, timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={**headers, "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise VoxgateError("connection_failed", f"cannot reach the gateway at {url}: {reason}") from None
