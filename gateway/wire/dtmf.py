"""DTMF digits as telephony wires carry them (RFC 4733 events 0-15)."""

from __future__ import annotations

DTMF_DIGITS = frozenset("0123456789*#ABCDabcd")


def dtmf_digit(value) -> str | None:
    """The canonical (upper-case) digit, or None when `value` is not one DTMF digit."""
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("ascii")
        except UnicodeDecodeError:
            return None
    if not isinstance(value, str) or len(value) != 1 or value not in DTMF_DIGITS:
        return None
    return value.upper()
