"""Direct SIP as an attacker on the same network sees it: a stranger's socket on another loopback address (not in
`sip.allow`) and a caller that lies in its SDP, against a real gateway. Each of these gave a call away, or
left state behind, before the SIP leg checked dialogs, offers and rates."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.sip.session_timer import Agreement
from tests.sip.conftest import sip_port
from tests.sip.udp_caller import UdpCaller, in_dialog, invite
from tests.telephony.clients import Control

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")

STRANGER = "127.0.0.66"  # not in the fixture's sip.allow (127.0.0.1)


@pytest.fixture
def callers():
    made = []

    def make(host: str = "127.0.0.1") -> UdpCaller:
        made.append(UdpCaller(host))
        return made[-1]

    yield make
    for c in made:
        c.close()


def header(message: str, name: str) -> str | None:
    for line in message.split("\r\n"):
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == name.lower():
            return value.strip()
    return None


def to_tag(message: str) -> str:
    return header(message, "To").split("tag=", 1)[1].split(";")[0]


async def response(c: UdpCaller, min_status: int = 200, timeout: float = 5.0) -> str:
    while True:
        data, _ = await c.recv(c.sip, timeout)
        if data.startswith(b"SIP/2.0 ") and int(data[8:11]) >= min_status:
            return data.decode()


def send(c: UdpCaller, gw, message: bytes) -> None:
    c.sip.sendto(message, ("127.0.0.1", sip_port(gw)))


async def no_event(control: Control, etype: str, timeout: float) -> None:
    with pytest.raises(TimeoutError):
        await control.expect(etype, timeout=timeout)


def calls(gw) -> dict:
    return gw.legs["gateway.legs.sip"].calls


def stack_state(gw) -> tuple[int, int]:
    """(calls, server transactions) the SIP stack holds, over both doors."""
    doors = gw.legs["gateway.legs.sip"].doors
    return sum(len(d.uas._calls) for d in doors), sum(len(d.uas.transactions._server) for d in doors)


# ------------------------------------------------------------------ dialogs bound to their peer


async def test_a_second_invite_with_a_ringing_calls_id_from_a_stranger_gets_403(sip_gateway, callers):
    gw = await sip_gateway(sip={"answer_delay_ms": 400})
    caller, stranger = callers(), callers(STRANGER)
    call_id = f"steal-{uuid.uuid4().hex}"
    send(caller, gw, invite(call_id, caller.sip.getsockname()[1], caller.rtp.getsockname()[1]))
    await asyncio.sleep(0.1)  # ringing
    for tag in (None, "guessed"):
        send(
            stranger,
            gw,
            invite(call_id, stranger.sip.getsockname()[1], stranger.rtp.getsockname()[1], host=STRANGER, to_tag=tag),
        )
        refused = await response(stranger)
        assert refused.startswith("SIP/2.0 403") and header(refused, "X-Voxgate-Reason") == "not_dialog_peer"
    answer = await response(caller)
    assert answer.startswith("SIP/2.0 200")  # the real caller's call goes on, with its own media address
    assert f"m=audio {caller.rtp.getsockname()[1]}" not in answer and len(calls(gw)) == 1
    send(caller, gw, in_dialog("ACK", call_id, caller.sip.getsockname()[1], to_tag(answer)))
    await caller.recv(caller.rtp, timeout=2)
    with pytest.raises(TimeoutError):
        await stranger.recv(stranger.rtp, timeout=0.3)


async def test_in_dialog_requests_from_a_stranger_get_403_and_change_nothing(sip_gateway, callers):
    """The stranger knows the Call-ID and both tags (it saw the signalling): a re-INVITE moving the media to it,
    a BYE, an INFO and a CANCEL from its address are all refused, and the call and its media go on."""
    gw = await sip_gateway()
    caller, stranger = callers(), callers(STRANGER)
    call_id = f"hijack-{uuid.uuid4().hex}"
    tag = to_tag(await caller.call(sip_port(gw), call_id))
    local = stranger.sip.getsockname()[1]
    control = await Control.connect(gw)
    await control.attach(call_id)
    attempts = [
        invite(call_id, local, stranger.rtp.getsockname()[1], host=STRANGER, to_tag=tag, cseq=2),
        in_dialog("BYE", call_id, local, tag, host=STRANGER, cseq=3),
        in_dialog(
            "INFO",
            call_id,
            local,
            tag,
            host=STRANGER,
            cseq=4,
            headers="Content-Type: application/dtmf-relay\r\n",
            body="Signal=5\r\n",
        ),  # fmt: skip
    ]
    for message in attempts:
        send(stranger, gw, message)
        refused = await response(stranger)
        assert refused.startswith("SIP/2.0 403") and header(refused, "X-Voxgate-Reason") == "not_dialog_peer"
    assert len(calls(gw)) == 1
    for _ in range(30):  # the media still goes to the caller, none to the stranger
        await caller.recv(caller.rtp)
    with pytest.raises(TimeoutError):
        await stranger.recv(stranger.rtp, timeout=0.2)
    await no_event(control, "dtmf", timeout=0.3)
    assert gw.metrics.errors.labels(code="not_dialog_peer")._value.get() == 3


async def test_in_dialog_requests_with_wrong_tags_get_481(sip_gateway, callers):
    gw = await sip_gateway()
    caller = callers()
    call_id = f"tags-{uuid.uuid4().hex}"
    tag = to_tag(await caller.call(sip_port(gw), call_id))
    local = caller.sip.getsockname()[1]
    for message in (
        in_dialog("BYE", call_id, local, "not-our-tag", cseq=2),
        in_dialog("BYE", call_id, local, tag, from_tag="not-the-callers", cseq=3),
    ):
        send(caller, gw, message)
        refused = await response(caller)
        assert refused.startswith("SIP/2.0 481") and header(refused, "X-Voxgate-Reason") == "dialog_mismatch"
    assert len(calls(gw)) == 1


async def test_a_notify_for_no_refer_of_ours_is_481_and_tells_the_agent_nothing(sip_gateway, callers):
    """`_on_notify` checked only the Call-ID: a NOTIFY told the agent `call.transfer succeeded` for a REFER
    never sent."""
    gw = await sip_gateway()
    caller = callers()
    call_id = f"notify-{uuid.uuid4().hex}"
    tag = to_tag(await caller.call(sip_port(gw), call_id))
    control = await Control.connect(gw)
    await control.attach(call_id)
    send(
        caller,
        gw,
        in_dialog(
            "NOTIFY",
            call_id,
            caller.sip.getsockname()[1],
            tag,
            cseq=2,
            headers="Event: refer\r\nSubscription-State: terminated\r\nContent-Type: message/sipfrag\r\n",
            body="SIP/2.0 200 OK\r\n",
        ),  # fmt: skip
    )
    refused = await response(caller)
    assert refused.startswith("SIP/2.0 481") and header(refused, "X-Voxgate-Reason") == "dialog_mismatch"
    await no_event(control, "call.transfer", timeout=0.5)


async def test_a_cancel_from_a_stranger_does_not_end_a_ringing_call(sip_gateway, callers):
    gw = await sip_gateway(sip={"answer_delay_ms": 400})
    caller, stranger = callers(), callers(STRANGER)
    call_id = f"cancel-{uuid.uuid4().hex}"
    request = invite(call_id, caller.sip.getsockname()[1], caller.rtp.getsockname()[1])
    send(caller, gw, request)
    await asyncio.sleep(0.1)
    branch = header(request.decode(), "Via").split("branch=")[1]  # what a stranger on the path saw
    cancel = in_dialog("CANCEL", call_id, stranger.sip.getsockname()[1], "", host=STRANGER, branch=branch)
    send(stranger, gw, cancel)
    refused = await response(stranger)
    assert refused.startswith("SIP/2.0 403") and header(refused, "X-Voxgate-Reason") == "not_dialog_peer"
    assert (await response(caller)).startswith("SIP/2.0 200")  # not 487: the call was not cancelled


# ------------------------------------------------------------------ SDP checked before answering

AUDIO = "m=audio {port} RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\n"


def sdp(connection: str = "IN IP4 127.0.0.1", media: str = AUDIO, port: int = 40000) -> str:
    return f"v=0\r\no=t 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc={connection}\r\nt=0 0\r\n" + media.format(port=port)


@pytest.mark.parametrize(
    "body, code",
    [
        (sdp(port=0), "audio_declined"),
        (sdp(port=70000), "sdp_port"),
        (sdp(port=40001), "sdp_port"),
        (sdp(media="m=audio abc RTP/AVP 0\r\n"), "bad_sdp"),
        (sdp(connection="IN IP4 localhost"), "sdp_address"),
        (
            sdp(
                media="m=audio {port} RTP/SAVP 0 101\r\na=rtpmap:0 PCMU/8000\r\n"
                "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\n"
            ),
            "srtp_unsupported",
        ),
        (sdp(media="m=audio {port} RTP/AVP 9\r\na=rtpmap:9 G722/8000\r\n"), "unsupported_format"),
    ],
)
async def test_an_offer_voxgate_cannot_answer_truthfully_gets_488_and_leaves_no_state(sip_gateway, callers, body, code):
    gw = await sip_gateway()
    c = callers()
    send(c, gw, invite(f"sdp-{uuid.uuid4().hex}", c.sip.getsockname()[1], 0, sdp=body))
    refused = await response(c)
    assert refused.startswith("SIP/2.0 488") and header(refused, "X-Voxgate-Reason") == code
    assert stack_state(gw) == (0, 0) and calls(gw) == {}


async def test_telephone_event_is_answered_at_8000_hz_with_the_payload_type_the_offer_bound_there(sip_gateway, callers):
    gw = await sip_gateway()
    c = callers()
    media = (
        "m=audio {port} RTP/AVP 0 100 101\r\na=rtpmap:0 PCMU/8000\r\n"
        "a=rtpmap:100 telephone-event/48000\r\na=rtpmap:101 telephone-event/8000\r\n"
    )
    send(c, gw, invite(f"dtmf-{uuid.uuid4().hex}", c.sip.getsockname()[1], 0, sdp=sdp(media=media, port=40002)))
    answer = await response(c)
    assert answer.startswith("SIP/2.0 200")
    assert "m=audio" in answer and "RTP/AVP 0 101\r\n" in answer and "a=rtpmap:101 telephone-event/8000" in answer
    assert "a=rtpmap:100" not in answer


# ------------------------------------------------------------------ bounded state and rate


async def test_thousands_of_refused_invites_leave_no_state(sip_gateway, callers, monkeypatch):
    """aiosipua kept every refused INVITE that was never ACKed in its call table for good (and its transaction
    for minutes): memory grew with every one."""
    import logging
    import tracemalloc

    gw = await sip_gateway(sip={"codecs": ["PCMA"], "invites_per_source_per_s": 100000})
    monkeypatch.setattr(logging.getLogger("voxgate.sip"), "level", logging.WARNING)  # the log capture's records
    c = callers()
    local, rtp = c.sip.getsockname()[1], c.rtp.getsockname()[1]

    async def refused(batch: int) -> None:
        for i in range(100):
            send(c, gw, invite(f"flood-{batch}-{i}-{uuid.uuid4().hex[:8]}", local, rtp, codec_pt=0))
        answered = 0
        while answered < 100:
            data, _ = await c.recv(c.sip)
            answered += data.startswith(b"SIP/2.0 488")

    tracemalloc.start()
    try:
        for batch in range(3):  # warm: first-use caches, the metric's label
            await refused(batch)
        before = tracemalloc.get_traced_memory()[0]
        for batch in range(3, 20):
            await refused(batch)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert stack_state(gw) == (0, 0) and calls(gw) == {}
    assert gw.metrics.errors.labels(code="unsupported_format")._value.get() == 2000
    assert grown < 256 * 1024, f"{grown / 1700:.0f} bytes kept per refused INVITE"


async def test_an_invite_flood_from_an_allowed_source_is_rate_limited_and_a_bystander_still_gets_through(
    sip_gateway, callers
):
    gw = await sip_gateway(sip={"allow": ["127.0.0.1", "127.0.0.2"], "invites_per_source_per_s": 5})
    flooder, bystander = callers(), callers("127.0.0.2")
    local, rtp = flooder.sip.getsockname()[1], flooder.rtp.getsockname()[1]
    for i in range(40):
        send(flooder, gw, invite(f"burst-{i}-{uuid.uuid4().hex[:8]}", local, rtp))
    statuses, retry_after = [], set()
    while len(statuses) < 40:
        text = await response(flooder)
        statuses.append(int(text[8:11]))
        if text.startswith("SIP/2.0 503"):
            assert header(text, "X-Voxgate-Reason") == "rate_limited"
            retry_after.add(header(text, "Retry-After"))
    assert statuses.count(200) <= 6 and statuses.count(503) >= 34 and retry_after == {"1"}
    assert gw.metrics.connections_refused.labels(reason="sip_invites_per_source_per_s")._value.get() >= 34
    await bystander.call(sip_port(gw), f"bystander-{uuid.uuid4().hex}")  # another source's call: 200 OK


async def test_the_per_ip_caps_count_sip_calls_over_udp_and_free_the_slot_when_a_call_ends(sip_gateway, callers):
    """server.limits applied to SIP over TCP only: over UDP one address could hold every session."""
    gw = await sip_gateway(server={"limits": {"max_connections_per_ip": 1}})
    first = callers()
    call_id = f"slot-{uuid.uuid4().hex}"
    tag = to_tag(await first.call(sip_port(gw), call_id))
    refused = await callers().final_response(sip_port(gw), f"second-{uuid.uuid4().hex}")
    assert refused.startswith("SIP/2.0 503") and header(refused, "X-Voxgate-Reason") == "rate_limited"
    assert gw.metrics.connections_refused.labels(reason="max_connections_per_ip")._value.get() == 1
    send(first, gw, in_dialog("BYE", call_id, first.sip.getsockname()[1], tag, cseq=2))
    assert (await response(first)).startswith("SIP/2.0 200")
    await asyncio.sleep(0.1)
    await callers().call(sip_port(gw), f"third-{uuid.uuid4().hex}")  # the slot came back with the BYE


# ------------------------------------------------------------------ transfers


async def test_call_transfer_is_refused_unless_sip_transfer_targets_allows_the_target(sip_gateway, callers):
    gw = await sip_gateway(sip={"transfer_targets": ["sip:*@pbx.example.com"]})
    caller = callers()
    call_id = f"toll-{uuid.uuid4().hex}"
    await caller.call(sip_port(gw), call_id)
    control = await Control.connect(gw)
    await control.attach(call_id)
    await control.send({"type": "call.transfer", "to": "tel:+19005550100"})
    error = await control.expect("error", timeout=5)
    assert error["code"] == "transfer_not_allowed"
    with pytest.raises(TimeoutError):  # no REFER went out
        while True:
            data, _ = await caller.recv(caller.sip, timeout=0.5)
            assert not data.startswith(b"REFER ")


async def test_refer_is_resent_until_answered_and_a_refusal_is_reported_as_failed(sip_gateway, callers):
    """REFER was sent once over UDP, and a 403 answer to it was dropped: the agent waited at `requested`."""
    gw = await sip_gateway(sip={"transfer_targets": ["sip:*@pbx.example.com"]})
    caller = callers()
    call_id = f"refer-{uuid.uuid4().hex}"
    await caller.call(sip_port(gw), call_id)
    control = await Control.connect(gw)
    await control.attach(call_id)
    await control.send({"type": "call.transfer", "to": "sip:sales@pbx.example.com"})
    await control.expect("call.transfer", timeout=5)  # requested
    refers = []
    while len(refers) < 2:  # the first one "lost": it comes again after T1
        data, _ = await caller.recv(caller.sip, timeout=3)
        if data.startswith(b"REFER "):
            refers.append(data.decode())
    assert (
        header(refers[0], "CSeq") == header(refers[1], "CSeq") and "Refer-To: <sip:sales@pbx.example.com>" in refers[0]
    )
    request = refers[1]
    answer = (
        "SIP/2.0 403 Forbidden\r\n"
        + "".join(f"{name}: {header(request, name)}\r\n" for name in ("Via", "From", "To", "Call-ID", "CSeq"))
        + "Content-Length: 0\r\n\r\n"
    )
    send(caller, gw, answer.encode())
    event = await control.expect("call.transfer", timeout=5)
    assert event["state"] == "failed" and event["status"] == 403


# ------------------------------------------------------------------ the right addresses


async def test_with_a_wildcard_host_sdp_and_contact_carry_the_address_the_caller_reaches(sip_gateway, callers):
    """sip.host 0.0.0.0 without public_ip wrote `Contact: <sip:...@0.0.0.0>`: a trunk could not reach us."""
    gw = await sip_gateway(sip={"host": "0.0.0.0"})
    answer = await callers().call(sip_port(gw), f"wild-{uuid.uuid4().hex}")
    contact = header(answer, "Contact")
    assert "0.0.0.0" not in answer and "127.0.0.1:" in contact, contact
    assert "c=IN IP4 127.0.0.1" in answer


async def test_with_a_wildcard_host_a_peer_off_loopback_is_never_given_a_loopback_address(sip_gateway):
    """The old SDP said c=127.0.0.1 to every peer of a 0.0.0.0 gateway: a real trunk's RTP went nowhere."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet leaves, connect only picks a route
            address = probe.getsockname()[0]
        except OSError:
            address = "127.0.0.1"
    if address.startswith("127."):
        pytest.skip("this machine has no non-loopback IPv4 address")
    gw = await sip_gateway(sip={"host": "0.0.0.0", "allow": [address]})
    caller = UdpCaller(address)
    try:
        caller.sip.sendto(
            invite(f"lan-{uuid.uuid4().hex}", caller.sip.getsockname()[1], caller.rtp.getsockname()[1], host=address),
            (address, sip_port(gw)),
        )
        answer = await response(caller)
    finally:
        caller.close()
    sdp_answer, contact = answer.split("\r\n\r\n", 1)[1], header(answer, "Contact")
    assert answer.startswith("SIP/2.0 200") and f"c=IN IP4 {address}" in sdp_answer and "127.0.0.1" not in sdp_answer
    assert f"{address}:" in contact, contact


async def test_allow_anyone_is_said_explicitly_and_warned_about_at_start(sip_gateway, callers, caplog):
    gw = await sip_gateway(sip={"allow": ["0.0.0.0/0"]})
    assert any(r.levelname == "WARNING" and "0.0.0.0/0" in r.getMessage() for r in caplog.records)
    await callers("127.0.0.9").call(sip_port(gw), f"anyone-{uuid.uuid4().hex}")  # and anyone may call


async def _transfer_under_way(gw, caller: UdpCaller, call_id: str) -> tuple[Control, str]:
    """A call whose agent asked for a transfer: the control socket, and the REFER as the caller got it."""
    await caller.call(sip_port(gw), call_id)
    control = await Control.connect(gw)
    await control.attach(call_id)
    await control.send({"type": "call.transfer", "to": "sip:sales@pbx.example.com"})
    await control.expect("call.transfer", timeout=5, state="requested")
    while True:
        data, _ = await caller.recv(caller.sip, timeout=3)
        if data.startswith(b"REFER "):
            return control, data.decode()


async def test_a_notify_is_taken_only_with_our_refers_event_id(sip_gateway, callers):
    gw = await sip_gateway(sip={"transfer_targets": ["sip:*@pbx.example.com"]})
    caller = callers()
    call_id = f"event-{uuid.uuid4().hex}"
    control, refer = await _transfer_under_way(gw, caller, call_id)
    cseq = header(refer, "CSeq").split()[0]
    tag = header(refer, "From").split("tag=")[1]
    send(caller, gw, ("SIP/2.0 202 Accepted\r\n" + "".join(
        f"{name}: {header(refer, name)}\r\n" for name in ("Via", "From", "To", "Call-ID", "CSeq")
    ) + "Content-Length: 0\r\n\r\n").encode())  # fmt: skip

    def notify(event: str, n: int) -> bytes:
        return in_dialog(
            "NOTIFY", call_id, caller.sip.getsockname()[1], tag, cseq=n,
            headers=f"Event: {event}\r\nSubscription-State: terminated\r\nContent-Type: message/sipfrag\r\n",
            body="SIP/2.0 200 OK\r\n",
        )  # fmt: skip

    send(caller, gw, notify(f"refer;id={int(cseq) + 7}", 2))  # another REFER's
    refused = await response(caller)
    assert refused.startswith("SIP/2.0 481") and header(refused, "X-Voxgate-Reason") == "dialog_mismatch"
    send(caller, gw, notify(f"refer;id={cseq}", 3))
    assert (await response(caller)).startswith("SIP/2.0 200")
    done = await control.expect("call.transfer", timeout=5)
    assert done["state"] == "succeeded" and done["status"] == 200


async def test_a_refer_nobody_answers_fails_after_timer_f(sip_gateway, callers, monkeypatch):
    from gateway.sip import transactions

    monkeypatch.setattr(transactions, "TIMER_F_S", 1.5)
    gw = await sip_gateway(sip={"transfer_targets": ["sip:*@pbx.example.com"]})
    control, _ = await _transfer_under_way(gw, callers(), f"silent-{uuid.uuid4().hex}")
    failed = await control.expect("call.transfer", timeout=5)
    assert failed["state"] == "failed" and failed["status"] == 408


async def test_a_flood_of_reinvites_never_acked_leaves_one_2xx_resending(sip_gateway, callers):
    """The caller sends 10 re-INVITEs in a row and ACKs none: each gets its 200 and only the latest is sent again
    (the stack keeps one 2xx resending per call; RFC 3261 §14.1), as on outbound calls (test_attacks_outbound.py)."""
    gw = await sip_gateway()
    c = callers()
    call_id = f"reinvites-{uuid.uuid4().hex}"
    tag = to_tag(await c.call(sip_port(gw), call_id))
    local, rtp = c.sip.getsockname()[1], c.rtp.getsockname()[1]
    for cseq in range(10, 20):
        send(c, gw, invite(call_id, local, rtp, to_tag=tag, cseq=cseq))
    await asyncio.sleep(1.7)  # T1 (0.5 s) and 2*T1 later: the resends of an unACKed 200
    answers: dict[str, int] = {}
    while True:
        try:
            data = c.sip.recv(65535).decode(errors="replace")
        except BlockingIOError:
            break
        if data.startswith("SIP/2.0 200"):
            answers[header(data, "CSeq")] = answers.get(header(data, "CSeq"), 0) + 1
    assert len(answers) == 10
    assert all(n == 1 for cseq, n in answers.items() if cseq != "19 INVITE"), answers
    assert answers["19 INVITE"] > 1  # the latest is still sent again until its ACK
    assert call_id in calls(gw)


async def test_a_reinvite_while_our_refresh_is_pending_gets_491_and_one_after_it_200(sip_gateway, callers):
    """Glare on an inbound call (RFC 3261 §14.2): while our session-refreshing re-INVITE awaits its answer, the
    caller's re-INVITE gets 491 Request Pending; once ours is answered, the caller's next one gets 200. The refresh
    is started in-process (its timer would take 45 s). Before: the caller's re-INVITE was answered 200 mid-glare."""
    gw = await sip_gateway()
    c = callers()
    call_id = f"glare-{uuid.uuid4().hex}"
    tag = to_tag(await c.call(sip_port(gw), call_id))
    local, rtp = c.sip.getsockname()[1], c.rtp.getsockname()[1]
    leg = gw.legs["gateway.legs.sip"]
    refresh = asyncio.create_task(leg.requests._refresh(calls(gw)[call_id], Agreement(90, True, "INVITE")))
    try:
        while not (ours := (await c.recv(c.sip))[0].decode()).startswith("INVITE "):
            pass
        send(c, gw, invite(call_id, local, rtp, to_tag=tag, cseq=2))
        assert (await response(c)).startswith("SIP/2.0 491")
        names = ("via", "from", "to", "call-id", "cseq")
        kept = [line for line in ours.split("\r\n") if line.split(":", 1)[0].strip().lower() in names]
        send(c, gw, ("SIP/2.0 200 OK\r\n" + "\r\n".join(kept) + "\r\nContent-Length: 0\r\n\r\n").encode())
        assert (await asyncio.wait_for(refresh, 5)) is not None  # our refresh answered: the call goes on
        send(c, gw, invite(call_id, local, rtp, to_tag=tag, cseq=3))
        assert (await response(c)).startswith("SIP/2.0 200")
    finally:
        refresh.cancel()
