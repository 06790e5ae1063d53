"""Any input to any wire either decodes or raises ProtocolError with a stable code: never another exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import protocol as P
from gateway.wire.asterisk import AsteriskWire
from gateway.wire.jambonz import JambonzWire
from gateway.wire.telnyx import TelnyxWire
from gateway.wire.vonage import VonageWire

CODES = {v for k, v in vars(P).items() if k.isupper() and isinstance(v, str)}

# Per wire: how it opens, the names it knows (under which key) and the fields it reads.
WIRES = {
    "asterisk": (
        AsteriskWire,
        '{"event":"MEDIA_START","channel_id":"1.1","format":"slin16","optimal_frame_size":640,"ptime":20}',
        "event",
        ["MEDIA_START", "MEDIA_MARK_PROCESSED", "DTMF_END", "MEDIA_XOFF", "MEDIA_XON", "ERROR", "STATUS"],
        ["channel_id", "format", "optimal_frame_size", "ptime", "correlation_id", "digit", "error_text"],
    ),
    "telnyx": (
        TelnyxWire,
        '{"event":"start","stream_id":"s","start":{"media_format":{"encoding":"L16","sample_rate":16000}}}',
        "event",
        ["connected", "start", "media", "mark", "dtmf", "stop", "error"],
        [
            "stream_id",
            "start",
            "media",
            "mark",
            "dtmf",
            "payload",
            "sequence_number",
            "media_format",
            "custom_parameters",
        ],
    ),
    "vonage": (
        VonageWire,
        '{"event":"websocket:connected","content-type":"audio/l16;rate=16000"}',
        "event",
        ["websocket:connected", "websocket:dtmf", "websocket:notify", "websocket:cleared"],
        ["content-type", "digit", "dtmf", "payload", "call_id"],
    ),
    "jambonz": (
        JambonzWire,
        '{"callSid":"c","sampleRate":16000,"mixType":"mono"}',
        ("type", "event"),
        ["mark", "dtmf", "playDone"],
        ["data", "dtmf", "duration", "callSid", "sampleRate", "mixType", "metadata"],
    ),
}
INNER_KEYS = [
    "name",
    "event",
    "digit",
    "payload",
    "chunk",
    "timestamp",
    "track",
    "encoding",
    "sample_rate",
    "channels",
    "media_format",
    "call_control_id",
    "voxgate_mark",
    "code",
    "title",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=10),
    st.sampled_from(["ulaw", "slin16", "PCMU", "L16", "audio/l16;rate=16000", "8000", "AAAA", "5", "dtmf", "playout"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(INNER_KEYS), inner, max_size=5)
    ),
    max_leaves=10,
)


def messages(key: str | tuple[str, ...], names: list[str], fields: list[str]):
    keys = (key,) if isinstance(key, str) else key
    objects = st.builds(
        lambda k, name, rest: json.dumps({**rest, k: name}),
        st.sampled_from(keys),
        st.sampled_from(names),
        st.dictionaries(st.sampled_from(fields), values, max_size=5),
    )
    return st.one_of(
        objects,
        objects,
        objects,
        st.builds(lambda n, rest: f"{n} {rest}", st.sampled_from(names), st.text(max_size=30)),
        st.text(max_size=40),
        st.binary(max_size=700),
    )


@pytest.mark.parametrize("name", list(WIRES))
def test_every_input_decodes_or_gets_a_stable_code(name):
    cls, opening, key, names, fields = WIRES[name]

    @settings(
        max_examples=60, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(st.booleans(), st.lists(messages(key, names, fields), min_size=1, max_size=4))
    def one(start_first, inputs):
        wire = cls()
        if start_first:
            wire.decode(opening)
        for raw in inputs:
            try:
                wire.decode(raw)
            except P.ProtocolError as exc:
                assert exc.code in CODES and exc.message

    one()
