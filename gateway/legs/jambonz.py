"""/v1/jambonz: jambonz `listen` with streaming bidirectional audio as a media leg.

The messages are `gateway.wire.jambonz`'s (subprotocol `audio.jambonz.org`);
the rate we play back at (`bidirectionalAudio.sampleRate`) may be named on
the listen URL (`?bidirectional_sample_rate=16000`), else it is `sampleRate`.
Barge-in sends `killAudio`; `mark` answers (`playout` / `cleared`) confirm marks.
"""

from __future__ import annotations

from gateway.core import CallCore
from gateway.legs.host import LegHost
from gateway.legs.ws_media import WireEndpoint, WireSpec, install_wire
from gateway.wire.jambonz import MAX_OUTSTANDING_MARKS, SUBPROTOCOL, JambonzWire

SPEC = WireSpec(
    "jambonz",
    "/v1/jambonz",
    lambda query: JambonzWire(query.get("bidirectional_sample_rate")),
    subprotocol=SUBPROTOCOL,
    max_outstanding_marks=MAX_OUTSTANDING_MARKS,
)


def install(core: CallCore, host: LegHost) -> WireEndpoint:
    return install_wire(core, host, SPEC)
