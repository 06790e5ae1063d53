"""openai-speech against servers that hang, lie or flood (tests/openai_speech/misbehaving.py, real HTTP on
loopback): a hung server costs a call about the first-byte timeout and is out (suspect) until a speech probe
passes; a watchdog's give-up counts against the server; a stream that stalls mid-chunk ends it; a body that is not
audio never plays; a runaway stream is read no faster than it is consumed and ends at the chunk's cap; a paced call
reads it no further than playout.max_ahead_ms ahead of what plays."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time

import aiohttp
import pytest

from tests.conftest import Client
from tests.openai_speech.misbehaving import Misbehaving
from tests.openai_speech.servers import ROOT, served_in_loop
from tests.service.engines import free_port
from tts import EngineError, SynthesisRequest
from tts.openai_speech import OpenAISpeechEngine, SpeechServerSettings

TEXT = "Hello there. This is the second sentence."


@pytest.fixture
async def misbehaving():
    """`await misbehaving(mode)` → (server, base URL), served in the test's loop; all stopped afterwards."""
    async with served_in_loop(Misbehaving) as start:
        yield start


async def readyz(gw) -> dict:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{gw.port}/readyz") as resp:
            return await resp.json()


def endpoint(gw_or_engine, base: str) -> dict:
    engine = getattr(gw_or_engine, "engine", gw_or_engine)
    return {e["endpoint"]: e for e in engine.endpoint_stats()}[base]


@pytest.mark.parametrize("mode", ["silent", "headers"])
async def test_a_hung_server_costs_the_call_the_first_byte_timeout_then_is_out_until_a_speech_probe_passes(
    mode, misbehaving, chained_gateway
):
    hung, hung_base = await misbehaving(mode)
    healthy, healthy_base = await misbehaving("ok")
    # the hung one first: with nothing in flight anywhere, placement picks the first listed
    gw = await chained_gateway([hung_base, healthy_base])
    c = await Client.connect(gw)
    await c.start()
    sent = time.monotonic()
    await c.send({"type": "text", "turn_id": "t1", "text": TEXT, "final": True})
    start = await c.until("audio.start", timeout=15)
    silence = c.events[-1][0] - sent
    done = await c.until("turn.done", timeout=15)
    # no chunk failed: each one that waited on the hung server moved to the healthy one before its first byte
    assert not c.of_type("error") and done["interrupted"] is False and done["played_text"] == TEXT
    print(f"\n{mode}: first audio {silence * 1000:.0f} ms after the text (ttfa_ms {start['ttfa_ms']})")
    ready = await readyz(gw)
    out = {e["endpoint"]: e for e in ready["endpoints"]}
    assert out[hung_base]["up"] is False and out[hung_base]["suspect"] is True
    assert "first_byte_timeout_s" in out[hung_base]["why_down"]
    assert out[healthy_base]["up"] is True and ready["ready"] is True
    assert gw.engine.stats()["first_byte_timeouts"] >= 1 and gw.engine.stats()["retried"] >= 1
    # the waiting requests were closed, not left hanging on the server (a speech probe may be open a while)
    deadline = time.monotonic() + 5
    while hung.open and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert hung.open == 0

    # the next turn goes to the healthy one only, although the call's chunks were first placed on the hung one
    hung_requests, healthy_requests = hung.requests, healthy.requests
    await c.send({"type": "text", "turn_id": "t2", "text": "Still here. On the healthy server.", "final": True})
    done = await c.until("turn.done", timeout=15)
    assert not c.of_type("error") and done["interrupted"] is False
    assert healthy.requests == healthy_requests + 2
    # the hung one got no call's chunk: at most its speech probes, each closed at the first-byte timeout
    probes = hung.requests - hung_requests
    assert endpoint(gw, hung_base)["up"] is False

    # mended: its health route answered all along, but only a speech probe that gets audio in time brings it back
    hung.mode = "ok"
    deadline = time.monotonic() + 10
    while not endpoint(gw, hung_base)["up"] and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert endpoint(gw, hung_base)["up"] is True and hung.requests > hung_requests + probes - 1
    assert {e["endpoint"]: e["up"] for e in (await readyz(gw))["endpoints"]}[hung_base] is True
    await c.ws.close()


async def test_the_sessions_watchdog_giving_up_on_a_chunk_counts_against_its_server(misbehaving, chained_gateway):
    hung, hung_base = await misbehaving("headers")
    healthy, healthy_base = await misbehaving("ok")
    # the session's watchdog (1 s) fires before the engine's first-byte timeout (5 s)
    gw = await chained_gateway([hung_base, healthy_base], {"engine": {"stall_timeout_s": 1, "first_byte_timeout_s": 5}})
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t1", "text": "Hello.", "final": True})
    error = await c.until("error", timeout=10)
    assert error["code"] == "engine_error" and "engine.stall_timeout_s" in error["message"]
    await c.until("turn.done", timeout=10)
    hung_ep = endpoint(gw, hung_base)
    assert hung_ep["up"] is False and "given up" in hung_ep["why_down"] and hung_ep["errors"] == {"engine_error": 1}
    assert gw.engine.stats()["watchdog"] == 1
    before = hung.requests
    await c.send({"type": "text", "turn_id": "t2", "text": "On the other one.", "final": True})
    done = await c.until("turn.done", timeout=15)
    assert done["interrupted"] is False and done["played_text"] == "On the other one." and hung.requests == before
    await c.ws.close()


async def test_a_stream_that_stalls_mid_chunk_ends_with_engine_error_and_its_server_is_out(misbehaving):
    stalling, base = await misbehaving("stall")
    engine = OpenAISpeechEngine(SpeechServerSettings(endpoints=[base], connect_timeout_s=2, stream_stall_timeout_s=0.5))
    await engine.start()
    try:
        got = []
        with pytest.raises(EngineError) as err:
            async for chunk in engine.synthesize(SynthesisRequest(text="Hi.", tag="s/t/0")):
                got.append(chunk)
        assert err.value.code == "engine_error" and "sent nothing for 0.5 s mid-chunk" in err.value.message
        # the half second that came before the stall went out in whole 80 ms packets (it may have played)
        assert sum(len(c.pcm) for c in got) == 12_000 // 1920 * 1920
        ep = engine.endpoint_stats()[0]
        assert ep["up"] is False and ep["suspect"] is True and engine.stats()["stalled"] == 1
    finally:
        await engine.close()


async def test_a_body_that_is_not_audio_never_plays_and_its_type_and_first_bytes_are_logged(
    misbehaving, chained_gateway, caplog
):
    _, base = await misbehaving("html")
    gw = await chained_gateway([base])
    c = await Client.connect(gw)
    await c.start()
    with caplog.at_level(logging.WARNING, logger="voxgate.openai_speech_engine"):
        await c.send({"type": "text", "turn_id": "t1", "text": "Hello.", "final": True})
        error = await c.until("error", timeout=10)
        done = await c.until("turn.done", timeout=10)
    assert error["code"] == "engine_error" and "text/html" in error["message"] and "not played" in error["message"]
    assert done["played_ms"] == 0 and not c.frames  # not one sample of the page was played
    (line,) = [r.getMessage() for r in caplog.records if "first bytes" in r.getMessage()]
    assert "text/html" in line and "b'<html><head><title>502 Bad" in line and len(line) < 400  # capped
    assert gw.engine.stats()["not_audio"] == 1
    await c.ws.close()


async def test_an_error_answer_that_never_ends_is_read_to_a_few_kib_and_quoted(misbehaving):
    _, base = await misbehaving("error_flood")
    engine = OpenAISpeechEngine(SpeechServerSettings(endpoints=[base], connect_timeout_s=2))
    await engine.start()
    try:
        with pytest.raises(EngineError) as err:  # not a wait for the end of a body that has none
            await asyncio.wait_for(_drain(engine.synthesize(SynthesisRequest(text="Hi.", tag="s/t/0"))), 10)
        assert err.value.code == "engine_error" and "refused the request (500): internal error" in err.value.message
        assert len(err.value.message) < 600
    finally:
        await engine.close()


async def _drain(stream) -> None:
    async for _ in stream:
        pass


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


@pytest.fixture
def runaway():
    """A runaway speech server in its own process (its buffers are not this process's memory)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.openai_speech.misbehaving", "--port", str(port), "--mode", "runaway"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


async def wait_up(root: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            try:
                async with http.get(f"{root}/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise TimeoutError(f"{root} did not start")


async def sent_bytes(root: str) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{root}/stats") as resp:
            return (await resp.json())["audio_bytes"]


async def test_a_runaway_server_is_read_no_faster_than_consumed_and_its_chunk_ends_at_the_cap(runaway):
    await wait_up(runaway)
    engine = OpenAISpeechEngine(SpeechServerSettings(endpoints=[f"{runaway}/v1"], connect_timeout_s=2))
    await engine.start()
    try:
        text = "Hello there."
        stream = engine.synthesize(SynthesisRequest(text=text, tag="s/t/0"))
        await asyncio.sleep(1.0)  # nobody reads the stream: the engine stops reading the socket
        before_rss, before_sent = rss_mb(), await sent_bytes(runaway)
        await asyncio.sleep(3.0)
        after_rss, after_sent = rss_mb(), await sent_bytes(runaway)
        print(f"\nrunaway, unread: sent {before_sent / 1e6:.1f} → {after_sent / 1e6:.1f} MB, ", end="")
        print(f"RSS {before_rss:.0f} → {after_rss:.0f} MB")
        # the upstream is held at the socket buffers: it could write gigabytes in 3 s on loopback
        assert after_sent - before_sent < 1_000_000 and after_rss - before_rss < 20
        got = 0
        with pytest.raises(EngineError) as err:
            async for chunk in stream:  # read as fast as it comes: the chunk ends at 30 s + 1 s per character
                got += len(chunk.pcm)
        assert (
            err.value.code == "engine_error" and f"over 42 s of audio for {len(text)} characters" in err.value.message
        )
        assert 40 * 24_000 < got <= 42 * 24_000 and engine.stats()["too_long"] == 1
        print(f"runaway, read: ended after {got / 24_000:.1f} s of audio, RSS {rss_mb():.0f} MB")
    finally:
        await engine.close()


async def test_an_unpaced_call_against_a_runaway_server_hears_a_bounded_chunk_and_the_gateways_memory_stays_flat(
    runaway, chained_gateway
):
    await wait_up(runaway)
    gw = await chained_gateway([f"{runaway}/v1"])
    c = await Client.connect(gw)
    await c.start(output={"pacing": "none"})  # audio as fast as the client reads: the cap, not the clock, ends it
    rss = [rss_mb()]
    await c.send({"type": "text", "turn_id": "t1", "text": "Hello.", "final": True})
    error = await c.until("error", timeout=15)
    assert error["code"] == "engine_error" and "over 36 s of audio for 6 characters" in error["message"]
    for _ in range(4):  # the call plays on; the upstream would stream for ever
        await asyncio.sleep(1.0)
        rss.append(rss_mb())
    print(f"\nrunaway call: gateway RSS {' → '.join(f'{r:.0f}' for r in rss)} MB, sent {await sent_bytes(runaway)} B")
    assert max(rss) - rss[0] < 40  # one capped chunk (36 s of float32 at 24 kHz and its copies), not a flood
    assert gw.engine.stats()["too_long"] == 1
    done = await c.until("turn.done", timeout=10)  # sent as fast as it came: the turn ends with the capped chunk
    assert done["interrupted"] is False and 35_000 < done["played_ms"] <= 36_000
    await c.ws.close()


async def server_stats(root: str) -> dict:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{root}/stats") as resp:
            return await resp.json()


async def test_a_paced_call_reads_a_runaway_server_no_further_than_max_ahead_of_what_plays(runaway, chained_gateway):
    """The clock plays the call; the session stops reading the engine's streams at playout.max_ahead_ms (4 s) ahead
    of what plays, so the engine stops reading the socket and the upstream is held. Two chunks: the second's held
    audio counts too, and its long wait to become the head is not a stall (engine.stall_timeout_s 2 s here)."""
    await wait_up(runaway)
    gw = await chained_gateway([f"{runaway}/v1"], {"engine": {"stall_timeout_s": 2}})
    c = await Client.connect(gw)
    await c.start()
    await c.send({"type": "text", "turn_id": "t1", "text": "Hello there. And a second sentence.", "final": True})
    await c.until("audio.start", timeout=10)
    session = next(iter(gw.core.registry.sessions.values()))
    bound = gw.config.playout.max_ahead_ms * session.output.sample_rate / 1000
    packet = session.output.sample_rate * 80 // 1000  # the engine's packet_ms
    ahead, sent = [], []
    for i in range(60):  # 6 s of the call
        await asyncio.sleep(0.1)
        ahead.append(session.ahead_samples)
        if i in (19, 59):
            sent.append((await server_stats(runaway))["audio_bytes"])
    rate = session.output.sample_rate
    print(f"\npaced runaway call: ahead of the playout at most {max(ahead) / rate:.2f} s (bound {bound / rate:g} s), ")
    print(f"upstream sent {sent[0] / 1e6:.2f} → {sent[1] / 1e6:.2f} MB over the last 4 s")
    assert max(ahead) <= bound + packet
    assert min(ahead[10:]) > bound / 2  # read on as it plays: the playout never runs short
    assert sent[1] - sent[0] < 1_000_000  # held at real time (~0.2 MB in 4 s), not at loopback speed
    assert not c.of_type("error") and not c.of_type("underrun")  # no cap reached, no watchdog, no gap
    stats = gw.engine.stats()
    assert stats["too_long"] == 0 and stats["watchdog"] == 0 and stats["cancelled"] == 0
    assert (await server_stats(runaway))["open"] == 2  # both chunks' requests held open, neither given up
    await c.send({"type": "interrupt"})
    done = await c.until("turn.done", timeout=10)
    assert done["interrupted"] is True and done["gaps"] == {"micro": 0, "audible": 0}
    assert not session._inflight and session.ahead_samples == 0  # everything emptied with the interrupt
    for _ in range(100):  # the engine's requests were cancelled: the server sees both connections close
        if (await server_stats(runaway))["open"] == 0:
            break
        await asyncio.sleep(0.05)
    assert (await server_stats(runaway))["open"] == 0
    await c.ws.close()


@pytest.mark.parametrize("name", ["tcp_connect_timeout_s", "first_byte_timeout_s", "stream_stall_timeout_s"])
def test_a_time_limit_that_is_not_positive_is_refused_naming_it(name):
    from gateway.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=rf"engine\.{name}: must be > 0"):
        load_config(None, {"engine": {"kind": "openai-speech", "endpoints": ["http://127.0.0.1:1/v1"], name: 0}})
