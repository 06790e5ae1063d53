"""Scenario files: the public set is valid, bad files fail with clear messages."""

import hashlib

import pytest

from bench.loadtest.scenarios import DEFAULT_SCENARIOS, ScenarioError, load_scenarios, parse_scenarios


def test_public_set_has_40_calls_in_russian_and_english_with_3_to_8_turns():
    s = load_scenarios()
    assert len(s.calls) >= 40
    assert {c.language for c in s.calls} == {"ru", "en"}
    assert sum(c.language == "ru" for c in s.calls) >= 15
    assert all(3 <= len(c.turns) <= 8 for c in s.calls)
    assert s.sha256 == hashlib.sha256(DEFAULT_SCENARIOS.read_bytes()).hexdigest()


def test_picker_is_seeded_and_deals_every_call_once_per_pass():
    s = load_scenarios()
    pa, pb = s.picker(3), s.picker(3)
    a = [pa.next().id for _ in range(len(s.calls))]
    b = [pb.next().id for _ in range(len(s.calls))]
    assert a == b and sorted(a) == sorted(c.id for c in s.calls)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("calls: []", "non-empty 'calls'"),
        ("calls: [{id: a, turns: [{reply: hi}]}, {id: a, turns: [{reply: hi}]}]", "duplicate id"),
        ("calls: [{id: a, turns: [{pause_ms: -1, reply: hi}]}]", "pause_ms"),
        ("calls: [{id: a, turns: [{reply: ''}]}]", "non-empty 'reply'"),
        ("calls: [{id: a, turns: [{reply: hi, mood: x}]}]", "unknown keys"),
        ("calls: [{id: a, turns: [{reply: hi}", "not valid YAML"),
    ],
)
def test_bad_scenarios_are_refused_with_the_place_named(text, fragment):
    with pytest.raises(ScenarioError, match=fragment):
        parse_scenarios(text, "x.yaml")
