"""SIPp (Debian `sip-tester`) as the far end: one scenario file of tests/sip/scenarios, run against a gateway."""

from __future__ import annotations

import asyncio
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).parent / "scenarios"


def require(tool: str) -> str:
    """The program's path, or a skip naming it (under CI=true, tests/conftest.py makes that a failure)."""
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (scripts/install_test_deps.sh installs it with apt)")
    return path


def free_udp_port(pairs: int = 1) -> int:
    """A port with `2 * pairs` ports from it free for UDP and TCP (SIPp's media port takes RTP and RTCP;
    baresip listens for SIP on both, and its control on TCP)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port % 2 or port + 2 * pairs > 65535:
            continue
        try:
            socks = []
            for p in range(port, port + 2 * pairs):
                for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                    t = socket.socket(socket.AF_INET, kind)
                    socks.append(t)
                    t.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise RuntimeError("no free UDP ports")


@dataclass
class SippRun:
    rc: int
    output: str
    errors: str

    def assert_ok(self) -> None:
        assert self.rc == 0, f"SIPp failed (exit {self.rc}):\n{self.output[-3000:]}\n{self.errors[-3000:]}"


async def run_sipp(
    tmp_path: Path,
    sip_port: int | None,
    scenario: str,
    fields: list[str] | None = None,
    calls: int = 1,
    rate: int = 10,
    timeout_s: float = 30.0,
    listen_port: int | None = None,
    tcp: bool = False,
    options: list[str] | None = None,
) -> SippRun:
    """SIPp calling `sip_port`; or, with `sip_port` None, answering on `listen_port` (a registrar, a UAS).
    `tcp`: over one TCP connection per call instead of UDP. `options`: more of SIPp's command line (e.g. `-au`)."""
    sipp = require("sipp")
    remote = [f"127.0.0.1:{sip_port}"] if sip_port is not None else []
    args = [
        sipp,
        *remote,
        "-sf",
        str(SCENARIOS / scenario),
        "-i",
        "127.0.0.1",
        "-mi",
        "127.0.0.1",
        "-p",
        str(listen_port or free_udp_port()),
        "-mp",
        str(free_udp_port(2)),
        "-m",
        str(calls),
        "-l",
        str(calls),
        "-r",
        str(rate),
        "-timeout",
        f"{int(timeout_s)}s",
        "-timeout_error",
        "-nostdin",
        "-trace_err",
        "-error_file",
        str(tmp_path / f"{scenario}.errors.log"),
        "-trace_screen",
        "-screen_file",
        str(tmp_path / f"{scenario}.screen.log"),
    ]
    if tcp:
        args += ["-t", "tn", "-max_socket", "200"]
    if fields is not None:
        inf = tmp_path / f"{scenario}.csv"
        inf.write_text("SEQUENTIAL\n" + ";".join(fields) + ";\n")
        args += ["-inf", str(inf)]
    args += options or []
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=tmp_path
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s + 15)
    except asyncio.TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    errors = ""
    for name in (f"{scenario}.errors.log", f"{scenario}.screen.log"):
        if (tmp_path / name).exists():
            errors += (tmp_path / name).read_text(errors="replace")
    return SippRun(proc.returncode, out.decode(errors="replace"), errors)
