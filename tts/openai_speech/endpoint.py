"""One OpenAI-compatible speech server as the engine sees it: its address, whether it serves, what it is
doing now (requests in flight), and its counters (time to first byte, errors by code) for /metrics and /readyz.

An endpoint that fails (no answer, a stream cut mid-chunk, a 5xx) is taken out; the engine's probe loop asks
its health route every `probe_interval_s` and puts it back when it answers. One that answers too slowly (no audio
byte within the first-byte timeout, a stream that stalls, a chunk the session's watchdog gave up on) is *suspect*:
its health route may well answer while its speech hangs, so only a speech probe (a short request whose first audio
byte comes in time) puts it back. Speech probes back off from `probe_interval_s` to `SUSPECT_BACKOFF_MAX_S`.
"""

from __future__ import annotations

import collections
import time
from urllib.parse import urlsplit

TTFB_WINDOW = 512  # recent first-byte times kept for the p50 on /readyz
SUSPECT_BACKOFF_MAX_S = 30.0  # a suspect endpoint's speech probes: the longest wait between two


def check_base_url(url: str) -> str:
    """A base URL as OpenAI clients take it (`http://host:port/v1`); ValueError naming what is wrong."""
    if not isinstance(url, str):
        raise ValueError(f"endpoint {url!r} must be a string URL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"endpoint {url!r} must be an http:// or https:// URL such as http://10.0.0.5:8091/v1")
    if parts.query or parts.fragment:
        raise ValueError(f"endpoint {url!r} must not carry a query or fragment")
    return url.rstrip("/")


class Endpoint:
    """A speech server's base URL (`…/v1`) and its state."""

    def __init__(self, base: str):
        self.base = check_base_url(base)
        parts = urlsplit(self.base)
        self.root = f"{parts.scheme}://{parts.netloc}"
        self.up = False
        self.why_down: str | None = "not probed yet"
        self.flavour = "openai"  # openai (vLLM-Omni, SGLang-Omni, others) | voxgate (its /v1/models says so)
        self.voices: set[str] | None = None  # what the server lists; None: it has no voices route
        self.model: str | None = None  # the first model its /v1/models lists
        self.health_url: str | None = None  # found by the first successful probe
        self.in_flight = 0
        self.requests = 0
        self.ttfb_sum = 0.0
        self.ttfb_count = 0
        self.recent_ttfb: collections.deque[float] = collections.deque(maxlen=TTFB_WINDOW)
        self.errors: collections.Counter[str] = collections.Counter()
        self.downs = 0
        self.last_change = time.monotonic()
        self.suspect = False  # out until a speech probe gets its first audio byte in time
        self.speech_probe_at = 0.0  # monotonic: when the next speech probe of a suspect endpoint is due
        self.speech_probe_wait = 0.0  # the back-off before the probe after that

    def mark_up(self) -> None:
        self.suspect = False
        if not self.up:
            self.up, self.why_down, self.last_change = True, None, time.monotonic()

    def mark_suspect(self, why: str, first_probe_in: float) -> None:
        """Out of rotation until a speech probe passes; the first one is due in `first_probe_in` seconds."""
        if not self.suspect:
            self.speech_probe_wait = first_probe_in
            self.speech_probe_at = time.monotonic() + first_probe_in
        self.suspect = True
        self.mark_down(f"suspect: {why}")

    def speech_probe_failed(self, why: str) -> None:
        """The suspect endpoint's speech probe failed too: the next one waits twice as long (at most 30 s)."""
        self.speech_probe_wait = min(SUSPECT_BACKOFF_MAX_S, max(self.speech_probe_wait, 0.5) * 2)
        self.speech_probe_at = time.monotonic() + self.speech_probe_wait
        self.why_down = f"suspect: {why}"

    def mark_down(self, why: str) -> None:
        if self.up:
            self.downs += 1
        self.up, self.why_down, self.last_change = False, why, time.monotonic()

    def record_ttfb(self, seconds: float) -> None:
        self.ttfb_sum += seconds
        self.ttfb_count += 1
        self.recent_ttfb.append(seconds)

    def ttfb_p50_ms(self) -> float | None:
        if not self.recent_ttfb:
            return None
        ordered = sorted(self.recent_ttfb)
        return round(ordered[len(ordered) // 2] * 1000, 1)

    def describe(self) -> dict:
        """For /readyz and /metrics."""
        return {
            "endpoint": self.base,
            "up": self.up,
            "suspect": self.suspect,
            "why_down": self.why_down,
            "flavour": self.flavour,
            "in_flight": self.in_flight,
            "requests": self.requests,
            "ttfb_sum_s": self.ttfb_sum,
            "ttfb_count": self.ttfb_count,
            "ttfb_p50_ms": self.ttfb_p50_ms(),
            "errors": dict(self.errors),
            "downs": self.downs,
        }
