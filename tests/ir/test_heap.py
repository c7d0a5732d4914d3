"""``deferred_full_collections``: full collections deferred inside, the caller's thresholds back
once every block has exited, whatever the nesting, threads or exceptions."""

from __future__ import annotations

import gc
import threading

import pytest

from gruc.ir.heap import DEFERRED_THRESHOLD, deferred_full_collections


def test_nested_blocks_raise_the_oldest_threshold_once_and_restore_it():
    before = gc.get_threshold()
    with deferred_full_collections():
        inside = gc.get_threshold()
        with deferred_full_collections():
            assert gc.get_threshold() == inside
        assert gc.get_threshold() == inside
    assert inside[:2] == before[:2] and inside[2] == max(before[2], DEFERRED_THRESHOLD)
    assert gc.get_threshold() == before


def test_thresholds_come_back_when_the_block_raises():
    before = gc.get_threshold()
    with pytest.raises(ValueError):
        with deferred_full_collections():
            raise ValueError("boom")
    assert gc.get_threshold() == before


def test_blocks_overlapping_in_threads_restore_the_thresholds_when_the_last_exits():
    before = gc.get_threshold()
    entered, release = threading.Event(), threading.Event()

    def other_thread() -> None:
        with deferred_full_collections():
            entered.set()
            release.wait(10)

    worker = threading.Thread(target=other_thread)
    worker.start()
    assert entered.wait(10)
    with deferred_full_collections():
        pass
    assert gc.get_threshold()[2] >= DEFERRED_THRESHOLD  # the other thread's block still runs
    release.set()
    worker.join(10)
    assert gc.get_threshold() == before


def test_a_disabled_collector_stays_disabled_and_a_decorated_function_keeps_its_name():
    @deferred_full_collections()
    def build() -> bool:
        """Doc."""
        return gc.isenabled()

    gc.disable()
    try:
        assert build() is False
    finally:
        gc.enable()
    assert build.__name__ == "build" and build.__doc__ == "Doc."
