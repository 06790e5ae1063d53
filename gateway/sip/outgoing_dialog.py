"""An answered outbound call's dialog, in the shape the SIP leg reads from aiosipua's IncomingCall (its ids, the
peer's address, hanging up with BYE), so that after the answer an outbound call is an ordinary SIP call.

Also what goes into the INVITE: the SDP offer and the request URI a `to` names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aiosipua import SipRequest, SipResponse

from gateway.sip import routes
from gateway.sip.outbound import InviteClient, _tag, new_branch

E164 = re.compile(r"\+[1-9][0-9]{6,14}")  # ITU-T E.164: + and up to 15 digits
# printable ASCII only (RFC 3261 §25.1: a URI escapes the rest): no control byte or raw UTF-8 reaches the wire
SIP_URI = re.compile(r"sips?:[!#-;=?A-~]+@[A-Za-z0-9.\-]+(?::\d{1,5})?(;[!#-;=?-~]*)?")
PAYLOAD_NAMES = {0: "PCMU", 8: "PCMA"}
TELEPHONE_EVENT_PT = 101


def request_uri(to: str, trunk_address: str) -> str | None:
    """`to` as the INVITE's Request-URI: a SIP URI as given, an E.164 number at the trunk; None: neither."""
    if E164.fullmatch(to):
        return f"sip:{to}@{trunk_address}"
    return to if SIP_URI.fullmatch(to) else None


def sdp_offer(
    ip: str, rtp_port: int, payload_type: int, session_id: int, crypto: list | None = None, profile: str = "RTP/AVP"
) -> str:
    """One audio stream: the codec we send, RFC 4733 telephone-events, 20 ms packets. `crypto`: our SDES lines
    (gateway/sip/sdes.py Crypto), offered with `profile` RTP/SAVP (SRTP required) or RTP/AVP (best effort)."""
    name = PAYLOAD_NAMES[payload_type]
    keys = "".join(f"a=crypto:{c.to_sdp()}\r\n" for c in crypto or ())
    return (
        f"v=0\r\no=voxgate {session_id} {session_id} IN IP4 {ip}\r\ns=voxgate\r\nc=IN IP4 {ip}\r\nt=0 0\r\n"
        f"m=audio {rtp_port} {profile} {payload_type} {TELEPHONE_EVENT_PT}\r\n"
        f"a=rtpmap:{payload_type} {name}/8000\r\na=rtpmap:{TELEPHONE_EVENT_PT} telephone-event/8000\r\n"
        f"a=fmtp:{TELEPHONE_EVENT_PT} 0-16\r\na=ptime:20\r\n{keys}a=sendrecv\r\n"
    )


@dataclass
class _Tags:
    remote_tag: str
    local_tag: str


class OutgoingDialog:
    """The dialog our INVITE's 2xx made. Requests from the far end carry its tag in From and ours in To, as an
    inbound caller's do, so the leg's dialog checks hold unchanged.

    Our requests in it (`request`): From with our tag, To with the far end's, to its Contact (the remote target),
    the next CSeq of ours, Route headers from the 2xx's Record-Route reversed (RFC 3261 §12.1.2, §12.2.1.1); they
    go to `next_hop` (gateway/sip/routes.py: over UDP the first route's address, else the trunk). The far end's requests must come with rising CSeqs (§12.2.2):
    `remote_cseq` is the last one's; a re-INVITE sent again (the same CSeq) is answered with the 2xx we gave it."""

    _answered = True
    advertised_addr = None

    def __init__(self, client: InviteClient, answer: SipResponse, peer: tuple[str, int], send):
        self.client = client
        self.invite = client.invite
        self.answer = answer  # the 2xx: its Session-Expires, Allow
        self.call_id = client.call_id
        self.source_addr = peer
        self.dialog = _Tags(_tag(answer.headers.get_first("to") or ""), client.dialed.from_tag)
        self._to = answer.headers.get_first("to") or ""
        self._target = routes.remote_target(answer.headers.get_first("contact"), client.dialed.request_uri)
        self._send = send  # (request, address)
        self.route_set = routes.uac_route_set(answer.headers.get("record-route"))
        self.next_hop = routes.first_hop(self.route_set, peer, client.dialed.transport)
        self._cseq = client.cseq
        self.remote_cseq = 0
        self.local_sdp = client.dialed.sdp  # what we last offered or answered (a refreshing re-INVITE offers it)
        self.sdp_version = 1  # the o= line's version: one more for every offer or answer we send (RFC 3264 §8)
        self.answers: dict[int, tuple[SipResponse, object]] = {}  # the far end's last re-INVITE: CSeq -> (our 2xx,
        # the event its ACK sets)

    def _stop_retransmissions(self) -> None:
        pass  # a 2xx to a re-INVITE stops with the call (the leg's task)

    def request(self, method: str, cseq: int | None = None) -> SipRequest:
        """A request in the dialog: the next CSeq of ours, or `cseq` (an ACK names its INVITE's)."""
        d = self.client.dialed
        if cseq is None:
            self._cseq += 1
            cseq = self._cseq
        request = SipRequest(method=method, uri=self._target)
        h = request.headers
        h.set_single("Via", f"SIP/2.0/{d.transport} {d.via_host};branch={new_branch()};rport")
        h.set_single("Max-Forwards", "70")
        h.set_single("From", f"<{d.from_uri}>;tag={d.from_tag}")
        h.set_single("To", self._to)
        h.set_single("Call-ID", self.call_id)
        h.set_single("CSeq", f"{cseq} {method}")
        h.set_single("User-Agent", "voxgate")
        if method not in ("ACK", "BYE"):
            h.set_single("Contact", f"<{d.contact}>")
        routes.add_routes(request, self.route_set)
        return request

    def send(self, request: SipRequest) -> None:
        self._send(request, self.next_hop)

    def next_sdp(self, sdp: str | None = None) -> str:
        """Our SDP (`sdp`, or the last we sent) with the next o= version: the body of an offer or answer we send."""
        self.sdp_version += 1
        self.local_sdp = _with_version(sdp or self.local_sdp, self.sdp_version)
        return self.local_sdp

    def hangup(self) -> None:
        """BYE in the dialog (RFC 3261 §15.1.1)."""
        bye = self.request("BYE")
        bye.headers.set_single("Content-Length", "0")
        self.send(bye)


def _with_version(sdp: str, version: int) -> str:
    """The o= line's session version set to `version` (the session id and the rest kept)."""
    return re.sub(r"^(o=\S+ \S+ )\d+", lambda m: f"{m.group(1)}{version}", sdp, count=1, flags=re.MULTILINE)
