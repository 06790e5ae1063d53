"""The WebRTC leg with a real aiortc client peer on loopback."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from tests.webrtc.peer import ClientPeer
from tts.espeak_engine import espeak_available

TEXT = "Hello there. This is the WebRTC leg speaking. It pulls frames from the playout."


@pytest.fixture
async def peer(gateway):
    p = ClientPeer(gateway.url)
    yield p
    await p.close()


async def test_opus_call_plays_a_full_turn_with_events_and_audio(gateway, peer):
    answer = await peer.connect()
    assert "opus/48000" in answer["sdp"].lower() and answer["session_id"]
    peer.send({"type": "session.start", "language": "en"})
    started = await peer.next_event("session.started")
    assert started["session_id"] == answer["session_id"]
    assert started["output"] == {"encoding": "opus", "sample_rate": 48000, "frame_ms": 20}
    assert started["mode"] == "sentence" and "mode_note" not in started  # the default, echoed as on /v1/ws

    t0 = peer.send({"type": "text", "turn_id": "t1", "text": TEXT, "final": True})
    start = await peer.next_event("audio.start", turn_id="t1")
    assert start["ttfa_ms"] >= 0
    mark = await peer.next_event("mark", turn_id="t1")
    assert mark["chunk"] == 0 and mark["played_ms"] > 0
    done = await peer.next_event("turn.done", turn_id="t1", timeout=20)
    assert done["interrupted"] is False and done["played_text"] == TEXT
    assert done["played_ms"] > 1500

    _, samples, rate, layout = peer.frames[-1]
    assert (rate, layout, len(samples)) == (48000, "stereo", 2 * 960)  # Opus decodes to 48 kHz stereo 20 ms
    heard = peer.first_sound_after(t0)
    assert heard is not None
    assert peer.rms_between(heard, heard + 1.0) > 0.02
    # Paced in real time: the turn's audio arrives over about its own duration.
    spoken = [at for at, s, _, _ in peer.frames if at >= heard]
    assert len(spoken) >= 50


async def test_interrupt_stops_audio_and_reports_what_was_heard(gateway, peer):
    await peer.connect()
    peer.send({"type": "session.start"})
    await peer.next_event("session.started")
    long_text = " ".join(f"Sentence number {i} goes on for a while." for i in range(30))
    peer.send({"type": "text", "turn_id": "long", "text": long_text, "final": True})
    await peer.next_event("audio.start", turn_id="long")
    await asyncio.sleep(0.8)
    t_int = peer.send({"type": "interrupt"})
    done = await peer.next_event("turn.done", turn_id="long")
    assert done["interrupted"] is True
    assert 300 < done["played_ms"] < 5000
    assert long_text.startswith(done["played_text"]) and 0 < len(done["played_text"]) < len(long_text)
    await asyncio.sleep(0.6)
    assert peer.rms_between(t_int + 0.3, t_int + 0.6) < 0.005  # silence after the barge-in
    # The session lives on: a new turn plays.
    peer.send({"type": "text", "turn_id": "after", "text": "Still here.", "final": True})
    await peer.next_event("turn.done", turn_id="after")


async def test_pcmu_is_used_when_it_is_all_the_client_offers(gateway):
    peer = ClientPeer(gateway.url, codecs=["PCMU"])
    try:
        answer = await peer.connect()
        assert "PCMU/8000" in answer["sdp"] and "opus" not in answer["sdp"].lower()
        peer.send({"type": "text", "turn_id": "t1", "text": "Short one.", "final": True})
        started = await peer.next_event("session.started")  # created by the first message
        assert started["output"]["encoding"] == "pcmu" and started["output"]["sample_rate"] == 8000
        await peer.next_event("turn.done", turn_id="t1")
        _, samples, rate, _ = peer.frames[-1]
        assert rate == 8000 and len(samples) == 160
    finally:
        await peer.close()


async def test_agent_reply_streams_as_a_turn_and_barge_in_trims_history(gateway, peer):
    await peer.connect()
    peer.send({"type": "session.start"})
    started = await peer.next_event("session.started")
    peer.send({"type": "user.text", "text": "Hello agent"})
    piece = await peer.next_event("agent.text", turn_id="agent-1")
    assert piece["text"]
    await peer.next_event("audio.start", turn_id="agent-1")
    done = await peer.next_event("turn.done", turn_id="agent-1", timeout=20)
    assert done["interrupted"] is False
    service_agent = gateway.agents.agents[started["session_id"]]
    reply = service_agent.conversation.history[-1]["content"]
    assert done["played_text"] == reply.strip()

    peer.send({"type": "user.text", "text": "Tell me more"})
    await peer.next_event("audio.start", turn_id="agent-2")
    await asyncio.sleep(0.5)
    peer.send({"type": "interrupt"})
    done = await peer.next_event("turn.done", turn_id="agent-2")
    assert done["interrupted"] is True
    history = service_agent.conversation.history
    assert history[-2] == {"role": "user", "content": "Tell me more"}
    assert history[-1] == {"role": "assistant", "content": done["played_text"]}
    assert len(done["played_text"]) < len(service_agent.model.EN[1])


async def test_bad_data_channel_message_gets_an_error_and_the_call_survives(gateway, peer):
    await peer.connect()
    peer.send("{not json")
    assert (await peer.next_event("error"))["code"] == "bad_json"
    peer.send({"type": "session.start", "voice": "nobody"})
    assert (await peer.next_event("error"))["code"] == "unknown_voice"
    peer.send({"type": "session.start"})
    await peer.next_event("session.started")
    peer.send({"type": "session.start"})
    assert (await peer.next_event("error"))["code"] == "session_exists"
    peer.send({"type": "text", "turn_id": "t", "text": "Fine.", "final": True})
    await peer.next_event("turn.done", turn_id="t")


async def test_session_end_closes_the_call(gateway, peer):
    await peer.connect()
    peer.send({"type": "session.start"})
    started = await peer.next_event("session.started")
    peer.send({"type": "session.end"})
    await peer.next_event("session.ended")
    for _ in range(50):
        if started["session_id"] not in gateway.sessions:
            break
        await asyncio.sleep(0.05)
    assert started["session_id"] not in gateway.sessions


@pytest.mark.parametrize(
    "body, status, code",
    [
        ("not json", 400, "bad_json"),
        ({"sdp": 5, "type": "offer"}, 400, "bad_message"),
        ({"sdp": "v=0\r\n", "type": "answer"}, 400, "bad_message"),
        ({"sdp": "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\n", "type": "offer"}, 400, "bad_message"),
    ],
)
async def test_bad_offers_get_clear_errors(gateway, body, status, code):
    async with aiohttp.ClientSession() as http:
        kw = {"data": body} if isinstance(body, str) else {"json": body}
        async with http.post(f"{gateway.url}/v1/webrtc/offer", **kw) as resp:
            assert resp.status == status
            assert (await resp.json())["code"] == code


async def test_offer_needs_the_api_key_when_keys_are_configured(gateway_factory):
    gw = await gateway_factory(server={"api_keys": ["k1"]})
    refused = ClientPeer(gw.url)
    try:
        with pytest.raises(RuntimeError, match="401"):
            await refused.connect()
    finally:
        await refused.close()
    peer = ClientPeer(gw.url, token="k1")
    try:
        await peer.connect()
    finally:
        await peer.close()


async def test_voices_config_and_demo_page_are_served(gateway):
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{gateway.url}/") as resp:
            page = await resp.text()
            assert resp.status == 200 and "voxgate" in page
            assert "Start here" in page and 'id="stt-note"' in page  # the page says what to do first
        async with http.get(f"{gateway.url}/static/demo.js") as resp:
            assert resp.status == 200 and "RTCPeerConnection" in await resp.text()
        async with http.get(f"{gateway.url}/v1/voices") as resp:
            assert "default" in [v["name"] for v in (await resp.json())["voices"]]
        async with http.get(f"{gateway.url}/v1/webrtc/config") as resp:
            rtc = await resp.json()
            assert (
                rtc["agent"] == "simulated" and rtc["stt"] == "off"
            )  # the page tells the caller speech won't reach the agent


async def test_two_calls_play_their_own_turns_at_the_same_time(gateway):
    peers = [ClientPeer(gateway.url), ClientPeer(gateway.url)]
    try:
        for p in peers:
            await p.connect()
            p.send({"type": "session.start"})
        ids = {(await p.next_event("session.started"))["session_id"] for p in peers}
        assert len(ids) == 2
        t0 = [
            p.send({"type": "text", "turn_id": f"call{i}", "text": "Two calls at once.", "final": True})
            for i, p in enumerate(peers)
        ]
        for i, p in enumerate(peers):
            done = await p.next_event("turn.done", turn_id=f"call{i}")
            assert done["interrupted"] is False and done["gaps"] == {"micro": 0, "audible": 0}
            assert p.first_sound_after(t0[i]) is not None
    finally:
        for p in peers:
            await p.close()


async def test_hanging_up_the_peer_ends_the_session(gateway):
    peer = ClientPeer(gateway.url)
    await peer.connect()
    peer.send({"type": "session.start"})
    started = await peer.next_event("session.started")
    assert started["session_id"] in gateway.sessions
    await peer.close()
    for _ in range(100):
        if started["session_id"] not in gateway.sessions:
            break
        await asyncio.sleep(0.05)
    assert started["session_id"] not in gateway.sessions


async def test_offers_beyond_max_sessions_are_refused_with_at_capacity(gateway_factory):
    gw = await gateway_factory(server={"max_sessions": 1})
    first, second = ClientPeer(gw.url), ClientPeer(gw.url)
    try:
        await first.connect()
        first.send({"type": "session.start"})
        await first.next_event("session.started")
        with pytest.raises(RuntimeError, match="at_capacity"):
            await second.connect()
    finally:
        await first.close()
        await second.close()


needs_espeak = pytest.mark.skipif(not espeak_available(), reason="needs the espeak extra (espeakng-loader)")


@needs_espeak
@pytest.mark.parametrize("text", ["Hi there, friend.", "Good morning.", "Yes, of course."])
async def test_a_fully_played_turn_reports_all_its_text(gateway_factory, text):
    # eSpeak chunk lengths are not whole milliseconds: played_text must not lose the last word to rounding.
    gw = await gateway_factory(engine={"kind": "espeak"})
    peer = ClientPeer(gw.url)
    try:
        await peer.connect()
        peer.send({"type": "text", "turn_id": "t", "text": text, "final": True})
        done = await peer.next_event("turn.done", turn_id="t")
        assert done["interrupted"] is False and done["played_text"] == text
    finally:
        await peer.close()


@needs_espeak
async def test_played_text_after_barge_in_keeps_every_fully_played_chunk(gateway_factory):
    gw = await gateway_factory(engine={"kind": "espeak"})
    peer = ClientPeer(gw.url)
    try:
        await peer.connect()
        peer.send({"type": "session.start", "language": "en"})
        await peer.next_event("session.started")
        first = "Thanks for calling the demo line."
        peer.send(
            {
                "type": "text",
                "turn_id": "t",
                "text": f"{first} The second sentence is much longer and keeps going for quite a while.",
                "final": True,
            }
        )
        await peer.next_event("mark", turn_id="t", chunk=0)  # the first sentence has been heard in full
        await asyncio.sleep(0.3)
        peer.send({"type": "interrupt"})
        done = await peer.next_event("turn.done", turn_id="t")
        assert done["interrupted"] is True
        assert done["played_text"].startswith(first) and len(done["played_text"]) > len(first)
    finally:
        await peer.close()


async def test_text_pieces_sent_back_to_back_are_spoken_in_order(gateway, peer):
    await peer.connect()
    pieces = ["One two three four five six. ", "Seven eight nine. ", "Ten eleven twelve."]
    for i, piece in enumerate(pieces):  # the first message also creates the session
        peer.send({"type": "text", "turn_id": "t", "text": piece, "final": i == len(pieces) - 1})
    done = await peer.next_event("turn.done", turn_id="t", timeout=20)
    assert done["played_text"] == "".join(pieces)


async def test_an_idle_peer_is_dropped_after_the_idle_timeout_and_frees_its_slot(gateway_factory):
    gw = await gateway_factory(server={"max_sessions": 1, "limits": {"idle_timeout_s": 1.0}})
    silent, second = ClientPeer(gw.url), ClientPeer(gw.url)
    try:
        await silent.connect()  # connected, data channel open, never a message: it holds the only slot
        for _ in range(60):
            try:
                await second.connect()
                break
            except RuntimeError as exc:
                assert "at_capacity" in str(exc)
                await second.close()
                second = ClientPeer(gw.url)
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("the silent peer still holds its slot after the idle timeout")
        second.send({"type": "session.start"})
        await second.next_event("session.started")
        error = await second.next_event("error", timeout=5)  # a session with no messages times out too
        assert error["code"] == "idle_timeout"
        await second.next_event("session.ended")
    finally:
        await silent.close()
        await second.close()


async def test_a_peer_that_never_acknowledges_its_events_is_dropped_not_buffered(gateway):
    peer = ClientPeer(gateway.url)
    try:
        await peer.connect()
        peer.send({"type": "session.start"})
        started = await peer.next_event("session.started")

        async def no_sack() -> None:  # the peer's SCTP stops acknowledging what the gateway sends
            pass

        peer.pc.sctp._send_sack = no_sack
        junk = json.dumps({"type": "x" * 60_000})  # each is answered with an error that echoes it
        for _ in range(60):
            if peer.channel.readyState != "open":
                break  # the gateway hung up
            peer.send(junk)
            await asyncio.sleep(0.01)
        for _ in range(100):
            if started["session_id"] not in gateway.sessions:
                break
            await asyncio.sleep(0.05)
        assert started["session_id"] not in gateway.sessions, (
            "the gateway kept buffering events for a peer that takes none"
        )
    finally:
        await peer.close()


async def test_offers_at_the_same_moment_cannot_exceed_max_sessions(gateway_factory):
    gw = await gateway_factory(server={"max_sessions": 1})
    peers = [ClientPeer(gw.url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(p.connect() for p in peers), return_exceptions=True)
        refused = [r for r in results if isinstance(r, RuntimeError) and "at_capacity" in str(r)]
        assert len(refused) == 2, results
    finally:
        for p in peers:
            await p.close()


async def test_session_start_echoes_turn_mode(gateway, peer):
    await peer.connect()
    peer.send({"type": "session.start", "mode": "turn"})
    started = await peer.next_event("session.started")
    assert started["mode"] == "turn" and "mode_note" not in started  # the simulated engine streams turns
