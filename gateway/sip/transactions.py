"""Our requests inside a call's dialog (REFER, UPDATE, a refreshing re-INVITE) as client transactions, and the
2xx we answer a far end's re-INVITE with, resent until its ACK (RFC 3261 §17.1.2, §13.3.1.4).

* A request is sent again over UDP after T1 = 0.5 s, doubling to T2 = 4 s, until a final answer; none within
  Timer F (32 s) counts as 408. Over TCP/TLS it is sent once and waited for as long.
* Our 2xx to a re-INVITE is sent again over UDP after T1, doubling to T2, until the ACK comes or 32 s passed.

Clocks only: building the messages and putting them on the wire is the caller's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

T1_S, T2_S, TIMER_F_S = 0.5, 4.0, 32.0
TIMEOUT = (408, "Request Timeout")  # what a request nobody answered counts as (RFC 3261 §8.1.3.1)


@dataclass
class Pending:
    """One of our in-dialog requests until its final answer: its CSeq number and method (what an answer names)."""

    cseq: int
    method: str
    answer: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    response: object = None  # the final answer itself (a re-INVITE's 2xx is ACKed from it)

    def answered(self, status: int, reason: str, response=None) -> None:
        if status >= 200 and not self.answer.done():
            self.response = response
            self.answer.set_result((status, reason))


async def client_transaction(send: Callable[[], None], pending: Pending, reliable: bool) -> tuple[int, str]:
    """Send the request (again per Timer E over UDP) until its final answer; `TIMEOUT` after Timer F."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMER_F_S
    interval = T1_S
    send()
    while True:
        left = deadline - loop.time()
        if left <= 0:
            return TIMEOUT
        try:
            return await asyncio.wait_for(
                asyncio.shield(pending.answer), timeout=left if reliable else min(interval, left)
            )
        except TimeoutError:
            if not reliable and loop.time() < deadline:
                send()
                interval = min(2 * interval, T2_S)


async def resend_until_acked(send: Callable[[], None], acked: asyncio.Event, reliable: bool) -> bool:
    """Our 2xx to a re-INVITE, sent until `acked` is set (True) or Timer H's 32 s passed (False)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMER_F_S
    interval = T1_S
    send()
    while not acked.is_set():
        left = deadline - loop.time()
        if left <= 0:
            return False
        try:
            await asyncio.wait_for(acked.wait(), timeout=left if reliable else min(interval, left))
        except TimeoutError:
            if not reliable and not acked.is_set() and loop.time() < deadline:
                send()
                interval = min(2 * interval, T2_S)
    return True
