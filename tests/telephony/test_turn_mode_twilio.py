"""Turn mode on a Twilio call (real sockets, the SimulatedEngine's turn mode): the agent's words go
into one engine stream per turn; barge-in clears Twilio and cancels the generation; `played_text`
is the text the confirmed frames had consumed."""

from __future__ import annotations

import asyncio
import contextlib

from tests.telephony.clients import Control, TwilioClient

LONG = " ".join(["this", "turn", "goes", "on", "and", "on"] * 12) + "."


async def test_a_twilio_call_in_turn_mode_plays_barges_in_and_reports_played_text(make_gateway):
    gw = await make_gateway(simulated={"ms_per_char": 40})
    control = await Control.connect(gw)
    attached = await control.attach("call-turn", mode="turn")
    assert attached["mode"] == "turn"
    tw = await TwilioClient.connect(gw)
    await tw.start(params={"call_id": "call-turn"})
    await control.expect("call.media")
    media = 0

    async def echo_marks():  # Twilio echoes each mark once the audio before it has played
        nonlocal media
        while True:
            msg, _ = await tw.recv()
            if msg["event"] == "media":
                media += 1
            elif msg["event"] == "mark":
                await tw.echo_mark(msg["mark"]["name"])

    echo = asyncio.ensure_future(echo_marks())
    for i, piece in enumerate(["Hello", " caller,", " nice", " to", " meet", " you."]):
        await control.send({"type": "text", "turn_id": "t1", "text": piece, "final": i == 5})
        await asyncio.sleep(0.02)
    done = await control.expect("turn.done", turn_id="t1", timeout=10)
    echo.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await echo
    assert media >= 20 and done["interrupted"] is False
    assert done["played_text"] == "Hello caller, nice to meet you."

    # a long turn, barged in after its first progress mark (500 ms in) was confirmed
    await control.send({"type": "text", "turn_id": "t2", "text": LONG[:300], "final": True})
    while True:
        msg, _ = await tw.recv()
        if msg["event"] == "mark":
            await tw.echo_mark(msg["mark"]["name"])
            break
    await asyncio.sleep(0.3)  # more plays, unconfirmed
    await control.send({"type": "interrupt"})
    while (await tw.recv())[0]["event"] != "clear":
        pass
    done = await control.expect("turn.done", turn_id="t2")
    assert done["interrupted"] is True
    heard = done["played_text"]
    # what Twilio confirmed: about 500 ms of a 40 ms/character turn
    assert heard and LONG.startswith(heard) and len(heard) * 40 <= done["played_ms"] + 40 * 8
    assert 300 <= done["played_ms"] <= 900
    assert not gw.engine._jobs  # the turn's generation was cancelled
    await tw.stop()
    await control.expect("session.ended")
