"""The vocoder lane's per-step choice for small batches (tts/qwen3/vocoder_lane.py `ModeChooser`): each way is
tried, the cheaper one runs, and the other is tried again now and then so a change of the machine is seen."""

from __future__ import annotations

from tts.qwen3.vocoder_lane import ModeChooser


def run(chooser: ModeChooser, cost: dict, n: int) -> list[bool]:
    picks = []
    for _ in range(n):
        mode = chooser.serial()
        picks.append(mode)
        chooser.note(mode, cost[mode])
    return picks


def test_the_cheaper_way_wins_and_the_other_is_explored_again():
    c = ModeChooser(explore_every=100, explore_for=5)
    picks = run(c, {True: 0.010, False: 0.030}, 300)
    assert picks[:5] == [True] * 5 and picks[5:10] == [False] * 5  # each tried first
    assert picks[10:95].count(True) == 85  # then the cheaper one
    assert 0 < picks[100:300].count(False) <= 2 * 5 + 5  # explored a little, not more


def test_when_the_machine_changes_the_choice_follows():
    c = ModeChooser(explore_every=50, explore_for=5)
    run(c, {True: 0.010, False: 0.030}, 100)  # quiet box: serial with every core's threads is faster
    picks = run(c, {True: 0.100, False: 0.030}, 200)  # neighbours took the cores: a thread team stalls
    assert picks[-40:].count(False) >= 35
