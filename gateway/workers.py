"""`voxgate serve --workers N`: N gateway processes on one box, one HTTP port (and one AudioSocket port).

Python runs a process's calls on one core, so a box uses its cores with one
gateway process per core. Every worker binds the shared ports with
`SO_REUSEPORT` and the kernel spreads new connections across them; each is
its own node of the call plane (`cluster.node_id` + `-w<i>`), reachable by
the others on a port of its own (its `cluster.advertise_url`), so a call's
second leg that the kernel hands to another worker is forwarded to the owner
as it would be between boxes. Hence `cluster.redis_url` is required.

The parent is a supervisor only: it reserves the shared port, starts the
workers (`python -m gateway.workers`, each a whole `voxgate serve`), passes
SIGTERM/SIGINT on (each worker drains as one gateway does), restarts a worker
that dies after it was ready, and gives up (stopping the rest) when one fails
to start: a worker's own one-line refusal (bad config, Redis unreachable)
is then the command's answer.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

from gateway.command_args import say, setup_logging
from gateway.config import Config, ConfigError, load_config

log = logging.getLogger("voxgate.workers")

READY_FD_ENV = "VOXGATE_WORKER_READY_FD"  # the worker writes one line there once it serves
RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0)
STOP_GRACE_S = 10.0  # past the drain timeout, how long a worker may take to exit after SIGTERM before SIGKILL


def reuseport_socket(host: str, port: int, listen: bool = False) -> socket.socket:
    """A TCP socket bound with SO_REUSEPORT (Linux: every socket of the group must set it before bind)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(1024)
    return sock


def worker_node(config: Config, index: int, port: int) -> tuple[str, str]:
    """(node id, advertise host) of worker `index`: the configured node id (default: host name + port) with `-w<i>`."""
    base = config.cluster.node_id or f"{socket.gethostname()}:{port}"
    if config.cluster.advertise_url:
        host = urlsplit(config.cluster.advertise_url).hostname
    elif config.server.host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    else:
        host = config.server.host
    return f"{base}-w{index}"[:64], host


# ---------------------------------------------------------------- the supervisor
def serve_workers(args, n: int) -> int:
    """The parent of `voxgate serve --workers N`."""
    setup_logging(args.log_level)
    overrides: dict = {"server": {}}
    if args.host:
        overrides["server"]["host"] = args.host
    if args.port is not None:
        overrides["server"]["port"] = args.port
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        say(f"voxgate: {exc}")
        return 2
    if not 1 <= n <= 256:
        say(f"voxgate: --workers must be 1..256, not {n}")
        return 2
    if not config.cluster.enabled:
        say(
            f"voxgate: --workers {n} needs cluster.redis_url in {config.source} (each worker is a node of the call plane; see docs/cluster.md)"
        )
        return 2
    if config.telephony.audiosocket_port == 0:
        say("voxgate: --workers needs a fixed telephony.audiosocket_port (0 would give every worker a port of its own)")
        return 2
    if (
        config.engine.kind == "qwen3"
        and n > 1
        and not (config.engine.isolate or getattr(args, "isolate_engine", False))
    ):
        say(
            f"voxgate: --workers {n} with engine.kind qwen3 would load the model {n} times (once per worker): run one "
            "`voxgate engine --listen ipc://…` and give the workers engine: {kind: remote, endpoints: [ipc://…]}"
        )
        return 2
    if (config.engine.isolate or getattr(args, "isolate_engine", False)) and n > 1:
        say(
            f"voxgate: --workers {n} with engine.isolate would start {n} engines (one per worker): run one "
            "`voxgate engine --listen ipc://…` and give the workers engine: {kind: remote, endpoints: [ipc://…]}"
        )
        return 2
    host = config.server.host
    try:
        # Held (bound, never listening) while the workers live: port 0 becomes one port all of them share.
        reserved = reuseport_socket(host, config.server.port)
    except OSError as exc:
        say(f"voxgate: cannot start: {host}:{config.server.port}: {exc.strerror}")
        return 1
    port = reserved.getsockname()[1]
    child_args = {
        k: v for k, v in vars(args).items() if k != "handler" and isinstance(v, (str, int, float, bool, type(None)))
    }
    child_args.update(port=port, workers=None)
    sup = _Supervisor(child_args, n, stop_within=config.server.limits.drain_timeout_s + STOP_GRACE_S)
    say(f"voxgate: {n} workers sharing http://{host}:{port} (SO_REUSEPORT)")
    try:
        return sup.run()
    finally:
        reserved.close()


class _Supervisor:
    def __init__(self, child_args: dict, n: int, stop_within: float = 30.0):
        self.child_args, self.n = child_args, n
        self.stop_within = stop_within  # seconds from SIGTERM: a worker still running then is killed
        self.stop_deadline: float | None = None
        self.procs: dict[int, subprocess.Popen] = {}
        self.ready_pipes: dict[int, int] = {}
        self.ready: set[int] = set()
        self.failures: dict[int, int] = {}
        self.stopping = False

    def spawn(self, i: int) -> None:
        r, w = os.pipe()
        env = dict(os.environ, **{READY_FD_ENV: str(w)})
        cmd = [sys.executable, "-m", "gateway.workers", "--index", str(i), "--args", json.dumps(self.child_args)]
        self.procs[i] = subprocess.Popen(cmd, env=env, pass_fds=(w,))
        os.close(w)
        os.set_blocking(r, False)
        self.ready_pipes[i] = r

    def _check_ready(self, i: int) -> None:
        r = self.ready_pipes.get(i)
        if r is None:
            return
        try:
            data = os.read(r, 1024)
        except BlockingIOError:
            return
        if data:
            self.ready.add(i)
            self.failures[i] = 0
        os.close(r)
        del self.ready_pipes[i]

    def signal_all(self, sig: int) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(sig)

    def run(self) -> int:
        def on_signal(signum, _frame):
            self.stopping = True
            self.signal_all(signum)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        for i in range(self.n):
            self.spawn(i)
        restart_at: dict[int, float] = {}
        code = 0
        while True:
            for i in list(self.ready_pipes):
                self._check_ready(i)
            for i, p in list(self.procs.items()):
                rc = p.poll()
                if rc is None:
                    continue
                del self.procs[i]
                self._check_ready(i)
                if self.stopping:
                    continue
                if i not in self.ready:
                    # It never served: the config, a port or Redis refused it, and would refuse the others too.
                    log.error("worker %d exited with %s before it was ready; stopping the others", i, rc)
                    self.stopping, code = True, 1
                    self.signal_all(signal.SIGTERM)
                    continue
                self.ready.discard(i)
                k = self.failures.get(i, 0)
                self.failures[i] = k + 1
                delay = RESTART_BACKOFF_S[min(k, len(RESTART_BACKOFF_S) - 1)]
                log.error("worker %d exited with %s; restarting it in %.0f s", i, rc, delay)
                restart_at[i] = time.monotonic() + delay
            for i, at in list(restart_at.items()):
                if self.stopping:
                    restart_at.clear()
                elif time.monotonic() >= at:
                    del restart_at[i]
                    self.spawn(i)
            if self.stopping and not self.procs:
                return code
            if self.stopping:
                self._kill_late_workers()
            time.sleep(0.1)

    def _kill_late_workers(self) -> None:
        """A worker stuck in its shutdown must not hold the others' (and the pod's) exit forever."""
        now = time.monotonic()
        if self.stop_deadline is None:
            self.stop_deadline = now + self.stop_within
        elif now >= self.stop_deadline:
            for i, p in self.procs.items():
                if p.poll() is None:
                    log.error(
                        "worker %d (pid %d) did not stop within %.0f s of SIGTERM; killing it",
                        i,
                        p.pid,
                        self.stop_within,
                    )
                    p.kill()
            self.stop_deadline = float("inf")


# ---------------------------------------------------------------- one worker
def worker_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="one worker of `voxgate serve --workers N` (started by it)")
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--args", required=True, help="the serve command's arguments, as JSON")
    opts = ap.parse_args(argv)
    args = argparse.Namespace(**json.loads(opts.args))
    try:
        config = load_config(args.config, {"server": {"host": args.host} if args.host else {}})
    except ConfigError as exc:
        say(f"voxgate: {exc}")
        return 2
    own = reuseport_socket(config.server.host, 0)  # this worker's own address, for the forward and its own /metrics
    node_id, adv_host = worker_node(config, opts.index, args.port)
    own_port = own.getsockname()[1]
    args.node_id = node_id
    args.advertise_url = f"http://{adv_host}:{own_port}"
    ready_fd = int(os.environ.pop(READY_FD_ENV, "-1"))

    def setup(gateway) -> None:
        gateway.reuse_port = True
        gateway.extra_sockets.append(own)

    def ready(gateway) -> None:
        say(
            f"voxgate worker {opts.index}: node {node_id}, own address http://{config.server.host}:{own_port} (pid {os.getpid()})"
        )
        if ready_fd >= 0:
            os.write(ready_fd, b"ready\n")
            os.close(ready_fd)

    from gateway.app import serve_main

    args.setup_gateway, args.on_ready = setup, ready
    return serve_main(args)


if __name__ == "__main__":
    sys.exit(worker_main())
