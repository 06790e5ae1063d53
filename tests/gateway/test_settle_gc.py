"""settle_gc: what `voxgate serve` does to the collector once start-up is done (gateway/runtime_stats.py)."""

from __future__ import annotations

import gc

import pytest

from gateway import runtime_stats


@pytest.fixture
def restore_gc():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_settle_gc_freezes_start_up_and_sets_the_measured_thresholds(restore_gc, monkeypatch):
    monkeypatch.delenv(runtime_stats.GC_THRESHOLDS_ENV, raising=False)
    before = gc.get_freeze_count()
    assert runtime_stats.settle_gc() == runtime_stats.GC_THRESHOLDS == gc.get_threshold()
    assert gc.get_threshold()[0] > 700  # not CPython's default: calls' objects must not be promoted in a second
    assert gc.get_freeze_count() > before  # start-up's objects sit in the permanent generation, walked by no collection


def test_thresholds_can_be_overridden_for_measuring(restore_gc, monkeypatch):
    monkeypatch.setenv(runtime_stats.GC_THRESHOLDS_ENV, "700,10,10")
    assert runtime_stats.settle_gc() == (700, 10, 10)
