"""New INVITEs a second per source address (Kamailio's pike, in small): even an allowed trunk gets at most
`sip.invites_per_source_per_s` admitted, so a flood from one address (a looping PBX, a compromised trunk
account) cannot take every session and port while the other sources' calls go on.

A token bucket per address holding one second's worth, in `PeerLimits`'s bounded table (idle addresses are
forgotten first): a flood of distinct sources cannot grow it without bound.
"""

from __future__ import annotations

import time
from typing import Callable

from gateway.security.peers import PeerLimits

REASON = "sip_invites_per_source_per_s"  # the refusal's `reason` label on voxgate_connections_refused_total


class InviteRate:
    def __init__(self, per_second: float, clock: Callable[[], float] = time.monotonic):
        self._buckets = PeerLimits(0, per_second, clock)

    def admit(self, address: str) -> bool:
        """Take one token for a new INVITE from `address`: False when it has none left this second."""
        if self._buckets.open(address) is not None:
            return False
        self._buckets.close(address)  # the bucket only: how many calls are open is the registry's to count
        return True
