"""Outbound calls attacked as an attacker would (docs/security.md): a real gateway dials a far end on loopback
(tests/sip/tiny_uas.py, answering as each test scripts it), and a stranger on another address (127.0.0.66) who
learnt the call's Call-ID and tags forges requests in its dialog; the far end itself answers with what no trunk
should send; POST /v1/calls is fed what would smuggle bytes onto the wire. Each attack is refused with a stable
code or ends that call alone: the dialog and its media stay where they were, and the gateway serves the next call."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.sip.conftest import sip_port
from tests.sip.test_outbound_calls import KEY, STRANGER, _post
from tests.sip import udp_caller
from tests.sip.tiny_uas import Request, open_uas, parse_request, response
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")

TO_TAG = "far1"


def _sdp(ip: str = "127.0.0.1", port: int = 40000) -> str:
    return (
        f"v=0\r\no=far 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n"
        f"m=audio {port} RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\n"
    )


def answering(sdp: str | None = None, extra: list[str] | None = None, to_tag: str = TO_TAG):
    """A far end that rings, then answers our INVITE 200 with `sdp` (ours by default), and 200s whatever else."""

    def handle(request: Request) -> bytes | None:
        uas = handle.uas
        if request.method == "ACK":
            return None
        if request.method != "INVITE":
            return response(request, "200 OK", to_tag=to_tag)
        port = request.addr[1]
        contact = [f"Contact: <sip:far@127.0.0.1:{uas.port}>"] if extra is None else extra
        body = _sdp() if handle.sdp is None else handle.sdp
        ringing = response(request, "180 Ringing", to_tag=to_tag)
        uas.transport.sendto(ringing, ("127.0.0.1", port))
        return response(request, "200 OK", [*contact, "Content-Type: application/sdp"], body, to_tag=to_tag)

    handle.sdp = sdp  # a test may change what the next call is answered with
    return handle


async def _gateway(sip_gateway, handle, **server):
    uas = await open_uas(handle)
    handle.uas = uas
    trunk = {"name": "far", "address": f"127.0.0.1:{uas.port}", "from": "sip:+15550100@voxgate.test"}
    gw = await sip_gateway(sip={"trunks": [trunk], "rtp_timeout_s": 300}, server={"api_keys": [KEY], **server})
    return gw, uas


async def _call(gw, event: str = "call.answered"):
    status, body = await _post(gw, {"to": "+15551234567", "trunk": "far"})
    assert status == 201, body
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    await control.attach(body["call_id"])
    return body["call_id"], control, await control.expect(event)


def _leg(gw):
    return gw.legs["gateway.legs.sip"]


def _in_dialog(method: str, call_id: str, uas_port: int, body: str = "", source: str = STRANGER, extra="") -> bytes:
    """A request in the outbound call's dialog as the far end would send it: its tag in From, ours in To."""
    head = (
        f"{method} sip:voxgate@127.0.0.1 SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP {source}:{uas_port};branch=z9hG4bKforged{method}\r\n"
        f"From: <sip:+15551234567@127.0.0.1>;tag={TO_TAG}\r\n"
        f"To: <sip:+15550100@voxgate.test>;tag=OURTAG\r\n"
        f"Call-ID: {call_id}\r\nCSeq: 7 {method}\r\nMax-Forwards: 70\r\n"
        f"Contact: <sip:x@{source}:{uas_port}>\r\n{extra}"
    )
    if body:
        head += "Content-Type: application/sdp\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n{body}").encode()


@pytest.mark.parametrize(
    "field, value",
    [
        ("to", "sip:a@127.0.0.1\r\nX-Evil: 1"),
        ("to", "sip:a\x00b@127.0.0.1"),  # a NUL: many SIP parsers end the message there
        ("to", "sip:a\x7f@127.0.0.1"),
        ("to", "sip:a@127.0.0.1;x=\x01"),
        ("to", "sip:\u00e9@127.0.0.1"),  # raw UTF-8 in a URI (RFC 3261 §25.1 escapes it)
        ("from", "sip:a@b.test\r\nVia: SIP/2.0/UDP 127.0.0.66"),
        ("from", "sip:a\x00b@b.test"),
        ("from", "sip:\u00e9@b.test"),
        ("headers", {"Via": "SIP/2.0/UDP 127.0.0.66"}),
        ("headers", {"Authorization": "Digest x"}),
        ("headers", {"X-A": "1\r\nContact: <sip:evil@127.0.0.66>"}),
        ("headers", {"X-A\r\nVia": "1"}),
    ],
)
async def test_post_calls_refuses_what_would_put_bytes_of_its_choosing_on_the_wire(sip_gateway, field, value):
    """Every URI and header POST /v1/calls copies into the INVITE is printable ASCII of the right shape: 400
    `bad_message`, and the trunk sees no INVITE. Before: a NUL, DEL or raw UTF-8 in `to`/`from` was dialled."""
    gw, uas = await _gateway(sip_gateway, answering())
    status, answer = await _post(gw, {"to": "+15551234567", "trunk": "far", field: value})
    assert (status, answer["code"]) == (400, "bad_message"), answer
    status, body = await _post(gw, {"to": "sip:+15551234567@127.0.0.1;user=phone", "trunk": "far"})
    assert status == 201, body  # a good one right after goes out
    for _ in range(100):
        if uas.requests:
            break
        await asyncio.sleep(0.02)
    assert [r.uri for r in uas.requests if r.method == "INVITE"] == ["sip:+15551234567@127.0.0.1;user=phone"]


def _stranger() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((STRANGER, 0))
    s.settimeout(3)
    return s


async def _ask(sock: socket.socket, message: bytes, to: tuple[str, int]) -> str:
    """Send `message` from `sock`; the status line of the first answer that is not a 100."""
    sock.sendto(message, to)
    while True:
        data = await asyncio.get_running_loop().run_in_executor(None, sock.recv, 65535)
        line = data.decode(errors="replace").split("\r\n", 1)[0]
        if not line.startswith("SIP/2.0 100"):
            return line


async def test_a_stranger_who_learnt_the_dialog_cannot_speak_for_an_outbound_call(sip_gateway):
    """Once the trunk answered, a stranger on another address with the Call-ID and both tags sends a BYE, a
    re-INVITE and an UPDATE moving media to itself, INFO, NOTIFY, REFER: each 403 `not_dialog_peer`, the call and
    its media stay; then the far end's own BYE ends it."""
    gw, uas = await _gateway(sip_gateway, answering())
    call_id, control, _ = await _call(gw)
    c = _leg(gw).calls[call_id]
    ours, media = c.incoming.dialog.local_tag, c.guard.peer
    gateway = ("127.0.0.1", sip_port(gw))
    stranger = _stranger()
    evil_sdp = _sdp(STRANGER, 41000)
    try:
        for method, body in [("BYE", ""), ("INVITE", evil_sdp), ("UPDATE", evil_sdp), ("INFO", ""), ("NOTIFY", "")]:
            forged = _in_dialog(method, call_id, stranger.getsockname()[1], body).replace(b"OURTAG", ours.encode())
            assert (await _ask(stranger, forged, gateway)).startswith("SIP/2.0 403"), method
        refer = _in_dialog("REFER", call_id, stranger.getsockname()[1], extra="Refer-To: <sip:evil@127.0.0.66>\r\n")
        assert (await _ask(stranger, refer.replace(b"OURTAG", ours.encode()), gateway)).startswith("SIP/2.0 403")
        assert not c.ended and c.guard.peer == media and c.offer.address == media
        bye = _in_dialog("BYE", call_id, uas.port, source="127.0.0.1").replace(b"OURTAG", ours.encode())
        uas.transport.sendto(bye, gateway)  # the far end's own BYE is taken
        await control.expect("session.ended")
        assert c.ended
    finally:
        stranger.close()
        await control.ws.close()


@pytest.mark.parametrize(
    "sdp",
    [
        _sdp("224.0.0.1"),  # multicast: our RTP would go to every host of a group
        _sdp("255.255.255.255"),  # broadcast
        "",  # a 200 with no answer to our offer
        "hello\r\nworld",  # not SDP
        _sdp().replace("RTP/AVP 0 101", "RTP/AVP 18"),  # no codec we offered
        _sdp().replace("m=audio 40000", "m=audio 40001"),  # an odd RTP port
    ],
)
async def test_a_trunks_unusable_answer_fails_that_call_alone_and_frees_its_ports(sip_gateway, sdp):
    """The trunk answers our INVITE 200 with an SDP we cannot send to: the call is ACKed and hung up with BYE,
    the agent gets `call.failed` `rejected`, its RTP ports and its capacity place are free, and the next call
    (answered properly) is taken. Before: a multicast or broadcast c= was taken and our RTP streamed there."""
    handle = answering(sdp)
    gw, uas = await _gateway(sip_gateway, handle)
    call_id, control, failed = await _call(gw, "call.failed")
    leg = _leg(gw)
    try:
        assert (failed["code"], failed["status"]) == ("rejected", 488), failed
        for _ in range(100):
            if [r.method for r in uas.requests] == ["INVITE", "ACK", "BYE"]:
                break
            await asyncio.sleep(0.02)
        assert [r.method for r in uas.requests] == ["INVITE", "ACK", "BYE"]
        assert not leg.calls and not leg.ports._allocated and leg.dialing.ringing() == 0
    finally:
        await control.ws.close()
    handle.sdp = None
    _, control, _ = await _call(gw)  # the gateway goes on dialling
    await control.ws.close()


@pytest.mark.parametrize("ip, refused", [("239.1.2.3", True), ("255.255.255.255", True), ("0.0.0.0", False)])
def test_an_inbound_offer_naming_a_group_address_is_refused_too(ip, refused):
    """The same check guards inbound offers and re-offers; 0.0.0.0 stays the old way of putting a call on hold."""
    from gateway.sip.sdp_check import Refusal, check_offer

    checked = check_offer(_sdp(ip), [0])
    assert isinstance(checked, Refusal) == refused
    assert not refused or checked.code == "sdp_address"


async def test_a_flood_of_ringing_is_told_to_the_agent_once(sip_gateway):
    """The far end floods 180 Ringing (the same answer 200 times) before its 200: the agent hears `ringing` once,
    then the answer. Before: one `call.progress` per 180, 200 events for the agent to wade through."""

    def ring_later(request: Request) -> bytes | None:
        return response(request, "100 Trying", to_tag=TO_TAG) if request.method == "INVITE" else None

    gw, uas = await _gateway(sip_gateway, ring_later)
    status, body = await _post(gw, {"to": "+15551234567", "trunk": "far"})
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    try:
        await control.attach(body["call_id"])
        await control.expect("call.progress", state="trying")
        invite = uas.requests[0]
        for _ in range(200):
            uas.transport.sendto(response(invite, "180 Ringing", to_tag=TO_TAG), invite.addr)
        await asyncio.sleep(0.2)
        ok = response(
            invite,
            "200 OK",
            [f"Contact: <sip:far@127.0.0.1:{uas.port}>", "Content-Type: application/sdp"],
            _sdp(),
            to_tag=TO_TAG,
        )
        uas.transport.sendto(ok, invite.addr)
        events = []
        while not events or events[-1]["type"] != "call.answered":
            events.append(await control.recv())
        assert [e["state"] for e in events if e["type"] == "call.progress"] == ["ringing"]
    finally:
        await control.ws.close()


async def test_an_inbound_invite_finds_no_place_a_ringing_outbound_call_holds(sip_gateway):
    """server.max_sessions 1 and an outbound call ringing (it may answer any moment): an inbound INVITE gets 503
    `at_capacity`, as a second POST /v1/calls does. Before: the INVITE was answered, and when the trunk then
    answered, the outbound call found no place and was hung up."""
    gw, uas = await _gateway(sip_gateway, lambda request: None, max_sessions=1)  # a trunk that never answers
    status, body = await _post(gw, {"to": "+15551234567", "trunk": "far"})
    assert status == 201, body
    caller = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    caller.bind(("127.0.0.1", 0))
    caller.settimeout(3)
    try:
        message = udp_caller.invite("in-1", caller.getsockname()[1], 40002)
        assert (await _ask(caller, message, ("127.0.0.1", sip_port(gw)))).startswith("SIP/2.0 503")
    finally:
        caller.close()


async def test_a_2xx_asking_for_a_tiny_session_interval_does_not_make_us_refresh_in_a_loop(sip_gateway):
    """The far end's 2xx (and each refresh's) says `Session-Expires: 1;refresher=uac`, below the Min-SE (90 s) our
    INVITE sent: the interval is taken as our Min-SE, so we refresh at 45 s, not twice a second for the whole
    call. Before: a re-INVITE every 0.5 s, each answered and ACKed, the trunk's to stop."""
    gw, uas = await _gateway(
        sip_gateway, answering(extra=["Contact: <sip:far@127.0.0.1:9>", "Session-Expires: 1;refresher=uac"])
    )
    call_id, control, _ = await _call(gw)
    try:
        assert _leg(gw).calls[call_id].clock.agreement.interval == 90
        await asyncio.sleep(1.2)  # the old refresh came after 0.5 s
        assert [r.method for r in uas.requests] == ["INVITE", "ACK"]
    finally:
        await control.ws.close()


@pytest.mark.parametrize(
    "extra",
    [["Contact: <sip:"], ["Contact: *"], ["Contact: >x<"], ["Record-Route: <", "Contact: <sip:far@127.0.0.1:9>"]],
)
async def test_a_2xx_with_a_malformed_contact_or_record_route_puts_no_garbage_request_uri_on_the_wire(
    sip_gateway, extra
):
    """The far end's 2xx carries a Contact or Record-Route that names no SIP URI: the ACK and the BYE still go
    with a SIP Request-URI (the Contact's, else the one we dialled) and no garbage Route. Before: `sip`, `*` or `<`
    went out as the Request-URI."""
    gw, uas = await _gateway(sip_gateway, answering(extra=extra))
    call_id, control, _ = await _call(gw)
    try:
        await control.send({"type": "session.end"})
        for _ in range(100):
            if "BYE" in [r.method for r in uas.requests]:
                break
            await asyncio.sleep(0.02)
        sent = [(r.method, r.uri, r.values("route")) for r in uas.requests]
        assert [m for m, _, _ in sent] == ["INVITE", "ACK", "BYE"]
        for _, uri, route in sent:
            assert uri.startswith("sip:") and "<" not in uri and route == [], sent
    finally:
        await control.ws.close()


async def test_a_strangers_forged_2xx_with_a_record_route_to_itself_is_dropped(sip_gateway):
    """While the trunk rings, a stranger forges the 200 for our INVITE with its own SDP, Contact and Record-Route:
    dropped (only the trunk's address answers its INVITE). The trunk's own 200 then makes the dialog: media, Contact
    and the BYE's next hop are the trunk's, nothing reaches the stranger."""

    def ring_later(request: Request) -> bytes | None:
        return response(request, "180 Ringing", to_tag=TO_TAG) if request.method == "INVITE" else None

    gw, uas = await _gateway(sip_gateway, ring_later)
    status, body = await _post(gw, {"to": "+15551234567", "trunk": "far"})
    control = await Control.connect(gw, additional_headers={"Authorization": f"Bearer {KEY}"})
    stranger = _stranger()
    stranger.settimeout(0.5)
    try:
        await control.attach(body["call_id"])
        await control.expect("call.progress", state="ringing")
        invite = uas.requests[0]
        evil = [f"Contact: <sip:evil@{STRANGER}:{stranger.getsockname()[1]}>", "Content-Type: application/sdp"]
        evil.append(f"Record-Route: <sip:{STRANGER}:{stranger.getsockname()[1]};lr>")
        stranger.sendto(response(invite, "200 OK", evil, _sdp(STRANGER, 41000), "evil"), ("127.0.0.1", sip_port(gw)))
        await asyncio.sleep(0.3)
        assert body["call_id"] not in _leg(gw).calls  # still ringing
        ok = [f"Contact: <sip:far@127.0.0.1:{uas.port}>", "Content-Type: application/sdp"]
        uas.transport.sendto(response(invite, "200 OK", ok, _sdp(), TO_TAG), invite.addr)
        await control.expect("call.answered")
        c = _leg(gw).calls[body["call_id"]]
        assert c.guard.peer == ("127.0.0.1", 40000) and c.next_hop == ("127.0.0.1", uas.port)
        await control.send({"type": "session.end"})
        for _ in range(100):
            if "BYE" in [r.method for r in uas.requests]:
                break
            await asyncio.sleep(0.02)
        assert [r.method for r in uas.requests] == ["INVITE", "ACK", "BYE"]
        with pytest.raises(TimeoutError):
            stranger.recv(65535)  # not even an ACK for its forged 200
    finally:
        stranger.close()
        await control.ws.close()


class TcpFarEnd:
    """A far end on TCP: answers our INVITE 200 on the connection it came on, keeps every request it reads."""

    def __init__(self):
        self.requests: list[Request] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.closed = asyncio.Event()  # the gateway closed a connection of ours

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        peer = writer.get_extra_info("peername")
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                request = parse_request(head + await reader.readexactly(length), peer)
                if request is None:
                    continue
                self.requests.append(request)
                if request.method == "INVITE":
                    port = self.server.sockets[0].getsockname()[1]
                    contact = [f"Contact: <sip:far@127.0.0.1:{port};transport=tcp>", "Content-Type: application/sdp"]
                    writer.write(response(request, "200 OK", contact, _sdp(), TO_TAG))
                elif request.method == "BYE":
                    writer.write(response(request, "200 OK", to_tag=TO_TAG))
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed.set()


@pytest.mark.parametrize(
    "flood",
    [
        b"OPTIONS sip:voxgate@127.0.0.1 SIP/2.0\r\nContent-Length: 10000000\r\n\r\n" + b"x" * 65536,  # a 10 MB body
        b"OPTIONS sip:voxgate@127.0.0.1 SIP/2.0\r\nX-Junk: " + b"a" * 200_000,  # a header that never ends
        b"X-Junk: b\r\n" * 20_000,  # header lines without end of headers
    ],
)
async def test_a_tcp_trunk_flooding_its_connection_is_cut_off_and_the_call_still_ends_cleanly(sip_gateway, flood):
    """Once the call is answered the trunk floods its connection (a 10 MB Content-Length, a header without end):
    the gateway reads a bounded amount, drops that connection, and the call's BYE later goes on a new one; the
    next call is placed and answered."""
    far = TcpFarEnd()
    port = await far.start()
    trunk = {"name": "far", "address": f"127.0.0.1:{port}", "from": "sip:+15550100@voxgate.test", "transport": "tcp"}
    gw = await sip_gateway(sip={"trunks": [trunk], "rtp_timeout_s": 300}, server={"api_keys": [KEY]})
    call_id, control, _ = await _call(gw)
    try:
        far.writers[0].write(flood)
        await asyncio.wait_for(far.closed.wait(), 10)  # the gateway hung up on the flood
        await control.send({"type": "session.end"})
        for _ in range(200):
            if "BYE" in [r.method for r in far.requests]:
                break
            await asyncio.sleep(0.02)
        assert [r.method for r in far.requests] == ["INVITE", "ACK", "BYE"]
    finally:
        await control.ws.close()
    _, control, _ = await _call(gw)
    await control.ws.close()
    far.server.close()


async def test_a_flood_of_reinvites_never_acked_leaves_one_2xx_resending(sip_gateway):
    """The far end sends 10 re-INVITEs in a row and ACKs none: each gets its 200, and only the latest is sent again
    (a newer re-INVITE means the older 200 arrived: RFC 3261 §14.1 lets no new INVITE start before). Before: every
    200 was resent for 32 s, a task each, so a flood of re-INVITEs multiplied into a flood of answers."""
    gw, uas = await _gateway(sip_gateway, answering())
    call_id, control, _ = await _call(gw)
    ours = _leg(gw).calls[call_id].incoming.dialog.local_tag
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))  # the dialog's peer address (the trunk's), another port
    peer.setblocking(False)
    gateway = ("127.0.0.1", sip_port(gw))
    try:
        for cseq in range(10, 20):  # each also tells the agent call.media: 10 stay below its client's queue
            reinvite = _in_dialog("INVITE", call_id, peer.getsockname()[1], _sdp(), source="127.0.0.1")
            peer.sendto(
                reinvite.replace(b"OURTAG", ours.encode()).replace(b"CSeq: 7", f"CSeq: {cseq}".encode()), gateway
            )
        await asyncio.sleep(1.7)  # T1 (0.5 s) and 2*T1 later: the resends of an unACKed 200
        answers: dict[str, int] = {}
        while True:
            try:
                data = peer.recv(65535).decode(errors="replace")
            except BlockingIOError:
                break
            if data.startswith("SIP/2.0 200"):
                cseq = next(line for line in data.split("\r\n") if line.startswith("CSeq:"))
                answers[cseq] = answers.get(cseq, 0) + 1
        assert len(answers) == 10
        assert all(n == 1 for cseq, n in answers.items() if cseq != "CSeq: 19 INVITE"), answers
        assert not _leg(gw).calls[call_id].ended
    finally:
        peer.close()
        await control.ws.close()
