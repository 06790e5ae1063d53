"""`engine.isolate: true`: the engine as a supervised child process on this box.

The gateway writes its effective config (CLI overrides included) beside an
ipc:// socket in a private temporary folder, starts `voxgate engine` on that
socket, and talks to it as `engine.kind: remote` does. A child that dies is
started again (with a growing pause while it keeps dying); the gateway's
link reconnects by itself. The child gets SIGTERM when the gateway dies (Linux
parent-death signal), so no engine outlives its gateway.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import logging
import os
import shutil
import signal
import sys
import tempfile
import time

import yaml

from gateway.config import Config

log = logging.getLogger("voxgate.engine.supervisor")

BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
STABLE_S = 60.0  # a child up this long resets the backoff


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def child_config(config: Config) -> dict:
    """The config the child loads: the gateway's own, with the engine local (not isolated again) and out of any
    call plane (a private ipc:// engine in the plane's engine registry would draw other gateways' calls)."""
    data = dataclasses.asdict(config)
    data.pop("source", None)
    data.pop("cluster", None)
    data["engine"]["isolate"] = False
    return data


class EngineSupervisor:
    def __init__(self, config: Config, heartbeat_s: float = 2.0):
        self.config = config
        self.heartbeat_s = heartbeat_s
        self.dir = tempfile.mkdtemp(prefix="voxgate-engine-")  # 0700: only this user reaches the socket
        self.endpoint = f"ipc://{self.dir}/engine.sock"
        self.config_path = os.path.join(self.dir, "engine.yaml")
        with open(self.config_path, "w", encoding="utf-8") as f:
            yaml.safe_dump(child_config(config), f, sort_keys=False)
        self.proc: asyncio.subprocess.Process | None = None
        self.restarts = 0
        self._stopping = False
        self._task: asyncio.Task | None = None
        self._started_at = 0.0

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gateway.cli",
            "engine",
            "--config",
            self.config_path,
            "--listen",
            self.endpoint,
            "--heartbeat-s",
            str(self.heartbeat_s),
        ]

    async def _spawn(self) -> None:
        # its own session: a terminal's Ctrl-C reaches the gateway only, which drains its calls (they still need
        # the engine) and then stops the child itself
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv(), preexec_fn=_die_with_parent, start_new_session=True
        )
        self._started_at = time.monotonic()
        log.info("engine child started (pid %d) on %s", self.proc.pid, self.endpoint)

    async def start(self) -> None:
        await self._spawn()

    async def wait_ready(self, engine, timeout: float) -> None:
        """Until the gateway's link to the child serves; ValueError when the child exits first or takes too long."""
        deadline = time.monotonic() + timeout
        while engine.health() is not None:
            if self.proc.returncode is not None:
                raise ValueError(
                    f"the engine child process exited with {self.proc.returncode} while starting (its log is above)"
                )
            if time.monotonic() > deadline:
                raise ValueError(
                    f"the engine child process was not ready after {timeout:g} s (engine.isolate_start_timeout_s)"
                )
            await asyncio.sleep(0.05)
        self._task = asyncio.get_running_loop().create_task(self._supervise(), name="engine-supervisor")

    async def _supervise(self) -> None:
        failures = 0
        while True:
            rc = await self.proc.wait()
            if self._stopping:
                return
            failures = 0 if time.monotonic() - self._started_at > STABLE_S else failures + 1
            pause = BACKOFF_S[min(failures, len(BACKOFF_S) - 1)]
            log.error("engine child (pid %d) exited with %s; starting it again in %.1f s", self.proc.pid, rc, pause)
            await asyncio.sleep(pause)
            if self._stopping:
                return
            self.restarts += 1
            await self._spawn()

    async def stop(self, timeout: float = 30.0) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except BaseException:  # noqa: BLE001 - cancelled
                pass
        proc = self.proc
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except asyncio.TimeoutError:
                log.warning("engine child (pid %d) did not stop in %.0f s: killing it", proc.pid, timeout)
                proc.kill()
                await proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
