"""Turn mode against the official streaming text layout (`non_streaming_mode=False`): the text fed
word by word from an empty start, at rates faster and slower than the 12.5 tokens/s the model
reads, gives the official greedy codes on the whole text up to the official run's end.

Live comparison against qwen-tts 0.1.1 on tiny checkpoints it initialised itself (skips without it).
The virtual clock of `run_paced` makes a step cost one 80 ms frame; words arrive at a rate given in
the checkpoint's own text tokens per second (the tiny vocabulary spells a word in several tokens):
at 8 tokens/s the stream pauses for every word, at 40 the text runs ahead of it.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from audio.reference import load_reference
from tests.qwen3.clone_audio import speech_like, write_wav
from tts.qwen3.generate import GenerationSettings
from tts.qwen3.prompt import voice_head
from tts.qwen3.tokenizer import TextTokenizer
from tts.qwen3.turn import TurnGenerator, run_paced, words
from tts.qwen3.voice_clone import VoiceCloner
from tts.qwen3.weights import load_model

pytestmark = pytest.mark.parity

FRAMES = 36  # past the end of the text track (the tiny vocabulary spells these in 20 and 30 tokens): the pad tail too
TEXTS = {"en": "Hi there, my friend.", "ru": "Привет, друг мой."}
FRAMES_FOR = {"en": 26, "ru": 36}  # the English one's track ends by frame 21
LANG = {"en": "english", "ru": "russian"}
GREEDY = GenerationSettings(greedy=True, subtalker_greedy=True)


@functools.lru_cache(maxsize=4)
def _loaded(model_dir):
    return load_model(model_dir), TextTokenizer.from_dir(model_dir)


def _word_rate(tok, text, tokens_per_s):
    """Words per second that carry `tokens_per_s` of this tokenizer's tokens."""
    return tokens_per_s * len(words(text)) / len(tok.encode(text))


def _turn(model_dir, text, rate, frames=FRAMES, **voice):
    model, tok = _loaded(model_dir)
    head = voice_head(model.talker, model.config, tok, **voice)
    gen = TurnGenerator(model, tok, head, GREEDY, max_positions=512)
    run = run_paced(gen, words(text), _word_rate(tok, text, rate), step_s=0.08, max_frames=frames)
    return run, gen


def _assert_official_prefix(ours, theirs, gen):
    """Same codes up to the official run's end; where it stopped before its text was consumed
    (EOS held here), ours goes on."""
    assert theirs.shape[0] >= 1
    assert ours.shape[0] >= theirs.shape[0]
    n = theirs.shape[0]
    assert torch.equal(ours[:n], theirs), f"first differing frame {int((ours[:n] != theirs).any(1).nonzero()[0])}"


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_custom_voice_turn_equals_official_streaming(official, official_dirs, lang):
    d = official_dirs("1b7", "custom_voice")
    theirs, _ = official.official_generate(
        official.official_model(d),
        official.hf_tokenizer(d),
        TEXTS[lang],
        speaker="ryan",
        language=LANG[lang],
        max_frames=FRAMES_FOR[lang],
        streaming_text=True,
    )
    for rate in (8.0, 40.0):
        run, gen = _turn(d, TEXTS[lang], rate, FRAMES_FOR[lang], speaker="ryan", language=LANG[lang])
        _assert_official_prefix(run.codes, theirs, gen)
        if rate < 12.5:
            assert run.pauses >= len(words(TEXTS[lang])) - 2  # it really waited for text, word after word
        else:
            assert run.pauses <= 1


def test_voice_design_turn_equals_official_streaming(official, official_dirs):
    d = official_dirs("1b7", "voice_design")
    instruct = "A calm, low voice speaking slowly."
    theirs, _ = official.official_generate(
        official.official_model(d),
        official.hf_tokenizer(d),
        TEXTS["en"],
        speaker=None,
        language="english",
        instruct=instruct,
        max_frames=FRAMES_FOR["en"],
        streaming_text=True,
    )
    run, gen = _turn(d, TEXTS["en"], 40.0, FRAMES_FOR["en"], language="english", instruct=instruct)
    _assert_official_prefix(run.codes, theirs, gen)


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    d = tmp_path_factory.mktemp("turn_refs")
    return {
        "long": write_wav(d / "long.wav", speech_like(6.0, 24000, seed=1), 24000),
        "short": write_wav(d / "short.wav", speech_like(1.0, 24000, seed=2), 24000),
    }


def _clone_turn(d, ref_path, ref_text, text, lang, x_vector_only, rate, frames=FRAMES):
    model, tok = _loaded(d)
    clone = VoiceCloner(model, tok, d).prompt(load_reference(ref_path), ref_text, x_vector_only)
    return _turn(d, text, rate, frames, language=lang, clone=clone)


@pytest.mark.parametrize("lang,rate", [("en", 40.0), ("ru", 8.0)])
def test_xvector_clone_turn_equals_official_streaming(official, official_dirs, refs, lang, rate):
    d = official_dirs("1b7", "base")
    theirs, _, _ = official.official_clone_codes(
        d, refs["long"], None, TEXTS[lang], language=LANG[lang], x_vector_only=True, max_frames=FRAMES_FOR[lang]
    )
    run, gen = _clone_turn(d, refs["long"], None, TEXTS[lang], LANG[lang], True, rate, FRAMES_FOR[lang])
    _assert_official_prefix(run.codes, theirs, gen)


@pytest.mark.parametrize("ref", ["long", "short"])
def test_in_context_clone_turn_equals_official_streaming(official, official_dirs, refs, ref):
    """In-context clones: the prefill holds T[:reference frames + 1], so the turn starts once that
    much text has arrived, or at finish when all of it fits (the `long` reference, 29 frames, a short
    text), and streams the rest (the `short` one: 13 frames, a longer text track)."""
    d = official_dirs("1b7", "base")
    ref_text, text = ("Hello.", "Hi there.") if ref == "long" else ("Hello, this is my voice.", TEXTS["en"])
    theirs, _, fed = official.official_clone_codes(
        d, refs[ref], ref_text, text, language="english", x_vector_only=False, max_frames=FRAMES
    )
    streamed = fed["trailing"].shape[0] > 1
    assert streamed == (ref == "short")
    for rate in (8.0,):
        run, gen = _clone_turn(d, refs[ref], ref_text, text, "english", False, rate)
        _assert_official_prefix(run.codes, theirs, gen)
        last_word_at = (len(words(text)) - 1) / _word_rate(_loaded(d)[1], text, rate)
        # streamed: the first frame came before the last word arrived; else it waited for the whole text
        assert (run.first_frame_s < last_word_at) == streamed


def test_turn_codes_do_not_depend_on_the_arrival_schedule(official_dirs):
    """All at once, one word at a time, irregular pieces: one set of codes (the codes of a turn
    whose official run ends by EOS before its text is used up go on here: the EOS hold)."""
    d = official_dirs("1b7", "custom_voice")
    text = TEXTS["en"]
    runs = []
    for pieces, rate in [([text], None), (list(text), 100.0), ([text[:3], text[3:9], text[9:15], text[15:]], 2.0)]:
        model, tok = _loaded(d)
        gen = TurnGenerator(
            model,
            tok,
            voice_head(model.talker, model.config, tok, speaker="vivian", language="auto"),
            GREEDY,
            max_positions=512,
        )
        runs.append(run_paced(gen, pieces, rate, step_s=0.08, max_frames=FRAMES).codes)
    for r in runs[1:]:
        assert torch.equal(r, runs[0])


def test_synth_turn_mode_cli_writes_the_official_codes(official, official_dirs, tmp_path):
    from gateway.cli import main

    d = official_dirs("1b7", "custom_voice")
    out, codes_out = str(tmp_path / "t.wav"), str(tmp_path / "t.npy")
    assert (
        main(
            [
                "synth",
                "--model-dir",
                d,
                "--text",
                TEXTS["ru"],
                "--speaker",
                "ryan",
                "--language",
                "ru",
                "--greedy",
                "--turn-mode",
                "--text-rate",
                "8",
                "--max-frames",
                str(FRAMES),
                "--out",
                out,
                "--codes-out",
                codes_out,
            ]
        )
        == 0
    )
    theirs, _ = official.official_generate(
        official.official_model(d),
        official.hf_tokenizer(d),
        TEXTS["ru"],
        speaker="ryan",
        language="russian",
        max_frames=FRAMES,
        streaming_text=True,
    )
    codes = np.load(codes_out)
    assert np.array_equal(codes[: len(theirs)], theirs.numpy())
