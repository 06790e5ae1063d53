"""A call's session timer running (RFC 4028 §10), for the dialogs the leg refreshes or watches itself.

* We refresh: every half interval `refresh` runs (an UPDATE or re-INVITE as a client transaction, the leg's);
  it returns the agreement its 2xx set (the interval may change, the refresher may pass to the peer), or None
  when the refresh failed (408, 481, no answer): then `expire` ends the call.
* The peer refreshes: when no refresh came by the interval less min(32 s, interval/3), `expire` ends the call;
  `refreshed` (the peer's re-INVITE or UPDATE) starts the count again.

The decisions (who refreshes, the interval) are gateway/sip/session_timer.py's; this module only keeps time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gateway.sip.session_timer import Agreement

log = logging.getLogger("voxgate.sip")


class SessionClock:
    def __init__(
        self,
        agreement: Agreement,
        refresh: Callable[[Agreement], Awaitable[Agreement | None]],
        expire: Callable[[], None],
    ):
        self.agreement = agreement
        self._refresh = refresh
        self._expire = expire
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Count from now (idempotent)."""
        self.cancel()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def refreshed(self, agreement: Agreement | None = None) -> None:
        """The peer refreshed the session (with this agreement; None: the one we had). Also what aiosipua calls on
        an inbound call's refresh, where this clock stands in for its own timer."""
        self.agreement = agreement or self.agreement
        self.start()

    def cancel(self) -> None:
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        self._task = None

    async def _run(self) -> None:
        while self.agreement.we_refresh:
            await asyncio.sleep(self.agreement.refresh_after_s)
            agreed = await self._refresh(self.agreement)
            if agreed is None:
                self._task = None
                self._expire()
                return
            self.agreement = agreed
        await asyncio.sleep(self.agreement.give_up_after_s)
        self._task = None
        log.info("sip: the peer's session refresh did not come within %d s", self.agreement.interval)
        self._expire()
