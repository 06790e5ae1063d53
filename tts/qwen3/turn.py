"""Turn mode at the model level: one generation per agent turn, fed text as it arrives, in the
official streaming ("dual-track", `non_streaming_mode=False`) layout.

The layout, for every voice kind: a codec track C (`codec_bos`, then for an in-context clone the
reference's frames) and a text track T (for an in-context clone the reference transcript, then
the target text, then one `tts_eos`). The prefill is the voice head (tts.qwen3.prompt.voice_head)
followed by T[:len(C)] + C, padded with `tts_pad` where T is shorter; decode step i adds T[len(C) + i]
(or `tts_pad` once T is used up) to the previous frame's codes. The official `generate` knows T
in advance; here T grows while the turn runs, with these rules (`TurnTrack`):

* a step whose text entry has not arrived is not taken: the stream is paused (cache kept), never
  fed `tts_pad` while text is still coming (that makes the model end early);
* codec end-of-speech is masked until the `tts_eos` entry has been fed; then the segment runs to
  its own end, at most `base_frames + frames_per_token * tokens` frames (the engine's rule,
  `tts.qwen3.jobs.frame_cap`, defaults 24 + 8 per token);
* a long turn is cut at punctuation before the cache runs out (`TurnGenerator`): the segment
  ends there (its `tts_eos` follows), and the rest continues in a fresh prompt.

Fed any way at all, the codes equal the official streaming layout's on the whole text up to the
official run's end (tests/qwen3/test_turn_parity.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from tts.qwen3.generate import GenerationSettings, new_talker_sampling, predict_codes, prefill, talker_step
from tts.qwen3.jobs import FRAMES_BASE, FRAMES_PER_TOKEN, frame_cap, tokens_within
from tts.qwen3.model import Qwen3TTSModel
from tts.qwen3.prompt import VoiceHead
from tts.qwen3.sampling import SamplingRows, sample, talker_logits
from tts.qwen3.tokenizer import TextTokenizer
from tts.qwen3.turn_text import PUNCTUATION, TextToken, TurnText


class TurnTrack:
    """The text track of one segment: which text id the next step adds, or None (paused)."""

    def __init__(
        self,
        prefix: list[int],
        n_codec: int,
        *,
        pad_id: int,
        eos_id: int,
        base_frames: float = FRAMES_BASE,
        frames_per_token: float = FRAMES_PER_TOKEN,
    ):
        self.prefix = list(prefix)
        self.body: list[int] = []
        self.n_codec = n_codec
        self.pad_id, self.eos_id = pad_id, eos_id
        self.finished = False
        self.fed = 0  # entries of T fed to the talker (the prefill feeds n_codec at once)
        self.base_frames, self.frames_per_token = base_frames, frames_per_token

    @property
    def eos_index(self) -> int:
        return len(self.prefix) + len(self.body)

    def push(self, ids: list[int]) -> None:
        if self.finished:
            raise ValueError("the segment's text is finished")
        self.body += ids

    def finish(self) -> None:
        self.finished = True

    def entry(self, k: int) -> int | None:
        """T[k], or None while it has not arrived."""
        if k < len(self.prefix):
            return self.prefix[k]
        if k - len(self.prefix) < len(self.body):
            return self.body[k - len(self.prefix)]
        if not self.finished:
            return None
        return self.eos_id if k == self.eos_index else self.pad_id

    def can_prefill(self) -> bool:
        return self.entry(self.n_codec - 1) is not None and (self.finished or self.body != [])

    def prefill_ids(self) -> list[int]:
        ids = [self.entry(k) for k in range(self.n_codec)]
        self.fed = self.n_codec
        return ids

    def next_id(self) -> int | None:
        return self.entry(self.fed)

    def advance(self) -> None:
        self.fed += 1

    def eos_allowed(self) -> bool:
        """End-of-speech only once `tts_eos` itself has been fed."""
        return self.finished and self.fed > self.eos_index

    def consumed(self) -> int:
        """Target text tokens fed so far."""
        return max(0, min(len(self.body), self.fed - len(self.prefix)))

    def frame_cap(self) -> int:
        return frame_cap(len(self.body), self.base_frames, self.frames_per_token)


@dataclass
class TurnStats:
    pauses: int = 0  # times a step waited for text
    segments: int = 0
    ended_by: list = field(default_factory=list)  # per segment: "eos" | "cap"
    segment_frames: list = field(default_factory=list)  # per ended segment: frames it made


class TurnError(ValueError):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class TurnGenerator:
    """One turn on one stream (batch row 0 of the model's caches): `append`, `finish`, then `step()`
    until it returns None; `paused` says whether None meant "waiting for text" or the turn is `done`.

    (Re)allocates the model's caches for one sequence: do not share a model with a running engine.
    """

    def __init__(
        self,
        model: Qwen3TTSModel,
        tokenizer: TextTokenizer,
        head: VoiceHead,
        settings: GenerationSettings,
        *,
        normalize=None,
        max_positions: int = 2048,
        base_frames: float = FRAMES_BASE,
        frames_per_token: float = FRAMES_PER_TOKEN,
    ):
        self.model, self.talker, self.cfg = model, model.talker, model.config
        self.tokenizer, self.head, self.settings = tokenizer, head, settings
        self.device = self.talker.codec_head.weight.device
        self.text = TurnText(tokenizer, normalize)
        self._head_embeds = torch.cat(head.parts)
        clone = head.clone
        with torch.inference_mode():
            if clone is not None and clone.icl:
                self._prefix = list(clone.ref_ids)
                self._codec = torch.cat([head.bos_codec, self.talker.embed_frame(clone.ref_codes.to(self.device))])
            else:
                self._prefix, self._codec = [], head.bos_codec
        self.base_frames, self.frames_per_token = base_frames, frames_per_token
        self.prefill_len = self._head_embeds.shape[0] + self._codec.shape[0]
        self.max_positions = max_positions
        # body tokens one segment may take so that prefill + its frame cap fits the cache
        self.segment_tokens = tokens_within(max_positions - self.prefill_len - 1, base_frames, frames_per_token)
        if self.segment_tokens < 4:
            raise TurnError(
                "bad_request",
                f"a cache of {max_positions} positions leaves no room for a turn's "
                f"segment after its {self.prefill_len}-position prompt",
            )
        if self.talker.model.max_seq_len < max_positions or self.talker.model.layers[0].self_attn.kv_cache is None:
            model.setup_caches(1, max_positions)
        self.generator = None
        if settings.seed is not None:
            self.generator = torch.Generator(device=self.device).manual_seed(settings.seed)
        self._pred_rows = SamplingRows.filled(
            1,
            self.device,
            temperature=settings.subtalker_temperature,
            top_k=settings.subtalker_top_k,
            top_p=settings.subtalker_top_p,
            greedy=settings.subtalker_greedy,
        )
        self._pending: list[TextToken] = []  # released ids the current segment does not take (after a cut)
        self._finished = False
        self.frames: list[torch.Tensor] = []  # [G] codes per frame, every segment in order
        self.frame_text: list[int] = []  # per frame: raw text offset its steps had consumed up to
        self.stats = TurnStats()
        self.done = False
        self._spoken_before = 0  # raw text offset the segments already ended spoke up to
        self._seg_raw: list[int] = []  # raw_end of each body token of the current segment
        self._segment_bodies: list[list[int]] = []
        self._new_segment()

    # -- text side -----------------------------------------------------------
    def append(self, piece: str) -> None:
        self._take(self.text.append(piece))

    def finish(self) -> None:
        self._take(self.text.finish())
        self._finished = True
        if not self._pending:
            self.track.finish()

    def _take(self, tokens: list[TextToken]) -> None:
        self._pending += tokens
        while self._pending and not self.track.finished:
            tok = self._pending[0]
            n = len(self.track.body)
            if n == 0 and self.stats.segments > 1:
                self._strip_segment_start()
                tok = self._pending[0]
            if n >= self.segment_tokens or (
                n >= self.segment_tokens // 2
                and self._ends_clause()
                and self.tokenizer.decode([tok.id]).startswith(" ")
            ):
                self.track.finish()  # cut: this segment ends here, the rest starts a fresh prompt
                break
            self.track.push([tok.id])
            self._seg_raw.append(tok.raw_end)
            self._pending.pop(0)
        if self._finished and not self._pending:
            self.track.finish()

    def _strip_segment_start(self) -> None:
        """A fresh prompt starts at its word, not at the space before it (as a whole-text prompt would):
        re-encode the first pending piece (the ids sharing its raw_end) without its leading space."""
        first = [t for t in self._pending if t.raw_end == self._pending[0].raw_end]
        text = self.tokenizer.decode([t.id for t in first])
        if text[:1].isspace() and text.strip():
            ids = self.tokenizer.encode(text.lstrip())
            self._pending[: len(first)] = [TextToken(i, first[0].raw_end) for i in ids]

    def _ends_clause(self) -> bool:
        last = self.tokenizer.decode(self.track.body[-1:]).rstrip()
        return last.endswith(PUNCTUATION)

    # -- generation side -----------------------------------------------------
    def _new_segment(self) -> None:
        self.track = TurnTrack(
            self._prefix,
            self._codec.shape[0],
            pad_id=self.cfg.tts_pad_token_id,
            eos_id=self.cfg.tts_eos_token_id,
            base_frames=self.base_frames,
            frames_per_token=self.frames_per_token,
        )
        self.cb0 = new_talker_sampling(self.model, 1, self.settings, self.device)
        self._prefilled = False
        self._tok: torch.Tensor | None = None  # the next frame's codebook-0 token, once sampled
        self._hidden: torch.Tensor | None = None
        self._seg_frames = 0
        self._last_codes: torch.Tensor | None = None
        self._waiting = False
        self.stats.segments += 1

    def _embed(self, ids: list[int]) -> torch.Tensor:
        return self.talker.embed_text(torch.tensor(ids, dtype=torch.long, device=self.device))

    def _sample(self, logits: torch.Tensor) -> torch.Tensor:
        cb0 = self.cb0
        allowed = (cb0.generated >= cb0.min_new_tokens) & self.track.eos_allowed()
        processed = talker_logits(logits, cb0.seen, cb0.rows.repetition_penalty, cb0.suppress, cb0.eos_id, allowed)
        tok = sample(processed, cb0.rows, self.generator)
        cb0.seen.scatter_(1, tok.view(-1, 1), True)
        cb0.generated += 1
        return tok

    @property
    def paused(self) -> bool:
        """Waiting for text (not done)."""
        return not self.done and self._waiting

    def _wait(self) -> None:
        if not self._waiting:
            self.stats.pauses += 1
        self._waiting = True

    @torch.inference_mode()
    def step(self) -> torch.Tensor | None:
        """The next frame's codes [G], or None: paused (waiting for text) or done."""
        while not self.done:
            track = self.track
            if not self._prefilled:
                if track.finished and not track.body and self.stats.segments == 1:
                    self.done = True  # an empty turn speaks nothing
                    return None
                if not track.can_prefill():
                    self._wait()
                    return None
                text = self._embed(track.prefill_ids())
                n = text.shape[0]
                embeds = torch.cat([self._head_embeds, text + self._codec[:n]]).unsqueeze(0)
                self._hidden, logits = prefill(
                    self.talker, embeds, torch.tensor([self.prefill_len], device=self.device)
                )
                self._tok = self._sample(logits)
                self._prefilled = True
            elif self._tok is None:
                nid = track.next_id()
                if nid is None:
                    self._wait()
                    return None
                at = self.prefill_len + self._seg_frames - 1
                pos = torch.tensor([at], device=self.device)
                self._hidden, logits = talker_step(
                    self.talker, self._last_codes, self._embed([nid]), pos, kv_len=at + 1
                )  # the live columns only
                track.advance()
                self._tok = self._sample(logits)
            self._waiting = False
            if int(self._tok.item()) == self.cfg.talker.codec_eos_token_id or self._seg_frames >= track.frame_cap():
                self._end_segment("eos" if self._seg_frames < track.frame_cap() else "cap")
                continue
            codes = predict_codes(self.talker, self._hidden, self._tok, self._pred_rows, self.generator)
            self._tok, self._last_codes = None, codes
            self._seg_frames += 1
            self.frames.append(codes[0])
            done = track.consumed()
            self.frame_text.append(self._seg_raw[done - 1] if done else self._spoken_before)
            return codes[0]
        return None

    def _end_segment(self, why: str) -> None:
        self.stats.ended_by.append(why)
        self.stats.segment_frames.append(self._seg_frames)
        self._segment_bodies.append(list(self.track.body))
        self._spoken_before = self._seg_raw[-1] if self._seg_raw else self._spoken_before
        self._seg_raw = []
        if self._finished and not self._pending:
            self.done = True
            return
        self._new_segment()
        self._take([])

    def codes(self) -> torch.Tensor:
        g = self.cfg.talker.num_code_groups
        return torch.stack(self.frames).cpu() if self.frames else torch.zeros((0, g), dtype=torch.long)

    def played_text(self, frames: int) -> str:
        """The raw turn text the first `frames` frames spoke (the text their steps had consumed)."""
        if frames <= 0 or not self.frame_text:
            return ""
        return self.text.raw[: self.frame_text[min(frames, len(self.frame_text)) - 1]].strip()


def words(text: str) -> list[str]:
    """Text as an LLM might stream it: word by word, each word with its leading space."""
    import re

    return re.findall(r"\s*\S+", text)


@dataclass
class PacedRun:
    codes: torch.Tensor
    pauses: int
    paused_s: float  # total time steps waited for text (virtual clock)
    first_frame_s: float | None  # from the first piece's arrival
    end_s: float


def run_paced(
    gen: TurnGenerator,
    pieces: list[str],
    rate: float | None,
    step_s: float | None = None,
    max_frames: int | None = None,
) -> PacedRun:
    """Feed `pieces` at `rate` pieces per second (None: all at once, then finish) while stepping.

    A virtual clock: piece i arrives at i / rate; a step costs `step_s` (None: its measured time).
    The codes do not depend on the schedule; the pauses and first-frame time do.
    """
    arrivals = [0.0 if not rate else i / rate for i in range(len(pieces))]
    now, fed, paused_s, first = 0.0, 0, 0.0, None
    while True:
        while fed < len(pieces) and arrivals[fed] <= now + 1e-12:
            gen.append(pieces[fed])
            fed += 1
        if fed == len(pieces) and not gen.text.finished:
            gen.finish()
        t0 = time.perf_counter()
        frame = gen.step()
        cost = step_s if step_s is not None else time.perf_counter() - t0
        if frame is not None:
            now += cost
            if first is None:
                first = now
            if max_frames is not None and len(gen.frames) >= max_frames:
                break
            continue
        if gen.done:
            break
        wait = arrivals[fed] - now  # paused: jump to the next piece
        paused_s += max(wait, 0.0)
        now = max(now, arrivals[fed])
    return PacedRun(gen.codes(), gen.stats.pauses, paused_s, first, now)
