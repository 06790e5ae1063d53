"""Every entry under mutated and random input, against a real `voxgate serve` process.

Each case must get a stable error code, a clean close or a well-formed
refusal (see bench/fuzz/cases.py); after each entry's run the process is
alive, answers /healthz and logged no traceback; the last test checks the
ordinary call that played beside all of it: no audible gap, p99 frame
lateness within 20 ms. A few hundred cases in all (the long run is
`python -m bench.fuzz`). Examples are derandomized, so CI tries the same
cases every run.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings

from bench.fuzz import cases as C
from bench.fuzz.server import histogram_quantile

FAST = dict(
    deadline=None,
    database=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def _still_standing(gw) -> None:
    assert gw.alive(), "the gateway process died"
    assert gw.get("/healthz")[0] == 200
    crashes = gw.crashes_in(gw.new_log())
    assert not crashes, "the gateway logged an unhandled error:\n" + crashes[0]


def _check(outcome: C.Outcome, case) -> None:
    assert outcome.ok, f"{outcome.kind}: {outcome.detail}\ncase: {case!r:.2000}"


def test_native_ws_messages(fuzz_gateway, healthy_call):
    @settings(max_examples=110, **FAST)
    @given(C.ws_cases)
    def one(case):
        _check(C.run_ws(fuzz_gateway.ws, case), case)

    one()
    _still_standing(fuzz_gateway)


def test_control_socket_messages(fuzz_gateway, healthy_call):
    @settings(max_examples=50, **FAST)
    @given(C.control_cases)
    def one(case):
        _check(C.run_control(fuzz_gateway.ws, case), case)

    one()
    _still_standing(fuzz_gateway)


def test_twilio_media_stream_messages(fuzz_gateway, healthy_call):
    @settings(max_examples=50, **FAST)
    @given(C.twilio_cases)
    def one(case):
        _check(C.run_twilio(fuzz_gateway.ws, case), case)

    one()
    _still_standing(fuzz_gateway)


def test_audiosocket_frames(fuzz_gateway, healthy_call):
    @settings(max_examples=40, **FAST)
    @given(C.audiosocket_cases)
    def one(case):
        _check(C.run_audiosocket(fuzz_gateway.ws, fuzz_gateway.audiosocket_port, case), case)

    one()
    _still_standing(fuzz_gateway)


def test_sip_messages(fuzz_gateway, healthy_call):
    if fuzz_gateway.sip_port is None:
        pytest.skip("aiosipua is not installed (the sip extra): the fuzz gateway has no SIP door")

    @settings(max_examples=60, **FAST)
    @given(C.sip_cases())
    def one(case):
        _check(C.run_sip(fuzz_gateway.sip_port, case), case)

    one()
    _still_standing(fuzz_gateway)


def test_http_requests(fuzz_gateway, healthy_call):
    @settings(max_examples=80, **FAST)
    @given(C.http_requests())
    def one(request):
        _check(C.run_http(fuzz_gateway.port, request), request)

    one()
    _still_standing(fuzz_gateway)


def test_demo_page_and_static_paths(fuzz_gateway, healthy_call):
    """Long names, odd characters, encoded slashes, dot segments, NUL bytes: a coded 4xx or one of the page's own files."""

    @settings(max_examples=80, **FAST)
    @given(C.static_requests())
    @example({"method": "GET", "path": "/static/" + "a" * 300})  # was a 500: the OS's "file name too long" escaped
    @example({"method": "GET", "path": "/static/" + "ab/" * 1400})  # past PATH_MAX
    @example({"method": "GET", "path": "/static/..%2f..%2fetc%2fpasswd"})
    @example({"method": "GET", "path": "/static/demo.js%00"})
    @example({"method": "GET", "path": "/static/nope.js"})  # was aiohttp's plain-text 404
    @example({"method": "PUT", "path": "/static/demo.js"})  # and 405
    def one(case):
        _check(C.run_static(fuzz_gateway.port, case), case)

    one()
    _still_standing(fuzz_gateway)


def test_webrtc_offers(fuzz_gateway, healthy_call):
    @settings(max_examples=30, **FAST)
    @given(C.sdp_offers())
    def one(body):
        _check(C.run_webrtc_offer(fuzz_gateway.port, body), body)

    one()
    _still_standing(fuzz_gateway)


def test_media_wire_messages(fuzz_gateway, healthy_call):
    """chan_websocket, Telnyx, Vonage, jambonz: broken openings, mutated and random frames, then our close."""

    @settings(max_examples=60, **FAST)
    @given(C.wire_cases)
    def one(case):
        _check(C.run_wire(fuzz_gateway.ws, case), case)

    one()
    _still_standing(fuzz_gateway)


def test_the_healthy_call_kept_its_pacing_and_audio(fuzz_gateway, healthy_call):
    """Checked last, over everything the fuzzers above sent while it played.

    No audible gap, and p99 frame lateness within 20 ms as the call heard it. On a machine so loaded that the
    call's own process adds the lateness, two other views decide: the bar becomes three times what the call saw
    alone before the fuzzing began (its first turn), or the gateway's own clock (when each frame left, from
    /metrics over the same window) must have kept its p99 within 20 ms.
    """
    result = healthy_call.stop()
    server_p99_ms = 1000 * histogram_quantile(
        healthy_call.metrics_at_start, fuzz_gateway.metrics(), "voxgate_clock_lateness_seconds", 0.99
    )
    shown = str({**{k: v for k, v in result.items() if k != "errors"}, "server_clock_p99_ms": round(server_p99_ms, 2)})
    assert result["failure"] is None, shown
    assert result["turns"] >= 2 and result["frames"] > 0 and result["quiet_frames"] > 0, shown
    assert result["audible_gaps"] == 0, shown
    heard_ok = result["lateness_p99_ms"] <= max(20.0, 3 * result["quiet_lateness_p99_ms"])
    assert heard_ok or server_p99_ms <= 20.0, shown
    _still_standing(fuzz_gateway)
