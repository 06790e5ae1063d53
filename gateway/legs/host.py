"""What a leg's `install(core, host)` may ask of the server it is installed on (`gateway.app.Gateway`)."""

from __future__ import annotations

from typing import Awaitable, Callable, Iterable, Protocol


class LegHost(Protocol):
    def add_routes(self, routes: Iterable) -> None:
        """aiohttp route definitions served on the gateway's one port."""

    def on_start(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run once the HTTP server listens (e.g. a leg's own TCP server)."""

    def on_stop(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run at shutdown, before the HTTP server closes (sockets still read: clean close handshakes)."""
