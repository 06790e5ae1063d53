"""The LLM simulator: pieces that rebuild the text, at the configured pace."""

import time

import pytest

from gateway.agent.llm_sim import LlmSimulator, split_pieces


@pytest.mark.parametrize(
    "text", ["Hello there, how are you?", "Карта 3805 заблокирована — всё в порядке.", "  a  b ", "x" * 30]
)
def test_pieces_concatenate_back_to_the_text(text):
    assert "".join(split_pieces(text)) == text


def test_long_words_are_cut_into_token_sized_pieces():
    assert max(len(p) for p in split_pieces("Supercalifragilistic", max_piece_chars=8)) == 8


def test_schedule_is_ttft_then_one_piece_per_token_interval():
    sim = LlmSimulator(ttft_ms=300, tokens_per_s=40)
    sched = sim.schedule("one two three")
    assert [p for _, p in sched] == ["one", " two", " three"]
    assert [round(t, 6) for t, _ in sched] == [0.3, 0.325, 0.35]


def test_jitter_is_reproducible_with_a_seed():
    a = LlmSimulator(seed=7, jitter=0.2).schedule("a b c d e")
    b = LlmSimulator(seed=7, jitter=0.2).schedule("a b c d e")
    c = LlmSimulator(seed=8, jitter=0.2).schedule("a b c d e")
    assert a == b and a != c
    assert all(0.24 <= t for t, _ in a)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        LlmSimulator(tokens_per_s=0)
    with pytest.raises(ValueError):
        LlmSimulator(jitter=1.5)


async def test_stream_yields_at_the_simulated_pace():
    sim = LlmSimulator(ttft_ms=50, tokens_per_s=100)
    t0 = time.monotonic()
    got = []
    async for piece in sim.stream("a b c"):
        got.append((time.monotonic() - t0, piece))
    assert "".join(p for _, p in got) == "a b c"
    # behaviour in time, generous tolerance: never early
    assert got[0][0] >= 0.049 and got[-1][0] >= 0.069
