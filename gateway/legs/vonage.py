"""/v1/vonage: the Vonage Voice API WebSocket (NCCO `connect` to a `websocket` endpoint) as a media leg.

The messages are `gateway.wire.vonage`'s: L16 at the NCCO's content-type
rate, exactly 20 ms per message. Vonage names no call: the NCCO passes a
`call_id` header, or the endpoint's `uri` a `call_id` query parameter.
Barge-in sends `clear`; `websocket:notify` confirms marks.
"""

from __future__ import annotations

from gateway.core import CallCore
from gateway.legs.host import LegHost
from gateway.legs.ws_media import WireEndpoint, WireSpec, install_wire
from gateway.wire.vonage import VonageWire

SPEC = WireSpec("vonage", "/v1/vonage", lambda query: VonageWire())


def install(core: CallCore, host: LegHost) -> WireEndpoint:
    return install_wire(core, host, SPEC)
