"""Fuzzing the running gateway: every entry gets mutated and random input.

`server.py` runs `voxgate serve` as a subprocess (the process under attack;
its log is scanned for tracebacks), `healthy.py` keeps one ordinary call
playing beside the fuzzer and measures its pacing and gaps, `cases.py` holds
the hypothesis strategies and one runner per entry that sends a case and
classifies what came back. `tests/fuzz/` runs a few hundred cases in CI;
`python -m bench.fuzz` runs many more and reports counts of cases and outcomes.
"""
