"""/v1/asterisk: Asterisk `chan_websocket` (20.16 / 21.11 / 22.6 / 23+) as a media leg.

Asterisk dials us per call (`Dial(WebSocket/NAME/c(ulaw)f(json))`, a
`websocket_client.conf` section NAME with `protocols = media`). The messages
are `gateway.wire.asterisk`'s; the shared WebSocket adapter does the rest.
Barge-in sends FLUSH_MEDIA, MEDIA_MARK_PROCESSED confirms marks, and
MEDIA_XOFF / MEDIA_XON hold and release our frames.
"""

from __future__ import annotations

from gateway.core import CallCore
from gateway.legs.host import LegHost
from gateway.legs.ws_media import WireEndpoint, WireSpec, install_wire
from gateway.wire.asterisk import SUBPROTOCOL, AsteriskWire

SPEC = WireSpec("asterisk", "/v1/asterisk", lambda query: AsteriskWire(), subprotocol=SUBPROTOCOL)


def install(core: CallCore, host: LegHost) -> WireEndpoint:
    return install_wire(core, host, SPEC)
