"""Hypothesis strategies for every entry, and one runner per entry that sends a case and judges the answer.

A runner returns an `Outcome`: what came back (`kind`, e.g. `error:bad_json`,
`accepted`, `closed:1009`, `http:400`) and whether that is an acceptable
answer (`ok`): a stable error code, a clean close, a well-formed refusal, or
the input simply worked. `internal`, `engine_error`, an abnormal close (no
close frame), an HTTP 5xx other than a coded 503, or a probe that gets no
answer on a connection that should still be usable are failures.

Each socket case ends with a *probe* whose answer is known, so "the
connection still works and is still in step" is checked, not assumed.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from gateway import protocol as P

# Every code the protocol defines; `internal` (and `engine_error`: nothing a client sends may break the
# engine) mean the gateway failed, not the input.
STABLE_CODES = frozenset(v for k, v in vars(P).items() if k.isupper() and isinstance(v, str))
FAILURE_CODES = frozenset({P.INTERNAL, P.ENGINE_ERROR})
CLEAN_CLOSES = frozenset({1000, 1001, 1002, 1003, 1007, 1008, 1009, 1013})
MAX_MESSAGE_BYTES = 65_536  # the server's limits.max_message_bytes (the default)
ENTRIES = ("ws", "control", "twilio", "audiosocket", "webrtc", "http", "static", "wires", "sip")


@dataclass
class Outcome:
    kind: str
    ok: bool
    detail: str = ""


def _judge_codes(codes: list[str]) -> tuple[bool, str]:
    bad = [c for c in codes if c not in STABLE_CODES or c in FAILURE_CODES]
    return (not bad), (f"bad codes {bad}" if bad else "")


# ---------------------------------------------------------------- JSON-ish values
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.sampled_from(
        ["", "auto", "en", "pcm16", "mulaw", "alaw", "default", "t1", "\u0000", "\u202e", "😀", "Привет."]
    )
)
json_values = st.recursive(
    json_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=12
)

MESSAGE_TYPES = ["session.start", "text", "user.text", "interrupt", "session.end", "call.attach"]
FIELDS = [
    "type",
    "voice",
    "language",
    "instruct",
    "output",
    "turn_id",
    "text",
    "final",
    "drain",
    "call_id",
    "input",
    "barge_in",
]


@st.composite
def schema_messages(draw) -> str:
    """Objects shaped like protocol messages with random field values."""
    msg = {"type": draw(st.sampled_from(MESSAGE_TYPES) | st.text(max_size=12))}
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=5, unique=True)):
        if name in ("output", "input"):
            msg[name] = draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "encoding": st.sampled_from(["pcm16", "mulaw", "alaw", "opus", ""]) | json_scalars,
                        "sample_rate": st.sampled_from([8000, 16000, 24000, 48000, 8000.0, 44100, 0, -8000, 10**20])
                        | json_scalars,
                    },
                )
            )
        elif name == "barge_in":
            msg[name] = draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "mode": st.sampled_from(["off", "vad", "x"]) | json_scalars,
                        "min_speech_ms": json_scalars,
                    },
                )
                | json_values
            )
        elif name == "type":
            continue
        else:
            msg[name] = draw(json_values)
    return json.dumps(msg, allow_nan=True)


VALID_TEXT = '{"type":"text","turn_id":"t1","text":"Hello there.","final":true}'


@st.composite
def mutated(draw, base: str) -> str:
    """Character-level edits of a valid message (insert, delete, replace, duplicate a span)."""
    s = list(base)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["ins", "del", "rep", "dup"]))
        i = draw(st.integers(0, max(0, len(s) - 1)))
        ch = draw(
            st.sampled_from(list('{}[]":,\\0123456789eE.-+ntfu') + ["\\ud800", "\\u0000", "\\udfff", "\x00", "é"])
        )
        if op == "ins":
            s.insert(i, ch)
        elif op == "del" and s:
            del s[i]
        elif op == "rep" and s:
            s[i] = ch
        elif op == "dup":
            j = draw(st.integers(i, len(s)))
            s[i:i] = s[i:j]
    return "".join(s)


def _nested(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    if kind == "dict":
        return '{"a":' * depth + "1" + "}" * depth
    return '{"type":"text","turn_id":"t","text":"x","final":true,"extra":' + "[" * depth + "]" * depth + "}"


special_texts = st.one_of(
    # deep nesting, well under the size limit
    st.builds(_nested, st.integers(50, 30_000), st.sampled_from(["list", "dict", "field"])),
    # lone surrogates and other escapes that are not valid Unicode, in fields the server echoes
    st.builds(
        lambda tid, txt: '{"type":"text","turn_id":"%s","text":"%s","final":true}' % (tid, txt),
        st.sampled_from(["\\ud800", "t\\udfff", "\\ud83d", "\\ud83d\\ude00", "ok", "\\u0000"]),
        st.sampled_from(["Hi \\ud800 there.", "\\udc00", "fine", "\\ud83d\\ude00 smile.", "a\\u0000b."]),
    ),
    st.builds(
        lambda v: '{"type":"session.start","voice":"%s","language":"%s","instruct":"%s"}' % v,
        st.tuples(
            st.sampled_from(["\\ud800", "default"]),
            st.sampled_from(["\\udfff", "auto"]),
            st.sampled_from(["\\ud800", "calm"]),
        ),
    ),
    # huge numbers, NaN, infinities
    st.builds(
        lambda n: '{"type":"text","turn_id":%s,"text":"n","final":true}' % n,
        st.sampled_from(
            ["1e999", "-1e999", "NaN", "Infinity", "-0", "1" * 5000, "1" * 4300, "0.1e-400", "12345678901234567890"]
        ),
    ),
    st.builds(
        lambda n: '{"type":"session.start","output":{"encoding":"pcm16","sample_rate":%s}}' % n,
        st.sampled_from(["8000.0", "8000.5", "1e999", "NaN", "true", "-8000", "1" * 400, "16000.0", "48000"]),
    ),
    # big messages: just under, at and over the limit
    st.builds(
        lambda n: '{"type":"text","turn_id":"big","text":"%s","final":false}' % ("a" * n),
        st.sampled_from([MAX_MESSAGE_BYTES - 80, MAX_MESSAGE_BYTES + 10, 3 * MAX_MESSAGE_BYTES, 5 * MAX_MESSAGE_BYTES]),
    ),
    st.builds(lambda n: '{"type":"user.text","text":"%s"}' % ("é" * n), st.sampled_from([10, 30_000, 40_000])),
)

ws_texts = st.one_of(
    schema_messages(),
    json_values.map(lambda v: json.dumps(v, allow_nan=True)),
    mutated(VALID_TEXT),
    mutated('{"type":"session.start","voice":"default","output":{"encoding":"mulaw","sample_rate":8000}}'),
    special_texts,
    st.text(max_size=200),
)


@st.composite
def ws_frames(draw) -> tuple[str, object]:
    """One WebSocket message: ('text', str), ('binary', bytes) or ('badutf8', bytes sent as a text frame)."""
    kind = draw(st.sampled_from(["text"] * 8 + ["binary", "badutf8"]))
    if kind == "text":
        return kind, draw(ws_texts)
    if kind == "binary":
        return kind, draw(st.binary(max_size=400))
    good = draw(st.sampled_from(['{"type":"text","turn_id":"u","text":"', '{"type":"', ""]))
    return kind, good.encode() + draw(
        st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"])
    ) + b'"}'


ws_cases = st.fixed_dictionaries(
    {
        "start_first": st.booleans(),
        "messages": st.lists(ws_frames(), min_size=1, max_size=3),
    }
)


# ---------------------------------------------------------------- WebSocket runners
def _send(ws, frame: tuple[str, object]) -> None:
    kind, data = frame
    if kind == "text":
        ws.send(data)
    elif kind == "binary":
        ws.send(data, text=False)
    else:
        ws.send(data, text=True)  # bytes as a text frame: the client does not check them


def _probe(ws, marker: str, timeout: float, codes: list[str], on_event=None) -> str:
    """Send an unknown type named `marker`; read until its `unknown_type` comes back. Returns 'answered' or why not."""
    ws.send(json.dumps({"type": marker}))
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "probe unanswered"
        try:
            raw = ws.recv(timeout=left)
        except TimeoutError:
            return "probe unanswered"
        if isinstance(raw, bytes):
            continue
        m = json.loads(raw)
        if on_event:
            on_event(m)
        if m.get("type") == "error":
            if m.get("code") == P.UNKNOWN_TYPE and marker in m.get("message", ""):
                return "answered"
            codes.append(m.get("code"))


def _violates_framing(frames) -> bool:
    """Frames after which the server may drop the TCP connection: invalid UTF-8 in a text frame, or a message over
    the socket's size cap. The close frame it sent can then be lost to the RST our further writes provoke."""
    return any(kind == "badutf8" or (kind == "text" and len(data) > 4 * MAX_MESSAGE_BYTES) for kind, data in frames)


def _closed(exc: ConnectionClosed, codes: list[str], violated: bool = False) -> Outcome:
    code = exc.rcvd.code if exc.rcvd is not None else None
    ok_codes, why = _judge_codes(codes)
    ok = (code in CLEAN_CLOSES or (violated and code is None)) and ok_codes
    return Outcome(f"closed:{code}", ok, why or ("" if ok else f"no clean close frame ({exc})"))


def run_ws(base: str, case: dict, path: str = "/v1/ws", prelude=None) -> Outcome:
    codes: list[str] = []
    marker = f"fuzz.probe.{uuid.uuid4().hex[:8]}"
    try:
        with connect(base + path, max_size=None, open_timeout=10, close_timeout=2) as ws:
            if prelude:
                prelude(ws, codes)
            elif case["start_first"]:
                ws.send(json.dumps({"type": "session.start", "output": {"encoding": "pcm16", "sample_rate": 8000}}))
            for frame in case["messages"]:
                _send(ws, frame)
            answer = _probe(ws, marker, 10.0, codes)
            ok_codes, why = _judge_codes(codes)
            if answer != "answered":
                return Outcome("no_answer", False, answer)
            kind = "error:" + ",".join(sorted(set(codes))) if codes else "accepted"
            return Outcome(kind, ok_codes, why)
    except ConnectionClosed as exc:
        return _closed(exc, codes, _violates_framing(case["messages"] + case.get("before", [])))
    except (OSError, TimeoutError) as exc:
        return Outcome("connect_failed", False, f"{type(exc).__name__}: {exc}")


control_cases = st.fixed_dictionaries(
    {
        "before_attach": st.lists(ws_frames(), max_size=2),
        "attach": st.one_of(
            st.just({"type": "call.attach", "call_id": "CALL"}),
            st.fixed_dictionaries(
                {"type": st.just("call.attach"), "call_id": json_values},
                optional={"voice": json_values, "language": json_values},
            ),
        ),
        "messages": st.lists(ws_frames(), min_size=0, max_size=3),
    }
)


def run_control(base: str, case: dict) -> Outcome:
    def prelude(ws, codes):
        for frame in case["before_attach"]:
            _send(ws, frame)
        attach = dict(case["attach"])
        if attach.get("call_id") == "CALL":
            attach["call_id"] = f"fuzz-{uuid.uuid4().hex}"
        ws.send(json.dumps(attach, allow_nan=True))

    return run_ws(
        base,
        {"messages": case["messages"], "before": case["before_attach"], "start_first": False},
        "/v1/control",
        prelude,
    )


# ---------------------------------------------------------------- Twilio
def _twilio_start(call_id: str) -> dict:
    return {
        "event": "start",
        "sequenceNumber": "1",
        "streamSid": "MZ" + call_id[:30],
        "start": {
            "streamSid": "MZ" + call_id[:30],
            "callSid": "CA" + call_id[:30],
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {"call_id": call_id},
        },
    }


TWILIO_EVENTS = ["connected", "start", "media", "dtmf", "mark", "stop", "clear", "bogus"]


@st.composite
def twilio_messages(draw) -> tuple[str, object]:
    choice = draw(st.integers(0, 9))
    if choice <= 3:
        event = draw(st.sampled_from(TWILIO_EVENTS))
        msg: dict = {"event": event}
        if draw(st.booleans()):
            msg["media"] = draw(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "payload": st.sampled_from(["", "/w==", "not base64!", "A" * 20000, "//8A" * 40]) | json_values,
                        "track": st.sampled_from(["inbound", "outbound", "both"]) | json_values,
                        "timestamp": st.sampled_from(["0", "20", "nan", "inf", "-5", "1e30", "abc"]) | json_values,
                        "chunk": json_values,
                    },
                )
            )
        if draw(st.booleans()):
            msg["dtmf"] = draw(
                st.fixed_dictionaries({}, optional={"digit": st.sampled_from(["1", "#", "x", "12", ""]) | json_values})
            )
        if draw(st.booleans()):
            msg["mark"] = draw(st.fixed_dictionaries({}, optional={"name": json_values}))
        if draw(st.booleans()):
            msg["start"] = draw(json_values)
        return "text", json.dumps(msg, allow_nan=True)
    if choice <= 6:
        return "text", draw(
            mutated('{"event":"media","media":{"track":"inbound","chunk":"1","timestamp":"20","payload":"//8A//8A"}}')
        )
    return draw(ws_frames())


twilio_cases = st.fixed_dictionaries(
    {
        "start": st.sampled_from(["valid"] * 3 + ["mutated", "random"]),
        "start_mutation": mutated(json.dumps(_twilio_start("X" * 32))),
        "start_random": twilio_messages(),
        "messages": st.lists(twilio_messages(), max_size=4),
    }
)


def run_twilio(base: str, case: dict) -> Outcome:
    """Errors on /v1/twilio go to the call's control socket (never to Twilio): the control socket is the witness.

    With a valid `start`, the probe (a mark echo never sent) must come back on the control socket as
    `bad_message`, or the call must have ended. With a broken `start` the stream may not have started:
    then a `stop` after the probe must close the Twilio socket cleanly.
    """
    call_id = uuid.uuid4().hex
    codes: list[str] = []
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    try:
        with connect(base + "/v1/control", open_timeout=10, close_timeout=2) as control:
            control.send(json.dumps({"type": "call.attach", "call_id": call_id}))
            with connect(base + "/v1/twilio", max_size=None, open_timeout=10, close_timeout=2) as tw:
                tw.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
                if case["start"] == "valid":
                    tw.send(json.dumps(_twilio_start(call_id)))
                elif case["start"] == "mutated":
                    tw.send(case["start_mutation"].replace("X" * 30, call_id[:30]).replace("X" * 32, call_id))
                else:
                    _send(tw, case["start_random"])
                try:
                    for frame in case["messages"]:
                        _send(tw, frame)
                    tw.send(json.dumps({"event": "mark", "streamSid": "MZ" + call_id[:30], "mark": {"name": probe}}))
                    if case["start"] != "valid":
                        tw.send(json.dumps({"event": "stop"}))
                        tw.recv(timeout=5)  # nothing is sent to a stream without audio: this waits for the close
                        return Outcome("no_close", False, "the stream did not close after stop")
                except ConnectionClosed as exc:
                    closed = _closed(
                        exc,
                        codes,
                        _violates_framing(case["messages"] + [case["start_random"]] * (case["start"] == "random")),
                    )
                    if not closed.ok:
                        return closed
                    _drain(control, codes, probe, 0.3)
                    ok, why = _judge_codes(codes)
                    return Outcome(closed.kind + (":" + ",".join(sorted(set(codes))) if codes else ""), ok, why)
                except TimeoutError:
                    return Outcome("no_close", False, "the stream did not close after stop")
                answer = _drain(control, codes, probe, 10.0)
                ok, why = _judge_codes(codes)
                if answer == "probe":
                    return Outcome("error:" + ",".join(sorted(set(codes))) if codes else "accepted", ok, why)
                if answer == "ended":
                    return Outcome("call_ended:" + ",".join(sorted(set(codes))), ok, why)
                return Outcome("no_answer", False, "no probe answer on the control socket")
    except ConnectionClosed as exc:
        return _closed(exc, codes)
    except OSError as exc:
        return Outcome("connect_failed", False, f"{type(exc).__name__}: {exc}")


def _drain(control, codes: list[str], probe: str, timeout: float) -> str:
    """Control-socket events until the probe's answer ('probe'), the call's end ('ended') or the timeout ('')."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return ""
        try:
            m = json.loads(control.recv(timeout=left))
        except (TimeoutError, ConnectionClosed):
            return ""
        if m["type"] == "error":
            if m["code"] == P.BAD_MESSAGE and probe in m["message"]:
                return "probe"
            codes.append(m["code"])
        elif m["type"] == "session.ended" or (m["type"] == "call.media" and m.get("state") == "ended"):
            return "ended"


# ---------------------------------------------------------------- AudioSocket
def as_frame(kind: int, payload: bytes, declared: int | None = None) -> bytes:
    return struct.pack(">BH", kind, len(payload) if declared is None else declared) + payload


@st.composite
def as_messages(draw) -> bytes:
    kind = draw(
        st.sampled_from([0x10, 0x10, 0x10, 0x03, 0xFF, 0x01, 0x11, 0x16, 0x02, 0x04, 0x7F, 0xFE]) | st.integers(0, 255)
    )
    payload = draw(
        st.sampled_from([b"", b"\x00" * 320, b"\x01" * 321, b"5", b"x", b"12", b"\x01", b"\x00" * 16])
        | st.binary(max_size=64)
    )
    lie = draw(st.sampled_from([None] * 14 + ["short", "long"]))
    declared = (
        None
        if lie is None
        else (
            max(0, len(payload) - draw(st.integers(1, 8)))
            if lie == "short"
            else len(payload) + draw(st.integers(1, 600))
        )
    )
    return as_frame(kind, payload, declared)


audiosocket_cases = st.fixed_dictionaries(
    {
        "handshake": st.sampled_from(["uuid"] * 6 + ["wrong_type", "short_uuid", "garbage", "nothing"]),
        "messages": st.lists(as_messages(), max_size=5),
        "junk": st.binary(max_size=40),
        "end": st.sampled_from(["probe"] * 4 + ["truncate", "hangup"]),
    }
)


def _as_recv_all(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    out = b""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            out += data
    except (TimeoutError, socket.timeout):
        pass
    except OSError:
        pass
    return out


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _as_witness(control, codes: list[str], end: str, timeout: float) -> str:
    """Control-socket events until the probe's DTMF ('probe'), the call's end ('ended') or the timeout ('')."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return ""
        try:
            m = json.loads(control.recv(timeout=left))
        except TimeoutError:
            return ""
        except ConnectionClosed:
            return "ended"
        if m["type"] == "dtmf" and m.get("digit") == "7" and end == "probe":
            return "probe"
        if m["type"] == "error":
            codes.append(m["code"])
        if m["type"] == "session.ended" or (m["type"] == "call.media" and m.get("state") == "ended"):
            return "ended"


def run_audiosocket(base: str, port: int, case: dict) -> Outcome:
    """The call's control socket is the witness: errors, DTMF (the probe) and the call's end show up there."""
    call = uuid.uuid4()
    codes: list[str] = []
    try:
        with connect(base + "/v1/control", open_timeout=10, close_timeout=2) as control:
            control.send(json.dumps({"type": "call.attach", "call_id": str(call)}))
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            try:
                hs, end = case["handshake"], case["end"]
                try:
                    if hs == "uuid":
                        sock.sendall(as_frame(0x01, call.bytes))
                    elif hs == "wrong_type":
                        sock.sendall(as_frame(0x10, call.bytes))
                    elif hs == "short_uuid":
                        sock.sendall(as_frame(0x01, call.bytes[:10]))
                    elif hs == "garbage":
                        sock.sendall(case["junk"] or b"\x99")
                    for m in case["messages"]:
                        sock.sendall(m)
                    if end == "truncate":
                        sock.sendall(b"\x10\x01")  # a header cut short, then EOF
                        sock.shutdown(socket.SHUT_WR)
                    elif end == "hangup":
                        sock.sendall(as_frame(0x00, b""))
                    else:
                        sock.sendall(as_frame(0x03, b"7"))
                except OSError:  # the server closed first (a handshake it refused, or a call it ended)
                    pass
                if hs != "uuid":
                    # No call could start: the server must close (hangup frame and/or EOF); our EOF ends its wait at once.
                    _shutdown(sock)
                    data = _as_recv_all(sock, 8.0)
                    return Outcome("refused", True, f"{len(data)} bytes then close")
                answer = _as_witness(control, codes, end, 0.5)
                if not answer:
                    # A lying length may hold the reader mid-payload: our EOF must end the call (no call hangs on a peer).
                    _shutdown(sock)
                    answer = _as_witness(control, codes, end, 5.0)
                    answer = answer and answer + "_after_eof"
                ok, why = _judge_codes(codes)
                if not answer:
                    return Outcome(
                        "no_answer",
                        False,
                        f"neither the probe nor the call's end reached the control socket; codes {codes}",
                    )
                return Outcome(answer + (":" + ",".join(sorted(set(codes))) if codes else ""), ok, why)
            finally:
                sock.close()
    except ConnectionClosed as exc:
        return _closed(exc, codes)
    except OSError as exc:
        return Outcome("connect_failed", False, f"{type(exc).__name__}: {exc}")


# ---------------------------------------------------------------- HTTP
ROUTES = [
    "/healthz",
    "/readyz",
    "/metrics",
    "/v1/voices",
    "/v1/ws",
    "/v1/control",
    "/v1/twilio",
    "/v1/webrtc/offer",
    "/v1/webrtc/config",
    "/",
    "/static/demo.js",
    "/static/../../etc/passwd",
    "/v1/tokens",
    "/v1/audio/speech",
    "/v1/models",
    "/v1/asterisk",
    "/v1/telnyx",
    "/v1/vonage",
    "/v1/jambonz",
    "/nope",
]
METHODS = [
    "GET",
    "POST",
    "PUT",
    "DELETE",
    "PATCH",
    "HEAD",
    "OPTIONS",
    "TRACE",
    "CONNECT",
    "PRI",
    "get",
    "G\x00T",
    "BREW",
]


@st.composite
def http_requests(draw) -> bytes:
    method = draw(
        st.sampled_from(METHODS)
        | st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=10)
    )
    path = draw(st.sampled_from(ROUTES))
    suffix = draw(
        st.sampled_from(
            [""] * 8 + ["?token=x", "?a=%ff%fe", "/" + "a" * 20_000, "?" + "q" * 9000, "%00", "/%2e%2e/", "\u00e9"]
        )
        | st.text(max_size=30).map(urllib.parse.quote)
    )
    version = draw(st.sampled_from(["HTTP/1.1"] * 12 + ["HTTP/1.0", "HTTP/2.0", "HTTP/9", "FOO", ""]))
    headers = {"Host": "127.0.0.1"}
    if draw(st.booleans()):  # well-formed headers half the time, so more requests get past the parser to the handlers
        pairs = draw(
            st.lists(
                st.sampled_from(
                    [
                        ("Content-Type", "application/json"),
                        ("Authorization", "Bearer nope"),
                        ("Origin", "https://evil.example"),
                        ("Connection", "close"),
                        ("Upgrade", "websocket"),
                        ("Sec-WebSocket-Version", "13"),
                    ]
                ),
                max_size=3,
            )
        )
        method = (
            method
            if draw(st.booleans())
            else draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS"]))
        )
        version = "HTTP/1.1"
    else:
        pairs = draw(
            st.lists(
                st.tuples(
                    st.sampled_from(
                        [
                            "Content-Type",
                            "Content-Length",
                            "Transfer-Encoding",
                            "Authorization",
                            "Origin",
                            "Upgrade",
                            "Connection",
                            "Sec-WebSocket-Key",
                            "Sec-WebSocket-Version",
                            "X-Twilio-Signature",
                            "X-Big",
                            "Bad Name",
                        ]
                    ),
                    st.sampled_from(
                        [
                            "application/json",
                            "-1",
                            "99999999999999999999",
                            "0",
                            "chunked",
                            "Bearer x",
                            "websocket",
                            "Upgrade",
                            "13",
                            "dGhlIHNhbXBsZSBub25jZQ==",
                            "x" * 10_000,
                            "\x01\x7f",
                            "https://evil.example",
                        ]
                    ),
                ),
                max_size=4,
            )
        )
    for name, value in pairs:
        headers[name] = value
    body = draw(
        st.sampled_from(
            [
                b"",
                b"{}",
                b'{"sdp":"v=0","type":"offer"}',
                b'{"model":"tts-1","input":"Hi.","voice":"default"}',
                b'{"model":"tts-1","input":"' + b"a" * 30000 + b'","response_format":"pcm"}',
                b'{"input":"\\ud800","voice":{"x":1},"speed":1e999}',
                b"[" * 20_000,
                b"\xff\xfe",
                b"{" * 5 + b"x",
            ]
        )
        | st.binary(max_size=200)
        | json_values.map(lambda v: json.dumps(v, allow_nan=True).encode())
    )
    if "Content-Length" not in headers and "Transfer-Encoding" not in headers and body:
        headers["Content-Length"] = str(len(body))
    head = f"{method} {path}{suffix} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode("utf-8", "surrogateescape") + body


def run_http(port: int, request: bytes) -> Outcome:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError as exc:
        return Outcome("connect_failed", False, str(exc))
    try:
        try:
            sock.sendall(request)
        except OSError:
            pass  # the server may close on a bad start line before reading it all
        data = b""
        sock.settimeout(3.0)
        try:
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except (TimeoutError, socket.timeout):
            return Outcome("waiting", True, "server waits for more bytes (a body it was promised)")
        except OSError as exc:
            return Outcome("reset", True, str(exc))
        if not data:
            return Outcome("closed", True)
        line = data.split(b"\r\n", 1)[0].decode(errors="replace")
        parts = line.split(" ")
        if len(parts) < 2 or not parts[1].isdigit():
            return Outcome("garbled", False, line[:200])
        status = int(parts[1])
        if status >= 500:
            ok = status == 503 and b'"code"' in data
            return Outcome(f"http:{status}", ok, "" if ok else data[:300].decode(errors="replace"))
        return Outcome(f"http:{status}", True)
    finally:
        sock.close()


# ---------------------------------------------------------------- the demo page and /static/ (and every route's path)
# Names that have broken static file servers: past NAME_MAX (255) and PATH_MAX, encoded slashes and
# backslashes, dot segments (raw and encoded), NUL bytes, the real files with something after them.
STATIC_DIR = Path(__file__).resolve().parents[2] / "gateway" / "static"
STATIC_BODIES = frozenset(p.read_bytes() for p in STATIC_DIR.iterdir() if p.is_file())
MAX_REQUEST_LINE = 8190  # aiohttp's default: longer request lines are refused by its parser (400) before any route
URL_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/%?")
STATIC_PREFIXES = ["/static/"] * 10 + [
    "/",
    "/static",
    "//static/",
    "/static//",
    "/static/./",
    "/STATIC/",
    "/v1/webrtc/config/",
    # the same tails on the other routes: each must answer a coded 4xx too
    "/v1/voices/",
    "/v1/twilio/",
    "/v1/control/",
    "/v1/asterisk/",
    "/v1/ws/",
    "/v1/tokens/",
    "/v1/audio/speech/",
    "/healthz/",
    "/v1/",
]
STATIC_NAMES = [
    "demo.js",
    "demo.css",
    "index.html",
    "DEMO.JS",
    "demo.js/",
    "demo.js/x",
    "demo.js.",
    "demo.js~",
    ".",
    "..",
    "...",
    "../../../../etc/passwd",
    "a/../demo.js",
    "./demo.js",
    "%2e%2e/%2e%2e/etc/passwd",
    ".%2e/",
    "%2e",
    "..%2f..%2fetc%2fpasswd",
    "%2fetc%2fpasswd",
    "demo.js%2f",
    "%5c..%5c..%5cwindows",
    "..%5cdemo.js",
    "%00",
    "demo.js%00",
    "%00.js",
    "a%00b",
    "%00" * 300,
    "%ff%fe",
    "%c0%ae%c0%ae/",
    "%",
    "%zz",
    "%2",
    "con",
    "aux.js",
    "~root",
    "?",
    "#x",
    ";x",
    "demo.js;x",
    "*",
    "%25",
    "%252e%252e/",
]
STATIC_RAW_ODD = ["\x00", "a\x00b", "é", "a b", "\\..\\", "\x7f", "\t", "<x>", '"', "{}", "|", "^", "`"]


@st.composite
def static_requests(draw) -> dict:
    """One request for the demo page or a /static/ name: {"method", "path"}; most are well-formed URLs."""
    prefix = draw(st.sampled_from(STATIC_PREFIXES))
    long_name = st.builds(
        lambda unit, n: unit * n,
        st.sampled_from(["a", "%c3%a9", "%41", "ab/", "../", "%2e%2e%2f", "%00"]),
        st.sampled_from([85, 86, 128, 200, 255, 256, 300, 1365, 2000, 2600]),
    )
    segments = st.lists(
        st.sampled_from(STATIC_NAMES) | st.text(max_size=20).map(lambda t: urllib.parse.quote(t, safe="")),
        min_size=1,
        max_size=4,
    ).map("/".join)
    name = draw(st.sampled_from(STATIC_NAMES) | long_name | segments | st.sampled_from(STATIC_RAW_ODD))
    query = draw(st.sampled_from([""] * 6 + ["?x=1", "?%00", "?" + "q" * 3000, "/"]))
    method = draw(st.sampled_from(["GET"] * 6 + ["HEAD", "POST", "PUT", "DELETE", "OPTIONS"]))
    return {"method": method, "path": (prefix + name + query)[: MAX_REQUEST_LINE + 500]}


def _read_response(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    data = b""
    while len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _dechunk(body: bytes) -> bytes:
    out, rest = b"", body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            return body
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


def run_static(port: int, case: dict) -> Outcome:
    """A well-formed URL must get a coded JSON 4xx, or 200 with one of the demo page's own files, nothing else.

    A request line aiohttp's parser refuses (raw NUL, raw non-ASCII, over its line limit) gets its plain 400
    before any route runs: that is fine there, any other answer to it must be coded too. A 5xx is always a failure (no coded 503 is expected here).
    """
    path, method = case["path"], case["method"]
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    well_formed = set(path) <= URL_SAFE and len(method) + len(path) + 10 <= MAX_REQUEST_LINE
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError as exc:
        return Outcome("connect_failed", False, str(exc))
    try:
        sock.settimeout(5.0)
        try:
            sock.sendall(head.encode("utf-8", "surrogateescape"))
            data = _read_response(sock)
        except (TimeoutError, socket.timeout):
            return Outcome("no_answer", False, "no full response within 5 s")
        except OSError as exc:
            return Outcome("reset", not well_formed, str(exc))
    finally:
        sock.close()
    header, _, body = data.partition(b"\r\n\r\n")
    parts = header.split(b"\r\n", 1)[0].decode(errors="replace").split(" ")
    if len(parts) < 2 or not parts[1].isdigit():
        return Outcome("garbled", False, header[:200].decode(errors="replace"))
    status = int(parts[1])
    if b"transfer-encoding: chunked" in header.lower():
        body = _dechunk(body)
    if status >= 500:
        return Outcome(f"http:{status}", False, data[:300].decode(errors="replace"))
    if status == 200:
        ok = method == "HEAD" or body in STATIC_BODIES
        return Outcome(
            "http:200", ok, "" if ok else f"200 with a body that is none of the demo page's files: {body[:200]!r}"
        )
    if not well_formed and status == 400 and not body.lstrip().startswith(b"{"):
        return Outcome("http:400:parser", True)  # refused by aiohttp's parser, before any route
    if not 400 <= status < 500:
        return Outcome(f"http:{status}", False, data[:300].decode(errors="replace"))
    if method == "HEAD":
        return Outcome(f"http:{status}", True)  # a HEAD answer has no body to carry the code
    try:
        code = json.loads(body)["code"]
    except (ValueError, KeyError, TypeError):
        return Outcome(f"http:{status}:uncoded", False, f"a {status} without a coded JSON body: {body[:200]!r}")
    ok = code in STABLE_CODES and code not in FAILURE_CODES
    return Outcome(f"http:{status}:{code}", ok, "" if ok else f"code {code!r}")


# ---------------------------------------------------------------- WebRTC offers
OFFER = "\r\n".join(
    [
        "v=0",
        "o=- 4611731400430051336 2 IN IP4 127.0.0.1",
        "s=-",
        "t=0 0",
        "a=group:BUNDLE 0 1",
        "a=msid-semantic: WMS",
        "m=audio 9 UDP/TLS/RTP/SAVPF 111 0 8",
        "c=IN IP4 0.0.0.0",
        "a=rtcp:9 IN IP4 0.0.0.0",
        "a=ice-ufrag:fuzz",
        "a=ice-pwd:fuzzfuzzfuzzfuzzfuzzfuzz",
        "a=ice-options:trickle",
        "a=fingerprint:sha-256 " + ":".join(["AB"] * 32),
        "a=setup:actpass",
        "a=mid:0",
        "a=recvonly",
        "a=rtcp-mux",
        "a=rtpmap:111 opus/48000/2",
        "a=fmtp:111 minptime=10;useinbandfec=1",
        "a=rtpmap:0 PCMU/8000",
        "a=rtpmap:8 PCMA/8000",
        "m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
        "c=IN IP4 0.0.0.0",
        "a=ice-ufrag:fuzz",
        "a=ice-pwd:fuzzfuzzfuzzfuzzfuzzfuzz",
        "a=fingerprint:sha-256 " + ":".join(["AB"] * 32),
        "a=setup:actpass",
        "a=mid:1",
        "a=sctp-port:5000",
        "a=max-message-size:262144",
        "",
    ]
)
SDP_JUNK = [
    "m=audio",
    "m=video 9 RTP/AVP 96",
    "m=audio 0 RTP/AVP",
    "m=text 9 RTP/AVP 98",
    "a=rtpmap:111 opus/0/2",
    "a=rtpmap:999999999999 opus/48000/2",
    "a=rtpmap:x",
    "a=fingerprint:sha-256 ZZ",
    "a=setup:bogus",
    "a=mid:",
    "a=sctp-port:99999999",
    "c=IN IP6 ::1",
    "c=IN IP4",
    "a=candidate:1 1 udp 1 1.2.3.4 9 typ host",
    "a=candidate:x",
    "a=ssrc:-1 cname:x",
    "a=group:BUNDLE 7",
    "o=",
    "v=9",
    "",
    "\x00",
    "é",
    "m=audio 9 UDP/TLS/RTP/SAVPF " + "1 " * 500,
]


@st.composite
def sdp_offers(draw) -> bytes:
    lines = OFFER.split("\r\n")
    for _ in range(draw(st.integers(0, 5))):
        op = draw(st.sampled_from(["drop", "dup", "junk", "swap", "truncate_line"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "junk":
            lines.insert(i, draw(st.sampled_from(SDP_JUNK) | st.text(max_size=30)))
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif lines[i]:
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        if not lines:
            lines = [""]
    sep = draw(st.sampled_from(["\r\n"] * 4 + ["\n", "\r"]))
    sdp = sep.join(lines)
    wrapper = draw(st.sampled_from(["ok"] * 6 + ["type", "sdp_not_str", "extra"]))
    body: dict = {"sdp": sdp, "type": "offer"}
    if wrapper == "type":
        body["type"] = draw(json_values)
    elif wrapper == "sdp_not_str":
        body["sdp"] = draw(json_values)
    elif wrapper == "extra":
        body["x"] = draw(json_values)
    return json.dumps(body, allow_nan=True).encode()


def run_webrtc_offer(port: int, body: bytes) -> Outcome:
    head = (
        f"POST /v1/webrtc/offer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(head + body)
        data = _as_recv_all(sock, 15.0)
    finally:
        sock.close()
    line = data.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = line.split(" ")
    if len(parts) < 2 or not parts[1].isdigit():
        return Outcome("no_response", False, line[:200])
    status = int(parts[1])
    payload = data.split(b"\r\n\r\n", 1)[-1]
    if status == 200:
        return Outcome("answered", b'"sdp"' in payload, "")
    try:
        code = json.loads(payload).get("code")
    except ValueError:
        code = None
    ok = (
        400 <= status < 500
        and code in STABLE_CODES
        and code not in FAILURE_CODES
        or (status == 503 and code == P.AT_CAPACITY)
    )
    return Outcome(f"http:{status}:{code}", ok, "" if ok else payload[:300].decode(errors="replace"))


def seeded_random(seed: int) -> random.Random:
    return random.Random(seed)


# ---------------------------------------------------------------- media wires (chan_websocket, Telnyx, Vonage, jambonz)
def _wire_starts(call: str) -> dict[str, tuple[str, list[str], str]]:
    """path, subprotocols, a valid opening message per wire (as the providers send them)."""
    return {
        "asterisk": (
            "/v1/asterisk",
            ["media"],
            json.dumps(
                {
                    "event": "MEDIA_START",
                    "connection_id": "voxgate",
                    "channel": "WebSocket/voxgate/0x1",
                    "channel_id": call,
                    "format": "ulaw",
                    "optimal_frame_size": 160,
                    "ptime": 20,
                }
            ),
        ),
        "telnyx": (
            "/v1/telnyx",
            [],
            json.dumps(
                {
                    "event": "start",
                    "sequence_number": "1",
                    "stream_id": call,
                    "start": {
                        "call_control_id": "v3:" + call,
                        "call_session_id": call,
                        "custom_parameters": {},
                        "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1},
                    },
                }
            ),
        ),
        "vonage": (
            "/v1/vonage",
            [],
            json.dumps({"event": "websocket:connected", "content-type": "audio/l16;rate=16000", "call_id": call}),
        ),
        "jambonz": (
            "/v1/jambonz",
            ["audio.jambonz.org"],
            json.dumps(
                {
                    "callSid": call,
                    "callId": call + "@10.0.0.1",
                    "direction": "inbound",
                    "sampleRate": 8000,
                    "mixType": "mono",
                    "metadata": {},
                }
            ),
        ),
    }


WIRES = ("asterisk", "telnyx", "vonage", "jambonz")

wire_cases = st.fixed_dictionaries(
    {
        "wire": st.sampled_from(WIRES),
        "start": st.sampled_from(["valid"] * 3 + ["mutated", "random", "none"]),
        "mutation_seed": st.integers(0, 2**16),
        "messages": st.lists(
            st.one_of(
                ws_frames(),
                st.binary(min_size=0, max_size=700).map(lambda b: ("binary", b)),
                st.sampled_from(["MEDIA_XOFF", "MEDIA_XON", "HANGUP", "FLUSH_MEDIA", "MEDIA_MARK_PROCESSED x"]).map(
                    lambda t: ("text", t)
                ),
            ),
            max_size=5,
        ),
    }
)


def _mutate_text(text: str, rng: random.Random) -> str:
    s = list(text)
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(s)) if s else 0
        op = rng.choice(["del", "ins", "rep"])
        ch = rng.choice(list('{}[]":,\\0123456789') + ["\\ud800", "é", "\x00"])
        if op == "del" and s:
            del s[i]
        elif op == "ins":
            s.insert(i, ch)
        elif s:
            s[i] = ch
    return "".join(s)


def wire_close_ok(code: int | None, frames) -> bool:
    """A clean close code, or, after frames that let the server drop the connection, none at all: no code
    (None) or 1006, which the client reports when the connection dropped with no close frame after its own
    close() (the server's close frame lost to the RST that our further writes provoked)."""
    return code in CLEAN_CLOSES or (code in (None, 1006) and _violates_framing(frames))


def run_wire(base: str, case: dict) -> Outcome:
    """No error goes back on a provider's socket (their protocols have no error message): the judge is the close.
    After the fuzzed frames we close; the server must answer with a clean close (or have closed cleanly first)."""
    call = uuid.uuid4().hex
    path, protocols, start = _wire_starts(call)[case["wire"]]
    rng = random.Random(case["mutation_seed"])
    frames = list(case["messages"])
    try:
        with connect(
            base + path, subprotocols=protocols or None, max_size=None, open_timeout=10, close_timeout=3
        ) as ws:
            try:
                if case["start"] == "valid":
                    ws.send(start)
                elif case["start"] == "mutated":
                    ws.send(_mutate_text(start, rng))
                elif case["start"] == "random":
                    _send(ws, frames.pop(0)) if frames else ws.send("{}")
                for frame in frames:
                    _send(ws, frame)
                ws.close(1000)
            except ConnectionClosed as exc:
                return _closed(exc, [], _violates_framing(case["messages"]))
            code = ws.close_code
            ok = wire_close_ok(code, case["messages"])
            return Outcome(f"closed:{code}", ok, "" if ok else f"close code {code} ({ws.close_reason!r})")
    except ConnectionClosed as exc:
        return _closed(exc, [], _violates_framing(case["messages"]))
    except Exception as exc:  # noqa: BLE001 - a refused upgrade (e.g. 401, 400) is an answer too
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status is not None:
            return Outcome(f"http:{status}", status < 500, "" if status < 500 else str(exc))
        return Outcome("connect_failed", False, f"{type(exc).__name__}: {exc}")


# ---------------------------------------------------------------- SIP (UDP)
SIP_SDP = (
    "v=0\r\no=fuzz 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
    "m=audio 4000 RTP/AVP 0 8 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\n"
)
SIP_METHODS = ("INVITE", "OPTIONS", "BYE", "CANCEL", "ACK", "INFO", "REFER", "NOTIFY", "REGISTER", "FOO")
SIP_HEADER_JUNK = (
    "Content-Length: -5",
    "Content-Length: 99999999999999",
    "Content-Length: x",
    "Via: ",
    "Via: SIP/2.0/UDP",
    "CSeq: abc INVITE",
    "CSeq: 1",
    "From: <",
    "To: \x00",
    "Call-ID:",
    "X-Call-Id: " + "x" * 300,
    "Content-Type: application/sdp;;;",
    "Contact: <sip:@:>",
    "l: 3",
    "v: SIP/2.0/UDP 127.0.0.1:1",
)


def sip_request(method: str, port: int, call_id: str, body: str = "", extra: tuple[str, ...] = ()) -> list[str]:
    head = [
        f"{method} sip:agent@127.0.0.1 SIP/2.0",
        f"Via: SIP/2.0/UDP 127.0.0.1:{port};branch=z9hG4bK{call_id[:12]}",
        "From: <sip:fuzz@127.0.0.1>;tag=f1",
        "To: <sip:agent@127.0.0.1>",
        f"Call-ID: {call_id}",
        f"CSeq: 1 {method}",
        "Max-Forwards: 70",
        *extra,
    ]
    if body:
        head.append("Content-Type: application/sdp")
    head.append(f"Content-Length: {len(body.encode())}")
    return head + ["", body]


@st.composite
def sip_cases(draw) -> dict:
    """A request, mutated: truncated, headers dropped or garbled, bad SDP, a lying Content-Length, a huge body, junk."""
    method = draw(st.sampled_from(SIP_METHODS))
    body = SIP_SDP if method in ("INVITE", "REFER") or draw(st.booleans()) else ""
    if body and draw(st.booleans()):
        sdp = body.split("\r\n")
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(sdp) - 1))
            sdp[i] = draw(st.sampled_from(SDP_JUNK) | st.text(max_size=40) | st.just(sdp[i][: len(sdp[i]) // 2]))
        body = "\r\n".join(sdp)
    shape = draw(st.sampled_from(["lines", "truncate", "huge_body", "binary", "lying_length"]))
    return {
        "method": method,
        "body": body,
        "shape": shape,
        "ops": draw(st.lists(st.tuples(st.integers(0, 12), st.sampled_from(SIP_HEADER_JUNK)), max_size=4)),
        "cut": draw(st.floats(0.0, 1.0)),
        "junk": draw(st.binary(min_size=1, max_size=200)),
        "huge": draw(st.integers(1000, 60000)),
        "sep": draw(st.sampled_from(["\r\n"] * 3 + ["\n"])),
    }


def _sip_bytes(case: dict, port: int, call_id: str) -> bytes:
    lines = sip_request(case["method"], port, call_id, case["body"])
    for index, junk in case["ops"]:
        i = min(index, len(lines) - 3)
        lines[i] = junk if index % 2 else lines[i]
        if not index % 2:
            lines.insert(i, junk)
    data = case["sep"].join(lines).encode("utf-8", "replace")
    shape = case["shape"]
    if shape == "truncate":
        data = data[: int(len(data) * case["cut"])]
    elif shape == "huge_body":
        data = data.replace(b"Content-Length: ", b"X-Old-Length: ", 1) + b"a" * case["huge"]
    elif shape == "binary":
        data = case["junk"] + data[: int(len(data) * case["cut"])]
    elif shape == "lying_length":
        data = data.replace(b"Content-Length: ", b"Content-Length: 9", 1)
    return data[:65000]


def _sip_probe(sock: socket.socket, sip_port: int, timeout: float) -> bool:
    """An OPTIONS ping: the SIP intake still answers."""
    probe_id = f"probe-{uuid.uuid4().hex}"
    local = sock.getsockname()[1]
    sock.sendto("\r\n".join(sip_request("OPTIONS", local, probe_id)).encode(), ("127.0.0.1", sip_port))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data, _ = sock.recvfrom(65535)
        except socket.timeout:
            return False
        if probe_id.encode() in data and data.startswith(b"SIP/2.0 200"):
            return True
    return False


def run_sip(sip_port: int, case: dict) -> Outcome:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind(("127.0.0.1", 0))
        call_id = f"fuzz-{uuid.uuid4().hex}"
        sock.sendto(_sip_bytes(case, sock.getsockname()[1], call_id), ("127.0.0.1", sip_port))
        answered = _sip_probe(sock, sip_port, 5.0)
        return Outcome(
            "probe_answered" if answered else "probe_unanswered",
            answered,
            "" if answered else "OPTIONS after the case got no 200",
        )
    finally:
        sock.close()
