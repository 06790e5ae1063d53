"""The locks' pure parts: bounded memory, bucket arithmetic, proxy hops; and the installed libraries meet the floors."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from gateway.security import peers, tokens
from gateway.security.peers import PeerLimits, client_address, parse_networks
from gateway.security.tokens import SessionTokens, TokenError


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_spent_token_ids_are_forgotten_when_they_expire_and_a_full_memory_refuses(monkeypatch):
    monkeypatch.setattr(tokens, "MAX_SPENT", 3)
    clock = Clock()
    store = SessionTokens(["k"], ttl_s=10, clock=clock)
    for _ in range(3):
        store.check(store.mint()[0], spend=True)
    fresh, _ = store.mint()
    with pytest.raises(TokenError, match="too many"):  # full of live ids: refuse rather than forget one
        store.check(fresh, spend=True)
    clock.t += 11
    late, _ = store.mint()
    store.check(late, spend=True)  # the expired ids made room
    assert store.spent_count == 1


def test_a_token_names_neither_key_nor_anything_reusable():
    store = SessionTokens(["super-secret-key"], ttl_s=60)
    token, _ = store.mint()
    assert "super-secret-key" not in token
    store.check(token, spend=False)
    store.check(token, spend=True)
    with pytest.raises(TokenError, match="already used"):
        store.check(token, spend=False)


def test_the_bucket_refills_at_the_configured_rate_and_caps_count_open_connections():
    clock = Clock()
    limits = PeerLimits(max_connections=0, per_second=4, clock=clock)
    assert [limits.open("a") for _ in range(5)] == [None] * 4 + [peers.RATE]
    clock.t += 0.25
    assert limits.open("a") is None and limits.open("a") == peers.RATE
    cap = PeerLimits(max_connections=2, per_second=0, clock=clock)
    assert [cap.open("b"), cap.open("b"), cap.open("b")] == [None, None, peers.CAP]
    cap.close("b")
    assert cap.open("b") is None


def test_idle_addresses_are_forgotten_so_a_spray_of_addresses_cannot_grow_memory(monkeypatch):
    monkeypatch.setattr(peers, "MAX_TRACKED", 100)
    clock = Clock()
    limits = PeerLimits(max_connections=5, per_second=10, clock=clock)
    for i in range(1000):
        address = f"10.0.{i // 256}.{i % 256}"
        assert limits.open(address) is None
        limits.close(address)
        clock.t += 0.2
    assert len(limits._peers) <= 100


def test_forwarded_for_is_read_from_the_right_and_only_from_trusted_peers():
    trusted = parse_networks(["10.0.0.0/8", "127.0.0.1"])
    assert client_address("127.0.0.1", "1.2.3.4, 5.6.7.8", trusted) == "5.6.7.8"
    assert client_address("127.0.0.1", "1.2.3.4, 10.1.1.1", trusted) == "1.2.3.4"  # a second trusted hop is skipped
    assert client_address("8.8.8.8", "1.2.3.4", trusted) == "8.8.8.8"  # an untrusted peer's header is ignored
    assert client_address("::ffff:127.0.0.1", "9.9.9.9", trusted) == "9.9.9.9"  # IPv4-mapped on a dual-stack socket


def test_installed_network_libraries_meet_the_floors_in_pyproject():
    deps = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"][
        "dependencies"
    ]
    floors = dict(d.split(">=") for d in deps if d.split(">=")[0] in ("aiohttp", "websockets"))
    assert set(floors) == {"aiohttp", "websockets"}

    def parts(v: str) -> tuple[int, ...]:
        return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in v.split(".")[:3])

    for name, floor in floors.items():
        assert parts(version(name)) >= parts(floor), f"{name} {version(name)} is below its floor {floor}"
