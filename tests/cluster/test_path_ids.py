"""Call ids in the path (`/v1/twilio/{call_id}`, `/v1/control/{call_id}`, `/v1/vonage/{call_id}`, …): a balancer can
hash on them, and the two legs of a call meet by them with no custom parameter, query or header."""

from __future__ import annotations

import websockets

from tests.telephony.clients import Control, TwilioClient, ws_url
from tests.telephony.wire_clients import VonageClient


async def test_twilio_and_control_meet_by_the_path_ids_alone(gateway):
    control = Control(await websockets.connect(ws_url(gateway, "/v1/control/order-77")))
    await control.attach("order-77")
    tw = TwilioClient(
        await websockets.connect(ws_url(gateway, "/v1/twilio/order-77"), compression=None), "MZ77", "CA77"
    )
    await tw.start()  # no customParameters: the path names the call
    assert (await control.expect("call.media"))["state"] == "connected"
    call = gateway.calls.get("order-77")
    assert call is not None and call is gateway.calls.get("CA77")  # the provider's ids are aliases of the same call
    await control.send({"type": "text", "turn_id": "t1", "text": "Hello by path.", "final": True})
    msg, _ = await tw.recv()
    assert msg["event"] == "media"


async def test_attach_naming_another_call_than_the_path_is_refused(gateway):
    control = Control(await websockets.connect(ws_url(gateway, "/v1/control/order-1")))
    await control.send({"type": "call.attach", "call_id": "order-2"})
    error = await control.expect("error")
    assert error["code"] == "bad_message" and "order-1" in error["message"]
    assert gateway.calls.get("order-2") is None


async def test_a_wire_leg_takes_its_call_id_from_the_path(gateway):
    control = await Control.connect(gateway)
    await control.attach("order-v9")
    vg = VonageClient(await websockets.connect(ws_url(gateway, "/v1/vonage/order-v9"), compression=None), 16000)
    await vg.send('{"event": "websocket:connected", "content-type": "audio/l16;rate=16000"}')
    assert (await control.expect("call.media"))["leg"] == "vonage"
