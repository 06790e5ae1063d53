"""`voxgate drain`: a Kubernetes preStop hook for a gateway pod. It starts the drain (SIGTERM to the
server process, which turns /readyz to 503 so the Service and the ingress stop sending new calls) and
then waits while calls remain, reading the session count from the server's own /readyz.

The kubelet sends its own SIGTERM only when the hook returns, and kills the pod at the end of
terminationGracePeriodSeconds either way; so the hook returns when the calls are gone, when the server
has exited, or at --timeout, whichever comes first.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request


def session_count(url: str, timeout: float = 3.0) -> int | None:
    """Sessions the gateway holds (its /readyz body answers 503 while draining), or None when it is gone."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:  # 503: draining, which is what we asked for
        body = exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None
    try:
        return int(json.loads(body).get("sessions", 0))
    except (ValueError, TypeError, AttributeError):
        return None


def alive(pid: int) -> bool:
    """The process runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def drain_and_wait(
    pid: int, port: int, host: str = "127.0.0.1", timeout_s: float = 3660.0, poll_s: float = 1.0, log=print
) -> str:
    """Why it returned: "no_calls", "exited" or "timeout"."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        log(f"voxgate drain: no process {pid} (nothing to drain; is --pid right?)")
        return "exited"
    url = f"http://{host}:{port}/readyz"
    deadline = time.monotonic() + timeout_s
    last = None
    unread = False
    while True:
        count = session_count(url)
        if count is None and not alive(pid):
            log("voxgate drain: the gateway has exited")
            return "exited"
        if count is None:  # a wrong --port/--host, or the server closing: the process is the truth then
            if not unread:
                log(f"voxgate drain: cannot read {url} (is --port/--host right?); waiting while process {pid} lives")
                unread = True
            if time.monotonic() >= deadline:
                log(f"voxgate drain: process {pid} still running after {timeout_s:.0f} s; giving up")
                return "timeout"
            time.sleep(poll_s)
            continue
        if count == 0:
            log("voxgate drain: no calls left")
            return "no_calls"
        if count != last:
            log(f"voxgate drain: {count} call(s) still open")
            last = count
        if time.monotonic() >= deadline:
            log(f"voxgate drain: {count} call(s) still open after {timeout_s:.0f} s; giving up")
            return "timeout"
        time.sleep(poll_s)
