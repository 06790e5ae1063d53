"""TURN credentials minted per session from a shared secret: coturn's REST API scheme
(`use-auth-secret` + `static-auth-secret` in turnserver.conf; draft-uberti-behave-turn-rest).

username = "<expiry unix time>:<user>", password = base64(HMAC-SHA1(secret, username)). The TURN server
recomputes the password from the username, so nothing is stored and a leaked pair dies at its expiry.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time


def turn_credentials(secret: str, ttl_s: float, user: str | None = None, now: float | None = None) -> tuple[str, str]:
    expiry = int((time.time() if now is None else now) + ttl_s)
    username = f"{expiry}:{user or 'voxgate-' + secrets.token_hex(6)}"
    password = base64.b64encode(hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()).decode()
    return username, password
