"""Per-IP connection caps and rate, address lists, and the client's address behind trusted proxies.

One `PeerLimits` is shared by every door of a gateway (the HTTP port and the AudioSocket port): an address
holds at most `max_connections_per_ip` connections at once, and opens at most `connections_per_ip_per_s`
a second (a token bucket holding one second's worth, so a page that opens its socket and its offer together
is not refused). 0 turns each off.
"""

from __future__ import annotations

import ipaddress
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

CAP = "max_connections_per_ip"  # refusal reasons (the metric's `reason` label)
RATE = "connections_per_ip_per_s"
MAX_TRACKED = 65_536  # addresses remembered at once; idle ones are forgotten first


def parse_networks(entries: Iterable[str]) -> list[Network]:
    """IPs and CIDRs (`10.0.0.0/8`, `::1`) → networks; raises ValueError naming a bad entry."""
    out = []
    for entry in entries:
        try:
            out.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not an IP address or CIDR network") from None
    return out


def in_networks(address: str | None, networks: list[Network]) -> bool:
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:10.0.0.1 on a dual-stack socket is 10.0.0.1
    return any(ip in net for net in networks)


def client_address(peer: str | None, forwarded_for: str | None, trusted: list[Network]) -> str | None:
    """The caller's address: the socket's peer, unless that peer is a trusted proxy; then the right-most
    X-Forwarded-For entry that is not itself a trusted proxy (entries left of it are the client's to forge)."""
    if not trusted or not forwarded_for or not in_networks(peer, trusted):
        return peer
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not in_networks(hop, trusted):
            return hop
    return hops[0] if hops else peer


@dataclass
class _Peer:
    open: int = 0
    tokens: float = 0.0
    stamp: float = 0.0


class PeerLimits:
    def __init__(self, max_connections: int, per_second: float, clock: Callable[[], float] = time.monotonic):
        self.max_connections = max_connections
        self.per_second = per_second
        self.burst = float(max(1, math.ceil(per_second)))
        self.clock = clock
        self._peers: dict[str, _Peer] = {}

    @property
    def enabled(self) -> bool:
        return self.max_connections > 0 or self.per_second > 0

    def open(self, address: str | None) -> str | None:
        """Count a new connection from `address`: None when it may go on (then call `close` when it ends),
        else the reason it is refused (`CAP` or `RATE`)."""
        if not self.enabled or address is None:
            return None
        peer = self._peers.get(address)
        now = self.clock()
        if peer is None:
            if len(self._peers) >= MAX_TRACKED:
                self._forget_idle(now)
            peer = self._peers[address] = _Peer(tokens=self.burst, stamp=now)
        if self.max_connections and peer.open >= self.max_connections:
            return CAP
        if self.per_second:
            peer.tokens = min(self.burst, peer.tokens + (now - peer.stamp) * self.per_second)
            peer.stamp = now
            if peer.tokens < 1.0:
                return RATE
            peer.tokens -= 1.0
        peer.open += 1
        return None

    def close(self, address: str | None) -> None:
        peer = self._peers.get(address) if address is not None else None
        if peer is not None and peer.open > 0:
            peer.open -= 1

    def open_counts(self) -> dict[str, int]:
        """Every address with connections open now (the call plane publishes them for plane-wide caps)."""
        return {address: peer.open for address, peer in self._peers.items() if peer.open > 0}

    def open_count(self, address: str) -> int:
        peer = self._peers.get(address)
        return peer.open if peer else 0

    def _forget_idle(self, now: float) -> None:
        """Addresses with nothing open and a refilled bucket carry no state worth keeping."""
        for address, peer in list(self._peers.items()):
            if peer.open == 0 and (
                not self.per_second or peer.tokens + (now - peer.stamp) * self.per_second >= self.burst
            ):
                del self._peers[address]
        if len(self._peers) >= MAX_TRACKED:  # a flood of distinct addresses, all busy: forget the oldest idle-most
            for address in list(self._peers)[: len(self._peers) // 4]:
                if self._peers[address].open == 0:
                    del self._peers[address]
