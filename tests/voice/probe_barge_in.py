"""Barge-in by voice, measured per leg: latency p50/p95, missed barge-ins on speech, false ones on noise.

    python -m tests.voice.probe_barge_in [--trials 10] [--noise-s 60] [--legs twilio,audiosocket,webrtc,native]

One gateway (SimulatedEngine, barge_in mode vad, the config defaults otherwise) on loopback; for each leg,
`--trials` calls run one after another, each with the agent speaking a long turn and a caller who starts speaking
(espeak-ng speech, two sentences × two voices, at the leg's rate) at a random point 0.5–1.5 s in.
Latency is caller speech onset in the injected audio → the first silent frame at the caller (Twilio: the
`clear`; AudioSocket and WebRTC: the first frame of a silent run; native WS: `turn.done`). Then
`--noise-s` seconds of pink noise and music-like tones per leg (six calls in parallel) count false
`user.speech` starts and false barge-ins. Prints a table and writes JSON with --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import uuid

import numpy as np

from bench import plots
from gateway.app import Gateway
from gateway.config import load_config
from tests import caller_audio as ca
from tests.telephony.conftest import FAST, merge
from tests.voice.callers import PacedSource, percentile, pump, resample
from tests.voice.conftest import VOICE
from tests.voice import test_barge_in_telephony as T
from tests.voice.test_barge_in_webrtc import MicPeer
from tests.voice.test_native_input import WsCaller, open_caller

LONG = T.LONG * 3  # ~25 s of agent speech: longer than any probe call
CLIPS = [("booking", "en-us"), ("stop", "en-us"), ("booking", "en-gb"), ("stop", "en-gb")]


def clip(rate: int, i: int) -> tuple[np.ndarray, float]:
    name, voice = CLIPS[i % len(CLIPS)]
    pcm, got = ca.read_wav(ca.speech_wav(16000, name, voice))
    onset = ca.speech_onset_ms(pcm, 16000)
    pcm = np.concatenate([ca.silence(200, 16000), pcm])
    if rate != 16000:
        pcm = resample(pcm, 16000, rate)
    return pcm, 200 + onset


def background(seconds: float, rate: int, seed: int) -> np.ndarray:
    parts, t = [], 0.0
    while t < seconds:
        parts.append(
            ca.noise(2000, rate, level=0.08, seed=seed + int(t))
            if int(t) % 4 == 0
            else ca.tones(2000, rate, level=0.15, seed=seed + int(t))
        )
        t += 2.0
    return np.concatenate(parts)


class Leg:
    """Opens one call of a leg; gives its control channel, caller source and the 'silent at caller' time."""

    rate = 8000

    async def open(self, gw, i):
        raise NotImplementedError


class TwilioLeg(Leg):
    name = "twilio"

    async def open(self, gw, i):
        call, tw = await T.twilio_call(gw, f"CAprobe{i}{uuid.uuid4().hex[:6]}")
        return call.ctl, call.source, lambda after: T.twilio_clear_at(call, after), call.close


class AudioSocketLeg(Leg):
    name = "audiosocket"

    async def open(self, gw, i):
        call, client = await T.audiosocket_call(gw, uuid.uuid4())

        async def close():
            await call.close()
            client.close()

        return call.ctl, call.source, lambda after: T.audiosocket_silence_at(call, after), close


class WebrtcLeg(Leg):
    name = "webrtc"
    rate = 48000

    async def open(self, gw, i):
        peer = MicPeer(gw.url)
        await peer.connect()
        peer.send({"type": "session.start"})
        await peer.next_event("session.started")
        return PeerEvents(peer), peer.source, peer.silent_from, peer.close


class NativeLeg(Leg):
    name = "native"
    rate = 16000

    async def open(self, gw, i):
        caller = await open_caller(gw, input={"encoding": "pcm16", "sample_rate": 16000})
        source = PacedSource(16000)
        task = asyncio.get_running_loop().create_task(pump(source, lambda f: caller.ws.send(f.astype("<i2").tobytes())))

        def done_at(after):
            return next((e["_at"] for e in caller.events if e["type"] == "turn.done" and e["_at"] >= after), None)

        async def close():
            task.cancel()
            await caller.close()

        return WsEvents(caller), source, done_at, close


class PeerEvents:
    def __init__(self, peer):
        self.peer = peer

    async def send(self, msg):
        self.peer.send(msg)

    async def expect(self, etype, timeout=5.0, **match):
        return await self.peer.next_event(etype, timeout=timeout, **match)

    @property
    def events(self):
        return self.peer.all_events


class WsEvents:
    def __init__(self, caller: WsCaller):
        self.caller = caller

    async def send(self, msg):
        await self.caller.send(msg)

    async def expect(self, etype, timeout=5.0, **match):
        return await self.caller.expect(etype, timeout=timeout, **match)

    @property
    def events(self):
        return self.caller.events


async def speech_trial(gw, leg: Leg, i: int, rng: random.Random) -> dict:
    ctl, source, silent_at, close = await leg.open(gw, i)
    try:
        await ctl.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
        await ctl.expect("audio.start", timeout=10)
        await asyncio.sleep(0.5 + rng.random())
        pcm, onset = clip(leg.rate, i)
        source.play(pcm, onset)
        try:
            done = await ctl.expect("turn.done", timeout=6)
        except (asyncio.TimeoutError, TimeoutError):
            return {"missed": True}
        await asyncio.sleep(0.5)
        at = silent_at(source.onset_at)
        return {
            "missed": done.get("interrupted_by") != "caller",
            "latency_ms": None if at is None else (at - source.onset_at) * 1000,
        }
    finally:
        await close()


async def noise_trial(gw, leg: Leg, i: int, seconds: float) -> dict:
    ctl, source, _, close = await leg.open(gw, 1000 + i)
    try:
        await ctl.send({"type": "text", "turn_id": "t1", "text": LONG, "final": True})
        await ctl.expect("audio.start", timeout=10)
        source.play(background(seconds, leg.rate, seed=17 * i))
        await asyncio.wait_for(source.played_all.wait(), seconds * 2 + 10)
        await asyncio.sleep(0.5)
        if isinstance(ctl, T.Control):
            try:
                while True:
                    await ctl.recv(timeout=0.05)
            except asyncio.TimeoutError:
                pass
        events = ctl.events
        return {
            "speech_starts": sum(1 for e in events if e.get("type") == "user.speech" and e.get("state") == "started"),
            "barge_ins": sum(1 for e in events if e.get("type") == "turn.done" and e.get("interrupted_by") == "caller"),
        }
    finally:
        await close()


async def main_async(args) -> list[dict]:
    overrides = merge(merge(FAST, VOICE), {"server": {"max_sessions": 200}})
    overrides["barge_in"] = {"mode": "vad", **json.loads(args.barge_in)}  # the config's defaults otherwise
    gw = Gateway(load_config(None, overrides))
    await gw.start(port=0)
    legs = {"twilio": TwilioLeg(), "audiosocket": AudioSocketLeg(), "webrtc": WebrtcLeg(), "native": NativeLeg()}
    rows = []
    try:
        for name in args.legs.split(","):
            leg = legs[name]
            rng = random.Random(args.seed)
            trials = [
                await speech_trial(gw, leg, i, rng) for i in range(args.trials)
            ]  # one at a time: latency, not load
            lat = [t["latency_ms"] for t in trials if not t["missed"] and t.get("latency_ms") is not None]
            per_call = args.noise_s / 6
            noise = await asyncio.gather(*(noise_trial(gw, leg, i, per_call) for i in range(6)))
            row = {
                "leg": name,
                "trials": args.trials,
                "missed": sum(t["missed"] for t in trials),
                "latency_p50_ms": percentile(lat, 50),
                "latency_p95_ms": percentile(lat, 95),
                "noise_s": args.noise_s,
                "false_speech_starts": sum(n["speech_starts"] for n in noise),
                "false_barge_ins": sum(n["barge_ins"] for n in noise),
            }
            rows.append(row)
            print(
                f"{name:12s} missed {row['missed']}/{row['trials']}  latency p50 {row['latency_p50_ms'] or 0:6.0f} ms  "
                f"p95 {row['latency_p95_ms'] or 0:6.0f} ms   {args.noise_s:.0f} s noise/tones: "
                f"{row['false_speech_starts']} false user.speech, {row['false_barge_ins']} false barge-ins",
                flush=True,
            )
    finally:
        await gw.stop()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--noise-s", type=float, default=60.0)
    ap.add_argument("--legs", default="twilio,audiosocket,webrtc,native")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--barge-in", default="{}", help='JSON overrides of the barge_in section, e.g. {"threshold": 0.7}')
    ap.add_argument("--out")
    ap.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw latency and misses per leg into FILE (.png or .svg), the run's "
        "data beside it as FILE.json (bench/plots.py)",
    )
    args = ap.parse_args()
    if args.plot:
        try:
            plots.check_target(args.plot, (args.out,))
        except plots.PlotError as e:
            ap.error(str(e))
    rows = asyncio.run(main_async(args))
    result = {"config": {"barge_in": "defaults, mode vad"}, "results": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    if args.plot:
        plots.write_plot("barge_in", result, args.plot, plots.command_line("tests.voice.probe_barge_in"))


if __name__ == "__main__":
    main()
