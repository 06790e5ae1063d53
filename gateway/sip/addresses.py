"""The address voxgate writes into SDP and Contact: one the peer can reach.

`sip.public_ip` when set (behind NAT). Otherwise, with a specific `sip.host`, that address; with a wildcard
(`0.0.0.0`, `::`), the address of the interface the kernel routes towards the peer, which is the interface the
peer's request came in on in every ordinary network: never `0.0.0.0`, and never a loopback address towards a
peer that is not on loopback.
"""

from __future__ import annotations

import socket

WILDCARDS = ("", "0.0.0.0", "::")


def media_address(public_ip: str | None, host: str | None, peer_ip: str) -> str:
    if public_ip:
        return public_ip
    if host not in WILDCARDS and host is not None:
        return host
    return local_address_towards(peer_ip)


def local_address_towards(peer_ip: str) -> str:
    """The local address of a UDP socket connected to `peer_ip` (no packet leaves: connect only picks a route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((peer_ip, 9))  # the discard port: any port would do
            return s.getsockname()[0]
        except OSError:  # no route to the peer (it cannot be reached whatever we write): this host's own name
            return "127.0.0.1" if peer_ip.startswith("127.") else socket.gethostbyname(socket.gethostname())
