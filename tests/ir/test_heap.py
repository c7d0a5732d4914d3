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


@pytest.mark.parametrize("paid_by", ["next block", "collect_if_owed"])
@pytest.mark.parametrize("owed, released", [(True, True), (True, False), (False, True)])
def test_a_full_collection_put_off_is_paid_when_the_next_block_starts(owed, released, paid_by):
    """A graph is a web of cycles: a dropped one waits for a full collection.  If the blocks put
    one off (``OWED_AFTER`` times the threshold of young collections since the last full one) and
    something holding a graph was freed since, the next block starts with it, so a loop that
    builds graph after graph does not keep them all; with nothing freed, a block pays nothing.
    ``collect_if_owed`` pays the same collection between blocks (a plan's peak memory is read
    from there), and says whether it ran."""
    import weakref

    from gruc import FLOAT, Graph, Target
    from gruc.ir import heap

    class Holder:
        pass

    graph = Graph(Target.custom(tiles_per_ipu=4))
    graph.add_variable(FLOAT, (4,), "x")  # the variable refers to its graph: a cycle
    gc.collect()  # the graph is old now: only a full collection frees it
    heap._released.clear()  # whatever earlier tests freed
    holder = Holder()
    heap.note_release(holder)
    dropped = weakref.ref(graph)
    del graph
    if released:
        del holder
    young = heap.OWED_AFTER * gc.get_threshold()[2] if owed else 0  # what a full one waits for
    with deferred_full_collections():
        for _ in range(young):
            gc.collect(1)
    assert dropped() is not None
    if paid_by == "next block":
        with deferred_full_collections():
            assert (dropped() is None) is (owed and released)
    else:
        assert heap.collect_if_owed() is (owed and released)
        assert (dropped() is None) is (owed and released)
    gc.collect()
