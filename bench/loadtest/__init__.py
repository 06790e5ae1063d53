"""`voxgate loadtest`: replay calls against a gateway at rising concurrency (issue 8)."""

from __future__ import annotations


def loadtest_main(args) -> int:
    from bench.loadtest.cli import run_from_args

    return run_from_args(args)
