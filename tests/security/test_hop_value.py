"""The hop value itself (gateway/cluster/hop.py), without sockets: what its signature binds, and its age."""

from __future__ import annotations

import pytest

from gateway.cluster import hop

SECRET = b"hop-unit-test-secret-0123456789"


def test_a_hop_verifies_only_for_the_request_and_call_it_was_signed_for():
    value = hop.sign(SECRET, "gw-1", "GET", "/v1/vonage?call_id=A", "A", now=1000)
    checked = hop.verify(SECRET, value, "GET", "/v1/vonage?call_id=A", now=1010)
    assert (checked.node, checked.call_id) == ("gw-1", "A") and len(checked.nonce) == 32
    for method, target in (
        ("POST", "/v1/vonage?call_id=A"),
        ("GET", "/v1/vonage?call_id=B"),
        ("GET", "/v1/vonage"),
        ("GET", "/v1/telnyx?call_id=A"),
    ):
        with pytest.raises(hop.HopRefused, match="signature does not verify"):
            hop.verify(SECRET, value, method, target, now=1010)
    parts = value.split(";")
    for i, forged in ((4, "B"), (1, "gw-2"), (3, "0" * 32), (2, "1009")):  # any field changed breaks the signature
        with pytest.raises(hop.HopRefused, match="signature"):
            hop.verify(SECRET, ";".join(parts[:i] + [forged] + parts[i + 1 :]), "GET", "/v1/vonage?call_id=A", now=1010)
    with pytest.raises(hop.HopRefused, match="different secrets"):
        hop.verify(b"another-secret-of-16+chars", value, "GET", "/v1/vonage?call_id=A", now=1010)


def test_a_hop_is_fresh_for_thirty_seconds_and_each_has_its_own_nonce():
    value = hop.sign(SECRET, "gw-1", "GET", "/v1/twilio/CA1", "CA1", now=1000)
    hop.verify(SECRET, value, "GET", "/v1/twilio/CA1", now=1000 + hop.MAX_AGE_S)
    with pytest.raises(hop.HopRefused, match="old"):
        hop.verify(SECRET, value, "GET", "/v1/twilio/CA1", now=1000 + hop.MAX_AGE_S + 1)
    assert (
        hop.sign(SECRET, "gw-1", "GET", "/x", "c", now=1).split(";")[3]
        != hop.sign(SECRET, "gw-1", "GET", "/x", "c", now=1).split(";")[3]
    )
    for junk in ("", "gw-1;1700000000;" + "0" * 64, "v2;a;b;c;d;e", "v2;;;;;"):
        with pytest.raises(hop.HopRefused):
            hop.verify(SECRET, junk, "GET", "/x")


def test_a_call_id_with_a_semicolon_hops_like_any_other():
    """Call ids may hold a `;` (a SIP Call-ID may): the hop's field split refused every forward of such a call as
    a signature mismatch, logged as nodes holding different secrets."""
    call_id = "a84b4c76e66710;part=2@pc33.example.com"
    value = hop.sign(SECRET, "gw-1", "GET", "/v1/control", call_id, now=1000)
    checked = hop.verify(SECRET, value, "GET", "/v1/control", now=1001)
    assert (checked.node, checked.call_id) == ("gw-1", call_id)
    with pytest.raises(hop.HopRefused, match="signature"):  # and it still binds the whole id
        hop.verify(SECRET, value.replace("part=2", "part=3"), "GET", "/v1/control", now=1001)
