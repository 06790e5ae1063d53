"""SIP digest authentication (RFC 3261 §22 over RFC 7616, with RFC 8760's SHA-256): pure, no sockets.

Client side, for a trunk that answers our request with 401/407: `choose_challenge` picks the strongest challenge we
can answer from the WWW-Authenticate/Proxy-Authenticate values, `authorization` computes the header value.

Server side, for INVITEs we challenge: `DigestServer.challenges` writes the challenge values, `DigestServer.verify`
checks an Authorization/Proxy-Authorization value. Nonces are stateless (a timestamp, random bytes and an HMAC of
both under a per-process secret), so issuing a challenge to anyone costs no memory; only nonces that came back with
a correct digest are remembered, with the highest nonce-count seen, so a replayed (nonce, nc) is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

HASHES: dict[str, Callable[..., Any]] = {"SHA-256": hashlib.sha256, "MD5": hashlib.md5}
STRENGTH = ("SHA-256", "MD5")  # strongest first: the order RFC 8760 §2.4 asks a server to list its challenges in
MAX_HEADER = 4096  # a digest header is a few hundred bytes; anything larger is not one we parse
_PARAM = re.compile(r'\s*([!#$%&\'*+\-.^_`|~0-9A-Za-z]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,"]*)\s*(?:,|$)')


class DigestError(ValueError):
    """A header we cannot parse or answer; `code` is stable, the message says what was wrong."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def parse(value: str) -> dict[str, str]:
    """`Digest realm="x", nonce="y", qop="auth"` as {"realm": "x", "nonce": "y", "qop": "auth"} (names lower-cased,
    quotes and escapes removed). Refuses another scheme and anything that is not a list of auth-params."""
    if len(value) > MAX_HEADER:
        raise DigestError("malformed", f"digest header of {len(value)} bytes (at most {MAX_HEADER})")
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != "digest":
        raise DigestError("not_digest", f"authentication scheme {scheme[:32]!r} is not Digest")
    params: dict[str, str] = {}
    pos, rest = 0, rest.strip()
    while pos < len(rest):
        m = _PARAM.match(rest, pos)
        if m is None or m.end() == pos:
            raise DigestError("malformed", f"digest parameters unreadable at {rest[pos : pos + 32]!r}")
        name, raw = m.group(1).lower(), m.group(2)
        if raw.startswith('"'):
            raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
        if name in params:
            raise DigestError("malformed", f"digest parameter {name!r} given twice")
        params[name] = raw
        pos = m.end()
    return params


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _h(algorithm: str, text: str) -> str:
    return HASHES[algorithm](text.encode()).hexdigest()


def response(
    algorithm: str,
    *,
    user: str,
    realm: str,
    password: str,
    method: str,
    uri: str,
    nonce: str,
    qop: str | None,
    nc: str = "",
    cnonce: str = "",
) -> str:
    """The `response` value (RFC 7616 §3.4.1; without qop, RFC 2069's form, which RFC 3261 still allows)."""
    ha1 = _h(algorithm, f"{user}:{realm}:{password}")
    ha2 = _h(algorithm, f"{method}:{uri}")
    if qop is None:
        return _h(algorithm, f"{ha1}:{nonce}:{ha2}")
    return _h(algorithm, f"{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}")


# -- client side ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Challenge:
    realm: str
    nonce: str
    algorithm: str  # a key of HASHES
    qop: str | None  # "auth", or None when the server offered no qop
    opaque: str | None
    stale: bool


def read_challenge(value: str) -> Challenge:
    """One WWW-Authenticate/Proxy-Authenticate value; DigestError when we cannot answer it."""
    p = parse(value)
    if "realm" not in p or "nonce" not in p:
        raise DigestError("malformed", "digest challenge without realm or nonce")
    algorithm = p.get("algorithm", "MD5").upper()
    if algorithm not in HASHES:
        raise DigestError("unsupported_algorithm", f"digest algorithm {algorithm[:32]!r} (we answer {STRENGTH})")
    qop = None
    if "qop" in p:
        offered = {q.strip().lower() for q in p["qop"].split(",")}
        if "auth" not in offered:  # auth-int would need the body hashed; no trunk we know asks only for it
            raise DigestError("unsupported_qop", f"digest qop {p['qop'][:32]!r} (we answer qop=auth)")
        qop = "auth"
    return Challenge(p["realm"], p["nonce"], algorithm, qop, p.get("opaque"), p.get("stale", "").lower() == "true")


def choose_challenge(values: Sequence[str]) -> Challenge:
    """The strongest challenge we can answer among a response's challenge headers (RFC 8760 §2.4: a server may
    send one per algorithm); DigestError with the first reason when none can be answered."""
    usable, first_error = [], None
    for value in values:
        try:
            usable.append(read_challenge(value))
        except DigestError as e:
            first_error = first_error or e
    if not usable:
        raise first_error or DigestError("missing", "no digest challenge in the response")
    return min(usable, key=lambda c: STRENGTH.index(c.algorithm))


def authorization(
    challenge: Challenge, *, method: str, uri: str, user: str, password: str, cnonce: str | None = None, nc: int = 1
) -> str:
    """The Authorization/Proxy-Authorization value answering `challenge` for a request `method uri`."""
    nc_text = f"{nc:08x}"
    cnonce = cnonce or secrets.token_urlsafe(16)
    digest = response(
        challenge.algorithm,
        user=user,
        realm=challenge.realm,
        password=password,
        method=method,
        uri=uri,
        nonce=challenge.nonce,
        qop=challenge.qop,
        nc=nc_text,
        cnonce=cnonce,
    )
    parts = [
        f"username={_quote(user)}",
        f"realm={_quote(challenge.realm)}",
        f"nonce={_quote(challenge.nonce)}",
        f"uri={_quote(uri)}",
        f"response={_quote(digest)}",
        f"algorithm={challenge.algorithm}",
    ]
    if challenge.qop:
        parts += [f"qop={challenge.qop}", f"nc={nc_text}", f"cnonce={_quote(cnonce)}"]
    if challenge.opaque is not None:
        parts.append(f"opaque={_quote(challenge.opaque)}")
    return "Digest " + ", ".join(parts)


# -- server side ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What `DigestServer.verify` made of a request's credentials. `code`: "ok"; "missing" (no credentials for
    our realm: challenge, not a failure); "stale" (right digest, expired nonce: challenge again with stale=true);
    or a refusal: "malformed", "unsupported_algorithm", "unsupported_qop", "bad_nonce",
    "replay", "wrong_credentials" (unknown user or wrong password, deliberately not told apart)."""

    code: str
    user: str | None = None

    @property
    def ok(self) -> bool:
        return self.code == "ok"

    @property
    def failed(self) -> bool:
        """A refusal that counts against the source (a missing or stale credential does not)."""
        return self.code not in ("ok", "missing", "stale")


_NONCE = struct.Struct(">Q8s16s")  # issue time (s), random bytes, HMAC-SHA256 of both truncated to 128 bits


class DigestServer:
    """Challenges and verifies digest credentials for one realm. `users` maps user name to password.
    `clock` is wall time in seconds (nonces carry it; tests pass their own)."""

    def __init__(
        self,
        realm: str,
        users: Mapping[str, str],
        *,
        algorithms: Sequence[str] = STRENGTH,
        nonce_ttl_s: float = 300.0,
        max_tracked_nonces: int = 65536,
        secret: bytes | None = None,
        clock: Callable[[], float] = time.time,
    ):
        unknown = [a for a in algorithms if a not in HASHES]
        if unknown or not algorithms:
            raise ValueError(f"digest algorithms {list(algorithms)} (choose from {list(HASHES)})")
        self.realm = realm
        self.users = users
        self.algorithms = tuple(sorted(algorithms, key=STRENGTH.index))
        self.nonce_ttl_s = nonce_ttl_s
        self.max_tracked_nonces = max_tracked_nonces
        self._secret = secret or os.urandom(32)
        self._clock = clock
        # nonce -> (issue time, highest nc accepted), in order of first use; a nonce issued at or before
        # `_forgotten_before` that is not here may have been evicted, so it is answered stale rather than trusted
        self._seen: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._forgotten_before = -1

    def new_nonce(self) -> str:
        issued, salt = int(self._clock()), os.urandom(8)
        return base64.urlsafe_b64encode(_NONCE.pack(issued, salt, self._sign(issued, salt))).decode().rstrip("=")

    def challenges(self, *, stale: bool = False) -> list[str]:
        """WWW-Authenticate (or Proxy-Authenticate) values, one per algorithm, strongest first, one nonce."""
        nonce = self.new_nonce()
        tail = ", stale=true" if stale else ""
        return [
            f'Digest realm={_quote(self.realm)}, nonce={_quote(nonce)}, algorithm={a}, qop="auth"{tail}'
            for a in self.algorithms
        ]

    def verify(self, method: str, authorizations: Sequence[str]) -> Verdict:
        """Check the Authorization/Proxy-Authorization values of a `method` request. The digest covers the `uri`
        the client names; it is not compared with the Request-URI, which proxies rewrite on the way (RFC 3261
        §16.5) and which SIPp leaves out of it; a captured header is still good for one request at most."""
        params, unreadable = None, False
        for value in authorizations:  # a request may carry credentials for other realms (or schemes) too
            try:
                p = parse(value)
            except DigestError as e:
                unreadable = unreadable or e.code == "malformed"
                continue
            if p.get("realm") == self.realm:
                params = p
                break
        if params is None:
            return Verdict("malformed" if unreadable else "missing")
        required = ("username", "nonce", "uri", "response")
        if any(k not in params for k in required):
            return Verdict("malformed")
        user, nonce = params["username"], params["nonce"]
        algorithm = params.get("algorithm", "MD5").upper()
        if algorithm not in self.algorithms:
            return Verdict("unsupported_algorithm", user)
        qop = params.get("qop")
        if qop is not None and (qop.lower() != "auth" or "nc" not in params or "cnonce" not in params):
            return Verdict("unsupported_qop", user)
        nc = 1
        if qop is not None:
            if not re.fullmatch(r"[0-9a-fA-F]{8}", params["nc"]):
                return Verdict("malformed", user)
            nc = int(params["nc"], 16)
        issued = self._nonce_issued(nonce)
        if issued is None:
            return Verdict("bad_nonce", user)
        password = self.users.get(user)
        expected = response(
            algorithm,
            user=user,
            realm=self.realm,
            # an unknown user costs the same hashing as a known one, so timing does not tell them apart
            password=password if password is not None else secrets.token_hex(16),
            method=method,
            uri=params["uri"],
            nonce=nonce,
            qop=qop.lower() if qop else None,
            nc=params.get("nc", ""),
            cnonce=params.get("cnonce", ""),
        )
        if password is None or not hmac.compare_digest(expected.encode(), params["response"].lower().encode()):
            return Verdict("wrong_credentials", user)
        if self._clock() - issued > self.nonce_ttl_s:
            return Verdict("stale", user)
        return self._count(nonce, issued, nc, user)

    def _sign(self, issued: int, salt: bytes) -> bytes:
        return hmac.new(self._secret, struct.pack(">Q", issued) + salt, hashlib.sha256).digest()[:16]

    def _nonce_issued(self, nonce: str) -> int | None:
        """The nonce's issue time if we issued it (and not in the future), else None."""
        try:
            raw = base64.urlsafe_b64decode(nonce + "=" * (-len(nonce) % 4))
            issued, salt, tag = _NONCE.unpack(raw)
        except (ValueError, struct.error):
            return None
        if not hmac.compare_digest(tag, self._sign(issued, salt)) or issued > self._clock() + 5:
            return None
        return issued

    def _count(self, nonce: str, issued: int, nc: int, user: str) -> Verdict:
        """Accept (nonce, nc) once: nc must grow for each request that reuses a nonce."""
        seen = self._seen.get(nonce)
        if seen is None and issued <= self._forgotten_before:
            return Verdict("stale", user)  # we may have accepted it before and forgotten: make the client renew
        if seen is not None and nc <= seen[1]:
            return Verdict("replay", user)
        self._seen[nonce] = (issued, nc)
        self._prune()
        return Verdict("ok", user)

    def _prune(self) -> None:
        horizon = self._clock() - self.nonce_ttl_s
        while self._seen:
            issued, _ = next(iter(self._seen.values()))
            if issued >= horizon and len(self._seen) <= self.max_tracked_nonces:
                break
            self._seen.popitem(last=False)
            self._forgotten_before = max(self._forgotten_before, issued)
