"""/v1/telnyx: Telnyx media streaming, bidirectional RTP mode, as a media leg.

The messages are `gateway.wire.telnyx`'s (frames reordered by chunk); the
codec Telnyx plays back may be named on the stream URL
(`?bidirectional_codec=L16&bidirectional_sampling_rate=16000`), else it is
the stream's own. Barge-in sends `clear`; mark echoes confirm marks.
"""

from __future__ import annotations

from gateway.core import CallCore
from gateway.legs.host import LegHost
from gateway.legs.ws_media import WireEndpoint, WireSpec, install_wire
from gateway.wire.telnyx import TelnyxWire

SPEC = WireSpec(
    "telnyx",
    "/v1/telnyx",
    lambda query: TelnyxWire(query.get("bidirectional_codec"), query.get("bidirectional_sampling_rate")),
)


def install(core: CallCore, host: LegHost) -> WireEndpoint:
    return install_wire(core, host, SPEC)
