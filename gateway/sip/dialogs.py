"""Whether a request for one of our calls may speak for it: the dialog's tags, and who sent it.

The SIP stack matches in-dialog requests by Call-ID alone in places (a NOTIFY, an ACK, a second INVITE while
the first rings), and never by who sent them. Every request that names a call of ours must come from the
dialog's peer (the address its INVITE came from) or from an address in `sip.allow` (a trunk's other proxies),
else 403 `not_dialog_peer`; and it must carry the dialog's tags (the caller's in From, ours in To), else 481
`dialog_mismatch` (RFC 3261 §12.2.2). A refused request changes nothing.

Pure: the request's method, tags and source in, a `Verdict` out.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway import protocol as P
from gateway.security.peers import Network, in_networks

# requests without our tag in To: a retransmitted INVITE (before our answer) and CANCEL (it matches the INVITE)
WITHOUT_OUR_TAG = ("INVITE", "CANCEL")


@dataclass(frozen=True)
class Dialog:
    peer_ip: str  # where the INVITE came from
    remote_tag: str  # the caller's From tag
    local_tag: str  # ours, in the To of our answers


@dataclass(frozen=True)
class Verdict:
    status: int
    reason: str
    code: str


NOT_PEER = Verdict(403, "Forbidden", P.NOT_DIALOG_PEER)
NO_SUCH_DIALOG = Verdict(481, "Call/Transaction Does Not Exist", P.DIALOG_MISMATCH)


def check(
    dialog: Dialog,
    method: str,
    from_tag: str | None,
    to_tag: str | None,
    source_ip: str,
    trusted: list[Network],
) -> Verdict | None:
    """None when the request belongs to the dialog; else the answer it gets (an ACK gets none: it is dropped)."""
    if source_ip != dialog.peer_ip and not in_networks(source_ip, trusted):
        return NOT_PEER
    if from_tag != dialog.remote_tag:
        return NO_SUCH_DIALOG
    if method in WITHOUT_OUR_TAG and not to_tag:
        return None
    return None if to_tag == dialog.local_tag else NO_SUCH_DIALOG


def trusted_networks(allow: list[Network]) -> list[Network]:
    """The `sip.allow` entries that may speak for any dialog: not a catch-all (`0.0.0.0/0` lets anyone start a
    call, not speak for someone else's)."""
    return [n for n in allow if n.prefixlen > 0]
