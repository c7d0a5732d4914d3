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

A graph is a web of cycles, so a dropped engine's graph waits for a full collection, and a loop
that builds engine after engine spends nearly all its time inside blocks: it grew by 155 MB an
engine (a 64x256x256 training layer).  So a full collection put off is paid when the next block
starts, if it is owed (:data:`OWED_AFTER` times as many young collections since the last full
one as the caller's threshold) and a compiled program (an engine's, a plan's) has been freed
since (:func:`note_release`): a loop stays flat, and a build followed by its compile, where nothing
was dropped, pays nothing; what it frees goes back to the operating system (glibc's
``malloc_trim``).  :func:`collect_if_owed` pays it earlier, for a measurement that starts
between blocks.  ``gc.disable()`` by the caller is respected.

Still needed now that a compiled module owns its graph (``dce`` returns a module over a copy of
what it runs, :mod:`gruc.ir.graph_copy`): the copy is a web of cycles like any graph, held by
the compiled program as before, and compiling a layer still makes as many long-lived objects
(the copy adds the views and vertices it keeps), so full collections during a compile would
still walk them all for nothing.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import weakref
from contextlib import contextmanager
from typing import Iterator

DEFERRED_THRESHOLD = 1000
"""Young-generation collections between full collections while deferred (CPython's default is
10): about seven million allocations."""

OWED_AFTER = 4
"""A full collection is owed once this many times the caller's threshold of young collections
passed without one: a 64x256x256 layer's plan makes 7-10, so a sweep of them collects every
four or five plans (every one, it took 8 % longer), and keeps at most that many dropped."""

_lock = threading.Lock()
_active = 0
_saved: tuple[int, ...] = ()
_libc = ctypes.CDLL(None) if sys.platform == "linux" else None
_malloc_trim = getattr(_libc, "malloc_trim", None)
"""glibc's ``malloc_trim`` (None where the C library has none)."""
_mallopt = getattr(_libc, "mallopt", None)
"""glibc's ``mallopt`` (None where the C library has none)."""
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_GLIBC_DEFAULTS = {_M_MMAP_MAX: 65536, _M_TRIM_THRESHOLD: 128 * 1024}
_KEEP_FREED = {_M_MMAP_MAX: 0, _M_TRIM_THRESHOLD: 2 ** 31 - 1}
"""While a block runs, every allocation comes from the heap and freed memory stays there for
the next one.  glibc serves any allocation over 32 MB with a fresh ``mmap`` and unmaps it when
freed, so each of numpy's large temporaries (a wide layer's weights are 45 million elements)
faults in its pages anew, one kernel entry per 4 KiB: 21 of the 67 CPU seconds of the
H = I = 2759 training layer's compile were the kernel's.  glibc's default thresholds come back
when the last block exits (fixed from then on: glibc stops sliding its mmap threshold once they
are set), and what the block freed goes back to the operating system then."""
_released = threading.Event()
"""Set when something :func:`note_release` watches is freed: a graph may have become garbage."""


def note_release(owner: object) -> None:
    """Mark, once ``owner`` is freed, that a graph may have become garbage.  ``owner`` is what
    holds a compiled graph and is itself freed by reference counting (a compiled program, which an
    engine holds), so its end is seen at once where the graph's would wait for a full
    collection."""
    weakref.finalize(owner, _released.set)


def _collect_owed(threshold: int) -> bool:
    """With the lock held and no block active: the full collection the last blocks put off, if it
    is owed and has garbage to find (``threshold``: the caller's oldest-generation threshold);
    True if it ran.  The heap it frees goes back to the operating system where the C library can
    say so (glibc's ``malloc_trim``): a dropped graph of a large layer is gigabytes of small
    objects, which the allocator would otherwise keep mapped for the process's next graph."""
    if not (_released.is_set() and gc.isenabled()
            and gc.get_count()[2] >= OWED_AFTER * threshold):
        return False
    _released.clear()
    gc.collect()
    release_free_heap()
    return True


def collect_if_owed() -> bool:
    """Pay now the full collection the next block would start with (see the module), outside
    any block; True if it ran.  For a measurement that must not count the previous graph's
    garbage: a plan's peak memory (:func:`gruc.plan.figures.measured`) is read from a high-water
    mark reset before the plan starts, so garbage still held then, though freed a moment later
    inside the plan, would count as the plan's."""
    with _lock:
        return _active == 0 and _collect_owed(gc.get_threshold()[2])


@contextmanager
def deferred_full_collections() -> Iterator[None]:
    """Run the block with full garbage collections deferred (see the module docstring)."""
    global _active, _saved
    with _lock:
        if _active == 0:
            _saved = gc.get_threshold()
            _collect_owed(_saved[2])
            gc.set_threshold(_saved[0], _saved[1], max(_saved[2], DEFERRED_THRESHOLD))
            _set_allocator(_KEEP_FREED)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                gc.set_threshold(*_saved)
                _set_allocator(_GLIBC_DEFAULTS)
                release_free_heap()


def _set_allocator(options: dict[int, int]) -> None:
    """Set glibc's allocator options (nothing where the C library has no ``mallopt``)."""
    if _mallopt is not None:
        for option, value in options.items():
            _mallopt(option, value)


def release_free_heap() -> None:
    """Hand the heap's free pages back to the operating system (glibc's ``malloc_trim``; nothing
    elsewhere): what a block kept for reuse, or a dropped plan freed, is then no one's memory."""
    if _malloc_trim is not None:
        _malloc_trim(0)
