"""Scenario files: the calls a load test replays (format: bench/scenarios/README.md)."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

import yaml

DEFAULT_SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios" / "callcentre.yaml"


class ScenarioError(ValueError):
    """A scenario file that cannot be replayed; the message names the file and the call."""


@dataclass(frozen=True)
class Turn:
    pause_ms: float  # caller's turn: from the agent's last audio heard (or call start) to the caller's end of turn
    reply: str  # the agent's reply text, streamed by the LLM simulator
    caller: str = ""  # what the caller said (for the record)
    language: str | None = None  # per-turn override of the call's language


@dataclass(frozen=True)
class Call:
    id: str
    language: str
    voice: str | None
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class ScenarioSet:
    path: str
    sha256: str
    calls: tuple[Call, ...]

    def picker(self, seed: int) -> "CallPicker":
        return CallPicker(self.calls, seed)


class CallPicker:
    """Deals calls in a seeded shuffled order, reshuffling after each pass through the set."""

    def __init__(self, calls: tuple[Call, ...], seed: int):
        self._calls = list(calls)
        self._rng = random.Random(seed)
        self._order: list[Call] = []

    def next(self) -> Call:
        if not self._order:
            self._order = self._calls[:]
            self._rng.shuffle(self._order)
        return self._order.pop()


def _fail(path: str, where: str, msg: str) -> ScenarioError:
    return ScenarioError(f"{path}: {where}: {msg}")


def parse_scenarios(text: str, path: str = "<string>") -> ScenarioSet:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("calls"), list) or not doc["calls"]:
        raise _fail(path, "top level", "needs a non-empty 'calls' list")
    if doc.get("version", 1) != 1:
        raise _fail(path, "version", "only version 1 is known")
    calls: list[Call] = []
    seen: set[str] = set()
    for i, c in enumerate(doc["calls"]):
        where = f"calls[{i}]"
        if not isinstance(c, dict):
            raise _fail(path, where, "must be a mapping")
        unknown = set(c) - {"id", "language", "voice", "turns"}
        if unknown:
            raise _fail(path, where, f"unknown keys {sorted(unknown)}")
        cid = c.get("id")
        if not isinstance(cid, str) or not cid:
            raise _fail(path, where, "needs a string 'id'")
        where = f"call {cid!r}"
        if cid in seen:
            raise _fail(path, where, "duplicate id")
        seen.add(cid)
        language = c.get("language", "auto")
        voice = c.get("voice")
        if not isinstance(language, str) or (voice is not None and not isinstance(voice, str)):
            raise _fail(path, where, "'language' and 'voice' must be strings")
        raw_turns = c.get("turns")
        if not isinstance(raw_turns, list) or not raw_turns:
            raise _fail(path, where, "needs a non-empty 'turns' list")
        turns = []
        for j, t in enumerate(raw_turns):
            tw = f"{where} turns[{j}]"
            if not isinstance(t, dict):
                raise _fail(path, tw, "must be a mapping")
            unknown = set(t) - {"pause_ms", "reply", "caller", "language"}
            if unknown:
                raise _fail(path, tw, f"unknown keys {sorted(unknown)}")
            pause = t.get("pause_ms", 0)
            reply = t.get("reply")
            if not isinstance(pause, (int, float)) or isinstance(pause, bool) or pause < 0:
                raise _fail(path, tw, "'pause_ms' must be a number >= 0")
            if not isinstance(reply, str) or not reply.strip():
                raise _fail(path, tw, "needs a non-empty 'reply'")
            turns.append(Turn(float(pause), reply, str(t.get("caller", "")), t.get("language")))
        calls.append(Call(cid, language, voice, tuple(turns)))
    return ScenarioSet(path, hashlib.sha256(text.encode()).hexdigest(), tuple(calls))


def load_scenarios(path: str | Path | None = None) -> ScenarioSet:
    p = Path(path) if path else DEFAULT_SCENARIOS
    if p.is_dir():
        p = p / "callcentre.yaml"
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ScenarioError(f"{p}: cannot read: {e.strerror}") from None
    sset = parse_scenarios(data.decode("utf-8"), str(p))
    # The digest is of the bytes on disk, so it matches `sha256sum FILE`.
    return ScenarioSet(sset.path, hashlib.sha256(data).hexdigest(), sset.calls)
