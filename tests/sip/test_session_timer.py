"""Session timer decisions (gateway/sip/session_timer.py), RFC 4028: 422 below our Min-SE, the interval within
both sides' bounds, who refreshes (Table 2), when to refresh and when to give up, and the outbound side."""

from __future__ import annotations

import pytest

from gateway.sip.session_timer import Agreement, Answer, Refusal, SessionTimerPolicy

POLICY = SessionTimerPolicy(session_expires=1800, min_se=90)
TIMER = [("Supported", "replaces, timer"), ("Allow", "INVITE, ACK, BYE, CANCEL, UPDATE")]


def test_too_small_an_interval_gets_422_with_our_min_se():
    answer = POLICY.answer([*TIMER, ("Session-Expires", "60;refresher=uac")])
    assert answer == Refusal(422, "Session Interval Too Small", {"Min-SE": "90"})
    assert isinstance(SessionTimerPolicy(min_se=300).answer([("Session-Expires", "120")]), Refusal)
    assert POLICY.answer([*TIMER, ("Session-Expires", "90")]).agreement.interval == 90


def test_the_callers_refresher_is_kept():
    uac = POLICY.answer([*TIMER, ("Session-Expires", "600;refresher=uac")])
    assert uac == Answer(Agreement(600, False, "UPDATE"), {"Session-Expires": "600;refresher=uac", "Require": "timer"})
    uas = POLICY.answer([*TIMER, ("x", "600;refresher=UAS")])  # compact form, either case
    assert uas.agreement == Agreement(600, True, "UPDATE") and uas.headers["Session-Expires"] == "600;refresher=uas"


def test_refresher_chosen_by_table_2():
    # the caller supports timers and names no refresher: it refreshes
    assert POLICY.answer([*TIMER, ("Session-Expires", "600")]).agreement.we_refresh is False
    # the caller does not support them (a proxy may still have added Session-Expires): we refresh, no Require
    plain = POLICY.answer([("Session-Expires", "600"), ("Allow", "INVITE, BYE")])
    assert plain == Answer(Agreement(600, True, "INVITE"), {"Session-Expires": "600;refresher=uas"})
    # no Session-Expires at all: our interval, and the work is ours when the caller knows nothing of timers
    assert POLICY.answer([]) == Answer(Agreement(1800, True, "INVITE"), {"Session-Expires": "1800;refresher=uas"})
    assert POLICY.answer(TIMER).agreement == Agreement(1800, False, "UPDATE")


def test_interval_lowered_to_ours_but_never_below_the_callers_min_se():
    assert POLICY.answer([*TIMER, ("Session-Expires", "7200")]).agreement.interval == 1800
    assert POLICY.answer([*TIMER, ("Session-Expires", "7200"), ("Min-SE", "3600")]).agreement.interval == 3600
    assert POLICY.answer([*TIMER, ("Min-SE", "2400")]).agreement.interval == 2400
    assert POLICY.answer([*TIMER, ("Session-Expires", "99999999")]).agreement.interval == 1800


@pytest.mark.parametrize(
    "headers",
    [
        [("Session-Expires", "soon")],
        [("Session-Expires", "600;refresher=me")],
        [("Min-SE", "-5")],
        [("Session-Expires", "1" * 40)],
    ],
)
def test_malformed_headers_get_400(headers):
    answer = POLICY.answer(headers)
    assert isinstance(answer, Refusal) and answer.status == 400 and "Bad" in answer.reason


def test_refresh_at_half_and_give_up_before_expiry():
    assert Agreement(1800, True).refresh_after_s == 900
    assert Agreement(1800, False).give_up_after_s == 1800 - 32
    assert Agreement(90, False).give_up_after_s == 60  # interval/3 when that is less than 32 s


def test_outbound_offer_422_retry_and_the_callees_answer():
    assert POLICY.offer() == {"Supported": "timer", "Session-Expires": "1800", "Min-SE": "90"}
    asked = POLICY.after_422([("Min-SE", "3600")], offered=1800)
    assert asked == 3600 and POLICY.offer(asked) == {"Supported": "timer", "Session-Expires": "3600", "Min-SE": "3600"}
    assert POLICY.after_422([("Min-SE", "1800")], offered=1800) is None  # the same 422 again: give up
    assert POLICY.after_422([], offered=1800) is None
    assert POLICY.agreed([("Session-Expires", "1200;refresher=uac"), ("Allow", "UPDATE")]) == Agreement(1200, True)
    assert POLICY.agreed([("Session-Expires", "1200;refresher=uas")]) == Agreement(1200, False, "INVITE")
    assert POLICY.agreed([("Session-Expires", "1200")]).we_refresh is True
    assert POLICY.agreed([]) is None and POLICY.agreed([("Session-Expires", "junk")]) is None


@pytest.mark.parametrize(("expires", "min_se"), [(1800, 60), (60, 90), (100, 200), (10**6, 90)])
def test_policy_bounds(expires, min_se):
    with pytest.raises(ValueError, match="session timers"):
        SessionTimerPolicy(session_expires=expires, min_se=min_se)


@pytest.mark.parametrize(
    "headers, expected",
    [
        ([], None),  # the caller asked for no timer: none imposed
        ([("Supported", "timer")], None),
        ([("Session-Expires", "600;refresher=uac"), ("Supported", "timer")], (600, False, "INVITE")),
        # we refresh, with UPDATE where the caller allows it, else with a re-INVITE (the refresher it asked for)
        (
            [("Session-Expires", "600;refresher=uas"), ("Supported", "timer"), ("Allow", "INVITE, UPDATE")],
            (600, True, "UPDATE"),
        ),
        (
            [("Session-Expires", "600;refresher=uas"), ("Supported", "timer"), ("Allow", "INVITE, BYE")],
            (600, True, "INVITE"),
        ),
        ([("Session-Expires", "600"), ("Allow", "INVITE, BYE")], (600, True, "INVITE")),  # it cannot refresh: we do
    ],
)
def test_engaged_runs_only_timers_the_caller_asked_for(headers, expected):
    """Before: where we would have to re-INVITE, the refresher the caller asked for was overridden (uac), or the
    call ran no timer at all."""
    from gateway.sip.session_timer import engaged

    agreement = engaged(SessionTimerPolicy().answer(headers), headers)
    assert (agreement and (agreement.interval, agreement.we_refresh, agreement.refresh_with)) == expected
