"""The control channel's rules (docs/protocol.md) and Twilio input that is wrong in every way we could think of."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
import websockets

from tests.telephony.clients import Control, TwilioClient, tone_ulaw


async def errors_of(control: Control) -> list[str]:
    return [e["code"] for e in control.events if e["type"] == "error"]


async def test_messages_before_attach_and_a_second_attach_are_refused(gateway):
    control = await Control.connect(gateway)
    await control.send({"type": "text", "turn_id": "t", "text": "Hi.", "final": True})
    assert (await control.expect("error"))["code"] == "no_session"
    await control.send("{not json")
    assert (await control.expect("error"))["code"] == "bad_json"
    await control.send({"type": "call.attach"})
    assert (await control.expect("error"))["code"] == "bad_message"
    await control.send({"type": "call.attach", "call_id": "x" * 200})
    assert (await control.expect("error"))["code"] == "bad_message"
    await control.send({"type": "call.attach", "call_id": "c1", "voice": "nobody"})
    assert (await control.expect("error"))["code"] == "unknown_voice"

    await control.attach("c1")
    await control.send({"type": "call.attach", "call_id": "c2"})
    assert (await control.expect("error"))["code"] == "session_exists"  # one call per control socket
    await control.send({"type": "session.start"})
    assert (await control.expect("error"))["code"] == "bad_message"
    await control.send({"type": "user.text", "text": "hello"})
    assert (await control.expect("error"))["code"] == "no_agent"
    await control.ws.send(b"\x00\x01")
    assert (await control.expect("error"))["code"] == "binary_not_allowed"
    await control.send({"type": "dance"})
    assert (await control.expect("error"))["code"] == "unknown_type"

    other = await Control.connect(gateway)
    await other.send({"type": "call.attach", "call_id": "c1"})
    assert (await other.expect("error"))["code"] == "call_busy"  # one control socket per call


async def test_text_before_the_media_leg_plays_once_it_connects(gateway):
    control = await Control.connect(gateway)
    await control.attach("early")
    await control.send({"type": "text", "turn_id": "t", "text": "Waiting for you.", "final": True})
    await asyncio.sleep(0.3)
    assert not any(e["type"] == "audio.start" for e in control.events)  # nobody could hear it yet
    tw = await TwilioClient.connect(gateway, stream_sid="MZe", call_sid="CAe")
    await tw.start(params={"call_id": "early"})
    msg, _ = await tw.recv()
    assert msg["event"] == "media"
    await control.expect("turn.done", turn_id="t")
    await tw.stop()


async def test_agent_can_reattach_after_its_socket_drops(gateway):
    tw = await TwilioClient.connect(gateway, stream_sid="MZr", call_sid="CAr")
    await tw.start()
    first = await Control.connect(gateway)
    session_id = (await first.attach("CAr"))["session_id"]
    await first.close()
    await asyncio.sleep(0.05)
    second = await Control.connect(gateway)
    assert (await second.attach("MZr"))["session_id"] == session_id  # the same call, still connected
    await second.expect("call.media", state="connected")
    await tw.stop()
    await second.expect("session.ended")


async def test_control_requires_the_api_key_when_keys_are_configured(make_gateway):
    gw = await make_gateway(server={"api_keys": ["k1"]})
    with pytest.raises(websockets.InvalidStatus) as refused:
        await Control.connect(gw)
    assert refused.value.response.status_code == 401
    control = await Control.connect(gw, additional_headers={"Authorization": "Bearer k1"})
    await control.attach("c")


async def test_malformed_twilio_input_gets_errors_and_never_touches_other_calls(gateway):
    bystander = await TwilioClient.connect(gateway, stream_sid="MZok", call_sid="CAok")
    await bystander.start()
    bystander_control = await Control.connect(gateway)
    await bystander_control.attach("CAok")

    bad = await TwilioClient.connect(gateway, stream_sid="MZbad", call_sid="CAbad")
    await bad.media(tone_ulaw())  # media before start: nothing to attach it to (counted, logged)
    await bad.start()
    control = await Control.connect(gateway)
    await control.attach("CAbad")
    await control.expect("call.media", state="connected")
    await bad.send("{oops")
    await bad.send("[1, 2]")
    await bad.send({"event": "media", "media": {"payload": "!!!not base64!!!"}})
    await bad.send({"event": "media", "media": {"payload": ""}})
    await bad.send({"event": "media", "media": {"payload": base64.b64encode(b"\xff" * 9000).decode()}})
    await bad.send({"event": "media", "media": "payload"})
    await bad.send({"event": "dtmf", "dtmf": {"digit": "55"}})
    await bad.send({"event": "mark", "mark": {"name": "never-sent"}})
    await bad.send({"event": "teleport"})
    await bad.send(b"\x00\x01\x02")
    await bad.send({"event": "start", "start": {"streamSid": "MZother"}})
    expected = [
        "bad_json",
        "bad_message",
        "bad_audio",
        "bad_audio",
        "bad_audio",
        "bad_message",
        "bad_message",
        "bad_message",
        "unknown_type",
        "binary_not_allowed",
        "bad_message",
    ]
    for code in expected:
        assert (await control.expect("error"))["code"] == code
    await bad.media(tone_ulaw())  # still a working call
    await control.send({"type": "text", "turn_id": "t", "text": "Still fine.", "final": True})
    await control.expect("turn.done", turn_id="t")

    await bystander_control.send({"type": "text", "turn_id": "b", "text": "Unbothered.", "final": True})
    msg, _ = await bystander.recv()
    assert msg["event"] == "media" and msg["streamSid"] == "MZok"
    await bystander_control.expect("turn.done", turn_id="b")
    assert await errors_of(bystander_control) == []

    bad.ws.transport.abort()  # abrupt: no stop, no close frame
    ended = await control.expect("call.media", state="ended")
    assert ended["reason"] == "disconnected"
    await control.expect_closed()
    assert gateway.calls.get("CAok") is not None and gateway.calls.get("CAbad") is None
    metrics = gateway.metrics.render().decode()
    assert 'voxgate_errors_total{code="no_session"} 1.0' in metrics


async def test_unusable_start_closes_the_stream(gateway):
    tw = await TwilioClient.connect(gateway)
    await tw.start(media_format={"encoding": "audio/x-l16", "sampleRate": 16000, "channels": 1})
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await tw.recv()
    assert closed.value.rcvd.code == 1008
    tw = await TwilioClient.connect(gateway)
    await tw.send({"event": "start", "start": {"callSid": "CA9"}})  # no streamSid: nowhere to send audio
    with pytest.raises(websockets.ConnectionClosed):
        await tw.recv()
    assert len(gateway.calls) == 0 and not gateway.sessions


async def test_a_full_gateway_refuses_new_calls_with_at_capacity(make_gateway):
    gw = await make_gateway(server={"max_sessions": 1})
    first = await Control.connect(gw)
    await first.attach("one")
    second = await Control.connect(gw)
    await second.send({"type": "call.attach", "call_id": "two"})
    assert (await second.expect("error"))["code"] == "at_capacity"
    tw = await TwilioClient.connect(gw, stream_sid="MZ3", call_sid="CA3")
    await tw.start()
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await tw.recv()
    assert closed.value.rcvd.code == 1013


async def test_user_text_reaches_the_built_in_agent_and_its_reply_plays_on_twilio(make_gateway):
    gw = await make_gateway(llm={"kind": "simulated", "ttft_ms": 20, "tokens_per_s": 400})
    tw = await TwilioClient.connect(gw, stream_sid="MZa", call_sid="CAa")
    await tw.start()
    control = await Control.connect(gw)
    await control.attach("CAa")
    await control.send({"type": "user.text", "text": "Hello?"})
    start = await control.expect("audio.start")
    msg, _ = await tw.recv()
    assert msg["event"] == "media"
    await control.send({"type": "interrupt"})
    while msg["event"] != "clear":
        msg, _ = await tw.recv()
    done = await control.expect("turn.done", turn_id=start["turn_id"])
    assert done["interrupted"] is True
    await tw.stop()


async def test_draining_gateway_ends_telephony_calls_with_shutting_down(make_gateway):
    from tests.telephony.clients import AudioSocketClient

    gw = await make_gateway()
    tw = await TwilioClient.connect(gw, stream_sid="MZd", call_sid="CAd")
    await tw.start()
    tw_control = await Control.connect(gw)
    await tw_control.attach("CAd")
    asock = await AudioSocketClient.connect(gw)
    as_control = await Control.connect(gw)
    await as_control.attach(str(asock.uuid))
    await as_control.expect("call.media", state="connected")
    await gw.drain(timeout=0.1)
    for control in (tw_control, as_control):
        assert (await control.expect("error"))["code"] == "shutting_down"
        await control.expect("session.ended")
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await tw.recv()
    rest = await asock.read_until_eof()
    assert rest[-1] == (0x00, b"")


async def test_the_agent_keeps_its_history_and_events_after_the_control_socket_reattaches(make_gateway):
    gw = await make_gateway(llm={"kind": "simulated", "ttft_ms": 20, "tokens_per_s": 400})
    service = gw.agents
    tw = await TwilioClient.connect(gw, stream_sid="MZh", call_sid="CAh")
    await tw.start()
    tw.echo_marks(0.05)  # the history is trimmed to what Twilio confirms as played
    first = await Control.connect(gw)
    await first.attach("CAh")
    await first.send({"type": "user.text", "text": "Hello?"})
    await first.expect("turn.done")
    await first.close()
    await asyncio.sleep(0.05)
    second = await Control.connect(gw)
    await second.attach("CAh")
    await second.send({"type": "user.text", "text": "Tell me more."})
    assert (await second.expect("agent.text"))["text"]  # the reply streams to the new socket
    start = await second.expect("audio.start")
    await asyncio.sleep(1.0)  # a few words heard and confirmed (nothing heard would delete the reply from the history)
    await second.send({"type": "interrupt"})
    done = await second.expect("turn.done", turn_id=start["turn_id"])
    assert done["interrupted"] is True and done["played_text"]
    (the_agent,) = service.agents.values()
    last = the_agent.conversation.messages()[-1]
    assert last["role"] == "assistant" and last["content"] == done["played_text"]  # trimmed to what was heard
    await tw.stop()


async def test_an_agent_that_stops_reading_never_stalls_other_calls(make_gateway):
    gateway = await make_gateway(chunker={"max_chunk_chars": 20})  # a mark to the stuck agent every few hundred ms
    # The stuck agent: attached to a playing call, then it floods bad messages (each answered with an error
    # that echoes it) and never reads, so its socket's buffers fill up.
    stuck_tw = await TwilioClient.connect(gateway, stream_sid="MZstuck", call_sid="CAstuck")
    await stuck_tw.start()
    stuck = await Control.connect(gateway, max_queue=1)
    await stuck.attach("CAstuck")
    # Every event of this turn echoes its 30 kB id: the clock's own sends to the agent are large.
    await stuck.send(
        {"type": "text", "turn_id": "s" * 30_000, "text": "Long words for a long while. " * 20, "final": True}
    )
    junk = json.dumps({"type": "x" * 60_000})

    async def flood() -> None:
        for _ in range(300):
            await stuck.send(junk)

    flooding = asyncio.get_running_loop().create_task(flood())
    for _ in range(100):  # until the gateway stops reading the stuck agent (it is stuck writing to it)
        if stuck.ws.transport.get_write_buffer_size() > 0:
            break
        await asyncio.sleep(0.05)

    bystander = await TwilioClient.connect(gateway, stream_sid="MZby", call_sid="CAby")
    await bystander.start()
    control = await Control.connect(gateway)
    await control.attach("CAby")
    await control.send({"type": "text", "turn_id": "b", "text": "Unbothered by the other agent. " * 4, "final": True})
    frames = 0
    while frames < 50:  # a second of paced audio: the shared clock still runs
        msg, _ = await bystander.recv(timeout=2.0)
        frames += msg["event"] == "media"
    await control.expect("turn.done", turn_id="b")
    # The stuck agent lost its socket; its call goes on (an agent may re-attach).
    call = gateway.calls.get("CAstuck")
    assert call is not None and call.control is None
    again = await Control.connect(gateway)
    await again.attach("CAstuck")
    flooding.cancel()
    stuck.ws.transport.abort()


async def test_a_control_socket_that_never_reads_its_errors_is_dropped_not_held(gateway):
    # Before any attach: bad messages whose errors echo them, and a client that reads nothing.
    stuck = await Control.connect(gateway, max_queue=1)
    junk = json.dumps({"type": "x" * 60_000})

    async def flood() -> None:
        for _ in range(300):
            await stuck.send(junk)

    flooding = asyncio.get_running_loop().create_task(flood())
    try:
        # The gateway drops the socket once it backs up, so its handler ends (it would idle-time-out if it were reading).
        await asyncio.wait_for(stuck.ws.wait_closed(), 10)
        for _ in range(50):
            if not gateway.calls.connections:
                break
            await asyncio.sleep(0.05)
        assert not gateway.calls.connections
    finally:
        flooding.cancel()
        stuck.ws.transport.abort()


async def test_a_reading_agent_gets_even_the_largest_events(gateway):
    control = await Control.connect(gateway)
    await control.attach("CAbig")
    tw = await TwilioClient.connect(gateway, stream_sid="MZbig", call_sid="CAbig")
    await tw.start()
    await control.expect("call.media", state="connected")
    text = "漢字" * 10_000  # 48 kB of UTF-8 in one event (agent.text-like echoes, played_text)
    await control.send(
        json.dumps({"type": "text", "turn_id": "t", "text": text[:16_000], "final": False}, ensure_ascii=False)
    )
    await control.send({"type": "text", "turn_id": "t" * 20_000, "text": "x", "final": False})
    await control.send(json.dumps({"type": "漢" * 22_000}, ensure_ascii=False))  # its error echoes 66 kB of UTF-8
    assert (await control.expect("error"))["code"] == "unknown_type"
    await control.send({"type": "interrupt"})
    await control.expect("turn.done", turn_id="t")
    assert gateway.calls.get("CAbig").control is not None
    tw.ws.transport.abort()
