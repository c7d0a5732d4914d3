"""Garbage collection while a graph is built or compiled: full collections deferred.

Building and compiling a GRU layer creates hundreds of thousands of small objects that live as
long as the graph (views, slice operations, vertices, operands) and almost no garbage cycles.
CPython runs a *full* collection, a walk over every tracked object, each time the objects that
survived the young generations grow by a quarter: a compile that grows the heap from 50 000 to
500 000 objects walks it about ten times, for nothing — a third of the compile time of a GRU
layer at short sequence lengths.  While :func:`deferred_full_collections` is active the oldest
generation's threshold is raised, so full collections (nearly) stop; the young generations are
still collected as before, so short-lived garbage cycles are still freed.  The caller's
thresholds come back when the last active block exits (blocks nest, in any thread).

A full collection put off is paid when the next block starts, if it is still owed (as many young
collections since the last full one as the caller's threshold): a graph is a web of cycles, so a
dropped engine's graph waits for a full collection, and a loop that builds engine after engine
spends nearly all its time inside blocks — it grew by 155 MB an engine (a 64x256x256 training
layer) until this one collection at the start of each build, which keeps it flat for ~0.2 s.
``gc.disable()`` by the caller is respected.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

DEFERRED_THRESHOLD = 1000
"""Young-generation collections between full collections while deferred (CPython's default is
10): about seven million allocations."""

_lock = threading.Lock()
_active = 0
_saved: tuple[int, ...] = ()


@contextmanager
def deferred_full_collections() -> Iterator[None]:
    """Run the block with full garbage collections deferred (see the module docstring)."""
    global _active, _saved
    with _lock:
        if _active == 0:
            _saved = gc.get_threshold()
            if gc.isenabled() and gc.get_count()[2] >= _saved[2]:
                gc.collect()  # the full collection the last deferred block put off
            gc.set_threshold(_saved[0], _saved[1], max(_saved[2], DEFERRED_THRESHOLD))
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                gc.set_threshold(*_saved)
