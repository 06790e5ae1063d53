"""Chunker: sentence cuts without lookahead it does not have, fast first chunk, max length, and
properties over arbitrary splits of a stream into pieces (hypothesis)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.chunker import Chunker


def run(pieces: list[str], **kw) -> list[str]:
    c = Chunker(**kw)
    out: list[str] = []
    for p in pieces:
        out += c.push(p)
    return out + c.flush()


def squash(s: str) -> str:
    return re.sub(r"\s+", "", s)


# ------------------------------------------------------------------ sentences
def test_sentence_ends_cut_once_the_next_sentence_starts():
    c = Chunker(first_chunk_words=0)
    assert c.push("Hello there.") == []
    assert c.push(" ") == []  # "." + space could still be "Mr. " or "т. е."
    assert c.push("How") == ["Hello there."]
    assert c.flush() == ["How"]


def test_piece_ending_in_abbreviation_or_number_is_held_back():
    c = Chunker(first_chunk_words=0)
    assert c.push("Это стоит 3") == []
    assert c.push(".") == []
    assert c.push("5 руб. за минуту, т.") == []
    assert c.push("е. дёшево. Да") == ["Это стоит 3.5 руб. за минуту, т.е. дёшево."]
    assert c.flush() == ["Да"]


def test_russian_abbreviations_do_not_end_sentences():
    text = "Мы на ул. Ленина, д. 5, т. е. в центре, в 2020 г. Москва и т. п. вещи. Конец"
    assert run([text], first_chunk_words=0) == [
        "Мы на ул. Ленина, д. 5, т. е. в центре, в 2020 г.",
        "Москва и т. п. вещи.",
        "Конец",
    ]


def test_city_abbreviation_binds_to_the_name():
    assert run(["Офис в г. Москва. Ждём"], first_chunk_words=0) == ["Офис в г. Москва.", "Ждём"]


def test_english_abbreviations_and_initials():
    text = "Mr. Smith met Dr. J. K. Rowling, e.g. at noon in the U.S. Then he left."
    assert run([text], first_chunk_words=0) == [
        "Mr. Smith met Dr. J. K. Rowling, e.g. at noon in the U.S.",
        "Then he left.",
    ]


def test_etc_ends_a_sentence_only_before_a_capital():
    assert run(["Apples, pears etc. are fruit. Etc. Next"], first_chunk_words=0) == [
        "Apples, pears etc. are fruit.",
        "Etc.",
        "Next",
    ]


def test_ellipsis_inside_a_sentence_stays():
    assert run(["Ну... я не знаю… Может быть. Да"], first_chunk_words=0) == [
        "Ну... я не знаю…",
        "Может быть.",
        "Да",
    ]


def test_quotes_and_brackets_stay_with_their_sentence():
    text = 'Он сказал: «Привет!» Потом (шёпотом.) ушёл. "Really?" she asked. Ok'
    assert run([text], first_chunk_words=0) == [
        "Он сказал: «Привет!»",
        "Потом (шёпотом.) ушёл.",
        '"Really?" she asked.',
        "Ok",
    ]


def test_decimals_and_times_are_not_clause_breaks():
    assert run(["Курс 3,5 в 10:30, затем 7.25 к 11:00 и всё"], first_chunk_words=6) == [
        "Курс 3,5 в 10:30,",
        "затем 7.25 к 11:00 и всё",
    ]


def test_line_breaks_end_chunks():
    assert run(["Список:\n1. Хлеб\n2. Молоко\n"], first_chunk_words=0) == ["Список:", "1. Хлеб", "2. Молоко"]


# ------------------------------------------------------------------ fast first chunk
def test_first_chunk_goes_out_at_the_first_comma():
    c = Chunker(first_chunk_words=6)
    assert c.push("Здравствуйте") == []
    assert c.push(", меня") == ["Здравствуйте,"]
    assert c.push(" зовут Анна, я ваш помощник. Чем") == ["меня зовут Анна, я ваш помощник."]


def test_first_chunk_goes_out_after_n_words_without_a_comma():
    out = run(["Сегодня в Москве ожидается солнечная погода без осадков весь день. Завтра"], first_chunk_words=4)
    assert out[0] == "Сегодня в Москве ожидается"


def test_first_chunk_does_not_end_on_a_number_or_preposition():
    out = run(["I will call you at 10 30 tomorrow about the order. Bye"], first_chunk_words=5)
    assert out[0] == "I will call you at 10 30 tomorrow"


def test_first_chunk_words_zero_disables_the_fast_chunk():
    assert run(["Yes, of course, I can help. Sure"], first_chunk_words=0) == ["Yes, of course, I can help.", "Sure"]


def test_only_the_first_chunk_is_fast():
    assert run(["Hi, there. Well, then, fine. Ok"], first_chunk_words=6, min_first_chars=0) == [
        "Hi,",
        "there.",
        "Well, then, fine.",
        "Ok",
    ]


def test_a_fast_first_chunk_is_not_too_short_to_cover_the_next():
    assert run(["Hi, my dear friend, how are you? Fine"], first_chunk_words=6) == [
        "Hi, my dear friend,",
        "how are you?",
        "Fine",
    ]
    assert run(["Здравствуйте, меня зовут Анна."])[0] == "Здравствуйте,"


def test_range_dash_is_not_a_clause_break():
    assert run(["С 10 - 20 мая — отпуск. Да"], first_chunk_words=8)[0] == "С 10 - 20 мая —"


# ------------------------------------------------------------------ max length
def test_long_sentence_splits_at_its_last_clause_break():
    text = "Первая часть длинного предложения, вторая часть тоже длинная, третья часть, и конец. Ок"
    out = run([text], first_chunk_words=0, max_chunk_chars=70)
    assert out == [
        "Первая часть длинного предложения, вторая часть тоже длинная,",
        "третья часть, и конец.",
        "Ok"[:0] + "Ок",
    ]
    assert all(len(c) <= 70 for c in out)


def test_long_sentence_without_clauses_splits_at_a_word():
    out = run(["word " * 30], first_chunk_words=0, max_chunk_chars=40)
    assert all(len(c) <= 40 for c in out)
    assert squash("".join(out)) == "word" * 30


def test_overlong_token_is_cut_hard():
    out = run(["x" * 50 + " tail"], first_chunk_words=0, max_chunk_chars=20)
    assert out == ["x" * 20, "x" * 20, "x" * 10 + " tail"]


def test_min_chunk_chars_merges_short_sentences():
    assert run(["Да. Нет. Конечно, да. Ну"], first_chunk_words=0, min_chunk_chars=10) == ["Да. Нет. Конечно, да.", "Ну"]


def test_flush_ends_the_turn_and_resets():
    c = Chunker(first_chunk_words=3)
    c.push("Hello there. Bye")
    assert c.flush() == ["Bye"]
    assert c.pending == ""
    assert c.push("Once again, fast") == ["Once again,"]  # a new turn gets a fast first chunk again


def test_bad_options_are_rejected():
    import pytest

    with pytest.raises(ValueError):
        Chunker(max_chunk_chars=0)


# ------------------------------------------------------------------ properties
# Elements whose inside must never be cut (the text around them is built from elements).
PROTECTED = [
    "т.е.",
    "т. е.",
    "и т. д.",
    "и т.п.",
    "в 2020 г.",
    "в г. Москва",
    "ул. Ленина",
    "100 руб.",
    "Mr. Smith",
    "Dr. Who",
    "e.g.",
    "the U.S.",
    "3.5",
    "3,5",
    "10:30",
    "...",
    "…",
    "А. С. Пушкин",
    "(см. выше)",
    "«Да!»",
    '"Hi."',
    "(да.)",
]
WORDS = ["слово", "дом", "Привет", "word", "Hello", "звонок", "ready", "Анна", "fine"]
PUNCT = ["", "", "", ",", ".", "!", "?", ";", ":", " —", "...", "."]

element = st.one_of(
    st.sampled_from(PROTECTED), st.sampled_from(WORDS).flatmap(lambda w: st.sampled_from(PUNCT).map(lambda p: w + p))
)
spaces = st.sampled_from([" ", " ", " ", "  ", "\n", " \n "])


@st.composite
def stream(draw):
    elems = draw(st.lists(element, min_size=1, max_size=40))
    text = ""
    spans = []
    for e in elems:
        start = len(text)
        text += e
        spans.append((start, len(text), e))
        text += draw(spaces)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
    return text, spans, pieces


def boundaries(text: str, chunks: list[str]) -> list[tuple[int, int]]:
    """Input positions (end of one chunk, start of the next) for each cut."""
    pos, ends = 0, []
    for c in chunks:
        i = text.index(c, pos)
        assert text[pos:i].strip() == ""
        ends.append((i, i + len(c)))
        pos = i + len(c)
    return [(ends[k][1], ends[k + 1][0]) for k in range(len(ends) - 1)]


options = st.fixed_dictionaries(
    {
        "first_chunk_words": st.integers(0, 8),
        "min_first_chars": st.integers(0, 30),
        "max_chunk_chars": st.integers(30, 300),
        "min_chunk_chars": st.integers(1, 20),
    }
)


@settings(max_examples=300, deadline=None)
@given(stream(), options)
def test_chunks_give_back_the_input_and_never_cut_inside_protected_tokens(s, kw):
    text, spans, pieces = s
    chunks = run(pieces, **kw)
    assert all(c and c == c.strip() for c in chunks)
    assert squash("".join(chunks)) == squash(text)
    for end, _start in boundaries(text, chunks):
        for a, b, e in spans:
            assert not (a < end < b), f"cut inside {e!r}: {chunks}"
    assert all(len(c) <= kw["max_chunk_chars"] for c in chunks)


@settings(max_examples=200, deadline=None)
@given(stream(), options)
def test_chunking_does_not_depend_on_how_the_stream_was_split(s, kw):
    text, _spans, pieces = s
    assert run(pieces, **kw) == run([text], **kw)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.lists(st.integers(0, 300), max_size=10), options)
def test_any_text_round_trips(text, cuts, kw):
    cuts = sorted(min(c, len(text)) for c in cuts)
    pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
    chunks = run(pieces, **kw)
    assert squash("".join(chunks)) == squash(text)
    assert all(c.strip() and len(c) <= kw["max_chunk_chars"] for c in chunks)


def test_a_one_word_opening_sentence_goes_out_with_what_follows():
    c = Chunker(first_chunk_words=6, min_first_chars=10)
    chunks = []
    for token in "Yes. I can check that order for you, it shipped today. Anything else?".split(" "):
        chunks += c.push(token + " ")
    chunks += c.flush()
    assert chunks[0].startswith("Yes. I can") and len(chunks[0]) >= 10
    assert " ".join(chunks) == "Yes. I can check that order for you, it shipped today. Anything else?"


def test_a_one_word_reply_still_plays_at_the_end_of_the_turn():
    c = Chunker(min_first_chars=10)
    assert c.push("Yes.") == [] and c.flush() == ["Yes."]
