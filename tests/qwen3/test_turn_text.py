"""Turn mode's incremental tokeniser: appending never changes the ids already released, and the ids
equal the whole text's (what the official prompt takes), however the text was cut into pieces."""

from __future__ import annotations

import random

import pytest

from tts.qwen3.prompt import text_tokens
from tts.qwen3.tokenizer import TextTokenizer
from tts.qwen3.turn_text import TurnText

TEXTS = [
    "Hello world, this is a parity test.",
    "Привет, мир! Как дела? Это   тест...",
    "It's 3 000 rubles, Dr. Smith's e.g. U.S. cost!!\n\nNew line?  ok",
    "a  b\t c",
    "Tabs\tand 12.5% (yes).",
]


@pytest.fixture(scope="module")
def tok(tiny_dir):
    return TextTokenizer.from_dir(tiny_dir)


def _feed(tok, pieces, normalize=None):
    tt = TurnText(tok, normalize)
    out = []
    for p in pieces:
        before = list(tt.tokens)
        out += [t.id for t in tt.append(p)]
        assert tt.tokens[: len(before)] == before  # nothing released changes
    out += [t.id for t in tt.finish()]
    return out, tt


@pytest.mark.parametrize("text", TEXTS)
def test_any_split_gives_the_whole_texts_ids(tok, text):
    rng = random.Random(7)
    whole = text_tokens(tok, text)[3:-5]
    for _ in range(60):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, min(10, len(text) - 1))))
        pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
        assert _feed(tok, pieces)[0] == whole, pieces
    assert _feed(tok, list(text))[0] == whole  # one character at a time


def test_the_unfinished_word_and_numbers_are_held(tok):
    tt = TurnText(tok)
    assert tt.append("Hello") == []  # the word may go on
    assert tt.append(" wor") != []  # "Hello" is whole now...
    assert tok.decode([t.id for t in tt.tokens]) == "Hello"  # ...but " wor" is not
    tt.append("ld costs 3")
    assert tok.decode([t.id for t in tt.tokens]) == "Hello world costs"  # "3" waits for its next word
    tt.append(" 000")
    assert tok.decode([t.id for t in tt.tokens]) == "Hello world costs"  # "3 000" may be one number
    tt.append(" rub")
    assert tok.decode([t.id for t in tt.tokens]) == "Hello world costs"  # its next word is not whole
    tt.append("les ")
    assert tok.decode([t.id for t in tt.tokens]) == "Hello world costs 3 000 rubles"  # the last " " waits
    tt.finish()
    assert tok.decode([t.id for t in tt.tokens]) == "Hello world costs 3 000 rubles"


def test_a_long_run_of_numbers_is_released_without_a_word_after_it(tok):
    tt = TurnText(tok)
    tt.append("call 1 2 3 4 5 6 7 8 ")
    assert tok.decode([t.id for t in tt.tokens]).startswith("call 1 2 3 4 5 6")


def test_the_normaliser_sees_numbers_with_their_next_word(tok):
    seen = []

    def normalize(s):
        seen.append(s)
        return s.replace("5 km", "five kilometres").replace("Dr.", "Doctor")

    ids, tt = _feed(tok, ["It is 5", " km", " away,", " Dr.", " Who", " said."], normalize)
    assert tok.decode(ids) == "It is five kilometres away, Doctor Who said."
    assert any("5 km" in s for s in seen) and any("Dr. Who" in s for s in seen)
    # played text maps back to the raw text, never past what the consumed ids spoke
    n_five = len(tok.encode("It is five kilometres"))
    assert tt.spoken_text(n_five) in ("It is", "It is 5 km")
    assert tt.spoken_text(len(ids)) == "It is 5 km away, Dr. Who said."
    assert tt.spoken_text(len(tok.encode("It"))) == "It"
