"""One OpenAI-compatible speech server as the engine sees it: its address, whether it serves, what it is
doing now (requests in flight), and its counters (time to first byte, errors by code) for /metrics and /readyz.

An endpoint that fails (no answer, a stream cut mid-chunk, a 5xx) is taken out; the engine's probe loop asks
its health route every `probe_interval_s` and puts it back when it answers.
"""

from __future__ import annotations

import collections
import time
from urllib.parse import urlsplit

TTFB_WINDOW = 512  # recent first-byte times kept for the p50 on /readyz


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

    def mark_up(self) -> None:
        if not self.up:
            self.up, self.why_down, self.last_change = True, None, time.monotonic()

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
