"""`X-` headers a client may put on our requests (POST /v1/calls `headers` on the INVITE, `call.transfer` `headers`
on the REFER): names `X-` and a token, printable values, a bounded count and length, so that nothing a client
sends can add a CR/LF (a header of its own choosing) or another SIP header to the message."""

from __future__ import annotations

import re

X_HEADER = re.compile(r"X-[A-Za-z0-9\-]{1,64}")
MAX_HEADERS = 16
MAX_VALUE = 256
RULE = f"headers must map at most {MAX_HEADERS} X- header names to printable strings of at most {MAX_VALUE} characters"


def x_headers_ok(headers: object) -> bool:
    """Whether `headers` is a map of X- header names to values we may copy onto a request as they are."""
    return (
        isinstance(headers, dict)
        and len(headers) <= MAX_HEADERS
        and all(
            isinstance(k, str)
            and X_HEADER.fullmatch(k)
            and isinstance(v, str)
            and v.isprintable()
            and len(v) <= MAX_VALUE
            for k, v in headers.items()
        )
    )
