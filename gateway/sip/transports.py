"""The SIP leg's doors: aiosipua's UDP and TCP transports on one port, fixed where they fall short, and TLS
(which aiosipua lacks) on its own port as TCP with Python's ssl.

* UDP: Python 3.11's selector transport is not the DatagramTransport aiosipua asserts.
* TCP: answers go back on the connection the request came in on (stamped `received`/`rport`, RFC 3261
  §18.2.2), only `sip.allow`'s addresses may connect, connections count against the per-IP caps
  (`server.limits`), and one that carries no call and sends nothing for `sip.tcp_idle_s` is closed.
* Outbound calls to TCP and TLS trunks go over a connection we open (`connect`), read like the listener's: the
  trunk's answers and in-dialog requests come back on it, and a request for a trunk whose connection closed
  reopens it (RFC 3261 §18.1.1).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import Counter

from aiosipua import SipMessage, SipRequest, TcpSipTransport, UdpSipTransport, parse_via, stringify_via
from aiosipua.transport import _read_sip_message, _UdpProtocol

from gateway.security.peers import in_networks
from gateway.sip.tls import contact_over_tls

log = logging.getLogger("voxgate.sip")

TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a client that connects and never finishes its handshake holds nothing longer
CONNECT_TIMEOUT_S = 10.0  # a trunk that does not take our connection (and handshake) within this is unavailable


class _MalformedWithoutTraceback(logging.Filter):
    """A datagram that does not parse as SIP is the sender's problem: one line, not a traceback in our log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Failed to parse SIP message"):
            record.exc_info = None
            record.exc_text = None
        return True


logging.getLogger("aiosipua.transport").addFilter(_MalformedWithoutTraceback())


class UdpIntake(_UdpProtocol):
    def connection_made(self, transport) -> None:
        # aiosipua asserts a DatagramTransport, which Python 3.11's selector transport is not (fixed in 3.12)
        self._owner._udp_transport = transport


class UdpSip(UdpSipTransport):
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._udp_transport, _ = await loop.create_datagram_endpoint(
            lambda: UdpIntake(self), local_addr=self.local_addr
        )


class TcpSip(TcpSipTransport):
    """SIP over TCP. aiosipua answers by the top Via's host and port, which over TCP is the caller's
    listening port, not the connection: every request is stamped with the connection's address
    (`received`, `rport`), so its answers go back on the connection it came on (RFC 3261 §18.2.2).
    With `sip.allow` set, only those addresses may connect at all (a connection is held open for the
    whole call, so strangers do not get to hold any); connections count against the per-IP caps
    (`server.limits`) like every other door, and one that carries no call and sends nothing for
    `sip.tcp_idle_s` is closed (aiosipua keeps every connection until the peer closes it)."""

    def __init__(self, local_addr, peers, allow, metrics, idle_s: float, carries_call):
        super().__init__(local_addr=local_addr)
        self.peers, self.allow, self.metrics = peers, allow, metrics
        self.idle_s, self.carries_call = idle_s, carries_call
        self.dialled: dict[tuple[str, int], tuple] = {}  # trunk address -> how to connect to it again
        self.ringing: Counter[tuple[str, int]] = Counter()  # outbound calls still ringing over a connection of ours
        self._opening: dict[tuple[str, int], asyncio.Future] = {}

    # ------------------------------------------------------------ connections of ours (outbound calls)
    async def connect(
        self, remote: tuple[str, int], context: ssl.SSLContext | None = None, server_name: str | None = None
    ) -> None:
        """Open (or reuse) our connection to a trunk at `remote` (an IP and port); `context`: over TLS, the trunk's
        certificate checked and `server_name` sent (SNI) and matched. Concurrent calls share one attempt.
        Raises OSError (ssl.SSLCertVerificationError for a certificate that does not verify) or TimeoutError."""
        self.dialled[remote] = (context, server_name)
        if remote in self._connections:
            return
        pending = self._opening.get(remote)
        if pending is None:
            pending = self._opening[remote] = asyncio.ensure_future(self._open_connection(remote, context, server_name))
            pending.add_done_callback(lambda _, remote=remote: self._opening.pop(remote, None))
        await asyncio.shield(pending)

    async def _open_connection(self, remote, context, server_name) -> None:
        tls = {"ssl": context, "server_hostname": server_name, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S}
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(remote[0], remote[1], **(tls if context else {}))
        self._connections[remote] = (reader, writer)
        self._spawn(self._read_messages(reader, writer))

    def send(self, message, addr) -> None:
        """As aiosipua's, and a request for a trunk whose connection of ours has closed (the trunk closed it while
        a call is up: its BYE must still go) reopens it first."""
        if addr in self._connections or addr not in self.dialled or not isinstance(message, SipRequest):
            super().send(message, addr)
            return
        self._spawn(self._reopen_and_send(message, addr))

    async def _reopen_and_send(self, message, addr) -> None:
        try:
            await self.connect(addr, *self.dialled[addr])
            super().send(message, addr)
        except (OSError, TimeoutError, RuntimeError) as exc:
            log.info("sip: %s to %s:%d not sent: the connection cannot be reopened (%s)", message.method, *addr, exc)

    def _busy(self, addr: tuple[str, int]) -> bool:
        return self.ringing[addr] > 0 or self.carries_call(addr)

    async def _handle_connection(self, reader, writer) -> None:
        peer = writer.get_extra_info("peername")
        address = peer[0] if isinstance(peer, tuple) and peer else None
        if self.allow and not in_networks(address, self.allow):
            self.metrics.connections_refused.labels(reason="sip_allow").inc()
            writer.transport.abort()
            return
        refused = self.peers.open(address)
        if refused is not None:
            self.metrics.connections_refused.labels(reason=refused).inc()
            writer.transport.abort()
            return
        try:
            await self._read_messages(reader, writer)
        finally:
            self.peers.close(address)

    async def _read_messages(self, reader, writer) -> None:
        """aiosipua's read loop, with the idle limit: no read waits longer than `idle_s` while the
        connection carries no call of ours."""
        peer = writer.get_extra_info("peername")
        addr = (str(peer[0]), int(peer[1])) if peer else ("0.0.0.0", 0)
        self._connections[addr] = (reader, writer)
        try:
            while True:
                try:
                    async with asyncio.timeout(None if self._busy(addr) else self.idle_s):
                        data = await _read_sip_message(reader)
                except TimeoutError:
                    if self._busy(addr):  # a call began on it while the read waited
                        continue
                    self.metrics.connections_refused.labels(reason="sip_tcp_idle").inc()
                    log.info("sip: TCP connection with %s idle %.0f s without a call; closed", addr[0], self.idle_s)
                    break
                if data is None:
                    break
                self._dispatch(data, addr)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            self._connections.pop(addr, None)
            writer.close()
            try:
                async with asyncio.timeout(5):
                    await writer.wait_closed()
            except (ConnectionError, TimeoutError):
                pass

    def _dispatch(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            msg = SipMessage.parse(data)
        except Exception:
            log.info("sip: a message over TCP from %s does not parse; dropped", addr[0])
            return
        if isinstance(msg, SipRequest):
            _answer_on_this_connection(msg, addr)
        try:
            self.on_message(msg, addr)
        except Exception:
            log.exception("sip: handling a message from %s failed", addr[0])


def _answer_on_this_connection(request, addr: tuple[str, int]) -> None:
    vias = request.headers.get("via")
    if not vias:
        return
    top = parse_via(vias[0])
    top.params["received"], top.params["rport"] = addr[0], str(addr[1])
    request.headers.remove("Via")
    for v in [stringify_via(top), *vias[1:]]:
        request.headers.append("Via", v)


class TlsSip(TcpSip):
    """SIP over TLS: TcpSip's rules (answers on the connection, sip.allow, per-IP caps, idle close) over a TLS
    listener. Our Contact says `transport=tls`, so the peer's in-dialog requests come back over TLS."""

    def __init__(self, *args, context: ssl.SSLContext, **kwargs):
        super().__init__(*args, **kwargs)
        self.context = context

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle_connection,
            host=self.local_addr[0],
            port=self.local_addr[1],
            ssl=self.context,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S,
        )

    def send(self, message, addr) -> None:
        _mark_contact(message)
        super().send(message, addr)


def _mark_contact(message) -> None:
    contact = message.headers.get_first("contact")
    if contact:
        message.headers.set_single("Contact", contact_over_tls(contact))
