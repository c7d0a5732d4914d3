"""The numba backend's machinery: the table of compiled vertex implementations, the on-disk
kernel cache, and the run finder that lets kernels stream through memory.

Codelet families (``gruc.runtime.codelets``) generate numba source for their vertices and load it
with :func:`load_kernel`.  Generated sources are written to a cache directory (``GRUC_CACHE_DIR``,
default ``~/.cache/gruc``) and imported from there with ``cache=True``, so numba's compiled code is
reused by the next process instead of being compiled again (a first ``gruc gru`` pays for
compilation once per machine, not once per run).  Kinds without an entry in
:data:`NUMBA_VERTICES` run on the numpy definitions.

Memory access comes in two shapes.  When the operands are long runs of consecutive addresses (a
tensor's elements on a tile are one block, so work over linearly mapped tensors is a few runs per
tile) kernels walk *segments*: per segment a base address per operand, each operand either
streaming (+1 per element) or fixed (a broadcast scalar), which LLVM vectorises.  Otherwise
(transposed or scattered views) they gather through per-element indices.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Collection

import numpy as np
from numba import njit

from gruc.ir.vertices import VertexKind
from gruc.runtime import fastmath
from gruc.runtime.caches import cache_root
from gruc.runtime.interp import PrepareExecutable, PrepareVertex


class VertexTable(dict):
    """Vertex implementations by kind, plus ``executable_hooks``: functions that see the whole
    lowered executable and may prepare some vertices together (see
    :data:`gruc.runtime.interp.PrepareExecutable`)."""

    def __init__(self) -> None:
        super().__init__()
        self.executable_hooks: list[PrepareExecutable] = []


NUMBA_VERTICES: VertexTable = VertexTable()

SEGMENT_MIN_AVERAGE = 4
"""Use segment kernels when segments average at least this many elements."""

_FASTMATH_VERSION = hashlib.sha1(Path(fastmath.__file__).read_bytes()).hexdigest()[:12]

KERNEL_HEADER = ("import math\nimport numpy as np\nfrom numba import njit\n"
                 "from gruc.runtime.fastmath import (exp32, int32_of_float, sigmoid32, tanh32,\n"
                 "                                   uint32_of_float)\n"
                 f"# fastmath {_FASTMATH_VERSION}: numba's cache cannot see imported changes\n\n\n"
                 '@njit(cache=True, nogil=True, error_model="numpy")\n')
"""Start of every generated kernel module; the kernel function itself is named ``kernel``."""


def numba_vertex(kind: VertexKind) -> Callable[[PrepareVertex], PrepareVertex]:
    """Register the numba implementation of vertex kind ``kind``."""

    def register(fn: PrepareVertex) -> PrepareVertex:
        NUMBA_VERTICES[kind] = fn
        return fn

    return register


def numba_executable_hook(fn: PrepareExecutable) -> PrepareExecutable:
    """Register a whole-executable preparation hook of the numba backend."""
    NUMBA_VERTICES.executable_hooks.append(fn)
    return fn


def cache_directory() -> Path:
    """Where generated kernel sources (and numba's compiled code beside them) live."""
    return cache_root() / "kernels"


_LOADED: dict[str, Callable] = {}


def load_kernel(source: str) -> Callable:
    """The function ``kernel`` of a generated module (written to the cache first if needed)."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:20]
    if digest in _LOADED:
        return _LOADED[digest]
    directory = cache_directory()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"kernel_{digest}.py"
    if not path.exists() or path.read_text() != source:
        from gruc.files import atomic_file

        with atomic_file(path) as handle:  # a process killed here leaves no half-written kernel
            handle.write(source)
    name = f"gruc_kernel_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # numba's on-disk cache finds the function's module by name
    spec.loader.exec_module(module)
    _LOADED[digest] = module.kernel
    return module.kernel


@dataclass(frozen=True)
class Segments:
    """Runs of elements over which every operand is consecutive or fixed."""

    lengths: np.ndarray
    out_base: np.ndarray
    bases: tuple[np.ndarray, ...]
    streaming: tuple[bool, ...]


def streams(index: np.ndarray) -> bool:
    """Whether an operand names more than one element (else it is one element, broadcast)."""
    return index.size > 1 and not bool(np.all(index == index.flat[0]))


def find_segments(out: np.ndarray, operands: list[np.ndarray]) -> Segments | None:
    """Split the element range into segments, or None if they would be too short to pay."""
    n = len(out)
    if n == 0:
        return None
    streaming = tuple(streams(op) for op in operands)
    breaks = np.diff(out) != 1
    for op, moves in zip(operands, streaming):
        if moves:
            breaks |= np.diff(op) != 1
    starts = np.concatenate(([0], np.flatnonzero(breaks) + 1))
    if len(starts) * SEGMENT_MIN_AVERAGE > n:
        return None
    lengths = np.diff(np.append(starts, n))
    bases = tuple(op[starts] if moves else np.full(len(starts), op[0])
                  for op, moves in zip(operands, streaming))
    return Segments(lengths, out[starts], bases, streaming)


def runs_by_address(index: np.ndarray, host: np.ndarray | None = None, *,
                    host_order: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs in which both ``index`` (flat memory indices) and ``host`` (positions in a host
    array; default ``0, 1, ...``) are consecutive, as uint64 (memory starts, host starts,
    lengths) sorted by memory start: moved in that order, tile memory streams while the small
    host array takes the scattered side.  Runs are looked for along the operand's flat order,
    or with ``host_order`` along the host positions (a permutation then: a transposed host
    layout has its runs across the operand's rows)."""
    index = index.reshape(-1)
    if host is None:
        host = np.arange(len(index), dtype=np.int64)
    elif host_order:
        order = np.argsort(host, kind="stable")
        index, host = index[order], host[order]
    if len(index) == 0:
        empty = np.zeros(0, np.uint64)
        return empty, empty, empty
    breaks = (np.diff(index) != 1) | (np.diff(host) != 1)
    begins = np.concatenate(([0], np.flatnonzero(breaks) + 1))
    lengths = np.diff(np.append(begins, len(index)))
    order = np.argsort(index[begins], kind="stable")
    return (index[begins][order].astype(np.uint64), host[begins][order].astype(np.uint64),
            lengths[order].astype(np.uint64))


def write_counter(step_counts: np.ndarray, writers: np.ndarray) -> Callable[[], int]:
    """How many times the ``writers`` steps have run so far, as cheaply as their number allows:
    it is asked before every read of an operand a kernel may keep, so it must cost far less than
    the read."""
    if len(writers) == 0:
        return lambda: 0
    if len(writers) == 1:
        return partial(step_counts.item, int(writers[0]))
    return lambda: int(step_counts[writers].sum())


class Unchanged:
    """Tells whether an operand a step reads can have changed since that step last read it, so a
    kernel may keep its gathered host copy (the weights an RNN step multiplies by, gathered from
    thousands of tiles on every step, change only when the host writes them).

    Exact, not a heuristic.  The operand's bytes change only through the host
    (:attr:`DeviceMemory.host_writes`), a step that writes one of its variables or declares it dead
    (the interpreter counts executions, and counts only grow), or a step writing *another* variable
    the memory plan placed on the same bytes.  The last cannot happen between two reads of the
    operand with no write nor kill of it in between: the variable is live over that stretch, and
    the plan never lets a variable's bytes be shared while it is live (the invariant the planner
    tests and fuzzers hold it to).  A step that writes the operand itself never keeps it, unless
    it is one of the steps ``kept_by`` names, whose writes the caller keeps on the host too.
    """

    def __init__(self, operand, executable, step_counts: np.ndarray, reading_step: int, *,
                 kept_by: Collection[int] = ()) -> None:
        variables = frozenset(v.index for v in operand.tensor.variables())
        writers = [s for s in executable.writers_of(variables) if s not in kept_by]
        self.enabled = reading_step not in writers
        self.only_the_host_writes = self.enabled and not writers
        """Whether no step writes the operand (a bias, or weights outside a weight update): it
        changes only when the host writes it."""
        self.writes = write_counter(step_counts, np.array(writers, dtype=np.int64))
        self.seen: tuple[int, int, int] | None = None

    def __call__(self, memory) -> bool:
        """True if nothing changed since the last call (which is then not counted as a read)."""
        if not self.enabled:
            return False
        now = (id(memory), memory.host_writes, self.writes())
        if now == self.seen:
            return True
        self.seen = now
        return False


class HostCopy:
    """The host array that last received an operand's values (its elements in flat order), and
    whether tile memory may have changed them since: a later step reading the very same elements
    copies that array instead of gathering them from thousands of tiles again (a backward step's
    gate gradients are the input-gradient product's ``a`` and the weight-gradient product's
    ``b``).  Changes are told as :class:`Unchanged` tells them: the host's writes, and executions
    of the steps that write or kill one of the operand's variables."""

    def __init__(self, writers: np.ndarray, step_counts: np.ndarray) -> None:
        self.writes = write_counter(step_counts, writers)
        self.array: np.ndarray | None = None
        self._seen: tuple[int, int, int] | None = None

    def _now(self, memory) -> tuple[int, int, int]:
        return id(memory), memory.host_writes, self.writes()

    def take(self, memory, into: np.ndarray, gather: Callable, *, offer: bool) -> None:
        """``into`` = the operand's values: copied from the held array if it cannot be stale,
        else ``gather(memory, into)`` from tile memory.  With ``offer``, ``into`` is held next:
        it must be an array only the caller writes, and only when it takes the operand again."""
        now = self._now(memory)
        if self.array is None or now != self._seen:
            gather(memory, into)
        elif self.array is not into:
            np.copyto(into.reshape(-1), self.array.reshape(-1))
        if offer:
            self.array, self._seen = into, now


class HostCopies:
    """One :class:`HostCopy` per distinct operand (same type, same elements in the same order,
    same variables) of an executable.

    Operands of different variables are never shared, even on the same bytes: the memory plan
    gives the bytes of a variable that is dead to another one, and a copy of the first would
    not know that the second's writers changed them (a half layer's forward input slice and its
    weight update's, planned on the same bytes, once shared one stale copy)."""

    def __init__(self, executable, step_counts: np.ndarray) -> None:
        self.executable = executable
        self.step_counts = step_counts
        self._copies: dict[tuple[str, frozenset[int], bytes], list[tuple[np.ndarray, HostCopy]]] = {}

    def of(self, operand) -> HostCopy:
        """The one :class:`HostCopy` of ``operand``'s elements in their order, its type and its
        variables (found by a hash of the index, then compared exactly)."""
        index = operand.index.reshape(-1)
        variables = frozenset(v.index for v in operand.tensor.variables())
        key = (operand.dtype.name, variables, hashlib.sha1(index.tobytes()).digest())
        same = self._copies.setdefault(key, [])
        for known, copy in same:
            if np.array_equal(known, index):
                return copy
        copy = HostCopy(np.array(self.executable.writers_of(variables), dtype=np.int64),
                        self.step_counts)
        same.append((index, copy))
        return copy


@njit(cache=True, nogil=True)
def _copy_runs(data, sources, targets, lengths):  # pragma: no cover (compiled)
    for s in range(sources.shape[0]):
        source, target = sources[s], targets[s]
        for j in range(lengths[s]):
            data[target + np.uint64(j)] = data[source + np.uint64(j)]


@njit(cache=True, nogil=True)
def _copy_elements(data, sources, targets):  # pragma: no cover (compiled)
    for i in range(sources.shape[0]):
        data[targets[i]] = data[sources[i]]


UNSIGNED_VIEWS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
"""The unsigned type through which elements of each byte size are moved (moving is bit copying)."""


class CompiledCopy:
    """The numba backend's ``Copy``: element moves compiled once per step, as runs of consecutive
    addresses where the copy has them (a tensor's elements on a tile are one block) or element by
    element, through the unsigned view of the element size (a copy moves bits).  A copy whose
    source and destination share addresses, or converts between types, falls back to the
    definition, which reads everything before writing."""

    def __init__(self) -> None:
        self.prepared: dict[int, Callable] = {}

    def __call__(self, memory, step) -> None:
        run = self.prepared.get(step.step)
        if run is None:
            run = self.prepared[step.step] = self._prepare(step)
        run(memory)

    @staticmethod
    def _prepare(step) -> Callable:
        """The move of one copy step: runs of consecutive addresses when they are long enough to
        pay, else element by element; the numpy definition when nothing moves, the types differ, or
        source and destination share an address."""
        from gruc.runtime.interp import numpy_copy

        source, target = step.src.index.reshape(-1), step.dst.index.reshape(-1)
        if (len(source) == 0 or step.src.dtype is not step.dst.dtype
                or len(np.intersect1d(source, target))):
            return lambda memory: numpy_copy(memory, step)
        bits = UNSIGNED_VIEWS[step.dst.dtype.size]
        breaks = (np.diff(source) != 1) | (np.diff(target) != 1)
        begins = np.concatenate(([0], np.flatnonzero(breaks) + 1))
        if len(begins) * SEGMENT_MIN_AVERAGE <= len(source):
            lengths = np.diff(np.append(begins, len(source))).astype(np.uint64)
            sources, targets = source[begins].astype(np.uint64), target[begins].astype(np.uint64)
            return lambda memory: _copy_runs(memory.raw.view(bits), sources, targets, lengths)
        sources, targets = source.astype(np.int64), target.astype(np.int64)
        return lambda memory: _copy_elements(memory.raw.view(bits), sources, targets)
