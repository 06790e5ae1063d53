"""Short-lived, single-use session tokens, so a browser page never holds an API key.

`POST /v1/tokens` (with an API key) mints one; any door that takes an API key takes it instead. A token is
`vg1.<payload>.<signature>`: the payload (base64url JSON) holds a random id and the expiry, the signature is
HMAC-SHA256 over it with a key derived from the API keys (so gateways sharing keys accept each other's
tokens, and rotating the keys voids every token). The first door that opens a session with a token spends
it; ids spent are remembered until they expire (bounded: a full memory refuses tokens rather than forget).
In a cluster (cluster.redis_url) each minted id is also kept in Redis until it expires and the spending door
takes it with an atomic GETDEL, so a token opens one session in the whole plane (gateway/legs/accept.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Callable

PREFIX = "vg1."
MAX_SPENT = 100_000  # single-use memory: ids spent and not yet expired


class TokenError(Exception):
    """Why a token was refused (the message is safe to show: it never holds the token)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionTokens:
    def __init__(self, api_keys: list[str], ttl_s: float, clock: Callable[[], float] = time.time):
        material = "\n".join(sorted(api_keys)).encode() if api_keys else secrets.token_bytes(32)
        self._key = hmac.new(b"voxgate session tokens v1", material, hashlib.sha256).digest()
        self.ttl_s = ttl_s
        self.clock = clock
        self._spent: dict[str, float] = {}  # id -> expiry

    @staticmethod
    def looks_like_token(text: str) -> bool:
        return text.startswith(PREFIX)

    def mint(self, ttl_s: float | None = None) -> tuple[str, float]:
        """A fresh token and its expiry (unix seconds)."""
        ttl = self.ttl_s if ttl_s is None else min(ttl_s, self.ttl_s)
        expires = round(self.clock() + ttl, 3)
        payload = _b64(json.dumps({"id": secrets.token_hex(12), "exp": expires}, separators=(",", ":")).encode())
        return f"{PREFIX}{payload}.{self._sign(payload)}", expires

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())

    def check(self, token: str, spend: bool) -> str:
        """Raises TokenError unless the token is ours, unexpired and unspent; `spend` uses it up. Returns its id."""
        body = token[len(PREFIX) :] if token.startswith(PREFIX) else ""
        payload, _, signature = body.partition(".")
        if not payload or not hmac.compare_digest(signature.encode(), self._sign(payload).encode()):
            raise TokenError("the token is not valid")
        try:
            claims = json.loads(_unb64(payload))
            token_id, expires = str(claims["id"]), float(claims["exp"])
        except (ValueError, KeyError, TypeError):
            raise TokenError("the token is not valid") from None
        now = self.clock()
        if now >= expires:
            raise TokenError("the token has expired; mint a new one with POST /v1/tokens")
        if token_id in self._spent:
            raise TokenError("the token was already used; a token opens one session")
        if spend:
            if len(self._spent) >= MAX_SPENT:
                self._forget_expired(now)
                if len(self._spent) >= MAX_SPENT:
                    raise TokenError("too many tokens in use; try again shortly")
            self._spent[token_id] = expires
        return token_id

    @staticmethod
    def token_id(token: str) -> str:
        """The id of a token `check` accepted (the key it is spent by across a cluster)."""
        return str(json.loads(_unb64(token[len(PREFIX) :].partition(".")[0]))["id"])

    def _forget_expired(self, now: float) -> None:
        for token_id, expires in list(self._spent.items()):
            if expires <= now:
                del self._spent[token_id]

    @property
    def spent_count(self) -> int:
        return len(self._spent)
