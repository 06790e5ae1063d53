"""File writes off the caller's clock: one writer thread for every session's logs and WAV timelines.

The shared playout clock ticks hundreds of calls from one task; a write that
waits on a slow disk inside a tick would stall all of them. So a tick only
queues bytes (`LogFile.write_line`, `WavFile.write_frames`) and one daemon
thread opens, writes and closes the files. The queue is bounded: above half
of `MAX_BACKLOG_BYTES` a log line is dropped (and counted), above all of it a
WAV frame is too; the caller's audio never waits for the disk.
"""

from __future__ import annotations

import logging
import queue
import threading
import wave

log = logging.getLogger("voxgate.filewriter")

MAX_BACKLOG_BYTES = 64 << 20


class _Writer:
    def __init__(self):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.backlog_bytes = 0
        self.dropped_lines = 0
        self.dropped_frames = 0

    def put(self, item: tuple, nbytes: int, droppable_at: int) -> bool:
        with self._lock:
            if self.backlog_bytes + nbytes > droppable_at:
                return False
            self.backlog_bytes += nbytes
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="voxgate-filewriter", daemon=True)
                self._thread.start()
        self._queue.put((item, nbytes))
        return True

    def _run(self) -> None:
        while True:
            item, nbytes = self._queue.get()
            try:
                write_item(item)
            except Exception:  # a full or broken disk loses that file's rest, never the thread
                log.exception("file write failed")
            finally:
                with self._lock:
                    self.backlog_bytes -= nbytes
                done = item[-1] if item[0] == "sync" else None
                if done is not None:
                    done.set()

    def sync(self, timeout: float = 5.0) -> bool:
        """Waits until everything queued so far is on disk (tests, shutdown)."""
        done = threading.Event()
        self.put(("sync", done), 0, MAX_BACKLOG_BYTES)
        return done.wait(timeout)


_WRITER = _Writer()


def write_item(item: tuple) -> None:
    """Runs on the writer thread: one queued operation on one file. A write that fails (ENOSPC, EIO, a
    vanished volume) ends that file with one warning; its later lines are skipped, not each logged."""
    try:
        _write_item(item)
    except OSError as exc:
        target = item[1]
        if not target.failed:
            log.warning("cannot write %s: %s; its recording stops", target.path, exc)
        target.failed = True
        fh, target.fh = target.fh, None
        try:
            if fh is not None:
                fh.close()
        except OSError:
            pass


def _write_item(item: tuple) -> None:
    op, target = item[0], item[1]
    if op == "line":
        if target.fh is None and not target.failed:
            target.fh = _open(target, lambda: open(target.path, "a", encoding="utf-8"))
        if target.fh is not None:
            target.fh.write(item[2])
    elif op == "frames":
        if target.fh is None and not target.failed:
            target.fh = _open(target, lambda: _open_wav(target))
        if target.fh is not None:
            target.fh.writeframes(item[2])
    elif op == "close":
        if target.fh is not None:
            target.fh.close()
            target.fh = None


def _open(target, opener):
    try:
        return opener()
    except OSError as exc:
        log.warning("cannot write %s: %s", target.path, exc)
        target.failed = True
        return None


class MonoWavWriter:
    """A mono PCM16 WAV file being written.

    It opens the file itself and hands the open file to `wave`: a path that cannot be opened raises
    OSError here, before any `wave` writer exists (a half-built one raises from its destructor later).
    """

    def __init__(self, path: str, sample_rate: int):
        self._raw = open(path, "wb")
        try:
            self._wav = wave.open(self._raw, "wb")
            self._wav.setnchannels(1)
            self._wav.setsampwidth(2)
            self._wav.setframerate(sample_rate)
        except BaseException:
            self._raw.close()
            raise

    def writeframes(self, data: bytes) -> None:
        self._wav.writeframes(data)

    def close(self) -> None:
        try:
            self._wav.close()  # patches the header; `wave` leaves a file it did not open to its opener
        finally:
            self._raw.close()


def _open_wav(target):
    return MonoWavWriter(target.path, target.sample_rate)


class LogFile:
    """A JSON-lines file appended by the writer thread; lines are dropped (counted) when the disk falls behind."""

    def __init__(self, path: str):
        self.path = path
        self.fh = None  # owned by the writer thread
        self.failed = False

    def write_line(self, line: str) -> None:
        if not _WRITER.put(("line", self, line), len(line), MAX_BACKLOG_BYTES // 2):
            _WRITER.dropped_lines += 1

    def close(self) -> None:
        _WRITER.put(("close", self), 0, 1 << 62)


class WavFile:
    """A mono 16-bit WAV written by the writer thread."""

    def __init__(self, path: str, sample_rate: int):
        self.path = path
        self.sample_rate = sample_rate
        self.fh = None
        self.failed = False

    def write_frames(self, pcm16: bytes) -> None:
        if not _WRITER.put(("frames", self, pcm16), len(pcm16), MAX_BACKLOG_BYTES):
            _WRITER.dropped_frames += 1

    def close(self) -> None:
        _WRITER.put(("close", self), 0, 1 << 62)


def sync(timeout: float = 5.0) -> bool:
    return _WRITER.sync(timeout)


def stats() -> dict:
    return {
        "backlog_bytes": _WRITER.backlog_bytes,
        "dropped_lines": _WRITER.dropped_lines,
        "dropped_frames": _WRITER.dropped_frames,
    }
