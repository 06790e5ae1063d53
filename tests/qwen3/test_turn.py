"""Turn mode's rules on the tiny checkpoint (no official code needed): pause instead of pad, the
end-of-speech hold, the frame cap, and the cut of a long turn into fresh prompts at punctuation."""

from __future__ import annotations

import functools

import torch

from tts.qwen3.generate import GenerationSettings
from tts.qwen3.prompt import voice_head
from tts.qwen3.tokenizer import TextTokenizer
from tts.qwen3.turn import TurnGenerator, TurnTrack, run_paced, words
from tts.qwen3.weights import load_model

GREEDY = GenerationSettings(greedy=True, subtalker_greedy=True)


@functools.lru_cache(maxsize=1)
def _loaded(d):
    return load_model(d), TextTokenizer.from_dir(d)


def _gen(d, **kw):
    model, tok = _loaded(d)
    return TurnGenerator(
        model, tok, voice_head(model.talker, model.config, tok, speaker="ryan", language="english"), GREEDY, **kw
    )


def test_track_pauses_instead_of_feeding_pad_and_holds_eos():
    t = TurnTrack([], 1, pad_id=-1, eos_id=-2)
    assert not t.can_prefill()
    t.push([10])
    assert t.can_prefill() and t.prefill_ids() == [10]
    assert t.next_id() is None  # text still coming: paused, never pad
    t.push([11, 12])
    assert t.next_id() == 11
    t.advance()
    t.advance()
    assert t.next_id() is None and not t.eos_allowed()
    t.finish()
    assert t.next_id() == -2 and not t.eos_allowed()  # tts_eos is next, not fed yet
    t.advance()
    assert t.eos_allowed() and t.next_id() == -1  # then pads, end-of-speech allowed
    assert t.consumed() == 3 and t.frame_cap() == t.base_frames + 3 * t.frames_per_token


def test_a_paused_stream_takes_no_step_and_keeps_its_place(tiny_dir):
    gen = _gen(tiny_dir, max_positions=256, base_frames=4, frames_per_token=2)
    assert gen.step() is None and gen.paused  # no text yet: no prefill
    gen.append("Hello")
    assert gen.step() is None and gen.paused  # "Hello" may still grow
    gen.append(" world")
    n = 0
    while gen.step() is not None:
        n += 1
    assert gen.paused and n == len(gen.track.body)  # one frame per text token, then it waits
    assert gen.played_text(n) == "Hello"  # " world" is held: the last word
    gen.finish()
    while gen.step() is not None:
        pass
    assert gen.done and not gen.paused
    assert len(gen.frames) <= gen.track.frame_cap()
    assert gen.played_text(len(gen.frames)) == "Hello world"
    assert gen.played_text(1) in ("", "Hello")


def test_a_long_turn_is_cut_at_punctuation_and_continues_with_a_fresh_prompt(tiny_dir):
    text = "One two. Three four five, six seven. Eight!"
    gen = _gen(tiny_dir, max_positions=80, base_frames=2, frames_per_token=1)
    run = run_paced(gen, words(text), 20.0, step_s=0.08)
    assert gen.done and gen.stats.segments >= 2
    model, tok = _loaded(tiny_dir)
    first = tok.decode(gen._segment_bodies[0])
    assert first.rstrip().endswith((".", ",", "!"))  # cut after punctuation
    assert len(gen._segment_bodies[0]) <= gen.segment_tokens
    assert " ".join(tok.decode(b) for b in gen._segment_bodies) == text
    # the second segment is a fresh prompt: the same codes as a new turn of its text
    n0 = gen.stats.segment_frames[0]
    rest = tok.decode(gen._segment_bodies[1])
    assert not rest[0].isspace()
    assert gen.played_text(n0) == tok.decode(gen._segment_bodies[0])
    fresh = _gen(tiny_dir, max_positions=80, base_frames=2, frames_per_token=1)
    fresh.append(rest)
    fresh.finish()
    while fresh.step() is not None:
        pass
    n1 = gen.stats.segment_frames[1]
    assert torch.equal(run.codes[n0 : n0 + n1][: len(fresh.frames)], fresh.codes()[:n1])


def test_a_segment_and_a_whole_text_share_one_frame_cap_rule():
    """The single-stream generator's segment cap is the engine's cap for the same text (one rule, one place)."""
    from tts.qwen3.jobs import EngineSettings

    s = EngineSettings()
    for n in (1, 7, 40):
        t = TurnTrack([], 1, pad_id=-1, eos_id=-2)
        t.push(list(range(n)))
        assert t.frame_cap() == int(s.frames_base + s.frames_per_token * n)
