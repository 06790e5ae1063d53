"""eSpeak NG's own word boundaries, computed apart from tts/espeak_engine.py (the oracle of test_word_timings).

`record(monkeypatch)` keeps, for every text the engine's library speaks, the raw int16 audio and the raw
`espeak_EVENT`s eSpeak NG handed the synth callback (eSpeak's output depends on what it spoke before, so the
oracle reads the very synthesis the engine made). `boundaries` turns one such record into each word's
[char_start, char_end, start, end] in 24 kHz samples after the engine's leading-silence cut: a word starts at
its word event and ends at the first later word event, clause end or pause phoneme ("_...").
"""

from __future__ import annotations

import numpy as np

from tts import espeak_engine

WORD, END, MSG_TERMINATED, PHONEME = 1, 5, 6, 7


def record(monkeypatch) -> list[dict]:
    spoken: list[dict] = []
    real_on_audio, real_speak = espeak_engine._Library._on_audio, espeak_engine._Library.speak

    def on_audio(self, wav, n, events):
        i = 0
        while events[i].type != 0:
            e = events[i]
            self.raw_events.append((e.type, e.text_position, e.length, e.sample, bytes(e.id)))
            i += 1
        return real_on_audio(self, wav, n, events)

    def speak(self, text, voice, rate_wpm, abort):
        self.raw_events = []
        pcm = real_speak(self, text, voice, rate_wpm, abort)
        spoken.append({"text": text, "pcm16": pcm, "events": self.raw_events, "rate": self.sample_rate})
        return pcm

    monkeypatch.setattr(espeak_engine._Library, "_on_audio", on_audio)
    monkeypatch.setattr(espeak_engine._Library, "speak", speak)
    return spoken


def boundaries(spoken: dict) -> list[list[int]]:
    pcm, events, rate = spoken["pcm16"], spoken["events"], spoken["rate"]
    loud = np.flatnonzero(np.abs(pcm) > 64)
    cut = max(0, int(loud[0]) - rate * 5 // 1000)  # the engine keeps 5 ms before the first loud sample

    def out(sample: int) -> int:
        return max(0, sample - cut) * 24000 // rate

    words = []
    for i, (kind, position, length, sample, _) in enumerate(events):
        if kind != WORD or length <= 0:
            continue
        end = len(pcm)
        for later, _, _, at, name in events[i + 1 :]:
            if (later in (WORD, END, MSG_TERMINATED) or (later == PHONEME and name.startswith(b"_"))) and at > sample:
                end = at
                break
        words.append([position - 1, position - 1 + length, out(sample), out(end)])
    return words
