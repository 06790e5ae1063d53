"""A played turn leaves no reference cycles behind.

Objects in a cycle wait for the cycle collector, and its pauses stop the
shared clock for every call at once (a full collection at 600 calls took
80 ms when each text chunk left its job, task, stream and queue in a cycle).
So the per-chunk objects must be freed by reference counting alone: after
real turns on a real gateway, a collection finds none of them unreachable.
"""

from __future__ import annotations

import gc

from tests.conftest import Client

TEXT = "The first sentence of this reply is here. The second one follows it, and a third one ends the turn."
PER_CHUNK = {"_Job", "SynthesisStream", "SynthesisRequest", "StreamResampler", "ResampleStream", "SpokenChunk", "_Turn"}


def _name(obj) -> str:
    """The type's name; a chunk's task and coroutine by the coroutine they run (other tests' tasks may
    still be collected while this one runs)."""
    name = type(obj).__name__
    if name == "Task":
        return "Task " + getattr(obj.get_coro(), "__qualname__", "?")
    if name == "coroutine":
        return "coroutine " + obj.__qualname__
    return name


def _cyclic_garbage() -> dict[str, int]:
    """Type name -> count of what the cycle collector would free now (and frees it)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found: dict[str, int] = {}
        for obj in gc.garbage:
            name = _name(obj)
            if name in PER_CHUNK or name.endswith("Session._run_job"):
                found[name] = found.get(name, 0) + 1
        return found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_played_turns_leave_no_cyclic_garbage(start_gateway):
    gw = await start_gateway({"engine": {"stall_timeout_s": 5.0}})
    c = await Client.connect(gw)
    await c.start()
    _cyclic_garbage()  # what setting up left
    for n in range(3):
        await c.send({"type": "text", "turn_id": f"t{n}", "text": TEXT, "final": True})
        done = await c.until("turn.done", turn_id=f"t{n}", timeout=30)
        assert done["played_ms"] > 0
    assert _cyclic_garbage() == {}
    await c.close()
