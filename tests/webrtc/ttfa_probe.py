"""Measure TTFA over WebRTC against a running gateway (not a test; numbers go in notes).

    .venv/bin/voxgate serve --config configs/default.yaml --port 8090 &
    .venv/bin/python -m tests.webrtc.ttfa_probe --url http://127.0.0.1:8090 --turns 10 [--agent]

Per turn: the server's `audio.start.ttfa_ms` (first text received → first
frame out of the playout) and the client's view (text sent on the data
channel → first received frame with sound, after Opus and the jitter buffer).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from tests.webrtc.peer import ClientPeer

SENTENCES = [
    "Hello! Thanks for calling, how can I help you today?",
    "Your order has shipped and should arrive on Tuesday.",
    "Sure, I can move your appointment to three o'clock.",
    "Let me check that for you, it will only take a moment.",
    "Здравствуйте! Чем я могу вам помочь сегодня?",
]


async def probe(url: str, turns: int, language: str, agent: bool = False) -> None:
    peer = ClientPeer(url)
    await peer.connect()
    peer.send({"type": "session.start", "language": language})
    started = await peer.next_event("session.started")
    print(f"session {started['session_id']} codec {started['output']}")
    await asyncio.sleep(1.0)  # let the connection settle
    server, client = [], []
    for i in range(turns):
        text = SENTENCES[i % len(SENTENCES)]
        if agent:  # E2E: user.text → agent (LLM or simulator) → first sound
            turn_id = f"agent-{i + 1}"
            t0 = peer.send({"type": "user.text", "text": text})
        else:
            turn_id = f"p{i}"
            t0 = peer.send({"type": "text", "turn_id": turn_id, "text": text, "final": True})
        start = await peer.next_event("audio.start", turn_id=turn_id)
        await peer.next_event("turn.done", turn_id=turn_id, timeout=30)
        heard = peer.first_sound_after(t0)
        server.append(start["ttfa_ms"])
        client.append((heard - t0) * 1000 if heard else float("nan"))
        print(
            f"turn {i}: server ttfa {start['ttfa_ms']:.0f} ms, client first sound {client[-1]:.0f} ms  ({text[:30]}…)"
        )
        await asyncio.sleep(0.3)
    await peer.close()
    for name, xs in (("server audio.start ttfa", server), ("client send→first sound", client)):
        xs = sorted(xs)
        print(f"{name}: median {statistics.median(xs):.0f} ms, min {xs[0]:.0f}, max {xs[-1]:.0f} (n={len(xs)})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--language", default="auto")
    ap.add_argument("--agent", action="store_true", help="send user.text to the built-in agent instead of text turns")
    args = ap.parse_args()
    asyncio.run(probe(args.url, args.turns, args.language, args.agent))


if __name__ == "__main__":
    main()
