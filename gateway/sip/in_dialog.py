"""Requests inside a SIP call's dialog that are not the stack's: our own (REFER for `call.transfer`, UPDATE or
re-INVITE refreshing a session timer) as client transactions, their answers, the NOTIFYs of a transfer, and the
far end's re-INVITE and UPDATE on an outbound call (aiosipua's user agent server answers those of inbound calls).

* `call.transfer` REFERs to a target `sip.transfer_targets` allows (gateway/sip/transfer.py), with the `X-`
  headers asked for; its answer and the NOTIFYs come back as `call.transfer` events. Inbound and outbound calls.
* Session timers (RFC 4028) where we refresh: UPDATE (or a re-INVITE where the peer does not allow it) at half the interval
  (gateway/sip/session_clock.py); a refresh answered 408/481, refused or unanswered ends the call with BYE.
* The answers to our requests are taken only from the dialog's peer or `sip.allow`.
"""

from __future__ import annotations

import asyncio
import logging

from aiosipua import SipRequest, SipResponse
from aiosipua.dialog import DialogState
from aiosipua.sdp import serialize_sdp

from gateway import protocol as P
from gateway.security.peers import in_networks
from gateway.sip import dialogs, session_timer, transactions
from gateway.sip import transfer as sip_transfer
from gateway.sip.outbound import ALLOW
from gateway.sip.session_clock import SessionClock
from gateway.sip.x_headers import RULE as X_RULE
from gateway.sip.x_headers import x_headers_ok
from gateway.wire import sip as wire

log = logging.getLogger("voxgate.sip")
USER_AGENT = "voxgate"


def reinvite_pending(c) -> bool:
    """Our own re-INVITE (a session refresh) awaits its answer: the peer's re-INVITE meanwhile gets 491."""
    return any(p.method == "INVITE" for p in (c.requests or {}).values())


class DialogRequests:
    """One per SipServer (`server.requests`); the calls are gateway/sip/call.py SipCall objects."""

    def __init__(self, server):
        self.server = server

    async def transfer(self, c, target: str, headers: dict | None = None) -> None:
        """REFER the far end to `target` (with the `X-` headers asked for); the REFER's answer and the NOTIFYs
        come back as `call.transfer` events. Inbound and outbound calls alike."""
        server = self.server
        if c.ended or c.call is None:
            raise P.ProtocolError(P.BAD_MESSAGE, "the call has ended")
        if headers is not None and not x_headers_ok(headers):
            raise P.ProtocolError(P.BAD_MESSAGE, f"call.transfer.{X_RULE}")
        if (
            not (target.startswith("sip:") or target.startswith("tel:"))
            or len(target) > 256
            or not target.isprintable()
            or ">" in target
        ):
            raise P.ProtocolError(P.BAD_MESSAGE, "call.transfer.to must be a sip: or tel: URI")
        if not sip_transfer.target_allowed(target, server.config.transfer_targets):
            raise P.ProtocolError(
                P.TRANSFER_NOT_ALLOWED,
                f"{target!r} matches none of sip.transfer_targets {server.config.transfer_targets}",
            )
        if c.refer is not None:
            raise P.ProtocolError(P.BAD_MESSAGE, "a transfer of this call is already under way")
        request, host = self._new_request(c, "REFER")
        request.headers.set_single("Refer-To", f"<{target}>")
        request.headers.set_single("Referred-By", f"<sip:{USER_AGENT}@{host}>")
        for name, value in (headers or {}).items():
            request.headers.set_single(name, value)
        c.refer = sip_transfer.PendingRefer(int(request.headers.get_first("cseq").split(" ")[0]))
        await c.call.notify({"type": "call.transfer", "to": target, "state": "requested"})
        server._spawn(self._refer(c, request, c.refer))

    def _new_request(self, c, method: str) -> tuple[SipRequest, str]:
        """A request of ours in the call's dialog, and the host our Via and Contact name."""
        server = self.server
        if server.dialing.owns(c):
            request = c.incoming.request(method)
            return request, c.incoming.client.dialed.via_host.rsplit(":", 1)[0]
        door = c.door
        addr = door.uas.advertised_addr or door.transport.local_addr
        if c.incoming.advertised_addr is not None:
            addr = c.incoming.advertised_addr
        request = c.incoming.dialog.create_request(method, via_host=addr[0], via_port=addr[1], via_transport=door.name)
        request.headers.set_single("Contact", f"<sip:{addr[0]}:{addr[1]}>")
        return request, addr[0]

    def bye(self, c) -> None:
        """BYE in the call's dialog (RFC 3261 §15.1.1), through its route set; the dialog is over."""
        if self.server.dialing.owns(c):
            c.incoming.hangup()  # OutgoingDialog: routed the same way
            return
        if c.incoming.dialog.state != DialogState.CONFIRMED:
            return  # never answered, or the stack gave it up (no ACK): no dialog to end
        bye, _ = self._new_request(c, "BYE")
        bye.headers.remove("contact")
        bye.headers.set_single("Content-Length", "0")
        c.incoming.dialog.terminate()
        c.door.transport.send(bye, c.next_hop)

    async def _refer(self, c, request: SipRequest, pending: sip_transfer.PendingRefer) -> None:
        status, reason, _ = await self._transaction(c, request, pending)
        if status < 300 or c.ended:
            return  # accepted: the NOTIFYs tell the rest
        if c.refer is pending:
            c.refer = None
        log.info("sip: call %s: REFER answered %d %s", c.sip_call_id, status, reason)
        if c.call is not None:
            await c.call.notify({"type": "call.transfer", "state": "failed", "status": status, "reason": reason})

    def on_response(self, response: SipResponse, addr: tuple[str, int]) -> bool:
        """An answer to one of our in-dialog requests (REFER, UPDATE, re-INVITE; True: taken), or a 2xx to our
        refreshing re-INVITE sent again (ACKed again). From the dialog's peer or `sip.allow` only."""
        server = self.server
        c = server.calls.get(response.call_id or "")
        if c is None:
            return False
        number, _, method = (response.headers.get_first("cseq") or "").partition(" ")
        number, method = number.strip(), method.strip().upper()
        pending = (c.requests or {}).get(int(number)) if number.isdigit() else None
        ours = pending is not None and pending.method == method
        resent_2xx = method == "INVITE" and number in (c.acks or {})
        if not ours and not resent_2xx:
            return False
        if addr[0] not in (c.dialog.peer_ip, c.next_hop[0]) and not in_networks(addr[0], server.trusted):
            return True  # a stranger's answer: dropped
        if ours:
            pending.answered(response.status_code, response.reason_phrase, response)
        elif 200 <= response.status_code < 300:
            self._send(c, c.acks[number])
        return True

    def on_notify(self, door, c, request: SipRequest) -> None:
        """A NOTIFY in the call's dialog: only for the REFER we sent and still wait on (RFC 3515), else 481."""
        server = self.server
        pending = c.refer
        if c.call is None or pending is None or not pending.matches_event(request.headers.get_first("event")):
            server.core.metrics.errors.labels(code=P.DIALOG_MISMATCH).inc()
            server._reply(door, request, *dialog_refusal(dialogs.NO_SUCH_DIALOG))
            return
        status = wire.sipfrag_status(request.text if request.body else "")
        server._reply(door, request, 200, "OK")
        pending.answered(202, "Accepted")  # a NOTIFY may overtake the 202: the REFER was taken, stop resending it
        terminated = "terminated" in (request.headers.get_first("subscription-state") or "").lower()
        if status is None:
            if terminated:
                c.refer = None
            return
        code, reason = status
        if code >= 200 or terminated:
            c.refer = None
        state = "trying" if code < 200 else ("succeeded" if code < 300 else "failed")
        server._spawn(c.call.notify({"type": "call.transfer", "state": state, "status": code, "reason": reason}))

    def answer_offer(self, door, c, msg: SipRequest, method: str) -> None:
        """The far end's re-INVITE or UPDATE in an outbound call: a new offer taken (`_in_dialog` checked it), a
        session refresh noted; our 2xx to a re-INVITE is sent again until its ACK."""
        server = self.server
        dialog = c.incoming
        number = (msg.headers.get_first("cseq") or "").split(" ")[0]
        cseq = int(number) if number.isdigit() else -1
        if method == "INVITE" and dialog.answers.get(cseq) is not None:  # sent again: the same answer again
            server._send_reply(door, dialog.answers[cseq][0])
            return
        if cseq <= dialog.remote_cseq:
            server._reply(door, msg, 500, "Server Internal Error")  # out of order (RFC 3261 §12.2.2)
            return
        dialog.remote_cseq = cseq
        if reinvite_pending(c):
            server._reply(door, msg, 491, "Request Pending")  # our own re-INVITE is under way (RFC 3261 §14.2)
            return
        pairs = header_pairs(msg)
        timer = server.timers.answer(pairs)
        if isinstance(timer, session_timer.Refusal):
            server._reply(door, msg, timer.status, timer.reason, timer.headers)
            return
        asks_timer = msg.get_header("session-expires") is not None
        headers = {"Contact": f"<{dialog.client.dialed.contact}>", "Allow": ALLOW, "Supported": "timer"}
        if asks_timer:
            headers.update(timer.headers)
        if c.clock is not None and not asks_timer:  # a refresh without Session-Expires turns the timer off (§9)
            c.clock.cancel()
            c.clock = None
        elif c.clock is not None:  # a refresh (RFC 4028 §10)
            c.clock.refreshed(timer.agreement)
        elif asks_timer and timer.agreement is not None:
            c.clock = self.session_clock(c, timer.agreement)
            c.clock.start()
        resp = server._response(msg, 200, "OK", headers)
        if c.reoffer is not None or method == "INVITE":  # an answer to the offer, or ours in a 2xx to a bare INVITE
            answer = server._take_offer(c, c.reoffer) if c.reoffer is not None else None
            if answer is not None:
                answer.origin.username, answer.origin.session_id = USER_AGENT, "1"  # the session of our offer
            resp.headers.set_single("Content-Type", "application/sdp")
            resp.text = dialog.next_sdp(serialize_sdp(answer) if answer is not None else None)
        c.reoffer = None
        if method != "INVITE":
            server._send_reply(door, resp)
            return
        acked = asyncio.Event()
        for _, earlier in dialog.answers.values():  # a newer re-INVITE means our earlier 2xx arrived (RFC 3261
            earlier.set()  # §14.1): stop sending it again, else a flood of re-INVITEs is a flood of answers
        dialog.answers = {cseq: (resp, acked)}  # the latest re-INVITE's, until the next one

        def resend() -> None:
            if not c.ended:
                server._send_reply(door, resp)

        server._spawn(transactions.resend_until_acked(resend, acked, door.name != "UDP"))

    def acked(self, c, msg: SipRequest) -> None:
        """The ACK of our 2xx to a re-INVITE (the call's first ACK is ours to send, not to receive)."""
        number = (msg.headers.get_first("cseq") or "").split(" ")[0]
        answer = c.incoming.answers.get(int(number)) if number.isdigit() else None
        if answer is not None:
            answer[1].set()

    def session_clock(self, c, agreement: session_timer.Agreement) -> SessionClock:
        server = self.server
        return SessionClock(
            agreement, lambda a: self._refresh(c, a), lambda: server._spawn(server.hang_up(c, "session_expired"))
        )

    async def _refresh(self, c, agreement: session_timer.Agreement) -> session_timer.Agreement | None:
        """We refresh the call's session (RFC 4028 §7.4): UPDATE when the peer allows it, else (or when it refuses
        UPDATE with 405/501) a re-INVITE offering our SDP again, version bumped, its 2xx ACKed. Inbound and outbound
        calls alike. The agreement its 2xx sets, or None: 408, 481, no answer or another refusal (the call is then
        ended)."""
        server = self.server
        methods = ["UPDATE", "INVITE"] if agreement.refresh_with == "UPDATE" else ["INVITE"]
        status, reason = transactions.TIMEOUT
        for method in methods:
            if c.ended:
                return None
            request, _ = self._new_request(c, method)
            request.headers.set_single("Session-Expires", f"{agreement.interval};refresher=uac")
            request.headers.set_single("Min-SE", str(server.timers.min_se))
            request.headers.set_single("Supported", "timer")
            if method == "INVITE":
                request.headers.set_single("Allow", ALLOW)
                request.headers.set_single("Content-Type", "application/sdp")
                request.text = self._our_sdp(c)
            status, reason, response = await self._transaction(c, request)
            if 200 <= status < 300:
                if method == "INVITE":
                    number = request.headers.get_first("cseq").split(" ")[0]
                    c.acks = {number: self._ack(c, int(number))}  # a resent 2xx: ACKed again
                    self._send(c, c.acks[number])
                agreed = server.timers.agreed(header_pairs(response)) if response is not None else None
                return (
                    agreement if agreed is None else session_timer.Agreement(agreed.interval, agreed.we_refresh, method)
                )
            if status not in (405, 501):
                break
        log.info("sip: call %s: our session refresh got %d %s; ending it", c.sip_call_id, status, reason)
        return None

    def _our_sdp(self, c) -> str:
        """Our SDP again (a refreshing re-INVITE's offer), its o= version one more (RFC 3264 §8)."""
        if self.server.dialing.owns(c):
            return c.incoming.next_sdp()
        return serialize_sdp(self.server._sdp_answer(c, c.offer))  # the answer we gave, as it stands

    def _ack(self, c, cseq: int) -> SipRequest:
        """The ACK of the 2xx to our re-INVITE with CSeq `cseq` (RFC 3261 §13.2.2.4): routed as the dialog's requests."""
        if self.server.dialing.owns(c):
            ack = c.incoming.request("ACK", cseq=cseq)
        else:
            ack, _ = self._new_request(c, "ACK")
            c.incoming.dialog.local_cseq -= 1  # an ACK takes its INVITE's number, not a new one
            ack.headers.set_single("CSeq", f"{cseq} ACK")
            ack.headers.remove("contact")
        ack.headers.set_single("Content-Length", "0")
        return ack

    @staticmethod
    def _send(c, request: SipRequest) -> None:
        if not c.ended:
            c.door.transport.send(request, c.next_hop)

    async def _transaction(
        self, c, request: SipRequest, pending: transactions.Pending | None = None
    ) -> tuple[int, str, SipResponse | None]:
        """Send one of our requests in the call's dialog as a client transaction; its final status and answer."""
        cseq = int(request.headers.get_first("cseq").split(" ")[0])
        pending = pending or transactions.Pending(cseq, request.method.upper())
        if c.requests is None:
            c.requests = {}
        c.requests[cseq] = pending

        try:
            status, reason = await transactions.client_transaction(
                lambda: self._send(c, request), pending, reliable=c.door.name != "UDP"
            )
        finally:
            c.requests.pop(cseq, None)
        return status, reason, pending.response


def header_pairs(request) -> list[tuple[str, str]]:
    """A message's headers as (name, value) pairs, repeats kept."""
    return [(name, value) for name, values in request.headers.items() for value in values]


def dialog_refusal(verdict: dialogs.Verdict) -> tuple[int, str, dict[str, str]]:
    return verdict.status, verdict.reason, wire.refusal_headers(verdict.code)
