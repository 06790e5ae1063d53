"""Requests aiohttp cannot parse are refused requests, not faults of ours.

aiohttp answers them with 400 and logs each as an ERROR with a traceback:
anyone who can reach the port could fill the log (and page whoever watches
ERRORs) at will. They become one INFO line, naming what was wrong but not
quoting the request (a bad line may carry an API key in its query string).
"""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import HttpProcessingError

log = logging.getLogger("voxgate.http")


class _MalformedRequestsAreNotErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        if not log.isEnabledFor(logging.INFO):
            return False
        record.name, record.levelno, record.levelname = log.name, logging.INFO, "INFO"
        record.msg, record.args, record.exc_info, record.exc_text = (
            "refused a malformed HTTP request (%s)",
            (_what(exc),),
            None,
            None,
        )
        return True


def _what(exc: HttpProcessingError) -> str:
    """What was wrong, without the bytes that were: aiohttp quotes the offending line, which may carry a credential."""
    text = str(exc.message or type(exc).__name__).splitlines()[0] if exc.message else type(exc).__name__
    cut = min((i for i in (text.find(":"), text.find("'"), text.find('"')) if i >= 0), default=len(text))
    return text[:cut].strip() or type(exc).__name__


def quiet_malformed_requests() -> None:
    """Installs the filter on aiohttp's server logger (once per process)."""
    logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _MalformedRequestsAreNotErrors) for f in logger.filters):
        logger.addFilter(_MalformedRequestsAreNotErrors())
