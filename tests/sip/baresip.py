"""baresip (Debian `baresip`), a real SIP user agent, as the caller: driven over its ctrl_tcp module
(netstring JSON), its microphone a WAV file (aufile), what it hears written to WAV by its sndfile module."""

from __future__ import annotations

import asyncio
import json
import wave
from pathlib import Path

import numpy as np

from tests.sip.sipp import free_udp_port, require

CONFIG = """poll_method epoll
sip_listen 127.0.0.1:{sip_port}
audio_player alsa,null
audio_source aufile,{source}
audio_alert alsa,null
module_path /usr/lib/baresip/modules
module g711.so
module aufile.so
module alsa.so
module sndfile.so
module_app account.so
module_app menu.so
module_app ctrl_tcp.so
ctrl_tcp_listen 127.0.0.1:{ctrl_port}
snd_path {folder}
rtp_ports {rtp_first}-{rtp_last}
"""


def write_wav(path: Path, pcm: np.ndarray, rate: int = 8000) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())


class Baresip:
    def __init__(self, folder: Path, proc, reader, writer):
        self.folder = folder
        self.proc = proc
        self.reader = reader
        self.writer = writer
        self.events: list[dict] = []
        self._tokens = 0
        self.sip_port = 0  # where it listens for SIP (a call voxgate places goes there)

    @classmethod
    async def start(
        cls,
        folder: Path,
        source_wav: Path,
        modules: tuple[str, ...] = (),
        account_params: str = "",
        config: str = "",
        account: str | None = None,
    ) -> "Baresip":
        """`modules`: more of baresip's modules (e.g. srtp.so); `account_params`: more of the account's
        parameters (e.g. `;mediaenc=srtp-mand`); `config`: more config lines (e.g. `sip_cafile …`);
        `account`: the whole `accounts` line instead of the tester's (e.g. one that answers by itself)."""
        binary = require("baresip")
        folder.mkdir(parents=True, exist_ok=True)
        sip_port, ctrl_port, rtp = free_udp_port(2), free_udp_port(), free_udp_port(4)
        (folder / "config").write_text(
            CONFIG.format(
                sip_port=sip_port,
                ctrl_port=ctrl_port,
                source=source_wav,
                folder=folder,
                rtp_first=rtp,
                rtp_last=rtp + 7,
            )
            + "".join(f"module {m}\n" for m in modules)
            + config
        )
        (folder / "accounts").write_text((account or f"<sip:tester@127.0.0.1>;regint=0{account_params}") + "\n")
        log = open(folder / "baresip.log", "wb")
        proc = await asyncio.create_subprocess_exec(
            binary, "-f", str(folder), stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT
        )
        deadline = asyncio.get_running_loop().time() + 20.0  # a loaded CI box starts it slowly
        while asyncio.get_running_loop().time() < deadline and proc.returncode is None:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", ctrl_port)
                ua = cls(folder, proc, reader, writer)
                ua.sip_port = sip_port
                return ua
            except OSError:
                await asyncio.sleep(0.05)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise AssertionError(f"baresip did not start: {(folder / 'baresip.log').read_text(errors='replace')}")

    async def command(self, command: str, params: str = "") -> None:
        self._tokens += 1
        body = json.dumps({"command": command, "params": params, "token": str(self._tokens)}).encode()
        self.writer.write(f"{len(body)}:".encode() + body + b",")
        await self.writer.drain()

    async def event(self, etype: str, timeout: float = 10.0) -> dict:
        """The next event of this type (CALL_ESTABLISHED, CALL_CLOSED, …)."""

        async def read() -> dict:
            while True:
                length = int((await self.reader.readuntil(b":"))[:-1])
                msg = json.loads((await self.reader.readexactly(length + 1))[:-1])
                self.events.append(msg)
                if msg.get("event") and msg.get("type") == etype:
                    return msg

        return await asyncio.wait_for(read(), timeout)

    def heard(self) -> tuple[np.ndarray, int]:
        """What baresip heard (the decoded far-end audio sndfile wrote), as int16 samples and their rate."""
        files = sorted(self.folder.glob("dump-*-dec.wav"))
        assert files, f"sndfile wrote no recording: {sorted(p.name for p in self.folder.iterdir())}"
        with wave.open(str(files[-1])) as w:
            return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16), w.getframerate()

    async def stop(self) -> None:
        self.writer.close()
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()
