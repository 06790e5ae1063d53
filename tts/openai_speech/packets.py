"""Raw 16-bit PCM as it arrives over HTTP (pieces of any size, a sample may be split between two) re-cut into
float32 packets of whole `packet` samples, the playout's unit; what is left at the end comes out as a short tail."""

from __future__ import annotations

import numpy as np


class PacketCutter:
    def __init__(self, packet: int):
        self.packet = packet
        self._carry = b""  # the first byte of a sample whose second byte has not arrived
        self._held: list[np.ndarray] = []
        self._held_n = 0

    def feed(self, data: bytes) -> np.ndarray | None:
        """The whole packets `data` completes (as one array), or None while less than one is held."""
        data = self._carry + data
        whole = len(data) & ~1
        self._carry = data[whole:]
        if whole:
            self._held.append(np.frombuffer(data[:whole], "<i2").astype(np.float32) * (1.0 / 32768.0))
            self._held_n += whole // 2
        if self._held_n < self.packet:
            return None
        joined = np.concatenate(self._held) if len(self._held) > 1 else self._held[0]
        cut = self._held_n - self._held_n % self.packet
        rest = joined[cut:]
        self._held, self._held_n = ([rest] if len(rest) else []), len(rest)
        return joined[:cut]

    def flush(self) -> np.ndarray:
        """What is held (less than a packet); a lone trailing byte is not a sample and is dropped."""
        tail = np.concatenate(self._held) if self._held else np.zeros(0, np.float32)
        self._held, self._held_n, self._carry = [], 0, b""
        return tail
