"""gateway/sip/routes.py, pure: route sets in the order each side keeps them, the first hop, strict routers."""

from __future__ import annotations

import pytest

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")

from aiosipua import SipRequest  # noqa: E402

from gateway.sip import routes  # noqa: E402

RR = ["<sip:10.0.0.1:5070;lr>", "<sips:edge.example.com;lr;transport=tls>"]
PEER = ("192.0.2.9", 5060)


def test_the_uas_keeps_the_record_route_order_and_the_uac_reverses_it():
    assert routes.uas_route_set(RR) == RR
    assert routes.uac_route_set(RR) == RR[::-1]


def test_over_udp_the_first_loose_route_naming_an_address_is_the_first_hop():
    assert routes.first_hop(RR, PEER, "UDP") == ("10.0.0.1", 5070)
    assert routes.first_hop(["<sip:10.0.0.2;lr>"], PEER, "UDP") == ("10.0.0.2", 5060)


@pytest.mark.parametrize(
    "route_set, transport",
    [
        (RR, "TCP"),  # the connection the dialog lives on
        (RR, "TLS"),
        ([], "UDP"),  # no route set: the dialog's peer
        (RR[::-1], "UDP"),  # a name: not resolved per request
        (["<sip:10.0.0.1:5070>"], "UDP"),  # a strict router: the peer (it is the Request-URI)
    ],
)
def test_otherwise_the_dialogs_peer_is(route_set, transport):
    assert routes.first_hop(route_set, PEER, transport) == PEER


def test_a_sips_route_defaults_to_5061():
    assert routes.host_port("<sips:edge.example.com;lr>") == ("edge.example.com", 5061)
    assert routes.host_port("<tel:+15550100>") is None


def test_loose_routes_become_route_headers_and_a_strict_router_the_request_uri():
    request = SipRequest(method="BYE", uri="sip:bob@192.0.2.9:5060")
    routes.add_routes(request, RR)
    assert request.uri == "sip:bob@192.0.2.9:5060" and request.headers.get("route") == RR
    strict = SipRequest(method="BYE", uri="sip:bob@192.0.2.9:5060")
    routes.add_routes(strict, ["<sip:10.0.0.1:5070>", RR[1]])
    assert strict.uri == "sip:10.0.0.1:5070"
    assert strict.headers.get("route") == [RR[1], "<sip:bob@192.0.2.9:5060>"]
