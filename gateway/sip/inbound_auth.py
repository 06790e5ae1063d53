"""Who may start a call: `sip.allow` (source addresses), `sip.auth` (digest credentials), or both combined.

`sip.auth.combine`: `either` (the default) admits a source in `sip.allow` unchallenged and asks any other for
credentials; `both` refuses a source outside `sip.allow` and asks the rest for credentials too. Without `sip.auth`,
`sip.allow` alone decides. Pure: no sockets; the leg turns a `Decision` into the SIP answer.

Failed attempts count per source (gateway/sip/auth_failures.py): after `max_failures` in a burst the source is
refused without hashing for `block_s`, and each burst is logged once, never with a user name or a credential.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.security.peers import in_networks
from gateway.sip.auth_failures import AuthFailures
from gateway.sip.digest import DigestServer

ADMIT, FORBIDDEN, CHALLENGE, REFUSED = "admit", "forbidden", "challenge", "refused"


@dataclass(frozen=True)
class Decision:
    """`kind`: ADMIT, FORBIDDEN (outside sip.allow), CHALLENGE (401 with `challenges`), REFUSED (credentials
    refused; `reason` is the digest verdict's code, or `blocked`)."""

    kind: str
    reason: str = ""
    challenges: list[str] = field(default_factory=list)
    user: str | None = None


class InboundAuth:
    def __init__(self, allow: Sequence, auth, password_of=os.environ.get):
        """`allow`: parsed networks (sip.allow); `auth`: gateway.config.SipAuthConfig or None."""
        self.allow = list(allow)
        self.auth = auth
        self.server: DigestServer | None = None
        self.failures: AuthFailures | None = None
        if auth is not None:
            secret = password_of(auth.nonce_secret_env) if auth.nonce_secret_env else None
            self.server = DigestServer(
                auth.realm,
                {u.user: password_of(u.password_env) or "" for u in auth.users},
                algorithms=auth.algorithms,
                nonce_ttl_s=auth.nonce_ttl_s,
                secret=hashlib.sha256(secret.encode()).digest() if secret else None,
            )
            self.failures = AuthFailures(max_failures=auth.max_failures, block_s=auth.block_s)

    @property
    def open_to_any_source(self) -> bool:
        """Whether a source outside sip.allow may still get in (with credentials): TCP must accept it then."""
        return self.auth is not None and self.auth.combine == "either"

    def screen(self, source: str) -> Decision | None:
        """The address check, before rate limits: FORBIDDEN for a source no credentials could admit."""
        if not self.allow or in_networks(source, self.allow) or self.open_to_any_source:
            return None
        return Decision(FORBIDDEN, "the source address is not in sip.allow")

    def decide(self, source: str, method: str, authorizations: Sequence[str]) -> Decision:
        """After `screen`: ADMIT, or the challenge, or the refusal. `authorizations`: the request's Authorization
        and Proxy-Authorization values."""
        if self.server is None:
            return Decision(ADMIT)
        if self.auth.combine == "either" and self.allow and in_networks(source, self.allow):
            return Decision(ADMIT)
        if self.failures.blocked(source):
            return Decision(REFUSED, "blocked")
        verdict = self.server.verify(method, authorizations)
        if verdict.ok:
            self.failures.succeeded(source)
            return Decision(ADMIT, user=verdict.user)
        if verdict.code in ("missing", "stale"):
            return Decision(CHALLENGE, verdict.code, self.server.challenges(stale=verdict.code == "stale"))
        self.failures.failed(source, verdict.code)
        return Decision(REFUSED, verdict.code)
