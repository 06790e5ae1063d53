"""A fault-injecting TCP proxy for tests: latency, throttling, stalls and cuts between a client and a server.

    proxy = await FaultProxy(server_port).start()
    ... connect clients to proxy.port ...
    proxy.delay_s = 0.1          # every byte arrives 100 ms later (both directions)
    proxy.down_bps = 4000        # server → client throttled to 4 kB/s
    proxy.stalled = True         # nothing moves (the sockets stay open)
    proxy.cut()                  # every connection reset at once

Settings apply to every connection, live. Each direction is a reader task
(timestamps what it reads) and a writer task (sends each piece when its
time has come, no faster than the throttle allows), so latency does not
cost throughput and a stall holds data back instead of dropping it.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.delay_s = 0.0
        self.up_bps: float | None = None  # client → server
        self.down_bps: float | None = None  # server → client
        self.stalled = False
        self.small_buffers = False  # 8 KiB socket buffers toward the server: its own backlog shows sooner
        self.port: int | None = None
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task] = set()
        self.connections = 0

    async def start(self) -> "FaultProxy":
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cut(self) -> None:
        """Reset every connection now (RST both ways, as a dropped network path or a killed peer would)."""
        for client, server in list(self._conns):
            for w in (client, server):
                sock = w.get_extra_info("socket")
                if sock is not None:
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    except OSError:
                        pass
                w.transport.abort()
        self._conns.clear()

    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            sock = socket.socket()
            if self.small_buffers:  # before connecting, so the window never grows past it
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, self.target)
            s_reader, s_writer = await asyncio.open_connection(sock=sock)
        except OSError:
            c_writer.close()
            return
        self.connections += 1
        pair = (c_writer, s_writer)
        self._conns.add(pair)
        pipes = [self._spawn(self._pipe(c_reader, s_writer, "up")), self._spawn(self._pipe(s_reader, c_writer, "down"))]
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        for w in (c_writer, s_writer):  # one side ended: end the other (half-close is not modelled)
            w.close()
        self._conns.discard(pair)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str) -> None:
        queue: asyncio.Queue = asyncio.Queue(
            maxsize=8
        )  # bounded: a throttled or stalled side pushes back on the sender
        sender = self._spawn(self._send(queue, writer, direction))
        try:
            while True:
                data = await reader.read(4096)
                if not data:
                    break
                await queue.put((time.monotonic() + self.delay_s, data))
        except (ConnectionError, OSError):
            pass
        try:
            await queue.put(None)
            await sender
        except (ConnectionError, OSError):
            pass

    async def _send(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, direction: str) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            due, data = item
            while self.stalled:
                await asyncio.sleep(0.01)
            if due > time.monotonic():
                await asyncio.sleep(due - time.monotonic())
            bps = self.up_bps if direction == "up" else self.down_bps
            for i in range(0, len(data), 512 if bps else len(data)):
                piece = data[i : i + 512] if bps else data
                writer.write(piece)
                await writer.drain()
                if bps:
                    await asyncio.sleep(len(piece) / bps)
