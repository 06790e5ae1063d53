"""Route sets (RFC 3261 §12.1.1, §12.1.2, §12.2.1.1), pure: the proxies a trunk puts in Record-Route stay on the
path of every later request in the dialog. A UA that ignores them sends its BYE, re-INVITE or REFER around the
proxy, and carriers drop those.

* We answer (UAS): the route set is the INVITE's Record-Route list in order; our 1xx/2xx copy those headers.
* We called (UAC): the route set is the 2xx's Record-Route list reversed.
* Our requests in the dialog carry the route set as Route headers. A loose router (`;lr`, every proxy since
  RFC 3261) leaves the Request-URI the remote target (Contact); a strict one (RFC 2543) becomes the Request-URI
  and the remote target the last Route.
* Where the request goes (`first_hop`): over UDP, the first route's host:port when it names an IPv4 address;
  over TCP and TLS, the connection the dialog lives on (an inbound caller's, or ours to the trunk). Names are
  not resolved per request (nor are SDP's): a route naming a host by name is reached through the dialog's peer,
  the proxy that sent us the INVITE or that we sent it to, which is the nearest proxy of the set. With no route
  set, the dialog's peer too (a phone behind NAT names an address in Contact that nobody can reach).
* `sips:` and `;transport=tls` in a route are kept as the proxy wrote them; the transport is the door the dialog
  lives on (no new connection is opened for a route that names another transport), and a `sips:` route's
  default port is 5061.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

DEFAULT_PORTS = {"sip": 5060, "sips": 5061}


def uas_route_set(record_routes: Iterable[str]) -> list[str]:
    """The route set of a dialog we answered: the INVITE's Record-Route values in order (§12.1.1)."""
    return [r.strip() for r in record_routes if r.strip()]


def uac_route_set(record_routes: Iterable[str]) -> list[str]:
    """The route set of a dialog our INVITE made: the 2xx's Record-Route values reversed (§12.1.2), less those that
    name no SIP URI (`<`, `garbage`): a malformed one would become our ACK's and BYE's Request-URI."""
    return [r for r in reversed(uas_route_set(record_routes)) if host_port(r) is not None]


def remote_target(contact: str | None, fallback: str) -> str:
    """The URI of a 2xx's Contact (`<sip:far@h;transport=tcp>;x=y` -> `sip:far@h;transport=tcp`): our requests'
    Request-URI in the dialog; `fallback` when it names no SIP URI (absent, `*`, unbalanced `<`)."""
    text = (contact or "").strip()
    if "<" in text:
        start = text.find("<") + 1
        end = text.find(">", start)
        uri = text[start:end].strip() if end > 0 else ""
    else:
        uri = text.split(";")[0].strip()
    return uri if host_port(uri) is not None and uri.isprintable() and " " not in uri else fallback


def route_uri(route: str) -> str:
    """The URI of a Route/Record-Route value (`<sip:p.example;lr>;x=y` -> `sip:p.example;lr`)."""
    route = route.strip()
    if "<" in route and ">" in route:
        return route[route.find("<") + 1 : route.find(">")].strip()
    return route.split(",")[0].strip()


def loose(route: str) -> bool:
    """Whether the route's proxy is a loose router (its URI has the `lr` parameter)."""
    params = route_uri(route).split(";")[1:]
    return any(p.split("=")[0].strip().lower() == "lr" for p in params)


def host_port(route: str) -> tuple[str, int] | None:
    """The host and port a route's URI names (`sips:` defaults to 5061), or None when it is not a SIP URI."""
    uri = route_uri(route)
    scheme, colon, rest = uri.partition(":")
    if not colon or scheme.lower() not in DEFAULT_PORTS:
        return None
    hostport = rest.split(";")[0].split("?")[0].rsplit("@", 1)[-1]
    host, _, port = hostport.partition(":")
    if not host or (port and not port.isdigit()):
        return None
    return host, int(port) if port else DEFAULT_PORTS[scheme.lower()]


def first_hop(route_set: list[str], peer: tuple[str, int], transport: str) -> tuple[str, int]:
    """Where a request of the dialog goes: see the module's docstring."""
    if transport.upper() != "UDP" or not route_set or not loose(route_set[0]):
        return peer
    named = host_port(route_set[0])
    if named is None or not _ipv4(named[0]) or not 0 < named[1] < 65536:
        return peer
    return named


def hop_of(request, peer: tuple[str, int], transport: str) -> tuple[str, int]:
    """Where a request we built goes: the first hop its Route headers name (`first_hop`), else the peer."""
    return first_hop([r.strip() for r in request.headers.get("route") if r.strip()], peer, transport)


def add_routes(request, route_set: list[str]) -> None:
    """Our in-dialog `request` (its Request-URI the remote target) routed through `route_set` (§12.2.1.1)."""
    request.headers.remove("route")
    routes = list(route_set)
    if routes and not loose(routes[0]):  # a strict router: it is the Request-URI, the target the last Route
        target = request.uri
        request.uri = route_uri(routes[0])
        routes = [*routes[1:], f"<{target}>"]
    for route in routes:
        request.headers.append("Route", route)


def _ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True
