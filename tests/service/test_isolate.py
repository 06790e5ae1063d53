"""`engine.isolate: true`: the gateway runs `voxgate engine` as a supervised child on an ipc:// socket.

A real child process: a session speaks through it; the child SIGKILLed mid-turn fails the chunk with
`engine_error` at once, the supervisor starts it again, and the same session's next turn plays.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

pytest.importorskip("zmq")

from tests.conftest import Client  # noqa: E402
from tests.service.test_remote_faults import LONG, STALL_S, ready, wait_for  # noqa: E402

ISOLATED = {
    "engine": {"kind": "simulated", "isolate": True, "stall_timeout_s": STALL_S},
    "simulated": {"first_packet_ms": 20, "capacity_x": 50, "ms_per_char": 70, "stream_rtf": 0.5, "packet_ms": 80},
}


async def test_an_isolated_engine_serves_from_its_own_process_and_is_restarted_when_it_dies(start_gateway, caplog):
    gw = await start_gateway(ISOLATED)
    # the start waits for the child itself: no "no engine answered in 0.0 s ... refused" warning on a healthy start
    assert not [r for r in caplog.records if "no engine answered" in r.getMessage()]
    child = gw.supervisor.proc
    assert child.pid != os.getpid() and child.returncode is None
    assert gw.supervisor.endpoint.startswith("ipc://")
    assert gw.engine_kind == "remote" and (await ready(gw.port))[0] == 200

    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
    await c.until("audio.start", timeout=15)
    killed_at = time.monotonic()
    os.kill(child.pid, signal.SIGKILL)
    err = await c.until("error", timeout=STALL_S)
    assert err["code"] == "engine_error" and time.monotonic() - killed_at < STALL_S / 2, err
    await c.until("turn.done", turn_id="t1", timeout=10)

    async def restarted():
        return gw.supervisor.restarts == 1 and (await ready(gw.port))[0] == 200

    assert await wait_for(restarted, 30, 0.1)
    assert gw.supervisor.proc.pid != child.pid
    await c.send({"type": "text", "turn_id": "t2", "text": "The restarted engine speaks.", "final": True})
    assert (await c.until("turn.done", turn_id="t2", timeout=20))["played_text"] == "The restarted engine speaks."
    await c.close()
    proc = gw.supervisor.proc
    await gw.stop()
    assert proc.returncode is not None  # no engine outlives its gateway
