"""`CaptureGate`: no other thread of the engine calls into CUDA while a graph is capturing.

A capture in torch's default (global) error mode is invalidated by a CUDA call from any thread that
could synchronise or allocate (the vocoder lane's pinned buffers and event waits, a voice being
cloned), and every stream would then fail. Work on those threads runs inside `use()` — shared, so
the lane and a cloning thread never wait for each other — and a capture inside `capture()`, which
waits for the current users to finish and holds new ones back until it is done.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager


class CaptureGate:
    def __init__(self):
        self._cond = threading.Condition()
        self._users = 0
        self._capturing = False
        self.captures = 0  # how many `capture()` blocks have run

    @contextmanager
    def use(self):
        """CUDA work on a thread other than the capturing one."""
        with self._cond:
            while self._capturing:
                self._cond.wait()
            self._users += 1
        try:
            yield
        finally:
            with self._cond:
                self._users -= 1
                self._cond.notify_all()

    @contextmanager
    def capture(self):
        """Exclusive: waits for the users in flight, keeps new ones out until the block ends."""
        with self._cond:
            while self._capturing or self._users:
                self._cond.wait()
            self._capturing = True
            self.captures += 1
        try:
            yield
        finally:
            with self._cond:
                self._capturing = False
                self._cond.notify_all()

    @property
    def capturing(self) -> bool:
        return self._capturing
