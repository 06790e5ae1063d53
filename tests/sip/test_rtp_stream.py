"""The RTP voxgate sends, read packet by packet by a caller on a plain UDP socket: 20 ms G.711 packets with
continuous sequence numbers and timestamps, the marker bit at each talkspurt, strict RTP (a NAT's port is learned
in the first packets, a stranger is never heard nor answered), RTCP sender reports."""

from __future__ import annotations

import asyncio
import struct
import uuid

import numpy as np
import pytest

from gateway.sip import answering
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
    monkeypatch.setattr(answering, "RTCP_INTERVAL_S", 0.4)
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


def rtp_packet(seq: int, ssrc: int = 1234, payload: bytes = bytes([0xFF]) * 160) -> bytes:
    return struct.pack("!BBHII", 0x80, 0, seq, seq * 160, ssrc) + payload


def dropped(gw, reason: str) -> float:
    return gw.metrics.rtp_dropped.labels(reason=reason)._value.get()


async def test_behind_nat_the_first_packets_move_the_media_to_the_callers_real_port(sip_gateway, caller):
    """NAT keeps the caller's IP and rewrites its port: RTP from the signalling IP but another port, in the first
    packets, is where the call's audio goes from then on (the learning window of strict RTP)."""
    gw = await sip_gateway()
    call_id = f"nat-{uuid.uuid4().hex}"
    await caller.call(sip_port(gw), call_id)
    _, server_rtp = await caller.recv(caller.rtp)  # to the SDP's address at first
    behind_nat = UdpCaller._bind()  # the caller's RTP really leaves from another port (a NAT rewrote it)
    try:
        for seq in range(5):
            behind_nat.sendto(rtp_packet(seq), server_rtp)
            await asyncio.sleep(0.02)
        data, _ = await caller.recv(behind_nat, timeout=2)  # voxgate learned the NAT's port
        assert rtp_header(data)[1] == 0
    finally:
        behind_nat.close()


async def test_strict_rtp_a_stranger_gets_nothing_feeds_nothing_and_keeps_no_call_alive(sip_gateway, caller):
    """RTP bleed (CVE-2017-14099's class): packets from another address to a call's RTP port must not turn the
    agent's audio towards it, reach the call's inbound path, or keep a call whose caller went silent alive."""
    gw = await sip_gateway(sip={"rtp_timeout_s": 1.5})
    call_id = f"bleed-{uuid.uuid4().hex}"
    await caller.call(sip_port(gw), call_id)
    _, server_rtp = await caller.recv(caller.rtp)
    stranger = UdpCaller._bind(0, "127.0.0.66")
    (c,) = gw.legs["gateway.legs.sip"].calls.values()
    pushed = []
    c.call.inbound.push = lambda samples: pushed.append(samples)  # what reaches VAD, STT and the recording
    try:
        loud = bytes([0x00]) * 160  # μ-law full scale: speech, were it let in
        seq = 0
        while gw.legs["gateway.legs.sip"].calls and seq < 300:  # the stranger's RTP every 20 ms, up to 6 s
            stranger.sendto(rtp_packet(seq, ssrc=666, payload=loud), server_rtp)
            seq += 1
            await asyncio.sleep(0.02)
        with pytest.raises(TimeoutError):
            await caller.recv(stranger, timeout=0.3)  # not one packet of the call's audio went to the stranger
        assert not pushed, "the stranger's audio reached the call's inbound path"
        assert dropped(gw, "stranger") >= 20
        # the caller itself never sent RTP: the call ended at rtp_timeout_s, the stranger's packets notwithstanding
        assert gw.legs["gateway.legs.sip"].calls == {}
    finally:
        stranger.close()


async def test_strict_rtp_after_learning_another_port_of_the_callers_ip_is_dropped(sip_gateway, caller):
    gw = await sip_gateway()
    await caller.call(sip_port(gw), f"late-{uuid.uuid4().hex}")
    _, server_rtp = await caller.recv(caller.rtp)
    for seq in range(8):  # the caller's own RTP, from the SDP's port: the learning window closes
        caller.rtp.sendto(rtp_packet(seq), server_rtp)
        await asyncio.sleep(0.02)
    late = UdpCaller._bind()
    try:
        for seq in range(8, 20):
            late.sendto(rtp_packet(seq), server_rtp)
            await asyncio.sleep(0.02)
        with pytest.raises(TimeoutError):
            await caller.recv(late, timeout=0.3)
        assert dropped(gw, "after_learning") >= 10
        await caller.recv(caller.rtp)  # the call's audio still goes to the caller
    finally:
        late.close()


async def test_rtp_ports_are_drawn_at_random(sip_gateway):
    """aiortp handed ports out in order from the start of the range: the next call's port was guessable."""
    gw = await sip_gateway()
    ports = []
    for _ in range(4):
        c = UdpCaller()
        try:
            answer = await c.call(sip_port(gw), f"port-{uuid.uuid4().hex}")
        finally:
            c.close()
        ports.append(int(answer.split("m=audio ", 1)[1].split()[0]))
    assert all(30000 <= p <= 39999 and p % 2 == 0 for p in ports)
    assert ports != list(range(ports[0], ports[0] + 8, 2)), ports


async def test_no_rtp_before_the_ack_and_none_towards_an_address_an_invite_names(sip_gateway, caller):
    """INVITEs naming a victim's address in c= and never ACKed made voxgate send RTP there (a reflection
    amplifier): nothing is sent before the ACK (or the caller's first RTP), and Timer H ends the call."""
    from tests.sip.udp_caller import ack, invite

    gw = await sip_gateway(sip={"ack_timeout_s": 1.0})
    victim = UdpCaller()
    try:
        call_id = f"reflect-{uuid.uuid4().hex}"
        caller.sip.sendto(
            invite(call_id, caller.sip.getsockname()[1], victim.rtp.getsockname()[1]), ("127.0.0.1", sip_port(gw))
        )
        while True:
            data, _ = await caller.recv(caller.sip)
            if data.startswith(b"SIP/2.0 200"):
                break
        with pytest.raises(TimeoutError):
            await caller.recv(victim.rtp, timeout=0.6)  # answered, not ACKed: not one packet
        while True:  # Timer H (sip.ack_timeout_s): our BYE
            data, _ = await caller.recv(caller.sip, timeout=3)
            if data.startswith(b"BYE "):
                break
        assert gw.legs["gateway.legs.sip"].calls == {}
        # and an ACKed call's audio starts at the ACK
        answer = await caller.final_response(sip_port(gw), f"acked-{uuid.uuid4().hex}")
        tag = answer.split("\r\nTo: ", 1)[1].split("tag=", 1)[1].split("\r\n")[0]
        with pytest.raises(TimeoutError):
            await caller.recv(caller.rtp, timeout=0.3)
        caller.sip.sendto(
            ack(answer.split("Call-ID: ", 1)[1].split("\r\n")[0], caller.sip.getsockname()[1], tag),
            ("127.0.0.1", sip_port(gw)),
        )
        await caller.recv(caller.rtp, timeout=2)
    finally:
        victim.close()


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
