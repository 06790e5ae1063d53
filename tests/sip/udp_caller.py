"""A minimal SIP caller on plain UDP sockets, for what SIPp and baresip do not show: the RTP packets themselves,
and refusals read header by header."""

from __future__ import annotations

import asyncio
import socket
import struct


def invite(call_id: str, sip_local: int, rtp_port: int, codec_pt: int = 0, extra: str = "") -> bytes:
    name = {0: "PCMU", 8: "PCMA", 9: "G722"}[codec_pt]
    sdp = (
        f"v=0\r\no=t 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        f"m=audio {rtp_port} RTP/AVP {codec_pt} 101\r\na=rtpmap:{codec_pt} {name}/8000\r\na=rtpmap:101 telephone-event/8000\r\n"
    )
    return (
        f"INVITE sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{sip_local};branch=z9hG4bK{call_id[:10]}\r\n"
        f"From: <sip:t@127.0.0.1>;tag=a1\r\nTo: <sip:agent@127.0.0.1>\r\nCall-ID: {call_id}\r\nCSeq: 1 INVITE\r\n"
        f"Contact: <sip:t@127.0.0.1:{sip_local}>\r\n{extra}Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n{sdp}"
    ).encode()


def ack(call_id: str, sip_local: int, to_tag: str) -> bytes:
    return (
        f"ACK sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{sip_local};branch=z9hG4bKack{call_id[:6]}\r\n"
        f"From: <sip:t@127.0.0.1>;tag=a1\r\nTo: <sip:agent@127.0.0.1>;tag={to_tag}\r\nCall-ID: {call_id}\r\nCSeq: 1 ACK\r\n"
        f"Content-Length: 0\r\n\r\n"
    ).encode()


class UdpCaller:
    """SIP on one socket, RTP on a second (the port in our SDP) and RTCP on a third; packets kept with arrival times."""

    def __init__(self):
        self.sip = self._bind()
        self.rtp = self._bind()
        self.rtcp = self._bind(self.rtp.getsockname()[1] + 1)

    @staticmethod
    def _bind(port: int = 0) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", port))
        s.setblocking(False)
        return s

    async def recv(self, sock: socket.socket, timeout: float = 5.0) -> tuple[bytes, tuple]:
        return await asyncio.wait_for(asyncio.get_running_loop().sock_recvfrom(sock, 65535), timeout)

    async def final_response(self, port: int, call_id: str, codec_pt: int = 0, extra: str = "") -> str:
        """INVITE; the first final (>= 200) response, as text."""
        self.sip.sendto(
            invite(call_id, self.sip.getsockname()[1], self.rtp.getsockname()[1], codec_pt, extra), ("127.0.0.1", port)
        )
        while True:
            data, _ = await self.recv(self.sip)
            if data.startswith(b"SIP/2.0 ") and int(data[8:11]) >= 200:
                return data.decode()

    async def call(self, port: int, call_id: str, codec_pt: int = 0) -> str:
        """INVITE, 200 OK, ACK: the 200 OK as text."""
        text = await self.final_response(port, call_id, codec_pt)
        assert text.startswith("SIP/2.0 200"), text
        data = text.encode()
        to = next(line for line in data.decode().split("\r\n") if line.lower().startswith("to:"))
        tag = to.split("tag=", 1)[1].split(";")[0]
        self.sip.sendto(ack(call_id, self.sip.getsockname()[1], tag), ("127.0.0.1", port))
        return data.decode()

    def close(self) -> None:
        for s in (self.sip, self.rtp, self.rtcp):
            s.close()


def rtp_header(packet: bytes) -> tuple[int, int, int, int, int]:
    """(marker, payload type, sequence, timestamp, ssrc)"""
    b0, b1, seq, ts, ssrc = struct.unpack("!BBHII", packet[:12])
    return b1 >> 7, b1 & 0x7F, seq, ts, ssrc
