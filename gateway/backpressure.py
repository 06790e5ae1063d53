"""Sending without waiting on a slow peer.

The shared playout clock sends every call's frames and events from one task:
a send that waits for one peer to read would stall every call. Before each
send, legs ask whether it would have to wait (the transport is paused, or the
bytes would cross its high-water mark); a peer that far behind is dropped or
its frame skipped, never awaited.
"""

from __future__ import annotations


def send_would_wait(transport, protocol, nbytes: int) -> bool:
    """True when writing `nbytes` more would make aiohttp wait for the peer to read."""
    if transport is None or transport.is_closing():
        return True
    if protocol is not None and getattr(protocol, "writing_paused", False):
        return True
    return transport.get_write_buffer_size() + nbytes + 16 > transport.get_write_buffer_limits()[1]
