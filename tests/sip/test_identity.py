"""The caller's identity for the agent (gateway/sip/identity.py): From, To, P-Asserted-Identity, Diversion and
only the pass-listed headers, bounded and clean."""

from __future__ import annotations

import pytest

from gateway.sip.identity import MAX_VALUE, call_identity, pass_header_names

INVITE = [
    ("Via", "SIP/2.0/UDP 198.51.100.1:5060;branch=z9hG4bK1"),
    ("From", '"Smith, John" <sip:+15550100@trunk.example>;tag=a1'),
    ("To", "<sip:+15551234567@voxgate.example>"),
    ("P-Asserted-Identity", '"John Smith" <sip:+15550100@trunk.example>, <tel:+15550100>'),
    ("Diversion", "<sip:+15559990000@trunk.example>;reason=no-answer;counter=1"),
    ("Diversion", '<tel:+15558880000>;reason="unconditional", <sip:desk@pbx.example>'),
    ("X-Customer-Id", "cust-42"),
    ("X-Internal-Route", "pool-7"),
    ("Authorization", 'Digest username="alice", response="secret"'),
    ("Call-ID", "abc@198.51.100.1"),
]


def test_identity_of_an_inbound_invite():
    sip = call_identity("inbound", "sip:+15551234567@voxgate.example", INVITE, pass_header_names(["x-customer-id"]))
    assert sip == {
        "direction": "inbound",
        "from": "sip:+15550100@trunk.example",
        "to": "sip:+15551234567@voxgate.example",
        "from_display": "Smith, John",
        "p_asserted_identity": "sip:+15550100@trunk.example",
        "diversion": [
            {"uri": "sip:+15559990000@trunk.example", "reason": "no-answer"},
            {"uri": "tel:+15558880000", "reason": "unconditional"},
            {"uri": "sip:desk@pbx.example", "reason": None},
        ],
        "request_uri": "sip:+15551234567@voxgate.example",
        "headers": {"X-Customer-Id": "cust-42"},
    }


def test_nothing_is_passed_by_default_and_names_match_case_insensitively():
    assert call_identity("inbound", "sip:a@b", INVITE, pass_header_names([]))["headers"] == {}
    headers = call_identity("outbound", "sip:a@b", INVITE, pass_header_names(["X-CUSTOMER-ID", "Call-ID"]))["headers"]
    assert headers == {"X-Customer-Id": "cust-42", "Call-ID": "abc@198.51.100.1"}


def test_repeated_passed_header_is_joined():
    sip = call_identity("inbound", "sip:a@b", [("X-Tag", "one"), ("x-tag", "two")], pass_header_names(["X-Tag"]))
    assert sip["headers"] == {"X-Tag": "one, two"}


def test_bare_and_compact_and_missing_headers():
    sip = call_identity(
        "inbound", "sip:a@b", [("f", "sip:alice@example.com;tag=9"), ("t", "tel:+15551234")], frozenset()
    )
    assert (sip["from"], sip["from_display"], sip["to"]) == ("sip:alice@example.com", None, "tel:+15551234")
    assert (sip["p_asserted_identity"], sip["diversion"]) == (None, [])
    empty = call_identity("inbound", "sip:a@b", [], frozenset())
    assert (empty["from"], empty["to"], empty["from_display"]) == (None, None, None)


def test_values_are_bounded_and_stripped_of_control_characters():
    long = "x" * 100_000
    sip = call_identity(
        "inbound",
        "sip:a@b",
        [("From", f'"{long}" <sip:{long}@b>'), ("X-Note", "a\x00b\x1bc" + long), ("Diversion", "<sip:d@e>, " * 100)],
        pass_header_names(["X-Note"]),
    )
    assert len(sip["from_display"]) == MAX_VALUE and len(sip["from"]) == MAX_VALUE
    assert sip["headers"]["X-Note"].startswith("abc") and len(sip["headers"]["X-Note"]) == MAX_VALUE
    assert len(sip["diversion"]) == 8


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("Authorization", "credentials"),
        ("proxy-authorization", "credentials"),
        ("X Bad", "not a SIP header name"),
        ("", "not a SIP header name"),
    ],
)
def test_pass_list_refuses_credentials_and_non_names(name, why):
    with pytest.raises(ValueError, match=why):
        pass_header_names([name])
