"""Who is calling whom, from an INVITE's headers, for the agent (`call.attached`'s `sip` object): pure.

From, To, P-Asserted-Identity (RFC 3325) and Diversion (RFC 5806) are read; other headers are copied only when
their name is in the operator's pass list. Every value is bounded and stripped of control characters, since it
ends up in the agent's JSON and its logs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

MAX_VALUE = 512  # longer values are cut here: a caller's header is not a place for a payload
MAX_DIVERSIONS = 8
COMPACT = {"f": "from", "t": "to"}  # RFC 3261 §7.3.3 short forms that matter here
# never handed to an agent whatever the pass list says: credentials
NEVER_PASSED = frozenset({"authorization", "proxy-authorization"})
_TOKEN = re.compile(r"[!%'*+\-.^_`|~0-9A-Za-z]+")  # RFC 3261 token: a header name
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def pass_header_names(names: Sequence[str]) -> frozenset[str]:
    """The pass list, lower-cased; ValueError names what is not a header name or may not be passed."""
    for name in names:
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"sip.pass_headers: {name[:40]!r} is not a SIP header name")
        if name.lower() in NEVER_PASSED:
            raise ValueError(f"sip.pass_headers: {name} carries credentials and is never passed to the agent")
    return frozenset(n.lower() for n in names)


def call_identity(
    direction: str, request_uri: str, headers: Iterable[tuple[str, str]], pass_headers: frozenset[str]
) -> dict:
    """The `sip` object: `headers` are the INVITE's (name, value) pairs in order, repeats allowed;
    `pass_headers` comes from `pass_header_names`. Missing headers read as None (or [] for diversion)."""
    values: dict[str, list[str]] = {}
    spelled: dict[str, str] = {}
    for name, value in headers:
        key = COMPACT.get(name.strip().lower(), name.strip().lower())
        values.setdefault(key, []).append(value)
        spelled.setdefault(key, name.strip())
    from_display, from_uri = _name_addr(_first(values, "from"))
    _, to_uri = _name_addr(_first(values, "to"))
    _, pai = _name_addr(_first(values, "p-asserted-identity"))
    diversions = [d for v in values.get("diversion", []) for d in _split(v)][:MAX_DIVERSIONS]
    return {
        "direction": direction,
        "from": from_uri,
        "to": to_uri,
        "from_display": from_display,
        "p_asserted_identity": pai,
        "diversion": [_diversion(d) for d in diversions],
        "request_uri": _clean(request_uri),
        "headers": {spelled[k]: _clean(", ".join(values[k])) for k in values if k in pass_headers},
    }


def _first(values: dict[str, list[str]], key: str) -> str | None:
    found = values.get(key)
    entries = _split(found[0]) if found else []
    return entries[0] if entries else None


def _clean(text: str) -> str:
    return _CONTROL.sub("", text)[:MAX_VALUE]


def _split(value: str) -> list[str]:
    """A header value's comma-separated entries, commas inside quotes or <...> kept."""
    entries, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(value):
        if ch == '"' and (i == 0 or value[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and ch in "<>":
            depth += 1 if ch == "<" else -1
        elif not quoted and depth == 0 and ch == ",":
            entries.append(value[start:i])
            start = i + 1
    entries.append(value[start:])
    return [e.strip() for e in entries if e.strip()]


def _name_addr(entry: str | None) -> tuple[str | None, str | None]:
    """`"Alice" <sip:a@b>;tag=1` as ("Alice", "sip:a@b"); `sip:a@b;tag=1` as (None, "sip:a@b")."""
    if not entry:
        return None, None
    if "<" in entry and ">" in entry:
        display, _, rest = entry.partition("<")
        uri = rest.partition(">")[0].strip()
        display = display.strip()
        if display.startswith('"') and display.endswith('"') and len(display) >= 2:
            display = re.sub(r"\\(.)", r"\1", display[1:-1])
        return (_clean(display) or None), _clean(uri)
    return None, _clean(entry.partition(";")[0].strip())  # addr-spec: parameters after ';' are the header's


def _diversion(entry: str) -> dict:
    """`<tel:+1555>;reason=no-answer;counter=1` as {"uri": "tel:+1555", "reason": "no-answer"}."""
    _, uri = _name_addr(entry)
    params = entry.rpartition(">")[2] if ">" in entry else entry.partition(";")[2]
    reason = None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "reason":
            reason = _clean(value.strip().strip('"')) or None
    return {"uri": uri, "reason": reason}
