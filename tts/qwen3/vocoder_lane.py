"""The Qwen3 engine's vocoder lane: codes to PCM, and PCM to the streams.

One batched vocoder pass per step for the streams whose pending frames make their next packet (a ramp:
1 frame first, then 2, then 4), earliest deadline first, on the codec's streaming decoder with one state
row per slot (frame-exact, equal to the offline decode). With the pipeline on it runs on its own thread
(and CUDA stream), overlapping the next steps' talker work; every codec-state change goes through the
lane in order. Decoded PCM goes to the event loop in one callback per vocoder call.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time

import numpy as np

from tts.engine import EngineError, PcmChunk
from tts.qwen3.jobs import FRAME_S, Job

log = logging.getLogger("voxgate.qwen3")


class VocoderLane:
    """Mixin of `Qwen3Engine` (tts/qwen3/engine.py): the state it reads is set up there."""

    def _primed(self, cv) -> concurrent.futures.Future:
        """The vocoder state after the voice's reference codes: decoded once per voice, on the lane."""
        if cv.primed is None:
            from tts.qwen3.cloned_voices import prime_vocoder

            cv.primed = self._on_lane(prime_vocoder, self._vocoder, cv.clone.ref_codes, max(self.settings.packet_ramp))
        return cv.primed

    def _on_lane(self, fn, *args) -> concurrent.futures.Future:
        if self._lane is None:  # serial engine: now, on the worker
            fut: concurrent.futures.Future = concurrent.futures.Future()
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to whoever reads the future
                fut.set_exception(e)
            return fut
        tally = self._tally

        def run():
            from tts.qwen3.syncs import watching

            with self._capture_gate(), watching(tally), self._lane_stream_ctx():
                return fn(*args)

        return self._lane.submit(run)

    def _capture_gate(self):
        """Held by work on other threads that calls into CUDA: a graph capture holds it (tts.qwen3.batch)."""
        import contextlib

        return self._batch.capture_gate.use() if self._batch is not None else contextlib.nullcontext()

    def _lane_stream_ctx(self):
        import contextlib

        import torch

        if self._lane_stream is None:
            return contextlib.nullcontext()
        return torch.cuda.stream(self._lane_stream)

    def _lane_join(self) -> None:
        fut, self._voc_inflight = self._voc_inflight, None
        if fut is not None:
            fut.result()

    def _restore_vocoder_row(self, slot: int, saved: concurrent.futures.Future) -> None:
        self._vstate.assign([slot], saved.result())

    def _packet_target(self, job: Job) -> int:
        ramp = self.settings.packet_ramp
        return ramp[min(job.packets, len(ramp) - 1)]

    def _decode(self, entries: list[tuple[int, list]], owners: dict[int, int]) -> list[np.ndarray]:
        """On the lane: decode the frames of (slot, frames) entries (their state rows advance in place).
        `owners`: slot -> id of the job holding it when the work was handed over."""
        from tts.qwen3.codec import StreamingCodecState

        vs, g = self._vstate, self._batch.groups
        n = max(slot for slot, _ in entries) + 1
        chosen = {slot for slot, _ in entries}
        t = len(entries[0][1])
        if all(len(f) == t for _, f in entries) and all(s in chosen for s in owners if s < n):
            # Common case: streams in step (same packet size, every held slot below n chosen): decode slots
            # 0..n-1 on a view of the state, no gather/scatter of state rows. Rows without a live
            # stream decode zeros; they are reset when their slot is reused.
            codes = np.zeros((n, t, g), dtype=np.int64)
            for slot, frames in entries:
                codes[slot] = np.stack(frames)
            view = StreamingCodecState(vs.frames[:n], [b[:n] for b in vs.buffers])
            pcm = self._codec_call(codes, view)
            return [pcm[slot] for slot, _ in entries]
        out: dict[int, np.ndarray] = {}
        by_len: dict[int, list[tuple[int, list]]] = {}
        for e in entries:
            by_len.setdefault(len(e[1]), []).append(e)
        for t, group in by_len.items():
            idx = [slot for slot, _ in group]
            codes = np.stack([np.stack(frames) for _, frames in group])
            sub = vs.select(idx)
            pcm = self._codec_call(codes, sub)
            vs.assign(idx, sub)
            out.update({slot: row for slot, row in zip(idx, pcm)})
        return [out[slot] for slot, _ in entries]

    def _codec_call(self, codes: np.ndarray, state) -> np.ndarray:
        """One vocoder call: codes to the device, decode, PCM to the host (one wait, counted)."""
        import torch

        from tts.qwen3.syncs import wait_for

        codec = self._vocoder
        cuda = codec.device.type == "cuda"
        src = torch.from_numpy(codes)
        with torch.inference_mode():
            if cuda:
                src = src.pin_memory().to(codec.device, non_blocking=True)
            wav = codec.decode_step(src, state).float()
            host = torch.empty(wav.shape, dtype=torch.float32, pin_memory=cuda)
            host.copy_(wav, non_blocking=cuda)
        event = None
        if cuda:
            event = torch.cuda.Event()
            event.record()
        wait_for(event)
        with self._cond:
            self.counters["vocoder_calls"] += 1
            if self._tally is not None:
                self.counters["host_syncs"] = self._tally.count
        return host.numpy()

    def _vocode(self) -> None:
        """Hand the streams whose pending frames make their next packet (or that ended) to the lane. The
        previous hand-over is waited for first (at most one in flight: a vocoder slower than the talker
        slows the loop rather than queueing work)."""
        self._lane_join()
        with self._cond:
            live = [j for j in self._held.values() if not j.cancelled and not j.finished]
            owners = {slot: id(job) for slot, job in self._held.items() if not job.cancelled}
        # a stream is decoded once its pending frames make its next packet (1, 2, 4 ...), or at its end
        # (a turn paused for its text hands over what it has: the caller would hear a gap otherwise)
        todo = sorted((j for j in live if j.pending and (len(j.pending) >= self._packet_target(j) or not j.generating
                                                         or j.paused)),
                      key=lambda j: (j.priority, j.seq))
        if self.settings.vocoder_rows:
            todo = todo[: self.settings.vocoder_rows]
        ending = [j for j in live if not j.generating and not j.pending]  # everything vocoded: last chunk only
        tasks = []
        for job in todo + ending:
            frames, job.pending = job.pending, []
            job.vocoded += len(frames)
            job.packets += 1
            last = not job.generating
            job.finished = last
            tasks.append((job, job.slot, frames, last))
        if not tasks:
            return
        serial = self._serial_step(len(self._held))  # the batch as it stood this step, before the releases below
        with self._cond:  # a finished stream's slot is free from now: its vocoder row's next user is reset
            for job, _, _, last in tasks:  # on the lane after this work, so the slot need not wait for it
                if last:
                    self._release(job)
        if self._ckpt.codec is None and any(f for _, _, f, _ in tasks):
            raise EngineError("internal", "this checkpoint has no codec decoder")
        fut = self._on_lane(self._decode_and_deliver, tasks, owners)
        if serial:  # few streams: the worker waits for this decode (no talker work beside it)
            self.counters["vocoder_waited"] += 1
            fut.result()
        else:
            self.counters["vocoder_overlapped"] += 1
            self._voc_inflight = fut

    def _serial_step(self, held: int) -> bool:
        """Whether this step waits for its vocoder pass instead of overlapping it with the next talker step.

        The lane pays off for a batch (a step costs max(talker, vocoder), not their sum) and can cost a single
        stream on few cores: two busy threads share the cores, each with half the intra-op threads. So a batch
        of more than `serial_vocoder_rows` streams always overlaps, and a smaller one takes whichever way its
        measured iterations say is faster (`ModeChooser`), with the same intra-op threads either way."""
        if self._lane is None:
            return True
        small = 0 < held <= self._serial_rows
        serial = small and self._chooser.serial()
        if serial != self._serial_mode:
            self._serial_mode = serial
            self.counters["vocoder_mode_switches"] += 1
        return serial

    def _note_iteration(self, seconds: float) -> None:
        """The worker's iteration time, counted for the mode it ran in while the batch was small."""
        if self._serial_mode is not None and self._lane is not None and 0 < len(self._held) <= self._serial_rows:
            self._chooser.note(self._serial_mode, seconds)

    def _decode_and_deliver(self, tasks: list, owners: dict[int, int]) -> None:
        """On the lane: decode, then hand each stream its chunk (and finish the ones that ended)."""
        t0 = time.perf_counter()
        entries = [(slot, frames) for _, slot, frames, _ in tasks if frames]
        pcms: list = []
        if entries:
            try:
                pcms = self._decode(entries, owners)
            except Exception as e:  # noqa: BLE001 - fail the streams in this call, keep serving
                log.exception("vocoder failed")
                for job, _, frames, _ in tasks:
                    if frames:
                        self._fail(job, EngineError("internal", f"vocoder failed: {e}"))
                tasks = [t for t in tasks if not t[2]]
                pcms = []
            self._span("vocoder", t0, {"rows": len(entries)})
            self.timings["vocoder"] += time.perf_counter() - t0
        it = iter(pcms)
        deliveries = []
        for job, _, frames, last in tasks:
            pcm = next(it) if frames else np.zeros(0, dtype=np.float32)
            if job.cancelled:
                continue
            text_end = job.turn.text_end(job.delivered + len(frames)) if job.turn is not None else None
            deliveries.append((job.stream, PcmChunk(pcm, job.delivered, last, text_end)))
            job.delivered += len(frames)
            with self._cond:
                self.counters["audio_s"] += len(frames) * FRAME_S
            if last:
                self._complete(job)
        if deliveries:  # one callback per vocoder call: the engine service sends one message per step for it
            self._post(_deliver_all, deliveries)

    def _complete(self, job: Job) -> None:
        with self._cond:
            self._release(job)
            self._forget(job, "completed")


def _deliver_all(deliveries: list) -> None:
    """On the event loop: every stream's chunk of one vocoder call."""
    for stream, chunk in deliveries:
        stream._deliver(chunk)


class ModeChooser:
    """Serial or overlapped vocoder for small batches, by measured iteration time (an EWMA per mode).

    Each mode is tried first; then the cheaper one runs, and every `explore_every` iterations the other one
    runs `explore_for` iterations so that its estimate follows the machine (a neighbour taking cores)."""

    def __init__(self, explore_every: int = 400, explore_for: int = 12, alpha: float = 0.15):
        self.cost: dict[bool, float | None] = {True: None, False: None}
        self.seen = {True: 0, False: 0}
        self.explore_every, self.explore_for, self.alpha = explore_every, explore_for, alpha
        self._n = 0

    def serial(self) -> bool:
        for mode in (True, False):
            if self.seen[mode] < self.explore_for:
                return mode
        best = self.cost[True] <= self.cost[False]
        phase = self._n % self.explore_every
        return (not best) if phase >= self.explore_every - self.explore_for else best

    def note(self, serial: bool, seconds: float) -> None:
        self._n += 1
        self.seen[serial] += 1
        c = self.cost[serial]
        self.cost[serial] = seconds if c is None else c + self.alpha * (seconds - c)
