"""The RTP voxgate sends, read packet by packet by a caller on a plain UDP socket: 20 ms G.711 packets with
continuous sequence numbers and timestamps, the marker bit at each talkspurt, symmetric RTP, RTCP sender reports."""

from __future__ import annotations

import asyncio
import struct
import uuid

import numpy as np
import pytest

from gateway.legs import sip as sip_leg
from gateway.wire import sip as wire
from tests.sip.conftest import sip_port
from tests.sip.udp_caller import UdpCaller, rtp_header
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


@pytest.fixture
def caller():
    c = UdpCaller()
    yield c
    c.close()


async def test_rtp_is_continuous_with_a_marker_at_each_talkspurt(sip_gateway, caller, monkeypatch):
    monkeypatch.setattr(sip_leg, "RTCP_INTERVAL_S", 0.4)
    gw = await sip_gateway()
    call_id = f"rtp-{uuid.uuid4().hex}"
    answer = await caller.call(sip_port(gw), call_id, codec_pt=8)
    assert "RTP/AVP 8 101" in answer and "a=ptime:20" in answer
    control = await Control.connect(gw)
    await control.attach(call_id)
    packets = []

    async def read_rtp(n: int) -> None:
        while len(packets) < n:
            data, source = await caller.recv(caller.rtp)
            packets.append((asyncio.get_running_loop().time(), data, source))

    await read_rtp(15)  # idle: silence every 20 ms
    await control.send({"type": "text", "turn_id": "t1", "text": "Speech for the marker test.", "final": True})
    await control.expect("turn.done", turn_id="t1", timeout=10)
    await read_rtp(len(packets) + 10)
    heads = [rtp_header(p) for _, p, _ in packets]
    assert {h[1] for h in heads} == {8} and len({h[4] for h in heads}) == 1  # PCMA, one SSRC
    assert all(len(p) == 12 + 160 for _, p, _ in packets)
    assert all((b[2] - a[2]) % 65536 == 1 for a, b in zip(heads, heads[1:])), "sequence numbers skip"
    assert all((b[3] - a[3]) % 2**32 == wire.SAMPLES_PER_FRAME for a, b in zip(heads, heads[1:])), "timestamps skip"
    payloads = [wire.decode_payload("PCMA", p[12:]) for _, p, _ in packets]
    loud = [i for i, pcm in enumerate(payloads) if np.abs(pcm.astype(np.int32)).max() > 300]
    assert loud, "no speech in the RTP"
    markers = [i for i, h in enumerate(heads) if h[0]]
    assert markers == [0, loud[0]], f"marker bits at {markers}, speech from packet {loud[0]}"
    span = packets[-1][0] - packets[0][0]
    assert span >= 0.7 * 0.020 * (len(packets) - 1), f"{len(packets)} packets in {span:.2f} s: not paced"
    rtcp, _ = await caller.recv(caller.rtcp, timeout=3)
    assert rtcp[1] == 200  # a sender report
    await control.send({"type": "session.end"})
    while True:  # our BYE
        data, _ = await caller.recv(caller.sip)
        if data.startswith(b"BYE "):
            break


async def test_symmetric_rtp_sends_where_the_callers_rtp_comes_from(sip_gateway, caller):
    gw = await sip_gateway()
    call_id = f"nat-{uuid.uuid4().hex}"
    await caller.call(sip_port(gw), call_id)
    _, server_rtp = await caller.recv(caller.rtp)  # to the SDP's address at first
    behind_nat = UdpCaller._bind()  # the caller's RTP really leaves from another port (a NAT rewrote it)
    try:
        silence = bytes([0xFF]) * 160
        for seq in range(5):
            behind_nat.sendto(struct.pack("!BBHII", 0x80, 0, seq, seq * 160, 1234) + silence, server_rtp)
            await asyncio.sleep(0.02)
        data, _ = await caller.recv(behind_nat, timeout=2)  # voxgate latched onto the source address
        assert rtp_header(data)[1] == 0
    finally:
        behind_nat.close()


async def test_a_caller_whose_rtp_stops_is_hung_up(sip_gateway, caller):
    """A phone that vanished without a BYE: no RTP for sip.rtp_timeout_s ends the call with our BYE."""
    gw = await sip_gateway(sip={"rtp_timeout_s": 1.0})
    await caller.call(sip_port(gw), f"gone-{uuid.uuid4().hex}")  # and never sends a packet
    began = asyncio.get_running_loop().time()
    while True:
        data, _ = await caller.recv(caller.sip, timeout=5)
        if data.startswith(b"BYE "):
            break
    assert asyncio.get_running_loop().time() - began >= 0.9
    await asyncio.sleep(0.1)
    assert len(gw.calls) == 0


async def test_a_caller_that_keeps_sending_rtp_stays(sip_gateway, caller):
    gw = await sip_gateway(sip={"rtp_timeout_s": 1.0})
    await caller.call(sip_port(gw), f"here-{uuid.uuid4().hex}")
    _, server_rtp = await caller.recv(caller.rtp)
    for seq in range(100):  # 2 s of the caller's silence, as a phone sends it
        caller.rtp.sendto(struct.pack("!BBHII", 0x80, 0, seq, seq * 160, 99) + bytes([0xFF]) * 160, server_rtp)
        await asyncio.sleep(0.02)
    assert len(gw.calls) == 1


async def test_played_text_is_what_left_on_the_clock(sip_gateway, caller):
    """RTP has no far-end confirmation: after an interrupt, played_text is the start of the turn that was sent,
    and nothing of the turn leaves after it."""
    gw = await sip_gateway()
    call_id = f"truth-{uuid.uuid4().hex}"
    await caller.call(sip_port(gw), call_id)
    control = await Control.connect(gw)
    await control.attach(call_id)
    text = "First words go out at once. " + "Then a long tail that the caller never hears. " * 5
    await control.send({"type": "text", "turn_id": "t1", "text": text, "final": True})
    await control.expect("audio.start", turn_id="t1", timeout=10)
    await asyncio.sleep(0.8)
    await control.send({"type": "interrupt"})
    done = await control.expect("turn.done", turn_id="t1", timeout=5)
    assert done["interrupted"] is True and 500 <= done["played_ms"] <= 1500
    assert (
        done["played_text"]
        and text.startswith(done["played_text"].rstrip())
        and len(done["played_text"]) < len(text) / 2
    )
    await asyncio.sleep(0.1)
    while True:  # what is still queued on our socket was sent before the interrupt (or just after: silence)
        try:
            caller.rtp.recv(2048)
        except BlockingIOError:
            break
    after = []
    for _ in range(10):
        data, _ = await caller.recv(caller.rtp)
        after.append(wire.decode_payload("PCMU", data[12:]))
    assert all(np.abs(pcm.astype(np.int32)).max() < 300 for pcm in after), "speech went on after the interrupt"
