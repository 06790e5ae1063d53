"""The log disk full or gone: recording stops (one warning), the calls go on and end cleanly.

"Full" is the real thing: once the writer thread (audio.filewriter) has opened
a session's event log and WAV timeline, their handles are swapped for
/dev/full, whose every write fails with ENOSPC. "Gone" removes the log
directory after start (as an unmounted volume would refuse new files); root
ignores permission bits, so chmod could not show a read-only disk here.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import wave

from audio import filewriter
from tests.conftest import Client


async def _sessions_gone(gw) -> bool:
    for _ in range(100):
        if not gw.sessions:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_full_log_disk_stops_the_recording_not_the_call(start_gateway, tmp_path, caplog):
    caplog.set_level(logging.WARNING, "voxgate.filewriter")
    gw = await start_gateway({"server": {"log_dir": str(tmp_path / "logs"), "record_wav": True}})
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t0", "text": "Recorded.", "final": True})
    await c.until("turn.done", turn_id="t0")
    assert filewriter.sync()
    playout = next(iter(gw.sessions.values())).playout
    assert playout._log.fh is not None and playout._wav.fh is not None
    playout._log.fh.close()
    playout._log.fh = open("/dev/full", "a", encoding="utf-8", buffering=1)  # line-buffered: the next line fails
    playout._wav.fh.close()
    full_wav = wave.open(open("/dev/full", "wb", buffering=0), "wb")
    full_wav.setnchannels(1), full_wav.setsampwidth(2), full_wav.setframerate(playout.sample_rate)
    playout._wav.fh = full_wav
    await c.send(
        {"type": "text", "turn_id": "t", "text": "The disk is full and the caller still hears this.", "final": True}
    )
    done = await c.until("turn.done", turn_id="t", timeout=20)
    assert done["gaps"]["audible"] == 0 and done["played_text"] == "The disk is full and the caller still hears this."
    assert filewriter.sync()
    assert playout._log.failed and playout._wav.failed
    warnings = [r for r in caplog.records if "recording stops" in r.message]
    assert len(warnings) == 2  # one per file, not one per line or frame
    await c.send({"type": "session.end"})
    await c.until("session.ended")
    assert await _sessions_gone(gw)


async def test_a_log_directory_that_is_gone_leaves_new_calls_unrecorded_but_working(start_gateway, tmp_path):
    logs = tmp_path / "logs"
    gw = await start_gateway({"server": {"log_dir": str(logs), "record_wav": True}})
    shutil.rmtree(logs)
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t", "text": "Nothing is written, everything is heard.", "final": True})
    done = await c.until("turn.done", turn_id="t", timeout=20)
    assert done["played_text"] == "Nothing is written, everything is heard."
    assert filewriter.sync()
    assert next(iter(gw.sessions.values())).playout._log.failed
    await c.close()
    assert await _sessions_gone(gw)
