"""The hop: how one node of the call plane tells another "I checked this leg already; serve it".

A hop is a short signed value (the `X-Voxgate-Hop` header, or the payload of an AudioSocket hop frame):

    v2;<node>;<unix seconds>;<nonce>;<call id>;<hmac>

(the call id, which may itself hold a `;`, is what lies between the fourth `;` and the last one)

The HMAC-SHA256 (key: the plane's secret from `cluster.secret_env`) covers the version, the node, the
stamp, the nonce, the call id and what the hop opens: the request's method and its full path with the query
(`AUDIOSOCKET` and `audiosocket` for the TCP door). The owner accepts a hop once: a fresh stamp, a good
signature, and a nonce it has not seen (Redis `SET NX` with a short TTL, shared by every node, so a replay is
refused on whichever node it reaches). A hop is thus no skeleton key: a captured one opens nothing, not the
same door again, nor another path, query or call.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

VERSION = "v2"
MAX_AGE_S = 30.0  # clock skew between nodes plus the time a hop takes to arrive
NONCE_TTL_S = 2 * MAX_AGE_S  # a nonce is remembered while a hop carrying it could still be fresh
AUDIOSOCKET_METHOD, AUDIOSOCKET_TARGET = "AUDIOSOCKET", "audiosocket"


@dataclass(frozen=True)
class Hop:
    """A hop whose signature and stamp verified (its nonce still has to be spent: `HopCheck.spend`)."""

    node: str
    call_id: str
    nonce: str


class HopRefused(Exception):
    """Why a hop was refused: safe to log (it never holds the hop's value)."""


def _mac(secret: bytes, node: str, stamp: str, nonce: str, call_id: str, method: str, target: str) -> str:
    text = "\n".join((VERSION, node, stamp, nonce, call_id, method.upper(), target))
    return hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()


def sign(secret: bytes, node: str, method: str, target: str, call_id: str, now: float | None = None) -> str:
    """A fresh hop for one request: `target` is the path with its query (`request.path_qs`)."""
    stamp = str(int(time.time() if now is None else now))
    nonce = secrets.token_hex(16)
    return ";".join((VERSION, node, stamp, nonce, call_id, _mac(secret, node, stamp, nonce, call_id, method, target)))


def verify(secret: bytes, value: str, method: str, target: str, now: float | None = None) -> Hop:
    """The hop's sender and call when `value` was signed with `secret` for this method and target and is fresh;
    raises HopRefused saying why otherwise. The nonce is not spent here."""
    parts = value.split(";", 4)  # the call id is the one field that may hold a ";" (a SIP Call-ID may)
    if len(parts) != 5 or parts[0] != VERSION or ";" not in parts[4]:
        raise HopRefused(f"not a {VERSION} hop (a node of another version, or a forged header)")
    _, node, stamp, nonce, rest = parts
    call_id, _, mac = rest.rpartition(";")
    try:
        age = (time.time() if now is None else now) - int(stamp)
    except ValueError:
        raise HopRefused("its stamp is not a number") from None
    want = _mac(secret, node, stamp, nonce, call_id, method, target)
    if not hmac.compare_digest(mac.encode(), want.encode()):
        raise HopRefused(
            f"its signature does not verify for {method.upper()} {_shown(target)} (signed for another "
            "request, or the nodes hold different secrets in cluster.secret_env)"
        )
    if abs(age) > MAX_AGE_S:
        raise HopRefused(f"it is {age:.0f} s old (at most {MAX_AGE_S:g} s: are the nodes' clocks in step?)")
    if not nonce or not call_id:
        raise HopRefused("it names no nonce or no call")
    return Hop(node, call_id, nonce)


def _shown(target: str) -> str:
    """The target for a log line: the path only (a query may carry a credential)."""
    path, _, query = target.partition("?")
    return path + ("?…" if query else "")
