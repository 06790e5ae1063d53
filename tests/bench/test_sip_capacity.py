"""The SIP capacity bench with SRTP beside plain RTP, tiny: real `voxgate serve` subprocesses (plain SIP over UDP,
then SIP over TLS with `sip.srtp: required`), real callers (bench/sip_callers.py) that protect and unprotect
their RTP with libsrtp under the keys the SDP exchanged."""

from __future__ import annotations

import json

import pytest

from bench import gateway_capacity, sip_callers
from gateway.sip import sdes

pytest.importorskip("aiosipua", reason="aiosipua is not installed (the sip extra)")
pytest.importorskip("pylibsrtp", reason="pylibsrtp is not installed (the sip extra)")


def test_srtp_calls_beside_plain_rtp_calls_in_one_run(tmp_path, capsys):
    out = tmp_path / "srtp.json"
    argv = ["--leg", "sip", "--srtp", "--levels", "2", "--window", "2", "--warmup", "2", "--idle-s", "0"]
    assert gateway_capacity.main([*argv, "--json-output", str(out)]) == 0
    plain, srtp = json.loads(out.read_text())["levels"]
    assert (plain["media"], srtp["media"]) == ("plain", "srtp")
    for row in (plain, srtp):
        assert row["connected"] == 2 and row["errors"] == 0, row["error_codes"]
        assert row["frames_per_s_received"] > 50 and row["server_cpu_us_per_frame"] > 0
        # every packet the callers sent was taken: none dropped by strict RTP or (SRTP) for failing authentication
        assert row["rtp_sent"] > 100 and row["rtp_dropped_by_reason"] == {}
    # the SRTP calls were SRTP both ways: each caller keyed its call from the answer's a=crypto and every packet of
    # the gateway's authenticated under that key (plain RTP, or another key, counts as undecrypted, not as a frame)
    assert srtp["srtp_calls"] == 2 and srtp["srtp_undecrypted"] == 0
    assert plain["srtp_calls"] == 0
    text = capsys.readouterr().out
    assert "side by side" in text and "µs/frame vs plain RTP" in text and "SRTP: holds up to" in text


def test_a_caller_refuses_an_answer_without_srtp():
    offered = sdes.generate("AES_CM_128_HMAC_SHA1_80")
    plain = "v=0\r\nm=audio 20000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
    with pytest.raises(sdes.SdesError, match="not RTP/SAVP"):
        sip_callers.answered_srtp(offered, plain)
    other_tag = sdes.generate("AES_CM_128_HMAC_SHA1_80", tag=7).to_sdp()
    with pytest.raises(sdes.SdesError, match="was not offered"):
        sip_callers.answered_srtp(offered, plain.replace("RTP/AVP", "RTP/SAVP") + f"a=crypto:{other_tag}\r\n")
    ours = sdes.answer(offered).to_sdp()
    session = sip_callers.answered_srtp(offered, plain.replace("RTP/AVP", "RTP/SAVP") + f"a=crypto:{ours}\r\n")
    assert session.protect(bytes(12) + bytes(160)) != bytes(12) + bytes(160)
