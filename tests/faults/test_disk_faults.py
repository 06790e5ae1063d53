"""The log disk full or gone: recording stops (one warning), the calls go on and end cleanly.

"Full" is the real thing: the session's event log and WAV timeline are swapped
for /dev/full, whose every write fails with ENOSPC. "Gone" removes the log
directory after start (as an unmounted or read-only volume would refuse new
files); root ignores permission bits, so chmod could not show it here.
"""

from __future__ import annotations

import asyncio
import shutil
import wave

from tests.conftest import Client


async def test_a_full_log_disk_stops_the_recording_not_the_call(start_gateway, tmp_path, caplog):
    gw = await start_gateway({"server": {"log_dir": str(tmp_path / "logs"), "record_wav": True}})
    c = await Client.connect(gw)
    await c.start()
    session = next(iter(gw.sessions.values()))
    playout = session.playout
    playout._log.close()
    playout._log = open("/dev/full", "a", encoding="utf-8", buffering=1)  # line-buffered: the next event fails
    playout._wav.close()
    playout._wav = wave.open(open("/dev/full", "wb", buffering=0), "wb")
    playout._wav.setnchannels(1), playout._wav.setsampwidth(2), playout._wav.setframerate(playout.sample_rate)
    await c.send({"type": "text", "turn_id": "t", "text": "The disk is full and the caller still hears this.", "final": True})
    done = await c.until("turn.done", turn_id="t", timeout=20)
    assert done["gaps"]["audible"] == 0 and done["played_text"] == "The disk is full and the caller still hears this."
    assert playout.recording_failed and "No space left" in playout.recording_failed
    assert any("recording stopped" in r.message for r in caplog.records)
    await c.send({"type": "session.end"})
    await c.until("session.ended")
    for _ in range(50):
        if not gw.sessions:
            break
        await asyncio.sleep(0.05)
    assert not gw.sessions  # closing flushed into the full disk and still released the session


async def test_a_log_directory_that_is_gone_leaves_new_calls_unrecorded_but_working(start_gateway, tmp_path):
    logs = tmp_path / "logs"
    gw = await start_gateway({"server": {"log_dir": str(logs), "record_wav": True}})
    shutil.rmtree(logs)
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t", "text": "Nothing is written, everything is heard.", "final": True})
    done = await c.until("turn.done", turn_id="t", timeout=20)
    assert done["played_text"] == "Nothing is written, everything is heard."
    assert next(iter(gw.sessions.values())).playout.recording_failed
    await c.close()
