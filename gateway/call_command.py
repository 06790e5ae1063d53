"""`voxgate call TO --trunk NAME`: place an outbound call through a running gateway and speak into it.

It POSTs `/v1/calls`, attaches on `/v1/control/{call_id}`, prints the call's progress, says `--say TEXT` once the
far end answers (in the gateway's voice: the demo voice without a checkpoint), then hangs up, or with `--wait`
stays until the far end hangs up. Exit status: 0 the call was answered, 1 it failed (`call.failed`: its code and
SIP status are printed), 2 the gateway refused the request or could not be reached.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

DEFAULT_SAY = "Hello, this is voxgate calling. This call was placed with voxgate call. Goodbye."
ANSWERED, FAILED, REFUSED = 0, 1, 2


def add_arguments(p) -> None:
    p.add_argument("to", help="whom to call: a SIP URI (sip:bob@pbx.example) or an E.164 number (+15551234567)")
    p.add_argument("--trunk", required=True, help="one of the gateway's sip.trunks, by name")
    p.add_argument("--say", default=DEFAULT_SAY, help="what to say once answered (default: a short demo line)")
    p.add_argument("--gateway", default="http://127.0.0.1:8080", help="the gateway's base URL (default: %(default)s)")
    p.add_argument("--api-key", default=None, help="an API key of server.api_keys (default: $VOXGATE_API_KEY)")
    p.add_argument(
        "--from", dest="from_", metavar="URI", default=None, help="the From URI (default: the trunk's `from`)"
    )
    p.add_argument(
        "--header", action="append", default=[], metavar="X-NAME=VALUE", help="an X- header for the INVITE (repeat)"
    )
    p.add_argument("--ring-timeout", type=float, default=30.0, help="seconds to ring (default: %(default)s)")
    p.add_argument("--voice", default=None, help="the voice to speak with (default: the gateway's default voice)")
    p.add_argument("--wait", action="store_true", help="after speaking, stay on the call until the far end hangs up")


def run(args) -> int:
    headers = {}
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"voxgate call: --header must be X-NAME=VALUE, not {item!r}", file=sys.stderr)
            return REFUSED
        headers[name.strip()] = value
    body = {"to": args.to, "trunk": args.trunk, "ring_timeout_s": args.ring_timeout}
    if args.from_:
        body["from"] = args.from_
    if headers:
        body["headers"] = headers
    key = args.api_key or os.environ.get("VOXGATE_API_KEY")
    return asyncio.run(_call(args.gateway.rstrip("/"), body, key, args.say, args.voice, args.wait))


def _say(line: str, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(line + "\n")
    stream.flush()


async def _call(base: str, body: dict, key: str | None, text: str, voice: str | None, wait: bool) -> int:
    import aiohttp  # here, not at the top: `voxgate --help` builds every subcommand's parser

    auth = {"Authorization": f"Bearer {key}"} if key else {}
    async with aiohttp.ClientSession() as http:
        try:
            async with http.post(f"{base}/v1/calls", json=body, headers=auth) as r:
                answer = await r.json(content_type=None)
                status = r.status
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            _say(f"voxgate call: cannot place the call at {base}: {exc}", err=True)
            return REFUSED
        if status != 201:
            code = answer.get("code") if isinstance(answer, dict) else None
            message = answer.get("message") if isinstance(answer, dict) else None
            _say(f"voxgate call: refused ({status} {code or 'http_error'}): {message or answer}", err=True)
            return REFUSED
        call_id = answer["call_id"]
        _say(f"call {call_id}: placed through trunk {body['trunk']} to {body['to']}")
        ws_base = "ws" + base.removeprefix("http")
        try:
            async with http.ws_connect(f"{ws_base}/v1/control/{call_id}", headers=auth) as ws:
                attach = {"type": "call.attach", "call_id": call_id, **({"voice": voice} if voice else {})}
                await ws.send_str(json.dumps(attach))
                return await _follow(ws, text, wait)
        except (aiohttp.ClientError, OSError) as exc:
            _say(f"voxgate call: the control socket failed: {exc}", err=True)
            return REFUSED


async def _follow(ws, text: str, wait: bool) -> int:
    """Reads the control socket to the end of the call; speaks once answered; Ctrl-C hangs up."""
    loop = asyncio.get_running_loop()
    hang_up = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, hang_up.set)
    outcome = None
    reader = loop.create_task(ws.receive())
    stop = loop.create_task(hang_up.wait())
    try:
        while True:
            await asyncio.wait({reader, stop}, return_when=asyncio.FIRST_COMPLETED)
            if stop.done():
                _say("hanging up")
                await ws.send_str(json.dumps({"type": "session.end"}))
                stop = loop.create_future()  # once
            if not reader.done():
                continue
            msg = reader.result()
            if msg.type.name != "TEXT":  # CLOSE, CLOSED, ERROR: the gateway is done with the call
                break
            event = json.loads(msg.data)
            kind = event.get("type")
            if kind == "call.progress":
                _say(f"{event['state']} ({event['status']})")
            elif kind == "call.answered":
                outcome = ANSWERED
                sip = event.get("sip") or {}
                _say(f"answered ({event['status']}) by {sip.get('to') or sip.get('request_uri', '?')}")
                await ws.send_str(json.dumps({"type": "text", "turn_id": "say", "text": text, "final": True}))
            elif kind == "call.failed":
                outcome = FAILED
                _say(f"failed: {event['code']} ({event['status']} {event.get('reason', '')})".rstrip(), err=True)
            elif kind == "turn.done" and event.get("turn_id") == "say":
                _say(f"said it ({event['played_ms'] / 1000:.1f} s of audio played)")
                if not wait:
                    await ws.send_str(json.dumps({"type": "session.end"}))
            elif kind == "call.media" and event.get("state") == "ended":
                _say(f"the call ended ({event.get('reason', 'hangup')})")
            elif kind == "error":
                _say(f"error: {event.get('code')}: {event.get('message')}", err=True)
            elif kind == "session.ended":
                break
            reader = loop.create_task(ws.receive())
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        reader.cancel()
        stop.cancel()
    if outcome is None:
        _say("voxgate call: the call ended before it was answered or failed", err=True)
        return FAILED
    return outcome
