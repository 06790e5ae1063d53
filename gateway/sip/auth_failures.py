"""Failed digest attempts per source: a source that keeps failing is refused without hashing for a while, and
each burst of failures is logged once (the source and the reason, never the user name or any credential)."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("voxgate.sip.auth")


@dataclass
class _Burst:
    started: float
    last: float
    failures: int
    blocked_until: float = 0.0


class AuthFailures:
    """Per-source failure counts. A burst is a run of failures from one source with no gap longer than `quiet_s`;
    after `max_failures` in a burst the source is blocked for `block_s`. At most `max_sources` are tracked (the
    longest quiet forgotten first), so a flood of spoofed addresses costs bounded memory."""

    def __init__(
        self,
        *,
        max_failures: int = 5,
        quiet_s: float = 60.0,
        block_s: float = 60.0,
        max_sources: int = 10000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_failures = max_failures
        self.quiet_s = quiet_s
        self.block_s = block_s
        self.max_sources = max_sources
        self._clock = clock
        self._bursts: OrderedDict[str, _Burst] = OrderedDict()

    def blocked(self, source: str) -> bool:
        """Whether to refuse `source` (a host) without looking at its credentials. An attempt while blocked keeps
        the burst going, so a source that never stops is logged once, not once per block."""
        burst = self._bursts.get(source)
        now = self._clock()
        if burst is None or burst.blocked_until <= now:
            return False
        burst.last = now
        return True

    def failed(self, source: str, reason: str) -> None:
        """Count one refused attempt; `reason` is a digest Verdict code."""
        now = self._clock()
        burst = self._current(source, now)
        if burst is None:
            burst = _Burst(started=now, last=now, failures=0)
            log.warning(
                "SIP digest authentication failed from %s (%s); further failures from it are counted, not logged, "
                "until it has been quiet for %.0f s, and it is refused for %.0f s after %d",
                source,
                reason,
                self.quiet_s,
                self.block_s,
                self.max_failures,
            )
        burst.failures += 1
        burst.last = now
        if burst.failures >= self.max_failures:  # and again at each failure after a block ends, in the same burst
            burst.blocked_until = now + self.block_s
        self._bursts[source] = burst
        self._bursts.move_to_end(source)
        while len(self._bursts) > self.max_sources:
            self._bursts.popitem(last=False)

    def succeeded(self, source: str) -> None:
        """A source that authenticated is forgiven its earlier failures."""
        self._bursts.pop(source, None)

    def failures(self, source: str) -> int:
        """Failures in the source's current burst (0 when none or quiet long enough)."""
        burst = self._current(source, self._clock())
        return burst.failures if burst else 0

    def _current(self, source: str, now: float) -> _Burst | None:
        """The source's burst unless it has ended (quiet for `quiet_s` and not blocked)."""
        burst = self._bursts.get(source)
        if burst is None or (now - burst.last > self.quiet_s and burst.blocked_until <= now):
            return None
        return burst
