"""The soak in small: 50 paced calls for 75 s with turns, barge-ins, hang-ups and reconnects (bench/soak.py).

After every caller has gone, the server's counts must be back at their
baseline: sessions and engine requests at 0, asyncio tasks, fds and threads
where they were before the first call. (Memory is reported by the long run,
not asserted: allocators keep freed memory.) About 100 s in all (75 s of calls, start-up and drain); marked
`soak` so it can be picked out (`-m soak`) or left out (`-m "not soak"`); CI runs it.
"""

from __future__ import annotations

import pytest

from bench.soak import run


@pytest.mark.soak
def test_fifty_calls_for_seventy_five_seconds_leave_nothing_behind(tmp_path):
    report = run(calls=50, minutes=1.25, out=str(tmp_path), every=10.0, seed=7, quiet=True)
    v = report["verdict"]
    c = report["clients"]
    shown = str({"checks": v["checks"], "baseline": v["baseline"], "end": v["end"], "clients": c})
    assert report["alive"], shown
    # the calls did what a soak needs: many turns, every kind of ending, reconnects
    assert (
        c["turns"] >= 200 and c["barge_ins"] > 0 and c["hangups"] > 0 and c["clean_ends"] > 0 and c["reconnects"] > 0
    ), shown
    assert v["peak"]["sessions"] >= 40, shown
    assert v["checks"] == dict.fromkeys(v["checks"], True), shown
