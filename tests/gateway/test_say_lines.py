"""Lines from processes that share one stdout (the workers of `serve --workers`) arrive whole.

With PYTHONUNBUFFERED=1 (set on CI's machine) `print` writes a line's text and its newline in two writes,
so two workers' ready lines once ran together and the supervisor's reader waited for one that never came."""

from __future__ import annotations

import os
import subprocess
import sys

WRITER = """
import sys, time
from gateway.command_args import say
start = float(sys.argv[2])
while time.time() < start:
    pass
for i in range(4000):
    say(f"writer {sys.argv[1]} line {i} " + "x" * 60)
"""


def test_two_processes_saying_lines_at_once_never_interleave():
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    r, w = os.pipe()
    start = f"{__import__('time').time() + 1.0:.3f}"  # both begin spinning out lines at the same instant
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(k), start], stdout=w, env=env) for k in range(2)]
    os.close(w)
    with os.fdopen(r) as out:
        lines = out.read().splitlines()
    for p in procs:
        assert p.wait(30) == 0
    expected = {f"writer {k} line {i} " + "x" * 60 for k in range(2) for i in range(4000)}
    assert len(lines) == len(expected) and set(lines) == expected, [ln for ln in lines if ln not in expected][:3]
