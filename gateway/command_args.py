"""What the server commands (`voxgate serve`, `voxgate serve --workers`, `voxgate engine`) make of the flags they
share: the log level, the engine flags that override the config file's engine section, and how they print."""

from __future__ import annotations

import logging
import sys


def say(line: str) -> None:
    """One line to stdout in one write (flushed), so that the lines of processes sharing one stdout (the
    workers of `serve --workers`, an isolated engine) never interleave: `print` writes the text and its
    newline separately when stdout is unbuffered (PYTHONUNBUFFERED), and two workers' lines ran together."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, str(level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def engine_overrides(args) -> dict:
    """The engine section from --model-dir, --vocoder, --engine-endpoint, --speech-endpoint and --model tiny (gateway/cli.py has made the tiny
    checkpoint and set args.model_dir by then)."""
    engine: dict = {}
    if args.model_dir:
        engine["model_dir"] = args.model_dir
    if getattr(args, "vocoder", None):
        engine["vocoder"] = args.vocoder
    if getattr(args, "model", None) == "tiny":
        engine.update({"kind": "qwen3", "device": "cpu", "dtype": "float32"})
    if getattr(args, "engine_endpoint", None):  # serve --engine-endpoint: the engine runs elsewhere
        engine.update({"kind": "remote", "endpoints": list(args.engine_endpoint)})
    if getattr(args, "speech_endpoint", None):  # serve --speech-endpoint: an OpenAI-compatible speech server speaks
        if getattr(args, "engine_endpoint", None):
            raise ValueError("--speech-endpoint and --engine-endpoint name two different engines: give one")
        engine.update({"kind": "openai-speech", "endpoints": list(args.speech_endpoint)})
    return engine
