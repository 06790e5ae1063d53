"""voxgate_client.Session on /v1/ws against a real gateway on loopback."""

import asyncio

import numpy as np
import pytest

from voxgate_client import (
    Audio,
    AudioStart,
    Error,
    Mark,
    Session,
    SessionEnded,
    SessionStarted,
    TurnDone,
    VoxgateError,
    parse_event,
)


def url(gw) -> str:
    return f"http://127.0.0.1:{gw.port}"


async def collect_until_done(session: Session, turn_id: str, timeout: float = 15.0) -> list:
    got = []

    async def run():
        async for ev in session.events():
            got.append(ev)
            if isinstance(ev, TurnDone) and ev.turn_id == turn_id:
                return

    await asyncio.wait_for(run(), timeout)
    return got


async def test_streamed_pieces_come_back_as_typed_events_and_paced_frames(start_gateway):
    gw = await start_gateway()
    async with await Session.connect(url(gw)) as s:
        assert s.session_id and s.output == {
            "encoding": "pcm16",
            "sample_rate": 24000,
            "frame_ms": 20,
            "pacing": "realtime",
        }
        turn = s.turn()
        await turn.say("Hello there. ")
        await turn.say("How are you today?")
        await turn.end()
        got = await collect_until_done(s, turn.turn_id)
    kinds = [type(e) for e in got if not isinstance(e, Audio)]
    assert kinds[0] is AudioStart and kinds[-1] is TurnDone and Mark in kinds
    done = got[-1]
    assert done.played_text == "Hello there. How are you today?" and not done.interrupted
    assert done.gaps == {"micro": 0, "audible": 0}
    frames = [e for e in got if isinstance(e, Audio)]
    assert all(isinstance(f.data, bytes) and len(f.data) == 960 for f in frames)
    assert abs(len(frames) * 20 - done.played_ms) <= 60
    assert np.abs(frames[len(frames) // 2].to_numpy()).max() > 0  # real audio, not silence


@pytest.mark.parametrize(
    "encoding,rate,dtype,samples", [("pcm16", 16000, np.int16, 320), ("mulaw", 8000, np.uint8, 160)]
)
async def test_numpy_frames_in_the_negotiated_format(start_gateway, encoding, rate, dtype, samples):
    gw = await start_gateway()
    s = await Session.connect(url(gw), encoding=encoding, sample_rate=rate, audio="numpy")
    turn = await s.say("Numbers as arrays.")
    got = await collect_until_done(s, turn.turn_id)
    await s.close()
    frames = [e.data for e in got if isinstance(e, Audio)]
    assert frames and all(isinstance(f, np.ndarray) and f.dtype == dtype and len(f) == samples for f in frames)


async def test_say_takes_an_async_generator_and_done_waits_without_events(start_gateway):
    gw = await start_gateway()

    async def llm_tokens():
        for token in ["The ", "answer ", "is ", "forty ", "two."]:
            await asyncio.sleep(0.01)
            yield token

    async with await Session.connect(url(gw), audio="drop") as s:
        turn = await s.say(llm_tokens())
        done = await turn.done(timeout=15)
    assert done.played_text == "The answer is forty two." and done.played_ms > 0


async def test_interrupt_cuts_the_turn_and_reports_what_was_heard(start_gateway):
    gw = await start_gateway()
    async with await Session.connect(url(gw), audio="drop") as s:
        long = "This is a long reply that goes on. " * 6
        turn = await s.say(long)
        async for ev in s.events():
            if isinstance(ev, AudioStart):
                break
        await asyncio.sleep(0.3)
        await s.interrupt()
        done = await turn.done(timeout=10)
    assert done.interrupted and 0 < done.played_ms < 20 * 70 * len(long)
    assert len(done.played_text) < len(long.strip())


async def test_bad_input_becomes_typed_error_events_and_the_session_goes_on(start_gateway):
    gw = await start_gateway()
    async with await Session.connect(url(gw), audio="drop") as s:
        await s.say("One.", turn_id="a")
        await s.say("Again.", turn_id="a")  # the turn already got final text
        await s.user_text("hi")  # no agent configured
        errors = []
        async for ev in s.events():
            if isinstance(ev, Error):
                errors.append(ev.code)
            if isinstance(ev, TurnDone):
                break
        assert errors[:2] == ["turn_closed", "no_agent"]
        second = await s.say("Still here.")
        assert (await second.done(timeout=10)).played_text == "Still here."


async def test_refusals_raise_with_the_gateways_code(start_gateway):
    gw = await start_gateway({"server": {"api_keys": ["sekrit"], "max_sessions": 1}})
    with pytest.raises(VoxgateError) as exc:
        await Session.connect(url(gw))
    assert exc.value.code == "unauthorized"
    with pytest.raises(VoxgateError) as exc:
        await Session.connect(url(gw), api_key="sekrit", voice="nobody")
    assert exc.value.code == "unknown_voice"
    first = await Session.connect(url(gw), api_key="sekrit")
    with pytest.raises(VoxgateError) as exc:
        await Session.connect(url(gw), api_key="sekrit")
    assert exc.value.code == "at_capacity"
    await first.close()


async def test_end_with_drain_plays_the_turn_then_events_stop(start_gateway):
    gw = await start_gateway()
    s = await Session.connect(url(gw), audio="drop")
    turn = await s.say("Goodbye now.")
    await s.end(drain=True)
    events = [ev async for ev in s.events()]
    assert isinstance(events[-1], SessionEnded)
    assert (await turn.done(timeout=1)).played_text == "Goodbye now."
    with pytest.raises(VoxgateError):
        await s.say("too late")


def test_unknown_events_and_new_fields_do_not_break_parsing():
    ev = parse_event({"type": "turn.done", "turn_id": "t", "played_ms": 5, "interrupted": False, "future_field": 1})
    assert isinstance(ev, TurnDone) and ev.extra == {"future_field": 1}
    assert parse_event({"type": "brand.new", "x": 1}).data == {"type": "brand.new", "x": 1}
    assert isinstance(parse_event({"type": "session.started", "session_id": "s"}), SessionStarted)


async def test_unpaced_session_gets_the_audio_at_once_with_chunk_texts_and_a_cut_on_interrupt(start_gateway):
    gw = await start_gateway({"simulated": {"ms_per_char": 70, "stream_rtf": 1.0}})
    s = await Session.connect(url(gw), sample_rate=16000, pacing="none", audio="numpy")
    assert s.output["pacing"] == "none"
    turn = await s.say("Short one. And a second sentence here.")
    got = await collect_until_done(s, turn.turn_id)
    audio = np.concatenate([e.data for e in got if isinstance(e, Audio)])
    done = got[-1]
    assert abs(len(audio) / 16 - done.played_ms) < 0.1  # every sample sent is counted, nothing else
    assert [m.text for m in got if isinstance(m, Mark)] == ["Short one.", "And a second sentence here."]
    # barge-in mid-turn: turn.done reports what was sent, cut; nothing of the turn comes after it
    long = "A much longer reply that goes on and on, so that it is cut off before it ends. More words."
    turn = await s.say(long)
    seen, cut = [], None
    async for ev in s.events():
        seen.append(ev)
        if isinstance(ev, Audio) and cut is None:
            cut = len(seen)
            await s.interrupt()
        if isinstance(ev, TurnDone):
            break
    done = seen[-1]
    assert done.interrupted and done.played_ms < 3000 and long.startswith(done.played_text) and done.played_text != long
    sent = sum(len(e.data) for e in seen if isinstance(e, Audio)) / 16
    assert abs(sent - done.played_ms) < 0.1
    with pytest.raises(ValueError):
        await Session.connect(url(gw), pacing="fast")
    await s.close()
