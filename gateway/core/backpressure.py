"""Sending without waiting on a slow peer.

The shared playout clock sends every call's frames and events from one task:
a send that waits for one peer to read would stall every call. Client sockets
get a high-water mark of 1 MiB (room for the largest event above a full kernel
buffer); audio frames are skipped far below it, and a peer whose unsent events
would cross it has stopped reading: it is dropped, never awaited.
"""

from __future__ import annotations

import logging

log = logging.getLogger("voxgate.backpressure")

MAX_EVENT_BACKLOG_BYTES = 1 << 20
# A socket holding more unsent bytes than this is not keeping up: its audio frames are skipped (a gap with
# cause `network` at the caller), never queued. Far below the event high-water mark, so a frame never makes
# a send wait. Legs without a far-end buffer pass a smaller cap of their own (AudioSocket: what still plays
# after a barge-in).
MAX_FRAME_BACKLOG_BYTES = 48 * 1024


def allow_event_backlog(transport) -> None:
    """Raise the socket's high-water mark so that only a peer that stopped reading trips it."""
    if transport is not None:
        transport.set_write_buffer_limits(high=MAX_EVENT_BACKLOG_BYTES)


def send_would_wait(transport, protocol, nbytes: int) -> bool:
    """True when writing `nbytes` more would make aiohttp wait for the peer to read."""
    if transport is None or transport.is_closing():
        return True
    if protocol is not None and getattr(protocol, "writing_paused", False):
        return True
    return transport.get_write_buffer_size() + nbytes + 16 > transport.get_write_buffer_limits()[1]


def frame_must_skip(transport, cap: int = MAX_FRAME_BACKLOG_BYTES) -> bool:
    """True when an audio frame must be skipped: the socket's unsent backlog is over `cap`.

    One plain check is enough: a send can only wait above the high-water mark, far above `cap`
    (and aiohttp's pause flag clears below its low-water mark, itself above `cap`).
    """
    return transport.get_write_buffer_size() > cap


def drop_if_stuck(transport, protocol, nbytes: int, who: str) -> bool:
    """Abort the connection (True) when sending `nbytes` would wait on the peer."""
    if not send_would_wait(transport, protocol, nbytes):
        return False
    if transport is not None and not transport.is_closing():
        log.warning("%s not reading (%d bytes unsent); dropping its connection", who, transport.get_write_buffer_size())
        transport.abort()
    return True
