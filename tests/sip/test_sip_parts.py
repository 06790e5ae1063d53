"""The SIP leg's pure parts (gateway/sip/), without sockets: strict RTP's learning window, random RTP ports, the
per-source INVITE rate, transfer targets and the NOTIFY's `Event: refer` id, X- headers, the session clock."""

from __future__ import annotations

import asyncio

import random

import pytest

from gateway.sip import media_guard as mg
from gateway.sip.rate import InviteRate
from gateway.sip.rtp_ports import RandomPortAllocator
from gateway.sip.session_clock import SessionClock
from gateway.sip.session_timer import Agreement
from gateway.sip.transfer import PendingRefer, target_allowed
from gateway.sip.x_headers import x_headers_ok

SDP = ("198.51.100.7", 40000)
SIGNALLING = "203.0.113.5"


def test_strict_rtp_learns_a_nat_port_only_in_the_first_packets_and_only_from_an_expected_ip():
    guard = mg.MediaGuard.for_call(SDP, SIGNALLING)
    assert guard.admit(("192.0.2.66", 40000), 0.0) == mg.STRANGER  # another IP: never, even first
    assert guard.admit((SIGNALLING, 5060), 0.0) is None  # the signalling IP, another port: a NAT, learned
    assert guard.peer == (SIGNALLING, 5060)
    for i in range(1, mg.LEARN_PACKETS):
        assert guard.admit((SIGNALLING, 5060), i * 0.02) is None
    assert not guard.learning
    assert guard.admit(SDP, 0.2) == mg.AFTER_LEARNING  # the window closed on the learned source
    assert guard.peer == (SIGNALLING, 5060) and guard.admit((SIGNALLING, 5060), 0.3) is None
    guard.move(("198.51.100.8", 41000), SIGNALLING)  # a re-INVITE from the peer: learn again from there
    assert guard.admit(("198.51.100.8", 41000), 5.0) is None and guard.peer == ("198.51.100.8", 41000)


def test_strict_rtp_learning_ends_a_second_after_the_first_packet():
    guard = mg.MediaGuard.for_call(SDP, SIGNALLING)
    assert guard.admit(SDP, 10.0) is None
    assert guard.admit((SDP[0], 40002), 10.0 + mg.LEARN_S) == mg.AFTER_LEARNING
    assert guard.peer == SDP
    assert guard.admit_rtcp((SDP[0], 40001)) is None and guard.admit_rtcp(("192.0.2.66", 40001)) == mg.RTCP_STRANGER


async def test_rtp_ports_are_random_even_pairs_until_the_range_is_used_up():
    ports = RandomPortAllocator((47000, 47009), rng=random.Random(7))  # pairs at 47000..47008
    taken = []
    with pytest.raises(RuntimeError):
        while True:
            taken.append(await ports.allocate())
    assert taken and len(set(taken)) == len(taken) <= 5  # fewer where another program holds one of the ports
    assert all(p % 2 == 0 and q == p + 1 and 47000 <= p <= 47008 for p, q in taken)
    await ports.release(taken[0][0])
    assert await ports.allocate() == taken[0]


def test_the_invite_rate_is_a_bucket_per_source():
    now = [0.0]
    rate = InviteRate(2.0, clock=lambda: now[0])
    assert [rate.admit("203.0.113.5") for _ in range(3)] == [True, True, False]
    assert rate.admit("203.0.113.6")  # another source has its own bucket
    now[0] = 0.5
    assert rate.admit("203.0.113.5") and not rate.admit("203.0.113.5")


def test_transfer_targets_are_globs_over_the_whole_uri():
    globs = ["tel:+4420*", "sip:*@pbx.example.com"]
    assert target_allowed("tel:+442071234567", globs) and target_allowed("sip:sales@pbx.example.com", globs)
    assert not target_allowed("tel:+19005550100", globs)
    assert not target_allowed("sip:sales@pbx.example.com.evil.example", globs)
    assert not target_allowed("tel:+442071234567", [])


async def test_a_notify_names_our_refer_by_its_event_id():
    pending = PendingRefer(cseq=3)
    assert pending.matches_event("refer;id=3") and pending.matches_event("refer")
    assert not pending.matches_event("refer;id=4") and not pending.matches_event("presence")
    assert not pending.matches_event(None)


def test_x_headers_are_x_names_with_printable_values_and_bounded():
    assert x_headers_ok({"X-Transfer-Reason": "callback", "X-Customer-Id": "42"})
    assert not x_headers_ok({"Route": "sip:evil"})  # not an X- header
    assert not x_headers_ok({"X-Bad": "a\r\nRoute: sip:evil"})  # CR/LF would add a header of the client's choosing
    assert not x_headers_ok({"X-Long": "v" * 257})
    assert not x_headers_ok({f"X-H{i}": "v" for i in range(17)})
    assert not x_headers_ok({"X-Num": 5}) and not x_headers_ok(["X-A"])


async def test_the_session_clock_refreshes_at_half_the_interval_and_expires_when_a_refresh_fails():
    """Clocks only (interval 1 s stands in for the RFC's 90): we refresh at 0.5 s, the second refresh fails."""
    refreshes, expired = [], asyncio.Event()

    async def refresh(agreement):
        refreshes.append(asyncio.get_running_loop().time())
        return agreement if len(refreshes) == 1 else None

    clock = SessionClock(Agreement(1, we_refresh=True), refresh, expired.set)
    started = asyncio.get_running_loop().time()
    clock.start()
    await asyncio.wait_for(expired.wait(), 5)
    assert len(refreshes) == 2 and refreshes[0] - started >= 0.5


async def test_the_session_clock_gives_up_when_the_peers_refresh_does_not_come():
    expired = asyncio.Event()

    async def refresh(agreement):
        raise AssertionError("the peer refreshes, not we")

    clock = SessionClock(Agreement(3, we_refresh=False), refresh, expired.set)
    clock.start()
    await asyncio.sleep(1.5)
    clock.refreshed()  # the peer's refresh at 1.5 s: the count starts again (give up after 3 - 1 = 2 s)
    await asyncio.sleep(1.0)
    assert not expired.is_set()
    await asyncio.wait_for(expired.wait(), 5)
    clock.cancel()
