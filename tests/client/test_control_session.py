"""voxgate_client.Session.attach on /v1/control: a Twilio-format far end on a real gateway, the agent through the client."""

import asyncio

import pytest

import voxgate_client.session as client_session
from tests.telephony.clients import TwilioClient
from voxgate_client import CallMedia, Error, Reconnected, Session, SessionEnded, VoxgateError

TEL = {"telephony": {"unknown_call_timeout_s": 0.6}}


def url(gw) -> str:
    return f"ws://127.0.0.1:{gw.port}"


async def next_of(session: Session, kind, timeout: float = 10.0):
    async def run():
        async for ev in session.events():
            if isinstance(ev, kind):
                return ev
        raise AssertionError(f"events ended before a {kind.__name__}")

    return await asyncio.wait_for(run(), timeout)


async def read_twilio(tw: TwilioClient) -> None:
    """Twilio's side reads everything (an unread socket would stall the gateway's close handshake)."""
    tw.media = 0
    try:
        while True:
            msg, _ = await tw.recv(timeout=60)
            tw.media += msg["event"] == "media"
            if msg["event"] == "mark":  # as Twilio does once the audio before it has played
                await tw.echo_mark(msg["mark"]["name"])
    except Exception:
        pass


async def start_call(gw, call_id: str) -> tuple[Session, TwilioClient]:
    agent = await Session.attach(url(gw), call_id)
    tw = await TwilioClient.connect(gw, stream_sid=f"MZ{call_id}", call_sid=f"CA{call_id}")
    await tw.start(params={"call_id": call_id})
    tw.reader = asyncio.ensure_future(read_twilio(tw))
    assert (await next_of(agent, CallMedia)).state == "connected"
    return agent, tw


async def test_an_agent_speaks_into_a_twilio_call(start_gateway):
    gw = await start_gateway(TEL)
    agent, tw = await start_call(gw, "c1")
    assert agent.call_id == "c1" and agent.session_id
    turn = await agent.say("Hello caller.")
    done = await turn.done(timeout=10)
    assert tw.media >= done.played_ms // 20 - 2  # the caller got the audio
    assert done.played_text == "Hello caller." and done.played_ms > 0
    await tw.stop()
    ended = await next_of(agent, SessionEnded)
    assert ended.reason is None  # the gateway ended it, not the client
    assert [ev async for ev in agent.events()] == []  # the stream is over
    await agent.close()


async def test_a_dropped_control_socket_reattaches_to_the_same_call(start_gateway):
    gw = await start_gateway(TEL)
    agent, tw = await start_call(gw, "c2")
    first_session = agent.session_id
    agent._ws.transport.abort()  # the network drops the agent's socket (no close handshake)
    back = await next_of(agent, Reconnected)
    assert back.session_id == first_session and back.call_id == "c2"
    turn = await agent.say("Still with you.")
    done = await turn.done(timeout=10)
    assert done.played_text == "Still with you."
    await tw.stop()
    await agent.close()


async def test_text_sent_while_the_socket_is_down_waits_for_the_reattach(start_gateway, monkeypatch):
    gw = await start_gateway(TEL)
    agent, tw = await start_call(gw, "c3")
    gate = asyncio.Event()
    real_open = client_session._open

    async def slow_open(*a, **kw):
        await gate.wait()
        return await real_open(*a, **kw)

    monkeypatch.setattr(client_session, "_open", slow_open)  # hold the reconnect until the test lets it go
    agent._ws.transport.abort()
    await asyncio.sleep(0.1)
    say = asyncio.ensure_future(agent.say("Queued while away."))
    await asyncio.sleep(0.2)
    assert not say.done()
    gate.set()
    turn = await asyncio.wait_for(say, 10)
    assert (await turn.done(timeout=10)).played_text == "Queued while away."
    await tw.stop()
    await agent.close()


async def test_a_call_that_ended_while_disconnected_ends_the_session_cleanly(start_gateway, monkeypatch):
    gw = await start_gateway(TEL)
    agent, tw = await start_call(gw, "c4")
    gate = asyncio.Event()
    real_open = client_session._open

    async def slow_open(*a, **kw):
        await gate.wait()
        return await real_open(*a, **kw)

    monkeypatch.setattr(client_session, "_open", slow_open)
    agent._ws.transport.abort()
    await asyncio.sleep(0.1)
    await tw.stop()  # the caller hangs up while the agent is away
    await asyncio.sleep(0.2)
    gate.set()
    error = await next_of(agent, Error)
    assert error.code == "connection_lost" and "ended while" in error.message
    assert (await next_of(agent, SessionEnded)).reason
    with pytest.raises(VoxgateError):
        await agent.say("anyone?")
    await asyncio.sleep(0.1)
    assert len(gw.sessions) == 0  # the probe attach did not leave a waiting call behind
    await agent.close()


async def test_without_reconnect_a_drop_ends_the_session(start_gateway):
    gw = await start_gateway(TEL)
    agent = await Session.attach(url(gw), "c5", reconnect=False)
    tw = await TwilioClient.connect(gw, stream_sid="MZc5", call_sid="CAc5")
    await tw.start(params={"call_id": "c5"})
    tw.reader = asyncio.ensure_future(read_twilio(tw))
    await next_of(agent, CallMedia)
    agent._ws.transport.abort()
    events = [ev async for ev in agent.events()]
    assert not any(isinstance(e, Reconnected) for e in events)
    assert agent.ended.is_set()
    await tw.stop()
    await agent.close()


async def test_attach_refusals_raise(start_gateway):
    gw = await start_gateway(TEL)
    agent = await Session.attach(url(gw), "busy")
    with pytest.raises(VoxgateError) as exc:
        await Session.attach(url(gw), "busy")
    assert exc.value.code == "call_busy"
    with pytest.raises(VoxgateError) as exc:
        await Session.attach(url(gw), "x" * 500)
    assert exc.value.code == "bad_message"
    # A call whose media never comes ends with unknown_call, as an event.
    assert (await next_of(agent, Error, timeout=5)).code == "unknown_call"
    await agent.close()


@pytest.mark.parametrize("door", ["/v1/control", "/v1/control/", "/v1/control/{call_id}"])
async def test_attach_takes_a_url_that_already_names_the_door(start_gateway, door):
    """The cluster docs' path door (`/v1/control/{call_id}`, hashed on by a balancer) and a plain
    `/v1/control` URL are used as given (the old client appended a second `/v1/control`)."""
    gw = await start_gateway(TEL)
    call_id = "door" + str(len(door))
    agent = await Session.attach(f"http://127.0.0.1:{gw.port}" + door.format(call_id=call_id), call_id)
    try:
        assert agent._url == f"ws://127.0.0.1:{gw.port}" + door.format(call_id=call_id).rstrip("/")
        tw = await TwilioClient.connect(gw, stream_sid=f"MZ{call_id}", call_sid=f"CA{call_id}")
        await tw.start(params={"call_id": call_id})
        tw.reader = asyncio.ensure_future(read_twilio(tw))
        assert (await next_of(agent, CallMedia)).state == "connected"
        done = await (await agent.say("Through the door.")).done(timeout=10)
        assert done.played_text == "Through the door."
        await tw.stop()
    finally:
        await agent.close()
