"""Blind transfer (REFER, RFC 3515) that a caller cannot abuse and that does not get lost.

* Targets: `call.transfer` may only REFER to a URI that one of `sip.transfer_targets` matches (globs over the
  whole URI: `tel:+4420*`, `sip:*@pbx.example.com`). The default, no globs, refuses every transfer: an agent
  driven by an LLM can be talked into `tel:+1900…` (toll fraud), so where calls may go is the operator's call.
* The REFER is a client transaction (gateway/sip/transactions.py: resent over UDP until a final answer; none
  within 32 s is a 408). A final 3xx-6xx ends the transfer as failed with its code; a 2xx (202 Accepted) leaves
  it to the NOTIFYs.
"""

from __future__ import annotations

import fnmatch

from gateway.sip.transactions import Pending


def target_allowed(target: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(target, glob) for glob in globs)


class PendingRefer(Pending):
    """Our REFER in a dialog, until its subscription ends: its CSeq (a NOTIFY's `Event: refer;id=`), and the
    final answer to the REFER itself once one came."""

    def __init__(self, cseq: int):
        super().__init__(cseq, "REFER")

    def matches_event(self, event: str | None) -> bool:
        """`Event: refer;id=<our CSeq>`; the id may be left out for the dialog's first REFER (RFC 3515 §2.4.6),
        and we keep one REFER pending at a time."""
        if not event:
            return False
        kind, *params = [p.strip() for p in event.split(";")]
        if kind.lower() != "refer":
            return False
        ids = [p.split("=", 1)[1].strip() for p in params if p.lower().startswith("id=")]
        return not ids or ids[0] == str(self.cseq)
