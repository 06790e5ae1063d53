"""The event a server process waits on until it is told to stop (SIGTERM from Kubernetes or systemd, SIGINT from
a terminal). `voxgate serve` and `voxgate engine` both drain once it is set."""

from __future__ import annotations

import asyncio
import signal


def stop_on_signals() -> asyncio.Event:
    """An event that SIGTERM or SIGINT sets. Where the loop cannot take signal handlers (not the main thread, or
    Windows) it is left to the caller's other ways to stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    return stop
