"""SDES key lines (gateway/sip/sdes.py) and SRTP sessions (gateway/sip/srtp.py): the peer here is libsrtp itself
(pylibsrtp, set up straight from the SDP text we wrote), so what we protect is checked by an independent
receiver and what it protects by ours; wrong keys and replays are dropped and counted."""

from __future__ import annotations

import base64
import os
import struct

import pytest

pylibsrtp = pytest.importorskip("pylibsrtp", reason="pylibsrtp is not installed (the sip extra)")

from gateway.sip import sdes  # noqa: E402
from gateway.sip.sdes import Crypto, SdesError  # noqa: E402
from gateway.sip.srtp import SrtpSession  # noqa: E402

# RFC 4568 §9.1's example key
RFC_KEY = "PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR"


def rtp(seq: int, ssrc: int = 0x1234ABCD, payload: bytes | None = None) -> bytes:
    return struct.pack("!BBHII", 0x80, 0, seq, seq * 160, ssrc) + (payload or os.urandom(160))


def rtcp_sender_report(ssrc: int = 0x1234ABCD) -> bytes:
    return struct.pack("!BBHIIIIII", 0x80, 200, 6, ssrc, 1, 2, 3, 4, 5)


def peer_session(line: str, outbound: bool) -> pylibsrtp.Session:
    """libsrtp set up from an a=crypto value, as a far end would."""
    suite, key = line.split()[1], base64.b64decode(line.split()[2].removeprefix("inline:").split("|")[0])
    profile = {
        "AES_CM_128_HMAC_SHA1_80": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80,
        "AES_CM_128_HMAC_SHA1_32": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_32,
    }[suite]
    kind = pylibsrtp.Policy.SSRC_ANY_OUTBOUND if outbound else pylibsrtp.Policy.SSRC_ANY_INBOUND
    return pylibsrtp.Session(pylibsrtp.Policy(key, kind, srtp_profile=profile))


def test_parse_rfc4568_line():
    c = sdes.parse(f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20")
    assert (c.tag, c.suite, c.lifetime) == (1, "AES_CM_128_HMAC_SHA1_80", 2**20)
    assert c.master_key == base64.b64decode(RFC_KEY) and len(c.key) == 16 and len(c.salt) == 14
    assert sdes.parse(c.to_sdp()) == c
    assert sdes.parse(f"7 AES_CM_128_HMAC_SHA1_32 inline:{RFC_KEY} WSH=128").tag == 7


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20|1:4", "unsupported_mki"),  # RFC 4568's own example
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|1:4", "unsupported_mki"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20|1:4;inline:{RFC_KEY}|2^20|2:4", "unsupported_mki"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^10", "unsupported_lifetime"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^999999999", "unsupported_lifetime"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^x", "malformed"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY} UNENCRYPTED_SRTP", "unsupported_session_params"),
        (f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY} KDR=1", "unsupported_session_params"),
        (f"1 AES_256_CM_HMAC_SHA1_80 inline:{RFC_KEY}", "unsupported_suite"),
        (f"1 F8_128_HMAC_SHA1_80 inline:{RFC_KEY}", "unsupported_suite"),
        ("1 AES_CM_128_HMAC_SHA1_80 inline:not*base64", "malformed"),
        ("1 AES_CM_128_HMAC_SHA1_80 inline:" + base64.b64encode(b"x" * 29).decode(), "malformed"),
        (f"1 AES_CM_128_HMAC_SHA1_80 uri:{RFC_KEY}", "malformed"),
        ("AES_CM_128_HMAC_SHA1_80", "malformed"),
        ("1 AES_CM_128_HMAC_SHA1_80 inline:" + "A" * 2000, "malformed"),
    ],
)
def test_unusable_lines_are_refused_with_a_code(line, code):
    with pytest.raises(SdesError) as e:
        sdes.parse(line)
    assert e.value.code == code


def test_choose_prefers_80_and_takes_32_alone():
    k32 = f"1 AES_CM_128_HMAC_SHA1_32 inline:{RFC_KEY}"
    k80 = f"2 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}"
    k256 = f"3 AES_256_CM_HMAC_SHA1_80 inline:{RFC_KEY}"
    assert sdes.choose([k32, k256, k80]).tag == 2
    assert sdes.choose([k256, k32]).suite == "AES_CM_128_HMAC_SHA1_32"
    with pytest.raises(SdesError) as e:
        sdes.choose([k256, f"4 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|1:4"])
    assert e.value.code == "no_acceptable_crypto" and "AES_256_CM_HMAC_SHA1_80" in str(e.value)
    with pytest.raises(SdesError, match="no a=crypto line"):
        sdes.choose([])


def test_answer_keeps_tag_and_suite_with_a_fresh_key():
    offer = sdes.parse(f"5 AES_CM_128_HMAC_SHA1_32 inline:{RFC_KEY}")
    ours = sdes.answer(offer)
    assert (ours.tag, ours.suite) == (5, offer.suite) and ours.master_key != offer.master_key
    assert sdes.answer(offer).master_key != ours.master_key
    with pytest.raises(SdesError):
        sdes.generate("AES_256_CM_HMAC_SHA1_80")


@pytest.mark.parametrize(("suite", "tag_len"), [("AES_CM_128_HMAC_SHA1_80", 10), ("AES_CM_128_HMAC_SHA1_32", 4)])
def test_a_call_both_ways_with_libsrtp_as_the_peer(suite, tag_len):
    offer_line = sdes.generate(suite).to_sdp()  # the peer's offer
    ours = sdes.answer(sdes.parse(offer_line))
    session = SrtpSession(local=ours, remote=sdes.parse(offer_line))
    peer_tx, peer_rx = peer_session(offer_line, outbound=True), peer_session(ours.to_sdp(), outbound=False)
    for seq in range(100, 110):
        packet = rtp(seq)
        sent = session.protect(packet)
        assert len(sent) == len(packet) + tag_len and sent[12:] != packet[12:]
        assert peer_rx.unprotect(sent) == packet
        heard = rtp(seq, ssrc=0xCAFE)
        assert session.unprotect(peer_tx.protect(heard)) == heard
    report = rtcp_sender_report()
    srtcp = session.protect_rtcp(report)
    assert len(srtcp) == len(report) + 4 + 10  # SRTCP index and an 80-bit tag, with either suite
    assert peer_rx.unprotect_rtcp(srtcp) == report
    assert session.unprotect_rtcp(peer_tx.protect_rtcp(rtcp_sender_report(0xCAFE))) == rtcp_sender_report(0xCAFE)
    assert session.dropped == {}


def test_wrong_key_replay_and_garbage_are_dropped_and_counted():
    offer = sdes.generate("AES_CM_128_HMAC_SHA1_80")
    session = SrtpSession(local=sdes.answer(offer), remote=offer)
    peer_tx = peer_session(offer.to_sdp(), outbound=True)
    intruder = peer_session(sdes.generate("AES_CM_128_HMAC_SHA1_80").to_sdp(), outbound=True)

    assert session.unprotect(intruder.protect(rtp(1))) is None
    assert session.unprotect_rtcp(intruder.protect_rtcp(rtcp_sender_report())) is None
    assert session.dropped == {"auth": 2}

    packet = rtp(2)
    assert session.unprotect(peer_tx.protect(packet)) == packet  # the intruder did not spoil the real stream
    tampered = bytearray(peer_tx.protect(rtp(4)))
    tampered[20] ^= 1
    assert session.unprotect(bytes(tampered)) is None
    assert session.dropped == {"auth": 3}


def test_replayed_packet_is_dropped():
    offer = sdes.generate("AES_CM_128_HMAC_SHA1_80")
    session = SrtpSession(local=sdes.answer(offer), remote=offer)
    peer_tx = peer_session(offer.to_sdp(), outbound=True)
    packet = rtp(7)
    protected = peer_tx.protect(packet)
    assert session.unprotect(protected) == packet
    assert session.unprotect(protected) is None
    assert session.dropped == {"replay": 1}
    later = rtp(8)
    assert session.unprotect(peer_tx.protect(later)) == later


def test_garbage_is_dropped_as_malformed():
    offer = sdes.generate("AES_CM_128_HMAC_SHA1_80")
    session = SrtpSession(local=sdes.answer(offer), remote=offer)
    assert session.unprotect(b"\x80\x00") is None
    assert session.unprotect(b"\x80" * 3000) is None
    assert session.dropped["malformed"] == 2


def test_suites_must_match():
    with pytest.raises(ValueError, match="suites differ"):
        SrtpSession(sdes.generate("AES_CM_128_HMAC_SHA1_80"), sdes.generate("AES_CM_128_HMAC_SHA1_32"))
    assert isinstance(sdes.generate("AES_CM_128_HMAC_SHA1_80"), Crypto)


AVP_OFFER = [f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}"]


@pytest.mark.parametrize(
    ("mode", "proto", "lines", "outcome"),
    [
        ("required", "RTP/SAVP", AVP_OFFER, "srtp"),
        ("optional", "RTP/SAVP", AVP_OFFER, "srtp"),
        ("optional", "RTP/SAVPF", AVP_OFFER, "srtp"),
        ("optional", "RTP/AVP", [], "plain"),
        ("optional", "RTP/AVP", AVP_OFFER, "plain"),  # best-effort crypto in a plain offer is not taken up
        ("off", "RTP/AVP", [], "plain"),
        ("required", "RTP/AVP", [], "srtp_required"),
        ("required", "RTP/AVP", AVP_OFFER, "srtp_required"),
        ("off", "RTP/SAVP", AVP_OFFER, "srtp_off"),
        ("required", "RTP/SAVP", [], "no_acceptable_crypto"),
        ("required", "RTP/SAVP", [f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20|1:4"], "no_acceptable_crypto"),
    ],
)
def test_answer_offer_by_mode(mode, proto, lines, outcome):
    if outcome in ("srtp", "plain"):
        result = sdes.answer_offer(mode, proto, lines)
        assert (result is not None) == (outcome == "srtp")
        if result:
            ours, theirs = result
            assert theirs == sdes.parse(lines[0]) and (ours.tag, ours.suite) == (theirs.tag, theirs.suite)
    else:
        with pytest.raises(SdesError) as e:
            sdes.answer_offer(mode, proto, lines)
        assert e.value.code == outcome
    with pytest.raises(ValueError, match="srtp mode"):
        sdes.answer_offer("maybe", proto, lines)


def test_our_offer_and_the_answer_to_it():
    ours = sdes.offer()
    assert [(c.tag, c.suite) for c in ours] == [(1, "AES_CM_128_HMAC_SHA1_80"), (2, "AES_CM_128_HMAC_SHA1_32")]
    assert ours[0].master_key != ours[1].master_key
    # the far end (libsrtp here) answers our _32 line with its own key: both directions then work
    their_line = sdes.answer(sdes.parse(ours[1].to_sdp())).to_sdp()
    local, remote = sdes.answered(ours, [their_line])
    assert local == ours[1] and remote.suite == "AES_CM_128_HMAC_SHA1_32"
    session = SrtpSession(local, remote)
    peer_rx = peer_session(local.to_sdp(), outbound=False)
    packet = rtp(1)
    assert peer_rx.unprotect(session.protect(packet)) == packet
    for bad in (
        [],
        [their_line, their_line],
        [f"3 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}"],
        [f"1 AES_CM_128_HMAC_SHA1_32 inline:{RFC_KEY}"],
    ):
        with pytest.raises(SdesError) as e:
            sdes.answered(ours, bad)
        assert e.value.code == "answer_mismatch"


@pytest.mark.parametrize(
    "keyed, proto, lines, kept",
    [
        (True, "RTP/AVP", [f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}"], True),  # best effort, as it began
        (True, "RTP/SAVP", [f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}"], True),
        (True, "RTP/AVP", [], False),  # keys dropped: plain RTP now
        (False, "RTP/AVP", [], True),
        (False, "RTP/AVP", [f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}"], True),  # best effort ignored, as before
        (False, "RTP/SAVP", [f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}"], False),
    ],
)
def test_a_new_offer_keeps_the_calls_protection(keyed, proto, lines, kept):
    """An `optional` trunk's call keyed in RTP/AVP (best-effort SDES) takes a re-INVITE offering the same. Before:
    the leg compared the profile alone and refused it with 488 (the first case)."""
    assert sdes.same_protection(keyed, proto, lines) is kept
