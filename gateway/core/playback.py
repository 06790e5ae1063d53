"""Playback accounting: what the caller heard of a turn, as text.

`played_text` is the text of every text chunk the caller heard in full, plus
the heard words of the chunk that was cut off, in the agent's own writing.
The engine speaks each chunk's *normalised* text ("15%" becomes "fifteen
percent"), so each spoken chunk keeps a map from its spoken words to spans of
the original text: words that read the same anchor the map, and a run that
the normaliser rewrote becomes one group ("15%" ↔ "fifteen percent") that
counts as heard only when all of its spoken words were.

Where the engine says when each word is heard (`tts.WordTimings`: eSpeak's word
events, an aligner), a word's place in the chunk's audio is the engine's; otherwise
it is estimated by its share of the chunk's spoken characters over the chunk's
speech (its trailing silence left out): a chunk of 2 s of speech whose first word
holds 10 % of the letters has that word end at 0.2 s. Either way a word group counts
as heard once its end has played, and the session reports the groups' times to
clients that ask (`audio.words`, `SpokenChunk.take_words`).
"""

from __future__ import annotations

import bisect
import difflib
import re
from dataclasses import dataclass, field

from tts import WordTimings

_WORD = re.compile(r"\S+")
_KEY = re.compile(r"[\W_]+")


def _key(word: str) -> str:
    return _KEY.sub("", word.lower())


@dataclass
class SpokenChunk:
    """One text chunk as written and as spoken, with the word map between them."""

    original: str
    spoken: str
    word_ends: list[float] = field(default_factory=list)  # spoken word j ends at this share of the chunk's audio
    text_ends: list[int | None] = field(default_factory=list)  # original[:text_ends[j]] is heard once word j is
    frame_offsets: list[int] = field(default_factory=list)  # output-rate sample offset of each engine packet
    # the engine's text (stress marks and all): where each of its words starts and ends, to place its timings
    engine_words: tuple[list[int], list[int]] = ((), ())
    spans: list[tuple[float, float] | None] = field(default_factory=list)  # spoken word j's samples in the chunk
    source: str | None = None  # "engine" / "aligner" once the engine gave timings; None: the estimate
    words_sent: int = 0  # text_ends entries up to which audio.words have gone out
    text_sent: int = 0  # original[:text_sent] has gone out in audio.words
    finished: bool = False  # every spoken word has its span (timed or estimated)

    @classmethod
    def build(cls, original: str, spoken: str) -> "SpokenChunk":
        chunk = cls(original, spoken)
        o_words = [(m.group(), m.end()) for m in _WORD.finditer(original)]
        s_words = [m.group() for m in _WORD.finditer(spoken)]
        if not s_words:
            return chunk
        s_keys = [_key(w) for w in s_words]
        total, run = float(sum(max(1, len(k)) for k in s_keys)), 0
        for k in s_keys:
            run += max(1, len(k))
            chunk.word_ends.append(run / total)
        o_keys = [_key(w) for w, _ in o_words]
        if o_keys == s_keys:  # the normaliser rewrote no word (the common case): no alignment needed
            chunk.text_ends = [end for _, end in o_words]
            return chunk
        ends: list[int | None] = [None] * len(s_words)
        matcher = difflib.SequenceMatcher(None, o_keys, s_keys, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for k in range(i2 - i1):
                    ends[j1 + k] = o_words[i1 + k][1]
            elif tag == "replace":
                ends[j2 - 1] = o_words[i2 - 1][1]  # the group is heard with its last spoken word
            elif tag == "insert" and j1 > 0:
                # spoken words with no written counterpart belong to the group before them
                previous = next((j for j in range(j1 - 1, -1, -1) if ends[j] is not None), None)
                if previous is not None:
                    ends[j2 - 1], ends[previous] = ends[previous], None
            # "delete" (written, not spoken: markup, emoji) is covered by the next heard span
        chunk.text_ends = ends
        return chunk

    def with_engine_text(self, engine_text: str) -> "SpokenChunk":
        """The text the engine is given (the spoken form, perhaps with stress marks): its words are the
        spoken words one for one, and the engine's timings name them by character offsets in it."""
        words = list(_WORD.finditer(engine_text))
        if len(words) == len(self.word_ends):
            self.engine_words = ([m.start() for m in words], [m.end() for m in words])
            self.spans = [None] * len(words)
        return self

    def add_timings(self, timings: WordTimings, scale: float) -> None:
        """The engine's words (engine samples from the chunk's start; `scale` = output rate / engine rate)."""
        starts, ends = self.engine_words
        if not starts or self.finished:
            return  # the engine's text does not split into the spoken words: the estimate stands
        self.source = timings.source
        for w in timings.words:
            j = bisect.bisect_right(starts, w.char_start) - 1
            if j < 0 or w.char_start >= ends[j]:
                continue  # between words (a word event on whitespace): no word of ours
            start, end = w.start * scale, w.end * scale
            old = self.spans[j]
            self.spans[j] = (start, end) if old is None else (min(old[0], start), max(old[1], end))

    def finish(self, speech_samples: float) -> None:
        """The chunk's audio is complete; `speech_samples`: where its speech ends (trailing silence left out).
        Words the engine did not time (punctuation alone) sit at the end of the word before them."""
        if self.finished:
            return
        self.finished = True
        if self.source is None:
            self.spans = [
                ((self.word_ends[j - 1] if j else 0.0) * speech_samples, share * speech_samples)
                for j, share in enumerate(self.word_ends)
            ]
            return
        previous = 0.0
        for j, span in enumerate(self.spans):
            if span is None:
                self.spans[j] = (previous, previous)
            else:
                previous = span[1]

    def take_words(self, offset: float, rate: int) -> list[dict]:
        """The word groups whose times are newly known, as audio.words entries: {text, start_ms, end_ms}
        on the turn's timeline (`offset`: the chunk's first sample in the turn, at `rate`)."""
        out: list[dict] = []
        if len(self.spans) != len(self.text_ends):
            return out  # no timings yet, and the estimate waits for the chunk's end
        first = self.words_sent
        for j in range(self.words_sent, len(self.text_ends)):
            text_end = self.text_ends[j]
            if text_end is None:
                continue
            if self.spans[j] is None:
                break  # not timed yet
            group = [span for span in self.spans[first : j + 1] if span is not None]
            last = j == len(self.text_ends) - 1 or all(e is None for e in self.text_ends[j + 1 :])
            cut = len(self.original) if last and self.finished else text_end
            text = self.original[self.text_sent : cut].strip()
            if text:
                out.append(
                    {
                        "text": text,
                        "start_ms": round((offset + group[0][0]) * 1000.0 / rate, 3),
                        "end_ms": round((offset + group[-1][1]) * 1000.0 / rate, 3),
                    }
                )
            self.words_sent, self.text_sent, first = j + 1, cut, j + 1
        return out

    def _timed_ends(self) -> list[float]:
        """Each spoken word's end from the engine's spans so far: a word it skipped (punctuation alone) ends with
        the word before it; the words after the last timed one have not ended."""
        last = max((j for j, span in enumerate(self.spans) if span is not None), default=-1)
        ends, previous = [], 0.0
        for j, span in enumerate(self.spans):
            if span is not None:
                previous = span[1]
            ends.append(previous if j <= last else float("inf"))
        return ends

    def heard_text(self, heard: float, total: float) -> str:
        """The original text up to the last word group whose end is within the first `heard` of the chunk's
        `total` samples: the engine's word ends where it gave them, else the estimate (the share of letters)."""
        if self.finished:  # the engine's spans, or the estimate over the chunk's speech
            ends = [span[1] for span in self.spans]
        elif self.source is not None:  # cut while the engine was still timing it: the words timed so far
            ends = self._timed_ends()
        else:
            ends = [share * total for share in self.word_ends]
        cut = 0
        for end, text_end in zip(ends, self.text_ends):
            if end > heard + 1e-6:
                break
            if text_end is not None:
                cut = text_end
        return self.original[:cut].strip()


def played_text(
    chunks: list[SpokenChunk | None],
    pushed: dict[int, int],
    complete: set[int],
    failed: set[int],
    played_samples: dict[int, float],
    slack: float = 1.0,
) -> str:
    """The turn's heard text: full chunks, then the heard words of the chunk that was cut off.

    `chunks[i]` is chunk i's map (None while it is not yet prepared), `pushed[i]` its samples,
    `played_samples[i]` how many of them the caller heard (`slack`: rounding of that count). A failed
    chunk, or one that made no audio, is skipped: the chunks after it still count.
    """
    parts = []
    for index, chunk in enumerate(chunks):
        total = pushed.get(index, 0)
        if index in failed or (not total and index in complete):
            continue  # nothing of it was heard; the turn went on without it
        heard = played_samples.get(index, 0.0)
        if chunk is None or total <= 0 or heard <= 0:
            break
        whole = index in complete and heard >= total - slack
        text = chunk.original.strip() if whole else chunk.heard_text(min(heard, total), total)
        if text:
            parts.append(text)
        if not whole:
            break
    return " ".join(parts)


# ---------------------------------------------------------------- playback confirmations
CONFIRM_AFTER_BARGE_IN_S = (
    0.5  # after a barge-in, turn.done waits this long for the far end's outstanding confirmations
)
CONFIRM_AFTER_END_S = 1.5  # a turn that played out waits this long for its last chunk's (the far end's buffer + RTT)
PROGRESS_MARK_MS = 500.0  # inside a long chunk, a confirmation point this often: barge-in truth finer than a chunk


@dataclass
class _Mark:
    turn_id: str
    chunk: int
    played_ms: float
    chunk_played_ms: dict
    chunk_end: bool  # False: a progress mark inside the chunk (no client `mark` event)
    heard: bool = False  # set by `confirm`


@dataclass
class _Heard:
    outstanding: set = field(default_factory=set)  # mark ids sent, awaiting the far end
    heard_ms: float = 0.0
    heard_chunks: dict = field(default_factory=dict)  # chunk_played_ms as of the last confirmed mark
    cleared: bool = False  # we told the far end to drop its buffer: later confirmations were not heard
    held: object = None  # what the session needs to finish turn.done, while it waits
    timer: object = None


class PlaybackConfirmations:
    """Per session: marks sent to a far end that confirms playback, and turns waiting for those confirmations.

    A leg whose far end confirms what it played (Twilio's mark echo, chan_websocket's
    MEDIA_MARK_PROCESSED) says so with `confirms_playback = True`. The session then gives every mark it
    hands the leg (`on_playout_event`, type `mark`) a `mark_id` — at each chunk's end and, inside long
    chunks, every PROGRESS_MARK_MS (`progress: True`) — and the leg reports the far end's answer with
    `Session.playback_confirmed(mark_id, heard)`. A mark counts as heard when its confirmation comes back
    before our clear (barge-in); marks, `played_ms` and `played_text` follow the confirmations.
    """

    def __init__(self, release):
        self._marks: dict[int, _Mark] = {}
        self._turns: dict[str, _Heard] = {}
        self._next_id = 0
        self._release = release  # release(turn_id, held, heard_ms, heard_chunks): finish and emit turn.done

    def sent(self, turn_id: str, chunk: int, played_ms: float, chunk_played_ms: dict, chunk_end: bool = True) -> int:
        """A mark goes to the far end after the frame now being sent; returns its id."""
        self._next_id += 1
        self._marks[self._next_id] = _Mark(turn_id, chunk, played_ms, chunk_played_ms, chunk_end)
        self._turns.setdefault(turn_id, _Heard()).outstanding.add(self._next_id)
        return self._next_id

    def confirm(self, mark_id: int, heard: bool) -> _Mark | None:
        """The far end's word on one mark (None: not ours, or its turn is done); `mark.heard` says if it counts."""
        mark = self._marks.pop(mark_id, None)
        state = self._turns.get(mark.turn_id) if mark is not None else None
        if state is None:
            return None
        state.outstanding.discard(mark_id)
        mark.heard = heard and not state.cleared
        if mark.heard and mark.played_ms >= state.heard_ms:
            state.heard_ms, state.heard_chunks = mark.played_ms, mark.chunk_played_ms
        return mark

    def hold(self, turn_id: str, held, interrupted: bool, loop) -> None:
        """The turn's playout ended; its turn.done waits for the outstanding confirmations (or a timeout)."""
        state = self._turns.setdefault(turn_id, _Heard())
        state.held = held
        if interrupted:
            state.cleared = True
        if not state.outstanding:
            self._finish(turn_id)
            return
        wait = CONFIRM_AFTER_BARGE_IN_S if interrupted else CONFIRM_AFTER_END_S
        state.timer = loop.call_later(wait, self._finish, turn_id)

    def ready(self, turn_id: str) -> None:
        """After a confirmation: release the turn's held turn.done when nothing is outstanding."""
        state = self._turns.get(turn_id)
        if state is not None and state.held is not None and not state.outstanding:
            self._finish(turn_id)

    def cleared(self) -> None:
        """We are telling the far end to drop its buffer: no confirmation after this counts as heard."""
        for state in self._turns.values():
            state.cleared = True

    @property
    def holding(self) -> bool:
        return any(state.held is not None for state in self._turns.values())

    def release_all(self) -> None:
        """The session ends: every waiting turn.done goes out with what was confirmed."""
        for turn_id in [t for t, state in self._turns.items() if state.held is not None]:
            self._finish(turn_id)
        self._turns.clear()
        self._marks.clear()

    def _finish(self, turn_id: str) -> None:
        state = self._turns.pop(turn_id, None)
        if state is None:
            return
        for mark_id in state.outstanding:
            self._marks.pop(mark_id, None)
        if state.timer is not None:
            state.timer.cancel()
        if state.held is not None:
            self._release(turn_id, state.held, state.heard_ms, state.heard_chunks)
