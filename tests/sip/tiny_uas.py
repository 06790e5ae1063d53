"""A few lines of SIP answering on one UDP socket, for checking one of gateway/sip's parts against a real client
(SIPp, baresip) before the SIP leg uses it: requests read header by header, answers echo the dialog headers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Request:
    method: str
    uri: str
    headers: dict[str, list[str]]  # lower-case name -> values in order
    body: str
    addr: tuple[str, int]

    def values(self, name: str) -> list[str]:
        return self.headers.get(name.lower(), [])


def parse_request(data: bytes, addr: tuple[str, int]) -> Request | None:
    head, _, body = data.decode(errors="replace").partition("\r\n\r\n")
    lines = head.split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) != 3 or parts[0].startswith("SIP/"):
        return None  # a response: our own requests are never sent here
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return Request(parts[0], parts[1], headers, body, addr)


def response(
    request: Request, status: str, extra: list[str] | None = None, body: str = "", to_tag: str = "uas1"
) -> bytes:
    """`status` (e.g. "200 OK") to `request`, its Via/From/Call-ID/CSeq echoed, To tagged."""
    echoed = [f"Via: {v}" for v in request.values("via")]
    echoed += [f"From: {v}" for v in request.values("from")]
    echoed += [f"To: {v}" + ("" if ";tag=" in v else f";tag={to_tag}") for v in request.values("to")]
    echoed += [f"{n}: {v}" for n in ("Call-ID", "CSeq") for v in request.values(n)]
    lines = [f"SIP/2.0 {status}", *echoed, *(extra or []), f"Content-Length: {len(body.encode())}", "", body]
    return "\r\n".join(lines).encode()


class TinyUas(asyncio.DatagramProtocol):
    """Calls `handle(request)` for each request; it returns the bytes to answer with (or None)."""

    def __init__(self, handle: Callable[[Request], bytes | None]):
        self.handle = handle
        self.requests: list[Request] = []

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        request = parse_request(data, addr)
        if request is None:
            return
        self.requests.append(request)
        reply = self.handle(request)
        if reply is not None:
            self.transport.sendto(reply, addr)

    @property
    def port(self) -> int:
        return self.transport.get_extra_info("sockname")[1]


async def open_uas(handle: Callable[[Request], bytes | None]) -> TinyUas:
    _, uas = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: TinyUas(handle), local_addr=("127.0.0.1", 0)
    )
    return uas
