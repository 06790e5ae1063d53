"""A minimal SIP caller on plain UDP sockets, for what SIPp and baresip do not show: the RTP packets themselves,
and refusals read header by header."""

from __future__ import annotations

import asyncio
import random
import socket
import struct


def offer(rtp_port: int, codec_pt: int = 0, host: str = "127.0.0.1") -> str:
    name = {0: "PCMU", 8: "PCMA", 9: "G722"}[codec_pt]
    return (
        f"v=0\r\no=t 1 1 IN IP4 {host}\r\ns=-\r\nc=IN IP4 {host}\r\nt=0 0\r\n"
        f"m=audio {rtp_port} RTP/AVP {codec_pt} 101\r\na=rtpmap:{codec_pt} {name}/8000\r\na=rtpmap:101 telephone-event/8000\r\n"
    )


def invite(
    call_id: str,
    sip_local: int,
    rtp_port: int,
    codec_pt: int = 0,
    extra: str = "",
    host: str = "127.0.0.1",
    sdp: str | None = None,
    from_tag: str = "a1",
    to_tag: str | None = None,
    cseq: int = 1,
) -> bytes:
    sdp = offer(rtp_port, codec_pt, host) if sdp is None else sdp
    to = f"<sip:agent@127.0.0.1>;tag={to_tag}" if to_tag else "<sip:agent@127.0.0.1>"
    return (
        f"INVITE sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP {host}:{sip_local};branch=z9hG4bK{call_id[:10]}{cseq}\r\n"
        f"From: <sip:t@{host}>;tag={from_tag}\r\nTo: {to}\r\nCall-ID: {call_id}\r\nCSeq: {cseq} INVITE\r\n"
        f"Contact: <sip:t@{host}:{sip_local}>\r\n{extra}Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n{sdp}"
    ).encode()


def ack(call_id: str, sip_local: int, to_tag: str, host: str = "127.0.0.1", from_tag: str = "a1") -> bytes:
    return in_dialog("ACK", call_id, sip_local, to_tag, host=host, from_tag=from_tag)


def in_dialog(
    method: str,
    call_id: str,
    sip_local: int,
    to_tag: str,
    host: str = "127.0.0.1",
    from_tag: str = "a1",
    cseq: int = 1,
    headers: str = "",
    body: str = "",
    branch: str | None = None,
) -> bytes:
    """A request in the caller's dialog (ACK, BYE, INFO, NOTIFY...), as the caller (or a stranger) would send it;
    `to_tag` "" for one without our tag (CANCEL, which names its INVITE by the Via `branch`)."""
    branch = branch or f"z9hG4bK{method.lower()}{call_id[:6]}{cseq}"
    to = f"<sip:agent@127.0.0.1>;tag={to_tag}" if to_tag else "<sip:agent@127.0.0.1>"
    return (
        f"{method} sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP {host}:{sip_local};branch={branch}\r\n"
        f"From: <sip:t@{host}>;tag={from_tag}\r\nTo: {to}\r\nCall-ID: {call_id}\r\n"
        f"CSeq: {cseq} {method}\r\n{headers}Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


class UdpCaller:
    """SIP on one socket, RTP on a second (the port in our SDP) and RTCP on a third; packets kept with arrival times."""

    def __init__(self, host: str = "127.0.0.1"):
        self.host = host
        self.sip = self._bind(0, host)
        self.rtp, self.rtcp = rtp_pair(host)

    @staticmethod
    def _bind(port: int = 0, host: str = "127.0.0.1") -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((host, port))
        s.setblocking(False)
        return s

    async def recv(self, sock: socket.socket, timeout: float = 5.0) -> tuple[bytes, tuple]:
        return await asyncio.wait_for(asyncio.get_running_loop().sock_recvfrom(sock, 65535), timeout)

    async def final_response(self, port: int, call_id: str, codec_pt: int = 0, extra: str = "") -> str:
        """INVITE; the first final (>= 200) response, as text. Sent again as a phone does (RFC 3261 Timer A: after
        0.5 s, doubling) until an answer comes: a datagram may be lost (a loaded gateway's full socket buffer)."""
        request = invite(call_id, self.sip.getsockname()[1], self.rtp.getsockname()[1], codec_pt, extra, self.host)
        self.sip.sendto(request, ("127.0.0.1", port))
        resend, heard = 0.5, False
        while True:
            try:
                data, _ = await self.recv(self.sip, timeout=5.0 if heard else resend)
            except TimeoutError:
                if heard or resend > 4.0:
                    raise
                self.sip.sendto(request, ("127.0.0.1", port))
                resend *= 2
                continue
            heard = heard or data.startswith(b"SIP/2.0 ")
            if data.startswith(b"SIP/2.0 ") and int(data[8:11]) >= 200:
                return data.decode()

    async def call(self, port: int, call_id: str, codec_pt: int = 0) -> str:
        """INVITE, 200 OK, ACK: the 200 OK as text."""
        text = await self.final_response(port, call_id, codec_pt)
        assert text.startswith("SIP/2.0 200"), text
        data = text.encode()
        to = next(line for line in data.decode().split("\r\n") if line.lower().startswith("to:"))
        tag = to.split("tag=", 1)[1].split(";")[0]
        self.sip.sendto(ack(call_id, self.sip.getsockname()[1], tag, self.host), ("127.0.0.1", port))
        return data.decode()

    def close(self) -> None:
        for s in (self.sip, self.rtp, self.rtcp):
            s.close()


def rtp_pair(host: str = "127.0.0.1") -> tuple[socket.socket, socket.socket]:
    """An even RTP port and the RTCP port above it (an SDP's audio port must be even), outside the gateways' ranges."""
    rng = random.Random()
    while True:
        port = rng.randrange(46000, 60000, 2)
        try:
            rtp = UdpCaller._bind(port, host)
        except OSError:
            continue
        try:
            return rtp, UdpCaller._bind(port + 1, host)
        except OSError:
            rtp.close()


def rtp_header(packet: bytes) -> tuple[int, int, int, int, int]:
    """(marker, payload type, sequence, timestamp, ssrc)"""
    b0, b1, seq, ts, ssrc = struct.unpack("!BBHII", packet[:12])
    return b1 >> 7, b1 & 0x7F, seq, ts, ssrc
