"""What the server commands (`voxgate serve`, `voxgate serve --workers`, `voxgate engine`) make of the flags they
share: the log level, and the engine flags that override the config file's engine section."""

from __future__ import annotations

import logging


def setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, str(level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def engine_overrides(args) -> dict:
    """The engine section from --model-dir, --vocoder and --model tiny (gateway/cli.py has made the tiny
    checkpoint and set args.model_dir by then)."""
    engine: dict = {}
    if args.model_dir:
        engine["model_dir"] = args.model_dir
    if getattr(args, "vocoder", None):
        engine["vocoder"] = args.vocoder
    if getattr(args, "model", None) == "tiny":
        engine.update({"kind": "qwen3", "device": "cpu", "dtype": "float32"})
    return engine
