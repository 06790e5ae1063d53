"""The engine wire (tts/service/wire.py) and its server's door: typed messages, versions, bad input, the secret.

A raw ZeroMQ DEALER plays a gateway (or a stranger) against a real EngineServer on loopback tcp://.
"""

from __future__ import annotations

import asyncio

import msgspec
import numpy as np
import pytest

zmq = pytest.importorskip("zmq")

from tts.service import wire as W  # noqa: E402
from tts.service.remote import RemoteEngine  # noqa: E402
from tts.service.server import EngineServer  # noqa: E402
from tts.service.transport import EndpointError, Transport, secret_from_env  # noqa: E402
from tts.simulated import SimulatedEngine  # noqa: E402

SECRET = b"wire-test-secret-0123456789"


def test_messages_round_trip_and_pcm_travels_as_raw_frames():
    pcm = np.linspace(-1, 1, 1920, dtype=np.float32)
    frames = W.encode(W.Packets(chunks=[W.Chunk(7, 3, False, 1)]), [W.pcm_part(pcm)])
    assert len(frames) == 2 and bytes(frames[1]) == pcm.tobytes()  # the samples themselves, not in the header
    msg = W.decode_from_engine([frames[0], bytes(frames[1])])
    assert msg.chunks == [W.Chunk(7, 3, False, 1)]
    back = W.pcm_from(bytes(frames[1]))
    assert np.array_equal(back, pcm) and back.flags.writeable


def test_unknown_types_bad_fields_and_garbage_get_stable_codes_and_new_fields_are_ignored():
    def code(raw: bytes) -> str:
        with pytest.raises(W.WireError) as e:
            W.decode_from_gateway([raw])
        return e.value.code

    assert code(msgspec.msgpack.encode({"t": "turn_open", "turn": 1})) == W.UNKNOWN_TYPE
    assert code(msgspec.msgpack.encode({"t": "ops", "submit": [{"sid": "x"}]})) == W.BAD_MESSAGE
    assert code(b"\xc1 not msgpack") == W.BAD_MESSAGE
    assert W.decode_from_gateway([msgspec.msgpack.encode({"t": "ping", "added_later": 1})]) == W.Ping()


def test_tcp_needs_the_secret_and_endpoints_are_checked():
    with pytest.raises(EndpointError, match="VOXGATE_ENGINE_SECRET"):
        secret_from_env(["tcp://10.0.0.1:7000"], env={})
    with pytest.raises(EndpointError, match="too short"):
        secret_from_env(["tcp://10.0.0.1:7000"], env={"VOXGATE_ENGINE_SECRET": "short"})
    assert secret_from_env(["ipc:///run/voxgate/engine.sock"], env={}) is None
    with pytest.raises(ValueError):
        RemoteEngine(["http://engine:7000"])


@pytest.fixture
async def server():
    engine = SimulatedEngine()
    await engine.start()
    srv = EngineServer(engine, "tcp://127.0.0.1:0", secret=SECRET, heartbeat_s=1.0)
    await srv.start()
    yield srv
    await srv.close()
    await engine.close()


async def _exchange(sock, msg_frames: list, timeout: float = 5.0):
    await sock.send_multipart(msg_frames)
    return W.decode_from_engine(await asyncio.wait_for(sock.recv_multipart(), timeout))


async def test_a_monitor_attached_before_the_connect_sees_the_first_handshake(server):
    """The link's monitor goes on before `connect`: attached after it, it could miss the first handshake's success
    (the I/O thread may finish first), and a later disconnect was then reported as a handshake refusal (seen in CI
    for a killed engine)."""
    from zmq.utils.monitor import parse_monitor_message

    transport, monitors = Transport(), []

    def before_connect(sock):
        assert not sock.getsockopt(zmq.LAST_ENDPOINT)  # not connected yet
        monitors.append(sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED))

    sock = transport.client_socket(server.endpoint, SECRET, on_socket=before_connect)
    try:
        await asyncio.sleep(0.3)  # the handshake is done by now: a monitor attached only now would see nothing
        event = parse_monitor_message(await asyncio.wait_for(monitors[0].recv_multipart(), 5))
        assert event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED
    finally:
        sock.disable_monitor()
        monitors[0].close(linger=0)
        transport.close()


async def test_the_engine_answers_strangers_bad_messages_and_old_versions_and_keeps_serving(server):
    transport = Transport()
    sock = transport.client_socket(server.endpoint, SECRET)
    try:
        await asyncio.sleep(0.2)  # the handshake
        reply = await _exchange(sock, W.encode(W.Ops()))
        assert isinstance(reply, W.Error) and reply.code == W.NO_HELLO
        reply = await _exchange(sock, W.encode(W.Hello(v=W.VERSION + 1, gateway="g")))
        assert isinstance(reply, W.Refused) and reply.code == W.VERSION_MISMATCH
        reply = await _exchange(sock, [msgspec.msgpack.encode({"t": "turn_open", "turn": 1})])
        assert isinstance(reply, W.Error) and reply.code == W.UNKNOWN_TYPE
        reply = await _exchange(sock, W.encode(W.Hello(v=W.VERSION, gateway="g")))
        assert isinstance(reply, W.Welcome) and reply.engine == "simulated" and reply.heartbeat_s == 1.0
        await sock.send_multipart(
            W.encode(
                W.Ops(
                    submit=[
                        W.Submit(sid=1, text="Hi there.", due_in=0.0),
                        W.Submit(sid=1, text="Same sid.", due_in=0.0),
                        W.Submit(sid=2, text="Bad time.", due_in=float("nan")),
                    ]
                )
            )
        )
        failed, chunks = {}, []
        while 1 not in {c.sid for c in chunks if c.last}:
            msg = W.decode_from_engine(await asyncio.wait_for(sock.recv_multipart(), 5))
            if isinstance(msg, W.Packets):
                failed.update({f.sid: f.code for f in msg.failed})
                chunks += msg.chunks
        assert failed == {1: W.BAD_MESSAGE, 2: W.BAD_MESSAGE}  # the duplicate and the NaN; sid 1 itself played
    finally:
        sock.close(linger=0)
        transport.close()


async def test_a_gateway_with_another_secret_cannot_connect(server):
    remote = RemoteEngine([server.endpoint], secret=b"not-the-secret-at-all-000", connect_timeout_s=1.0)
    await remote.start()
    try:
        assert remote.health() is not None and "VOXGATE_ENGINE_SECRET" in remote.health()
        assert server.gateways == 0
    finally:
        await remote.close()


async def test_a_stranger_key_that_knows_the_engines_public_key_gets_no_welcome(server):
    """The engine's own check of the client key (ZAP), not the client's check of the server: a peer with a key pair
    of its own completes no handshake, even knowing the engine's public key (public keys are not secrets)."""
    from tts.service.transport import _keypair

    server_public, _ = _keypair(SECRET, b"server")
    transport = Transport()
    stranger = transport.context.socket(zmq.DEALER)
    stranger.setsockopt(zmq.LINGER, 0)
    stranger.curve_serverkey = server_public
    stranger.curve_publickey, stranger.curve_secretkey = zmq.curve_keypair()
    stranger.connect(server.endpoint)
    try:
        await stranger.send_multipart(W.encode(W.Hello(v=W.VERSION, gateway="stranger")))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(stranger.recv_multipart(), 1.5)
        assert server.gateways == 0
    finally:
        stranger.close(linger=0)
        transport.close()


def test_curve_keys_come_from_a_memory_hard_kdf_not_one_hash():
    import hashlib

    from tts.service import transport as T

    public, private = T._keypair(SECRET, b"client")
    one_hash = zmq.utils.z85.encode(hashlib.sha256(b"voxgate-engine-curve-v1/client/" + SECRET).digest())
    assert private != one_hash and len(zmq.utils.z85.decode(private)) == 32
    assert private == zmq.utils.z85.encode(hashlib.scrypt(SECRET, salt=T.KDF_SALT + b"client", dklen=32, **T.KDF_COST))
    assert T._keypair(SECRET, b"server")[1] != private


async def test_one_message_per_loop_turn_each_way_carries_every_streams_packets():
    from tts import SynthesisRequest

    engine = SimulatedEngine()  # defaults: 8 streams share one device; each step delivers to several of them
    await engine.start()
    steps_with_audio = 0
    step = engine._step

    def counting_step(now, dt):
        nonlocal steps_with_audio
        before = engine.audio_seconds
        step(now, dt)
        steps_with_audio += engine.audio_seconds > before

    engine._step = counting_step
    srv = EngineServer(engine, "tcp://127.0.0.1:0", secret=SECRET, heartbeat_s=1.0)
    await srv.start()
    remote = RemoteEngine([srv.endpoint], secret=SECRET)
    await remote.start()
    try:
        link = remote.links[0]
        ops0 = link.counters["ops_out"]
        streams = [remote.synthesize(SynthesisRequest(text="x" * 40, tag=f"s{i}/t/0")) for i in range(8)]
        assert link.counters["ops_out"] == ops0  # nothing sent yet: the loop turn's requests leave together
        chunks = await asyncio.gather(*[_all(s) for s in streams])
        assert link.counters["ops_out"] == ops0 + 1  # eight requests, one message
        total = sum(len(c) for c in chunks)
        assert link.counters["packets_in"] <= steps_with_audio < total  # one message per step, many packets each
    finally:
        await remote.close()
        await srv.close()
        await engine.close()


async def _all(stream):
    return [c async for c in stream]


async def test_a_gateway_that_stops_reading_is_dropped_at_its_backlog_and_the_others_play_on(tmp_path):
    """A peer that keeps talking but never reads (stuck, or hostile) cannot make the engine hold its packets
    without bound: at `send_backlog` messages queued for it the engine drops it and frees its streams,
    while a gateway that reads is served as before."""
    from tts import SynthesisRequest
    from tts.simulated import SimulatedSettings

    engine = SimulatedEngine(SimulatedSettings(first_packet_ms=10, capacity_x=200, stream_rtf=0.02, packet_ms=80))
    await engine.start()
    srv = EngineServer(engine, f"ipc://{tmp_path}/engine.sock", heartbeat_s=5.0, send_backlog=20)
    await srv.start()
    transport = Transport()
    stuck = transport.context.socket(zmq.DEALER)
    stuck.setsockopt(
        zmq.RCVHWM, 1
    )  # its own queue takes one message: past that the kernel's buffers, then the engine's
    stuck.setsockopt(zmq.RCVBUF, 4096)
    stuck.connect(srv.endpoint)
    remote = RemoteEngine([srv.endpoint])
    try:
        await asyncio.sleep(0.2)  # the handshake
        assert isinstance(await _exchange(stuck, W.encode(W.Hello(v=W.VERSION, gateway="stuck"))), W.Welcome)
        await stuck.send_multipart(
            W.encode(W.Ops(submit=[W.Submit(sid=i, text="Long speech. " * 400, due_in=0.0) for i in range(8)]))
        )
        await remote.start()
        good = remote.synthesize(SynthesisRequest(text="A reader is served. " * 10, tag="g/t/0"))
        pings = 0

        async def stuck_but_talking():
            nonlocal pings
            while srv.counters["dropped_not_reading"] == 0:
                await stuck.send_multipart(W.encode(W.Ops()))  # alive: never silent for a heartbeat
                pings += 1
                await asyncio.sleep(0.1)

        talker = asyncio.create_task(stuck_but_talking())
        chunks = await asyncio.wait_for(_all(good), 30)
        await asyncio.wait_for(talker, 30)
        assert chunks and chunks[-1].is_last  # the reader's request played to its end
        assert srv.counters["dropped_not_reading"] == 1 and srv.counters["dropped_silent"] == 0
        assert srv.open_streams == 0 and srv.gateways == 1  # the stuck one's 8 streams freed; the reader still known
        assert pings >= 1
    finally:
        await remote.close()
        stuck.close(linger=0)
        transport.close()
        await srv.close()
        await engine.close()


def test_closing_the_transport_never_waits_on_a_socket_left_open(tmp_path):
    """ZeroMQ's termination waits for every socket of the context: one left open and still referenced (a
    link's socket after a bug elsewhere: seen while writing this module's backlog test) hung the gateway's
    engine close for ever. In a subprocess, so that a hang fails the test instead of holding it."""
    import subprocess
    import sys

    code = f"""
import asyncio
from tts.service.transport import EndpointError, Transport
async def main():
    t = Transport()
    kept = t.client_socket("ipc://{tmp_path}/nobody.sock", None)  # left open, still referenced
    try:
        t.client_socket("tcp://127.0.0.1:9", None)  # refused: no secret
    except EndpointError:
        pass
    t.close()
    assert kept.closed
asyncio.run(main())
print("closed")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "closed" in out.stdout, out.stderr[-2000:]


def test_an_ipc_socket_folder_that_others_may_enter_is_refused_even_when_voxgate_did_not_make_it(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)  # made by someone else, readable by every user of the machine
    transport = Transport()
    try:
        with pytest.raises(EndpointError, match="mode 0700") as refused:
            transport.server_socket(f"ipc://{shared}/engine.sock", None)
        assert "0755" in str(refused.value) and not (shared / "engine.sock").exists()
        shared.chmod(0o700)
        transport.server_socket(f"ipc://{shared}/engine.sock", None).close(linger=0)
    finally:
        transport.close()
