"""RTP port pairs chosen at random from `sip.rtp_ports`, so a call's port cannot be guessed from the last one.

aiortp's allocator hands pairs out in order from the start of the range: the next call's port is the last one
plus two, and a stranger who knows one knows the next. This one draws an even port at random, skips the pairs
in use and those another program holds (a test bind, as aiortp's does), and falls back to a scan from a random
start when the range is nearly full. Same interface as aiortp's `PortAllocator` (`allocate`, `release`).
"""

from __future__ import annotations

import random
import socket

RANDOM_TRIES = 16  # random draws before the scan: a mostly free range almost never needs the scan


class RandomPortAllocator:
    def __init__(self, port_range: tuple[int, int], rng: random.Random | None = None):
        first, last = port_range
        first += first % 2  # RTP on the even port, RTCP on the odd one above it
        self.evens = range(first, last, 2)  # `last` is the top RTCP port at most
        self.rng = rng or random.SystemRandom()
        self._allocated: set[int] = set()

    async def allocate(self) -> tuple[int, int]:
        """An even RTP port and the RTCP port above it, both free; RuntimeError when none is left."""
        for _ in range(RANDOM_TRIES):
            port = self.rng.choice(self.evens)
            if self._take(port):
                return port, port + 1
        start = self.rng.randrange(len(self.evens))
        for i in range(len(self.evens)):
            port = self.evens[(start + i) % len(self.evens)]
            if self._take(port):
                return port, port + 1
        raise RuntimeError("No available port pair in range")

    async def release(self, rtp_port: int) -> None:
        self._allocated.discard(rtp_port)

    def _take(self, port: int) -> bool:
        if port in self._allocated or not (_free(port) and _free(port + 1)):
            return False
        self._allocated.add(port)
        return True


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True
