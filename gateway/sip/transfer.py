"""Blind transfer (REFER, RFC 3515) that a caller cannot abuse and that does not get lost.

* Targets: `call.transfer` may only REFER to a URI that one of `sip.transfer_targets` matches (globs over the
  whole URI: `tel:+4420*`, `sip:*@pbx.example.com`). The default, no globs, refuses every transfer: an agent
  driven by an LLM can be talked into `tel:+1900…` (toll fraud), so where calls may go is the operator's call.
* The REFER is a client transaction (RFC 3261 §17.1.2): over UDP it is sent again after T1 = 0.5 s, doubling
  to T2 = 4 s, until a final answer; none within Timer F (32 s) is a 408. A final 3xx-6xx ends the transfer as
  failed with its code; a 2xx (202 Accepted) leaves it to the NOTIFYs.
"""

from __future__ import annotations

import asyncio
import fnmatch
from dataclasses import dataclass, field
from typing import Callable

T1_S, T2_S, TIMER_F_S = 0.5, 4.0, 32.0
TIMEOUT = (408, "Request Timeout")  # what a REFER nobody answered counts as (RFC 3261 §8.1.3.1)


def target_allowed(target: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(target, glob) for glob in globs)


@dataclass
class PendingRefer:
    """Our REFER in a dialog, until its subscription ends: its CSeq (a NOTIFY's `Event: refer;id=`), and the
    final answer to the REFER itself once one came."""

    cseq: int
    answer: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def answered(self, status: int, reason: str) -> None:
        if status >= 200 and not self.answer.done():
            self.answer.set_result((status, reason))

    def matches_event(self, event: str | None) -> bool:
        """`Event: refer;id=<our CSeq>`; the id may be left out for the dialog's first REFER (RFC 3515 §2.4.6),
        and we keep one REFER pending at a time."""
        if not event:
            return False
        kind, *params = [p.strip() for p in event.split(";")]
        if kind.lower() != "refer":
            return False
        ids = [p.split("=", 1)[1].strip() for p in params if p.lower().startswith("id=")]
        return not ids or ids[0] == str(self.cseq)


async def client_transaction(send: Callable[[], None], pending: PendingRefer, reliable: bool) -> tuple[int, str]:
    """Send the REFER (again per Timer E over UDP) until its final answer; `TIMEOUT` after Timer F."""
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
