"""The call core: sessions, the turn pipeline, playback accounting, registries, the shared clock,
backpressure, timers and the caller's inbound audio. It imports no leg and no transport
(a test checks the import graph); legs in `gateway/legs/` adapt it to each way a call arrives.
"""

from gateway.core.call_core import CallCore
from gateway.core.session import Session

__all__ = ["CallCore", "Session"]
