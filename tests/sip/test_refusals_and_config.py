"""Refusals carry voxgate's stable code in `X-Voxgate-Reason`; the `sip:` config refuses what cannot work."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.config import ConfigError, load_config
from gateway.wire import sip as wire
from tests.sip.conftest import sip_port
from tests.sip.udp_caller import UdpCaller

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


@pytest.fixture
def callers():
    made = []

    def make() -> UdpCaller:
        made.append(UdpCaller())
        return made[-1]

    yield make
    for c in made:
        c.close()


def header(response: str, name: str) -> str | None:
    for line in response.split("\r\n"):
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == name.lower():
            return value.strip()
    return None


async def test_at_capacity_gets_503_with_the_reason(sip_gateway, callers):
    gw = await sip_gateway(server={"max_sessions": 1})
    await callers().call(sip_port(gw), f"first-{uuid.uuid4().hex}")
    refused = await callers().final_response(sip_port(gw), f"second-{uuid.uuid4().hex}")
    assert refused.startswith("SIP/2.0 503")
    assert header(refused, wire.REASON_HEADER) == "at_capacity"
    assert 'text="at_capacity"' in header(refused, "Reason")
    assert len(gw.calls) == 1


async def test_a_call_id_already_in_use_gets_486(sip_gateway, callers):
    gw = await sip_gateway()
    await callers().call(sip_port(gw), "shared-id")
    refused = await callers().final_response(
        sip_port(gw), f"other-{uuid.uuid4().hex}", extra="X-Call-Id: shared-id\r\n"
    )
    assert refused.startswith("SIP/2.0 486") and header(refused, wire.REASON_HEADER) == "call_busy"


async def test_no_codec_in_common_gets_488(sip_gateway, callers):
    gw = await sip_gateway(sip={"codecs": ["PCMA"]})
    refused = await callers().final_response(sip_port(gw), f"pcmu-{uuid.uuid4().hex}", codec_pt=0)
    assert refused.startswith("SIP/2.0 488") and header(refused, wire.REASON_HEADER) == "unsupported_format"


async def test_options_keepalive_is_answered(sip_gateway, callers):
    gw = await sip_gateway()
    c = callers()
    local = c.sip.getsockname()[1]
    c.sip.sendto(
        (
            f"OPTIONS sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{local};branch=z9hG4bKopt1\r\n"
            f"From: <sip:t@127.0.0.1>;tag=o1\r\nTo: <sip:agent@127.0.0.1>\r\nCall-ID: opt-1\r\nCSeq: 1 OPTIONS\r\n"
            f"Content-Length: 0\r\n\r\n"
        ).encode(),
        ("127.0.0.1", sip_port(gw)),
    )
    data, _ = await c.recv(c.sip)
    assert data.startswith(b"SIP/2.0 200") and b"INVITE" in data  # Allow names the methods


@pytest.mark.parametrize(
    "section, words",
    [
        ({"tls": {"cert_file": "/no/such.pem", "key_file": "/no/such.key"}}, "sip.tls.cert_file: must name a readable"),
        ({"tls": {"cert_file": __file__, "key_file": __file__}}, "do not load as a certificate and its key"),
        ({"transports": ["tls"]}, "lists only tls but sip.tls is not set"),
        ({"transports": ["sctp"]}, "must list some of udp, tcp, tls"),
        ({"transports": ["tcp"], "register": [{"server": "sip:p.example", "user": "u"}]}, "needs udp"),
        ({"srtp": "required"}, "sip.srtp: needs sip.tls"),
        ({"srtp": "maybe"}, "sip.srtp: must be one of off, optional, required"),
        ({"rtp_ports": "20000"}, "rtp_ports"),
        ({"codecs": ["opus"]}, "codecs"),
        ({"allow": ["not-an-ip"]}, "allow"),
        ({"public_ip": "voxgate.example.com"}, "public_ip"),
        ({"register": [{"server": "sip:provider example", "user": "u"}]}, "must be sip:HOST[:PORT]"),
        (
            {"register": [{"server": "sip:provider.example", "user": "u", "password_env": "VOXGATE_NO_SUCH_VAR"}]},
            "empty or unset",
        ),
    ],
)
def test_config_refuses_what_cannot_work_in_one_line(section, words):
    with pytest.raises(ConfigError) as err:
        load_config(None, {"sip": {"port": 5060, "allow": ["203.0.113.0/24"], **section}})
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_sip_port_open_to_anyone_is_refused_unless_said_so(caplog):
    """Closed by default: neither sip.allow nor sip.auth refuses to start, naming both; ["0.0.0.0/0"] is how
    "anyone" is said (and warned about at start, test_attacks)."""
    with pytest.raises(ConfigError) as err:
        load_config(None, {"sip": {"port": 5060}})
    message = str(err.value)
    assert "sip.allow" in message and "sip.auth" in message and "\n" not in message
    assert load_config(None, {"sip": {"port": 5060, "allow": ["0.0.0.0/0"]}}).sip.allow == ["0.0.0.0/0"]
    assert load_config(None, {"sip": {"allow": []}}).sip.port is None  # no SIP port: nothing to close


@pytest.mark.parametrize(
    "content_type, body, digit",
    [
        ("application/dtmf-relay", "Signal=5\r\nDuration=160", "5"),
        ("application/dtmf-relay", "Signal= #\r\n", "#"),
        ("application/dtmf-relay", "Signal=11", "#"),
        ("application/dtmf", "*", "*"),
        ("application/dtmf-relay", "Signal=55", None),
        ("text/plain", "Signal=5", None),
        ("application/dtmf-relay", "Signal=5" + "x" * 2000, None),
    ],
)
def test_dtmf_in_sip_info(content_type, body, digit):
    assert wire.dtmf_from_info(content_type, body) == digit


def test_sipfrag_status():
    assert wire.sipfrag_status("SIP/2.0 180 Ringing\r\n") == (180, "Ringing")
    assert wire.sipfrag_status("SIP/2.0 603") == (603, "")
    assert wire.sipfrag_status("hello") is None and wire.sipfrag_status("") is None


async def test_a_retransmitted_invite_is_one_call(sip_gateway, callers):
    from tests.sip.udp_caller import invite

    gw = await sip_gateway(
        sip={"answer_delay_ms": 300, "ack_timeout_s": 30}
    )  # no ACK here: the call must outlive the test
    c = callers()
    call_id = f"retx-{uuid.uuid4().hex}"
    request = invite(call_id, c.sip.getsockname()[1], c.rtp.getsockname()[1])
    for pause in (0.15, 0.45, 0):  # a phone that did not hear our 100 Trying sends the INVITE again (timer A):
        c.sip.sendto(request, ("127.0.0.1", sip_port(gw)))  # once while we ring, once after our 200 OK went out
        await asyncio.sleep(pause)
    finals = []
    deadline = asyncio.get_running_loop().time() + 1.0
    try:
        while True:
            data, _ = await c.recv(c.sip, timeout=max(0.01, deadline - asyncio.get_running_loop().time()))
            if data.startswith(b"SIP/2.0 ") and int(data[8:11]) >= 200:
                finals.append(data[:12])
    except TimeoutError:
        pass
    assert finals and all(f.startswith(b"SIP/2.0 200") for f in finals)  # 200 OK (and its retransmissions), no refusal
    assert len(gw.calls) == 1


async def test_registers_with_digest_auth_and_unregisters_at_stop(tmp_path, monkeypatch):
    await _register_at_sipp(tmp_path, monkeypatch, registrar_late_s=0.0)


async def test_a_register_lost_before_the_registrar_listens_is_sent_again(tmp_path, monkeypatch):
    """UDP: the first REGISTER goes out before the registrar listens and is lost; RFC 3261's Timer E resends it
    (aiosipua alone sends it once, and the gateway stayed unregistered until a restart)."""
    await _register_at_sipp(tmp_path, monkeypatch, registrar_late_s=1.2)


async def _register_at_sipp(tmp_path, monkeypatch, registrar_late_s: float) -> None:
    from tests.sip.sipp import free_udp_port, run_sipp
    from tests.telephony.conftest import merge, started_gateways

    from tests.sip.conftest import SIP_FAST

    monkeypatch.setenv("VOXGATE_TEST_SIP_PASSWORD", "s3cret-pass")
    registrar_port = free_udp_port()

    def start_registrar() -> asyncio.Task:
        return asyncio.create_task(
            run_sipp(tmp_path, None, "registrar.xml", fields=["s3cret-pass"], listen_port=registrar_port, timeout_s=30)
        )

    registrar = None
    if not registrar_late_s:
        registrar = start_registrar()
        await asyncio.sleep(0.5)  # SIPp listens (on a loaded box maybe not yet: the REGISTER is then resent)
    async with started_gateways() as start:
        gw = await start(
            merge(
                SIP_FAST,
                {
                    "sip": {
                        "register": [
                            {
                                "server": f"sip:127.0.0.1:{registrar_port}",
                                "user": "voxgate",
                                "password_env": "VOXGATE_TEST_SIP_PASSWORD",
                                "expires": 120,
                            }
                        ]
                    }
                },
            )
        )
        if registrar is None:
            await asyncio.sleep(registrar_late_s)
            registrar = start_registrar()
        (reg,) = gw.legs["gateway.legs.sip"].registrations
        for _ in range(200):  # 401, the REGISTER with credentials, 200
            if reg.state.value == "registered":
                break
            await asyncio.sleep(0.1)
        assert reg.state.value == "registered", reg.state
    (await registrar).assert_ok()  # SIPp checked the digest and saw the Expires: 0 REGISTER at our stop


async def test_over_tcp_answers_come_back_on_the_callers_connection(sip_gateway, callers):
    """A phone's Via names its listening port (here one nobody listens on), not its connection's: the answers
    must still come back on the connection the INVITE came in on."""
    from tests.sip.udp_caller import invite

    gw = await sip_gateway()
    rtp = callers().rtp
    call_id = f"tcp-{uuid.uuid4().hex}"
    request = invite(call_id, 5999, rtp.getsockname()[1]).replace(b"SIP/2.0/UDP", b"SIP/2.0/TCP")
    reader, writer = await asyncio.open_connection("127.0.0.1", sip_port(gw))
    try:
        writer.write(request)
        await writer.drain()
        statuses = []
        async with asyncio.timeout(5):
            while not statuses or statuses[-1] < 200:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                length = int(header(head, "Content-Length") or 0)
                await reader.readexactly(length)
                statuses.append(int(head[8:11]))
        assert statuses[0] == 100 and statuses[-1] == 200
    finally:
        writer.close()


async def test_over_tcp_only_allowed_addresses_may_connect(sip_gateway):
    gw = await sip_gateway(sip={"allow": ["127.0.0.2"]})
    reader, writer = await asyncio.open_connection("127.0.0.1", sip_port(gw))
    try:
        async with asyncio.timeout(3):
            assert await reader.read(100) == b""  # closed at once, before a byte is read
    except ConnectionResetError:
        pass  # an abort may arrive as a reset
    finally:
        writer.close()
    assert gw.metrics.connections_refused.labels(reason="sip_allow")._value.get() == 1


async def test_over_tcp_a_connection_without_a_call_is_closed_when_idle_and_one_with_a_call_is_kept(
    sip_gateway, callers
):
    """aiosipua keeps a TCP connection until its peer closes it: one that never sends (or stops sending without
    a call) would hold its per-IP slot for ever. A call's connection may be silent until the BYE: it is kept."""
    from tests.sip.udp_caller import ack, invite

    gw = await sip_gateway(sip={"tcp_idle_s": 1.0})
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", sip_port(gw))
    rtp = callers().rtp
    call_id = f"tcp-idle-{uuid.uuid4().hex}"
    reader, writer = await asyncio.open_connection("127.0.0.1", sip_port(gw))
    try:
        writer.write(invite(call_id, 5999, rtp.getsockname()[1]).replace(b"SIP/2.0/UDP", b"SIP/2.0/TCP"))
        await writer.drain()
        async with asyncio.timeout(5):
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                await reader.readexactly(int(header(head, "Content-Length") or 0))
                if int(head[8:11]) >= 200:
                    break
        to_tag = header(head, "To").split("tag=")[1].split(";")[0]
        writer.write(ack(call_id, 5999, to_tag).replace(b"SIP/2.0/UDP", b"SIP/2.0/TCP"))
        await writer.drain()
        async with asyncio.timeout(5):  # the idle one is closed after ~1 s
            assert await idle_reader.read(100) == b""
        assert gw.metrics.connections_refused.labels(reason="sip_tcp_idle")._value.get() == 1
        await asyncio.sleep(1.5)  # the call's connection, silent as long, is still open: no EOF waiting
        assert not reader.at_eof() and len(gw.legs["gateway.legs.sip"].calls) == 1
    finally:
        idle_writer.close()
        writer.close()
