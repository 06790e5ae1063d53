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

log = logging.getLogger("voxgate.qwen3")


class VocoderLane:
    """The vocoder passes and the hand-over of PCM. Owns the lane (thread + CUDA stream), the vocoder and its
    per-slot state rows; every change to a row goes through `submit`, so it happens in order."""

    def __init__(self, settings, scheduler, diagnostics, deliver):
        self.settings = settings
        self.scheduler = scheduler
        self.diag = diagnostics
        self.deliver = deliver  # Qwen3Engine.deliver: (stream, chunk or error) pairs to the callers
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None  # the lane's thread (None: serial)
        self._stream = None  # CUDA stream of the lane (made by `load`)
        self.vocoder = None  # tts.qwen3.codec.vocoder.Vocoder (None: a checkpoint without codec)
        self._state = None  # the codec's streaming state, one row per slot (the lane's alone)
        self.batch = None  # the talker batch: its capture gate, its code groups
        self.tally = None  # tts.qwen3.syncs.SyncTally while watching
        self.inflight: concurrent.futures.Future | None = None
        self.serial_rows = 0  # resolved at load (`_serial_step`)
        self.serial_mode: bool | None = None
        self.chooser = ModeChooser()
        self._words = None  # tts.aligner.lane.WordLane with engine.aligner_dir (sentence mode: words per request)

    def load(self, vocoder, batch, max_batch: int, *, cuda: bool) -> None:
        """The lane's vocoder (None: a checkpoint without codec), its state rows for every slot (made now, not at
        the first admission) and, with the pipeline on CUDA, its own stream."""
        self.vocoder, self.batch = vocoder, batch
        s = self.settings
        self.serial_rows = s.serial_vocoder_rows if s.serial_vocoder_rows >= 0 else (0 if cuda else 1)
        self._state = vocoder.new_state(max_batch) if vocoder is not None else None
        if cuda and self.settings.pipeline:
            import torch

            self._stream = torch.cuda.Stream()

    def align_words(self, words) -> None:
        """Word timings per request from this aligner lane (tts.aligner.lane.WordLane), the lane's from now on."""
        self._words = words

    def watch(self, tally) -> None:
        """Count the lane's host syncs into `tally` (tts.qwen3.syncs.SyncTally; None: stop), from its next work."""
        self.tally = tally

    @property
    def state_bytes(self) -> int:
        """Bytes of the codec state rows (the memory report)."""
        return sum(b.numel() * b.element_size() for b in self._state.buffers) if self._state is not None else 0

    def start(self) -> None:
        if self.settings.pipeline and self.pool is None:
            self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="qwen3-vocoder")

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
        if self._words is not None:
            self._words.shutdown()

    # -- work on the lane, in order -------------------------------------------------------
    def submit(self, fn, *args) -> concurrent.futures.Future:
        if self.pool is None:  # serial engine: now, on the calling thread
            fut: concurrent.futures.Future = concurrent.futures.Future()
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to whoever reads the future
                fut.set_exception(e)
            return fut
        tally = self.tally

        def run():
            from tts.qwen3.syncs import watching

            with self.capture_gate(), watching(tally), self._stream_ctx():
                return fn(*args)

        return self.pool.submit(run)

    def capture_gate(self):
        """Held by work on other threads that calls into CUDA: a graph capture holds it (tts.qwen3.batch)."""
        import contextlib

        return self.batch.capture_gate.use() if self.batch is not None else contextlib.nullcontext()

    def _stream_ctx(self):
        import contextlib

        import torch

        if self._stream is None:
            return contextlib.nullcontext()
        return torch.cuda.stream(self._stream)

    def join(self) -> None:
        fut, self.inflight = self.inflight, None
        if fut is not None:
            fut.result()

    def primed(self, cv) -> concurrent.futures.Future:
        """The vocoder state after the voice's reference codes: decoded once per voice, on the lane."""
        if cv.primed is None:
            from tts.qwen3.cloned_voices import prime_vocoder

            cv.primed = self.submit(prime_vocoder, self.vocoder, cv.clone.ref_codes, max(self.settings.packet_ramp))
        return cv.primed

    # Row changes: each is a no-op without a codec (no state rows).
    def save_row(self, slot: int) -> concurrent.futures.Future | None:
        """The row's state as it stands after the lane's work so far (a stream leaving its slot for a while)."""
        return self.submit(self._state.select, [slot]) if self._state is not None else None

    def restore_row(self, slot: int, saved: concurrent.futures.Future) -> None:
        if self._state is not None:
            self.submit(self._restore_row, slot, saved)

    def _restore_row(self, slot: int, saved: concurrent.futures.Future) -> None:
        self._state.assign([slot], saved.result())

    def move_row(self, src: int, dst: int) -> None:
        if self._state is not None:
            self.submit(self._move_row, src, dst)

    def _move_row(self, src: int, dst: int) -> None:
        self._state.assign([dst], self._state.select([src]))

    def reset_rows(self, slots: list[int]) -> None:
        if self._state is not None and slots:
            self.submit(self._state.reset, slots)

    # -- one step's vocoder pass -----------------------------------------------------------
    def hand_over(self, work) -> None:
        """Hand the scheduler's `VocoderWork` to the lane. The previous hand-over is waited for first (at most
        one in flight: a vocoder slower than the talker slows the loop rather than queueing work)."""
        if not work.tasks:
            return
        if self.vocoder is None and any(t.frames for t in work.tasks):
            raise EngineError("internal", "this checkpoint has no codec decoder")
        serial = self._serial_step(work.held)
        fut = self.submit(self._decode_and_deliver, work.tasks, work.owners)
        if serial:  # few streams: the worker waits for this decode (no talker work beside it)
            self.scheduler.count("vocoder_waited")
            fut.result()
        else:
            self.scheduler.count("vocoder_overlapped")
            self.inflight = fut

    def _serial_step(self, held: int) -> bool:
        """Whether this step waits for its vocoder pass instead of overlapping it with the next talker step.

        The lane pays off for a batch (a step costs max(talker, vocoder), not their sum) and can cost a single
        stream on few cores: two busy threads share the cores, each with half the intra-op threads. So a batch
        of more than `serial_vocoder_rows` streams always overlaps, and a smaller one takes whichever way its
        measured iterations say is faster (`ModeChooser`), with the same intra-op threads either way."""
        if self.pool is None:
            return True
        small = 0 < held <= self.serial_rows
        serial = small and self.chooser.serial()
        if serial != self.serial_mode:
            self.serial_mode = serial
            self.scheduler.count("vocoder_mode_switches")
        return serial

    def note_iteration(self, seconds: float, held: int) -> None:
        """The worker's iteration time, counted for the mode it ran in while the batch was small."""
        if self.serial_mode is not None and self.pool is not None and 0 < held <= self.serial_rows:
            self.chooser.note(self.serial_mode, seconds)

    def _decode(self, entries: list[tuple[int, tuple]], owners: frozenset) -> list[np.ndarray]:
        """On the lane: decode the frames of (slot, frames) entries (their state rows advance in place).
        `owners`: the slots held when the work was handed over."""
        from tts.qwen3.codec import StreamingCodecState

        vs, g = self._state, self.batch.groups
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
        from tts.qwen3.transfers import host_buffer

        codec = self.vocoder
        cuda = codec.device.type == "cuda"
        src = torch.from_numpy(codes)
        with torch.inference_mode():
            if cuda:
                src = src.pin_memory().to(codec.device, non_blocking=True)
            wav = codec.decode_step(src, state).float()
            host = host_buffer(torch.empty(wav.shape, dtype=torch.float32, pin_memory=cuda))
            host.copy_(wav, non_blocking=cuda)
        event = None
        if cuda:
            event = torch.cuda.Event()
            event.record()
        wait_for(event)
        tally = self.tally
        self.scheduler.count("vocoder_calls", host_syncs=tally.count if tally is not None else None)
        return host.numpy()

    def _decode_and_deliver(self, tasks: tuple, owners: frozenset) -> None:
        """On the lane: decode the `VocoderTask`s, then hand each caller its chunk (and finish the ones that
        ended), all through one `deliver` call."""
        t0 = time.perf_counter()
        entries = [(t.slot, t.frames) for t in tasks if t.frames]
        pcms: list = []
        if entries:
            try:
                pcms = self._decode(entries, owners)
            except Exception as e:  # noqa: BLE001 - fail the streams in this call, keep serving
                log.exception("vocoder failed")
                error = EngineError("internal", f"vocoder failed: {e}")
                streams = [self.scheduler.fail(t.rid) for t in tasks if t.frames]
                if self._words is not None:
                    for t in tasks:
                        self._words.drop(t.rid)
                self.deliver([(stream, error) for stream in streams if stream is not None])
                tasks = [t for t in tasks if not t.frames]
                pcms = []
            self.diag.span("vocoder", t0, {"rows": len(entries)})
            self.diag.timings["vocoder"] += time.perf_counter() - t0
        it = iter(pcms)
        deliveries = []
        aligning = []  # (rid, stream, frames) of requests whose words the aligner adds in a final chunk of their own
        words = self._words
        for t in tasks:
            pcm = next(it) if t.frames else np.zeros(0, dtype=np.float32)
            stream = self.scheduler.delivered(t.rid, len(t.frames), t.last)
            if stream is None:  # cancelled or failed meanwhile
                if words is not None:
                    words.drop(t.rid)
                continue
            align = words is not None and not t.turn
            if align:
                words.add(t.rid, pcm)
                if t.last:
                    aligning.append((t.rid, stream, t.frame_index + len(t.frames)))
            deliveries.append((stream, PcmChunk(pcm, t.frame_index, t.last and not align, t.text_end)))
        # one callback per vocoder call: the engine service sends one message per step for it
        self.deliver(deliveries)
        if aligning:  # after the audio's callback, so each stream's words come after its audio
            words.finish(aligning)


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
