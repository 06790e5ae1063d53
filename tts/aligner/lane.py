"""The aligner beside an engine: each request's audio is collected as it is vocoded, and once its last
chunk is out, the whole request is aligned with its text on the aligner's own thread. Requests that end
while the aligner is busy are aligned together in its next batch.

The request's audio goes out at once; its words follow in one more, empty, final chunk
(`PcmChunk.is_last`), posted after that audio, so a stream sees its words before it ends. A failed or
impossible alignment (a clip under 20 ms) ends the stream without words: the session's estimate stands.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading

import numpy as np

from tts.aligner.aligner import ForcedAligner
from tts.engine import PcmChunk, WordTiming, WordTimings

log = logging.getLogger("voxgate.aligner")

MIN_SECONDS = 0.02


class WordLane:
    def __init__(self, aligner: ForcedAligner, deliver, sample_rate: int):
        self.aligner = aligner
        self.deliver = deliver  # the engine's (stream, chunk) pairs to their callers (Qwen3Engine.deliver)
        self.rate = sample_rate
        self.audio: dict[int, list] = {}  # request id -> its PCM so far (dropped when it ends or leaves)
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="aligner")
        self.lock = threading.Lock()
        self.waiting: list[tuple] = []  # (stream, pcm, text, frame_index) ready to align

    def add(self, rid: int, pcm: np.ndarray) -> None:
        """On the vocoder lane: one more piece of request `rid`'s audio."""
        if len(pcm):
            self.audio.setdefault(rid, []).append(pcm)

    def drop(self, rid: int) -> None:
        self.audio.pop(rid, None)

    def finish(self, ended: list) -> None:
        """On the vocoder lane, after their audio was delivered: align these requests ((rid, stream, frames)),
        then end their streams."""
        with self.lock:
            for rid, stream, frames in ended:
                pieces = self.audio.pop(rid, [])
                pcm = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
                self.waiting.append((stream, pcm, stream.request.text, frames))
        self.pool.submit(self._align_waiting)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)

    def _align_waiting(self) -> None:
        with self.lock:
            batch, self.waiting = self.waiting, []
        if not batch:
            return  # an earlier call took these along
        usable = [i for i, (_, pcm, text, _) in enumerate(batch) if len(pcm) >= MIN_SECONDS * self.rate and text]
        words: list[WordTimings | None] = [None] * len(batch)
        try:
            aligned = self.aligner.align([(batch[i][1], self.rate, batch[i][2]) for i in usable])
            for i, spans in zip(usable, aligned):
                n = len(batch[i][1])  # a time past the audio's end means its end
                timed = tuple(WordTiming(w.char_start, w.char_end, min(w.start, n), min(w.end, n)) for w in spans)
                words[i] = WordTimings(timed, "aligner")
        except Exception:  # noqa: BLE001 - the streams end without words; the estimate stands
            log.exception("aligner failed on %d requests", len(usable))
        self.deliver(
            [
                (stream, PcmChunk(np.zeros(0, np.float32), frame, True, words=w))
                for (stream, _, _, frame), w in zip(batch, words)
            ]
        )


def load_word_lane(aligner_dir: str, device: str, dtype: str, deliver, sample_rate: int) -> WordLane:
    """The aligner from its directory on the engine's device (float32 on a CPU, the engine's dtype elsewhere);
    a directory that is not an aligner checkpoint is an EngineError `aligner_unavailable`."""
    from tts.engine import EngineError
    from tts.qwen3.config import ConfigError

    try:
        aligner = ForcedAligner.from_dir(aligner_dir, device, "float32" if device == "cpu" else dtype)
    except ConfigError as e:
        raise EngineError("aligner_unavailable", f"engine.aligner_dir: {e.message}") from None
    log.info("aligner: %s on %s (word timings per request)", aligner_dir, device)
    return WordLane(aligner, deliver, sample_rate)
