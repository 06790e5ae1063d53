"""Where an outbound call's audio goes: to the address and port the far end's SDP answer names, from the moment our
ACK is out, whether or not the far end ever sends RTP itself. The far end here is SIPp on 127.0.0.1 answering with
an SDP that names the test's own UDP socket on 127.0.0.5, and sending no RTP: a softphone (baresip) sends RTP
from its SDP address at once, and its first packet alone would open the media gate and move the RTP session there
(strict RTP's learning, gateway/sip/media_guard.py), hiding a call that sent nothing, or sent to the signalling
address, until then."""

from __future__ import annotations

import asyncio
import re
import socket
import struct

import numpy as np
import pytest

from gateway.wire.sip import decode_payload
from tests.sip.sipp import free_udp_port, run_sipp
from tests.sip.test_outbound_late_attach import AUTH, _gateway, _place
from tests.sip.udp_caller import rtp_header, rtp_pair
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")

MEDIA_IP = "127.0.0.5"  # not SIPp's signalling address (127.0.0.1)


async def _collect(sock: socket.socket, packets: list) -> None:
    loop = asyncio.get_running_loop()
    while True:
        packets.append(await loop.sock_recvfrom(sock, 2048))


async def test_audio_goes_to_the_answers_media_address_though_the_far_end_sends_no_rtp(sip_gateway, tmp_path):
    far = free_udp_port()
    gw = await _gateway(sip_gateway, far)
    media, rtcp = rtp_pair(MEDIA_IP)  # an even port (the SDP check refuses an odd one), and the RTCP port above it
    packets: list[tuple[bytes, tuple]] = []
    listening = asyncio.create_task(_collect(media, packets))
    sipp = asyncio.create_task(
        run_sipp(
            tmp_path,
            None,
            "out_answer_media_elsewhere.xml",
            listen_port=far,
            fields=[MEDIA_IP, str(media.getsockname()[1])],
        )
    )
    control = None
    try:
        await asyncio.sleep(0.5)
        call_id = await _place(gw, {"to": "+15551234567", "trunk": "far"})
        control = await Control.connect(gw, additional_headers=AUTH)
        await control.attach(call_id)
        await control.expect("call.answered", timeout=10)
        await control.send({"type": "text", "turn_id": "t1", "text": "Your media lives elsewhere.", "final": True})
        played = (await control.expect("turn.done", timeout=15))["played_ms"]
        await asyncio.sleep(0.3)  # the last packets in flight
        await control.send({"type": "session.end"})
    finally:
        run = await sipp
        listening.cancel()
        media.close()
        rtcp.close()
        if control is not None:
            await control.close()
    run.assert_ok()  # the ACK and our BYE reached SIPp's signalling address
    assert played > 500
    assert len(packets) >= played / 20 * 0.8, f"{len(packets)} RTP packets at the SDP's address for {played} ms played"
    sources = {addr for _, addr in packets}
    assert len(sources) == 1 and next(iter(sources))[0] == "127.0.0.1"  # one RTP socket of ours
    assert {rtp_header(p)[1] for p, _ in packets} == {0}  # PCMU, as answered
    loud = [p for p, _ in packets if np.sqrt(np.mean(decode_payload("PCMU", p[12:]).astype(np.float64) ** 2)) > 300]
    assert len(loud) >= played / 20 * 0.5, f"{len(loud)} of {len(packets)} packets carry speech"


async def _early_media(sock: socket.socket, to: tuple[str, int]) -> None:
    """PCMU silence, a packet every 20 ms, until cancelled."""
    for seq in range(1, 65536):
        sock.sendto(struct.pack("!BBHII", 0x80, 0, seq, 160 * seq, 0x5EED) + b"\xff" * 160, to)
        await asyncio.sleep(0.02)


async def test_rtp_before_the_answer_draws_no_rtcp_to_the_trunks_signalling_address(sip_gateway, tmp_path):
    """While the call rings the RTP session has no far end: RTP reaching our port (early media, or anyone's) is not
    taken, and nothing is sent. It was: aiortp sent RTCP receiver reports for it every ~5 s (the first within 7.5 s;
    the far end rings 9 s here), and an RTCP BYE when the unanswered call's session closed, to the address the
    session was created with, the trunk's signalling address (its SIP port + 1)."""
    far = free_udp_port()  # far: SIPp's SIP port; far + 1: watched here
    gw = await _gateway(sip_gateway, far)
    dialing = gw.legs["gateway.legs.sip"].dialing
    watch = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    watch.bind(("127.0.0.1", far + 1))
    watch.setblocking(False)
    early, early_rtcp = rtp_pair()
    reports: list[tuple[bytes, tuple]] = []
    watching = asyncio.create_task(_collect(watch, reports))
    sipp = asyncio.create_task(run_sipp(tmp_path, None, "out_ringing.xml", listen_port=far))
    control = None
    try:
        await asyncio.sleep(0.5)
        call_id = await _place(gw, {"to": "+15551234567", "trunk": "far", "ring_timeout_s": 9})
        control = await Control.connect(gw, additional_headers=AUTH)
        await control.attach(call_id)
        await control.expect("call.progress", state="ringing", timeout=10)
        ours = int(re.search(r"m=audio (\d+)", dialing.clients[call_id].dialed.sdp).group(1))
        sent = asyncio.create_task(_early_media(early, ("127.0.0.1", ours)))
        failed = await control.expect("call.failed", timeout=15)
        sent.cancel()
        assert failed["code"] == "no_answer"
    finally:
        run = await sipp
        watching.cancel()
        for s in (watch, early, early_rtcp):
            s.close()
        if control is not None:
            await control.close()
    run.assert_ok()
    assert reports == [], f"{len(reports)} datagrams to the trunk's SIP port + 1"
