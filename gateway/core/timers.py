"""Per-session timers that end a call: the one max-call-length rule every leg shares."""

from __future__ import annotations

import asyncio

from gateway import protocol as P


def arm_max_call(session, limit_s: float) -> asyncio.TimerHandle:
    """End `session` with `call_too_long` after `limit_s` (limits.max_call_s); cancelled when the session closes.

    Each leg arms it when its call starts playing (native WS and WebRTC at session.start, telephony when
    the media leg connects)."""
    loop = asyncio.get_running_loop()

    def too_long() -> None:
        if not session.closed:
            error = P.error_event(P.CALL_TOO_LONG, f"the call reached limits.max_call_s = {limit_s:g} s")
            loop.create_task(session.close(error))

    handle = loop.call_later(limit_s, too_long)
    session.on_close(handle.cancel)
    return handle
