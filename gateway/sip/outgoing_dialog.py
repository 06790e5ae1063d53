"""An answered outbound call's dialog, in the shape the SIP leg reads from aiosipua's IncomingCall (its ids, the
peer's address, hanging up with BYE), so that after the answer an outbound call is an ordinary SIP call.

Also what goes into the INVITE: the SDP offer and the request URI a `to` names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aiosipua import SipRequest, SipResponse

from gateway.sip.outbound import InviteClient, _tag, new_branch

E164 = re.compile(r"\+[1-9][0-9]{6,14}")  # ITU-T E.164: + and up to 15 digits
SIP_URI = re.compile(r"sips?:[^@\s<>\"]+@[A-Za-z0-9.\-]+(?::\d{1,5})?(;[^\s<>\"]*)?")
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
    inbound caller's do, so the leg's dialog checks hold unchanged."""

    _answered = True
    advertised_addr = None

    def __init__(self, client: InviteClient, answer: SipResponse, peer: tuple[str, int], send):
        self.client = client
        self.invite = client.invite
        self.call_id = client.call_id
        self.source_addr = peer
        self.dialog = _Tags(_tag(answer.headers.get_first("to") or ""), client.dialed.from_tag)
        self._to = answer.headers.get_first("to") or ""
        contact = answer.headers.get_first("contact") or ""
        self._target = contact[contact.find("<") + 1 : contact.find(">")] if "<" in contact else contact.split(";")[0]
        self._send = send  # (request, address)
        self._cseq = client.cseq

    def _stop_retransmissions(self) -> None:
        pass  # we sent no 2xx

    def hangup(self) -> None:
        """BYE in the dialog (RFC 3261 §15.1.1): to the far end's Contact, the next CSeq of ours."""
        d = self.client.dialed
        self._cseq += 1
        bye = SipRequest(method="BYE", uri=self._target.strip() or d.request_uri)
        h = bye.headers
        h.set_single("Via", f"SIP/2.0/{d.transport} {d.via_host};branch={new_branch()};rport")
        h.set_single("Max-Forwards", "70")
        h.set_single("From", f"<{d.from_uri}>;tag={d.from_tag}")
        h.set_single("To", self._to)
        h.set_single("Call-ID", self.call_id)
        h.set_single("CSeq", f"{self._cseq} BYE")
        h.set_single("User-Agent", "voxgate")
        h.set_single("Content-Length", "0")
        self._send(bye, self.source_addr)
