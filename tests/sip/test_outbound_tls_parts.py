"""The pure parts of TLS trunks and trunk SRTP: our offer (gateway/sip/outgoing_dialog.py sdp_offer) as the answering
side reads it, the keys an answer selects (gateway/sip/sdes.py answer_keys), and the client TLS context
(gateway/sip/tls.py client_context)."""

from __future__ import annotations

import ssl
from types import SimpleNamespace

import pytest

from gateway.sip import sdes
from gateway.sip.outgoing_dialog import sdp_offer
from gateway.sip.sdp_check import AudioOffer, check_offer
from gateway.sip.tls import client_context, failure
from tests.sip.certs import self_signed

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")


@pytest.mark.parametrize("profile", ["RTP/SAVP", "RTP/AVP"])
def test_our_srtp_offer_carries_both_suites_and_an_answerer_takes_the_80_bit_one(profile):
    ours = sdes.offer()
    offer = check_offer(sdp_offer("127.0.0.1", 40000, 0, 1, ours, profile), [0, 8], srtp=True)
    assert isinstance(offer, AudioOffer) and offer.proto == profile
    lines = offer.sdp.audio.attributes["crypto"]
    assert [sdes.parse(line).suite for line in lines] == list(sdes.SUITES)
    assert sdes.choose(lines) == ours[0]  # what an answerer picks: AES_CM_128_HMAC_SHA1_80, tag 1


def _answer_line(offered: sdes.Crypto) -> str:
    return sdes.answer(offered).to_sdp()


def test_the_answers_line_selects_our_key_and_carries_theirs():
    ours = sdes.offer()
    theirs = sdes.answer(ours[1])  # the far end took the 32-bit suite (tag 2)
    for mode, proto in (("required", "RTP/SAVP"), ("optional", "RTP/SAVP"), ("optional", "RTP/AVP")):
        local, remote = sdes.answer_keys(mode, ours, proto, [theirs.to_sdp()])
        assert (local, remote.master_key) == (ours[1], theirs.master_key)


@pytest.mark.parametrize(
    "mode, proto, lines, code",
    [
        ("required", "RTP/AVP", [], "srtp_required"),  # plain RTP answered to RTP/SAVP
        ("required", "RTP/AVP", ["with-a-key"], "srtp_required"),  # RTP/AVP is not SRTP, key or not
        ("required", "RTP/SAVP", [], "srtp_required"),  # SAVP without a key
        ("optional", "RTP/SAVP", [], "srtp_required"),  # SAVP without a key, whatever the mode
        ("required", "RTP/SAVP", ["unoffered-tag"], "answer_mismatch"),
        ("required", "RTP/SAVP", ["with-a-key", "with-a-key"], "answer_mismatch"),  # one line, not two
    ],
)
def test_an_answer_without_usable_keys_is_refused(mode, proto, lines, code):
    ours = sdes.offer()
    good = _answer_line(ours[0])
    other = sdes.generate("AES_CM_128_HMAC_SHA1_80", tag=7).to_sdp()
    values = [good if line == "with-a-key" else other for line in lines]
    with pytest.raises(sdes.SdesError) as err:
        sdes.answer_keys(mode, ours, proto, values)
    assert err.value.code == code


def test_optional_answered_plain_is_plain_rtp():
    assert sdes.answer_keys("optional", sdes.offer(), "RTP/AVP", []) is None


def test_the_client_context_verifies_the_trunk_and_its_name(tmp_path):
    cert, key = self_signed(tmp_path / "ours")
    ctx = client_context(SimpleNamespace(cert_file=cert, key_file=key, ca_file=None), str(cert))
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_a_tls_failure_is_told_in_words():
    exc = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED]")
    exc.verify_message = "certificate has expired"
    assert failure(exc) == "certificate verify failed: certificate has expired"
    assert failure(ConnectionRefusedError(111, "Connection refused")) == "[Errno 111] Connection refused"
