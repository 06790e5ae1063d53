"""An outbound INVITE's client transaction (RFC 3261 §17.1.1) through a trunk, with digest and the ring timeout.

Written here rather than taken from aiosipua 0.7.1's UAC, which ACKs neither a 407 nor a 486 and gives the call up
when a trunk resends a 407: real trunks resend a final answer until it is ACKed. Here every final answer is ACKed,
each retransmission of it again (§17.1.1.3), for as long as the transaction lingers (Timer D, 32 s over UDP):

* INVITE resent over UDP after 0.5 s, doubling (Timer A), until any answer; no answer in 32 s (Timer B):
  `unavailable` with status 408.
* 1xx: `trying` (100), `ringing` (180-182 and any other 1xx), `early` (183 with SDP); early media is not played.
  The same progress again (a resent or flooded 180) is told once.
* 401/407: answered once per request with digest (gateway/sip/digest.py: MD5 or SHA-256), as a new INVITE with
  the next CSeq; a second challenge, or one we cannot answer: `auth_failed`.
* Session timers (RFC 4028): with a policy, the INVITE offers `Session-Expires`, `Min-SE` and `Supported: timer`;
  a 422 is answered once with a new INVITE carrying the Min-SE it asked for (§7.1), a second one fails the call.
* The ring timeout: CANCEL once a provisional answer came (RFC 3261 §9.1 forbids it before), then `no_answer`.
* 2xx: ACKed (a new transaction: its own branch, to the 2xx's Contact); a resent 2xx is ACKed again.

The transaction only builds and reads messages; `send` puts one on the wire and `feed` hands it the answers, so
it is tested against a real SIPp on loopback (tests/sip/test_outbound_sipp.py).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from aiosipua import SipRequest, SipResponse

from gateway.sip import digest, routes
from gateway.sip.session_timer import SessionTimerPolicy

TIMER_A_S, TIMER_A_MAX_S, TIMER_B_S = 0.5, 4.0, 32.0  # RFC 3261 §17.1.1.2 (T1 = 0.5 s, T2 = 4 s, 64*T1)
TIMER_D_S = 32.0  # how long a finished transaction still ACKs resent finals (§17.1.1.2: at least 32 s over UDP)
BRANCH_MAGIC = "z9hG4bK"  # RFC 3261 §8.1.1.7
ALLOW = "INVITE, ACK, CANCEL, BYE, OPTIONS, INFO, NOTIFY, REFER, UPDATE"  # what we answer in an outbound call

# the stable codes of `call.failed` (docs/protocol.md)
BUSY, NO_ANSWER, REJECTED, NOT_FOUND, UNAVAILABLE, AUTH_FAILED, TLS_FAILED = (
    "busy",
    "no_answer",
    "rejected",
    "not_found",
    "unavailable",
    "auth_failed",
    "tls_failed",  # a TLS trunk's certificate did not verify, or the handshake failed (gateway/sip/dialing.py)
)


def failure_code(status: int) -> str:
    """`call.failed`'s code for a final answer that is not 2xx."""
    if status in (486, 600):
        return BUSY
    if status in (404, 604, 484):
        return NOT_FOUND
    if status in (401, 407):
        return AUTH_FAILED
    if status == 487:
        return NO_ANSWER  # our CANCEL took
    if status in (408, 480) or status >= 500 and status != 603:
        return UNAVAILABLE
    return REJECTED  # 603 Decline, 403, 488 and the other refusals


def new_branch() -> str:
    return BRANCH_MAGIC + secrets.token_hex(8)


@dataclass
class Outcome:
    """How the INVITE ended: answered (the 2xx) or failed with a stable code and the SIP status."""

    answered: bool
    status: int
    reason: str
    code: str | None = None  # None when answered
    response: SipResponse | None = None


@dataclass
class Dialed:
    """What the INVITE says: who calls whom, where it goes, and the offer."""

    request_uri: str  # sip:+15551234567@trunk.example
    from_uri: str  # sip:+15550100@trunk.example
    contact: str  # sip:voxgate@OUR_IP:OUR_PORT
    via_host: str  # OUR_IP:OUR_PORT, as the Via names it
    sdp: str
    transport: str = "UDP"
    headers: dict[str, str] = field(default_factory=dict)  # X- headers of the request
    credentials: tuple[str, str] | None = None  # (user, password) for 401/407
    call_id: str = field(default_factory=lambda: secrets.token_hex(16))
    from_tag: str = field(default_factory=lambda: secrets.token_hex(6))


class InviteClient:
    """One outbound INVITE until it is answered or fails; `run` returns the Outcome."""

    def __init__(
        self,
        dialed: Dialed,
        send: Callable[[SipRequest], None],
        *,
        ring_timeout_s: float,
        on_progress: Callable[[str, int], None] | None = None,
        timers: SessionTimerPolicy | None = None,
    ):
        self.dialed = dialed
        self.timers = timers
        self.timer_offer = timers.offer() if timers is not None else {}  # Session-Expires, Min-SE, Supported
        self.authorization: tuple[str, str] | None = None
        self.retried_422 = False
        self._send = send
        self.ring_timeout_s = ring_timeout_s
        self.on_progress = on_progress or (lambda state, status: None)
        self.cseq = 1
        self.branch = new_branch()
        self.invite = self._invite()
        self.challenged = False  # a 401/407 was answered for this call: a second one fails it
        self.provisional = False  # a 1xx came: a CANCEL may go, INVITE retransmission stops
        self.cancelled = False
        self.told: tuple[str, int] | None = None  # the last progress told to `on_progress`
        self.acks: dict[tuple[int, str], SipRequest] = {}  # (CSeq, To tag) of a final -> the ACK that answers it
        self.outcome: Outcome | None = None
        self._done: asyncio.Future[Outcome] | None = None

    @property
    def call_id(self) -> str:
        return self.dialed.call_id

    # ------------------------------------------------------------ messages
    def _request(self, method: str, uri: str, branch: str, cseq: int, to: str) -> SipRequest:
        d = self.dialed
        req = SipRequest(method=method, uri=uri)
        h = req.headers
        h.set_single("Via", f"SIP/2.0/{d.transport} {d.via_host};branch={branch};rport")
        h.set_single("Max-Forwards", "70")
        h.set_single("From", f"<{d.from_uri}>;tag={d.from_tag}")
        h.set_single("To", to)
        h.set_single("Call-ID", d.call_id)
        h.set_single("CSeq", f"{cseq} {method}")
        h.set_single("User-Agent", "voxgate")
        return req

    def _invite(self) -> SipRequest:
        d = self.dialed
        req = self._request("INVITE", d.request_uri, self.branch, self.cseq, f"<{d.request_uri}>")
        req.headers.set_single("Contact", f"<{d.contact}>")
        req.headers.set_single("Allow", ALLOW)
        for name, value in {**self.timer_offer, **d.headers}.items():
            req.headers.set_single(name, value)
        if self.authorization is not None:
            req.headers.set_single(*self.authorization)
        req.headers.set_single("Content-Type", "application/sdp")
        req.text = d.sdp
        return req

    def _ack_final(self, response: SipResponse) -> SipRequest:
        """The ACK of a non-2xx final: part of the INVITE's transaction (its branch, its Request-URI), To with
        the answer's tag (RFC 3261 §17.1.1.3)."""
        to = response.headers.get_first("to") or f"<{self.dialed.request_uri}>"
        return self._request("ACK", self.dialed.request_uri, self.branch, self.cseq, to)

    def _ack_2xx(self, response: SipResponse) -> SipRequest:
        """The ACK of a 2xx: a transaction of its own, to the 2xx's Contact (RFC 3261 §13.2.2.4), through the route
        set its Record-Route makes (§12.1.2; gateway/sip/routes.py); the sender puts it on the first route's hop."""
        target = routes.remote_target(response.headers.get_first("contact"), self.dialed.request_uri)
        to = response.headers.get_first("to") or ""
        ack = self._request("ACK", target, new_branch(), self.cseq, to)
        routes.add_routes(ack, routes.uac_route_set(response.headers.get("record-route")))
        return ack

    def _cancel(self) -> SipRequest:
        """CANCEL: the INVITE's branch and CSeq number, its To without a tag (RFC 3261 §9.1)."""
        d = self.dialed
        return self._request("CANCEL", d.request_uri, self.branch, self.cseq, f"<{d.request_uri}>")

    # ------------------------------------------------------------ the transaction
    async def run(self) -> Outcome:
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        started = loop.time()
        self._send(self.invite)
        resend_after = TIMER_A_S
        next_resend = started + resend_after
        ring_deadline = started + self.ring_timeout_s
        while not self._done.done():
            now = loop.time()
            if now - started >= TIMER_B_S + (self.ring_timeout_s if self.provisional else 0):
                self._finish(Outcome(False, 408, "Request Timeout", UNAVAILABLE))
                break
            if not self.cancelled and now >= ring_deadline and self.provisional:
                self.cancelled = True  # the 487 (ACKed) or a late 200 (ACKed, then BYE by the owner) ends it
                self._send(self._cancel())
            if self.dialed.transport == "UDP" and not self.provisional and now >= next_resend:
                self._send(self.invite)
                resend_after = min(resend_after * 2, TIMER_A_MAX_S)
                next_resend = now + resend_after
            wakeups = [started + TIMER_B_S]
            if not self.cancelled:
                wakeups.append(ring_deadline)
            if self.dialed.transport == "UDP" and not self.provisional:
                wakeups.append(next_resend)
            wait = max(0.01, min(wakeups) - loop.time())
            await asyncio.wait([self._done], timeout=wait)
        return self._done.result() if self._done.done() else self.outcome

    def cancel_now(self) -> None:
        """Give the call up (shutdown): CANCEL when it rings; before any provisional answer there is nothing to
        cancel yet (RFC 3261 §9.1), and a later answer finds no one."""
        if self.provisional and not self.cancelled and self.outcome is None:
            self.cancelled = True
            self._send(self._cancel())

    def feed(self, response: SipResponse) -> None:
        """An answer whose Call-ID is this call's. After the outcome too: resent finals are ACKed again."""
        number, _, method = (response.headers.get_first("cseq") or "").partition(" ")
        if method.strip().upper() != "INVITE" or not number.strip().isdigit():
            return  # the answer to our CANCEL (200) says nothing the INVITE's answer will not
        status, cseq = response.status_code, int(number)
        if status < 200:
            if cseq == self.cseq and self.outcome is None:
                self._provisional(response)
            return
        to_tag = _tag(response.headers.get_first("to") or "")
        ack = self.acks.get((cseq, to_tag))
        if ack is not None:  # a retransmitted final: ACK it again
            self._send(ack)
            return
        if cseq != self.cseq:
            return  # a final for a request we already replaced, never seen before: nothing to ACK it with
        ack = self._ack_2xx(response) if status < 300 else self._ack_final(response)
        self.acks[(cseq, to_tag)] = ack
        self._send(ack)
        if self.outcome is not None:
            return  # a second final (another fork's 2xx after ours): ACKed, the owner hangs it up
        if status < 300:
            self._finish(Outcome(True, status, response.reason_phrase, None, response))
        elif status in (401, 407) and not self.challenged and not self.cancelled:
            self._answer_challenge(response)
        elif status == 422 and self._retry_after_422(response):
            pass
        else:
            self._finish(Outcome(False, status, response.reason_phrase, failure_code(status)))

    def _provisional(self, response: SipResponse) -> None:
        first = not self.provisional
        self.provisional = True
        status = response.status_code
        if status == 100:
            state = "trying"
        elif status == 183 and response.body:
            state = "early"
        else:
            state = "ringing"
        # the same answer again (a far end resending 180, or flooding it) tells the agent nothing new
        if (first or status != 100) and (state, status) != self.told:
            self.told = (state, status)
            self.on_progress(state, status)

    def _answer_challenge(self, response: SipResponse) -> None:
        self.challenged = True
        header = "www-authenticate" if response.status_code == 401 else "proxy-authenticate"
        if self.dialed.credentials is None:
            self._finish(Outcome(False, response.status_code, "no credentials for the trunk's challenge", AUTH_FAILED))
            return
        try:
            challenge = digest.choose_challenge(response.headers.get(header) or [])
        except digest.DigestError as exc:
            self._finish(Outcome(False, response.status_code, f"unanswerable challenge: {exc}", AUTH_FAILED))
            return
        user, password = self.dialed.credentials
        value = digest.authorization(
            challenge, method="INVITE", uri=self.dialed.request_uri, user=user, password=password
        )
        name = "Authorization" if response.status_code == 401 else "Proxy-Authorization"
        self.authorization = (name, value)
        self._send_again()

    def _retry_after_422(self, response: SipResponse) -> bool:
        """A 422 (our Session-Expires below the callee's Min-SE): once, a new INVITE with its Min-SE (§7.1)."""
        if self.timers is None or self.retried_422 or self.cancelled:
            return False
        pairs = [(name, value) for name, values in response.headers.items() for value in values]
        asked = self.timers.after_422(pairs, int(self.timer_offer["Session-Expires"]))
        if asked is None:
            return False
        self.retried_422 = True
        self.timer_offer = self.timers.offer(asked)
        self._send_again()
        return True

    def _send_again(self) -> None:
        """The INVITE again, as a new transaction (the next CSeq, a new branch), with what the last answer asked."""
        self.cseq += 1
        self.branch = new_branch()
        self.provisional = False
        self.invite = self._invite()
        self._send(self.invite)

    def _finish(self, outcome: Outcome) -> None:
        if self.outcome is None:
            self.outcome = outcome
            if self._done is not None and not self._done.done():
                self._done.set_result(outcome)


def _tag(header: str) -> str:
    for part in header.split(";")[1:]:
        name, _, value = part.strip().partition("=")
        if name.lower() == "tag":
            return value.strip()
    return ""
