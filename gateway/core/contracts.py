"""What the call core asks of a leg (docs/protocol.md). Legs implement these; the core never imports a leg.

A session has one text leg (agent text in, events out) and one media leg
(audio out, paced by the shared clock or pulled by the leg). Telephony media
legs and control sockets join a session through the call registry
(`gateway.core.calls`), so they also know how to end themselves.
"""

from __future__ import annotations

from typing import Protocol

from audio.encode import OutputFormat
from audio.playout import PlayoutEvent


class TextLeg(Protocol):
    async def send_event(self, event: dict) -> None:
        """One server event; must never wait on a peer that stopped reading (drop the peer instead)."""


class MediaLeg(Protocol):
    output: OutputFormat  # what the session encodes each frame to
    clock_driven: bool  # True: the shared gateway clock ticks this session; False: the leg pulls frames
    send_idle_silence: bool  # legs that own the far end's clock send silence while idle

    async def send_audio(self, frame: bytes) -> bool:
        """One encoded 20 ms frame. False when the frame was skipped (backpressure): the caller never hears it."""

    # Optional:
    # def congested(self) -> bool: True when the next frame would be skipped (asked before each tick, so the
    #     playout counts the frame as a `network` gap, not as played).
    # send_audio_now: Callable[[bytes], bool] | None: `send_audio` without a coroutine, where sending a frame never
    #     waits (a plain transport write); the session's tick calls it instead of awaiting `send_audio`.
    # confirms_playback: bool = True when the far end confirms chunk marks; the leg then reports each one with
    #     `Session.playback_confirmed(turn_id, chunk, heard)` and marks, played_ms and played_text follow them.

    async def on_flush(self) -> None:
        """Barge-in: tell the far end to drop what it buffered."""

    def on_playout_event(self, event: PlayoutEvent) -> None:
        """Every playout event (e.g. Twilio places its own marks on `mark`)."""


class ControlLeg(TextLeg, Protocol):
    async def close(self) -> None: ...


class TelephonyLeg(MediaLeg, Protocol):
    async def hangup(self) -> None:
        """End the media stream from our side (the session ended)."""
