"""Moving an operand between tile memory and a contiguous host array, for kernels that compute
on the host (BLAS products): element ``e`` of the operand to or from host position ``e`` (or one
given per element), as runs of consecutive addresses where both sides have them, else element by
element; and reads that copy another kernel's host array of the same elements instead, while tile
memory cannot have changed them (:class:`SharedRead`)."""

from __future__ import annotations

import numpy as np
from numba import njit

from gruc.runtime.kernels import SEGMENT_MIN_AVERAGE, HostCopies, runs_by_address
from gruc.runtime.lower import DeviceMemory, Operand
from gruc.types import HALF


# Run tables are uint64: unsigned indices spare numba its negative-index wraparound, which lets
# LLVM vectorise the copies (about 7x faster on runs of ~20 elements).
@njit(cache=True, nogil=True)
def _move_runs(src, src_starts, dst, dst_starts, lengths):  # pragma: no cover (compiled)
    for s in range(lengths.shape[0]):
        source, target = src_starts[s], dst_starts[s]
        for j in range(lengths[s]):
            dst[target + np.uint64(j)] = src[source + np.uint64(j)]


@njit(cache=True, nogil=True)
def _add_runs(src, bases, positions, lengths, acc):  # pragma: no cover (compiled)
    for s in range(bases.shape[0]):
        base, at = bases[s], positions[s]
        for j in range(lengths[s]):
            acc[at + np.uint64(j)] += src[base + np.uint64(j)]


@njit(cache=True, nogil=True)
def _add_scaled_runs(dst, bases, positions, lengths, src, factor):  # pragma: no cover (compiled)
    for s in range(bases.shape[0]):
        base, at = bases[s], positions[s]
        for j in range(lengths[s]):
            dst[base + np.uint64(j)] = dst[base + np.uint64(j)] + factor * src[at + np.uint64(j)]


@njit(cache=True, nogil=True)
def _add_scaled_index(dst, index, positions, src, factor):  # pragma: no cover (compiled)
    for i in range(index.shape[0]):
        dst[index[i]] = dst[index[i]] + factor * src[positions[i]]


@njit(cache=True, nogil=True)
def _move_index(src, src_index, dst, dst_index):  # pragma: no cover (compiled)
    for i in range(src_index.shape[0]):
        dst[dst_index[i]] = src[src_index[i]]


@njit(cache=True, nogil=True)
def _add_index(src, index, positions, acc):  # pragma: no cover (compiled)
    for i in range(index.shape[0]):
        acc[positions[i]] += src[index[i]]


class Transfer:
    """Moves an operand's elements between tile memory and a contiguous host float32 array:
    element ``e`` of the operand (flat order) to or from host position ``positions[e]`` (default
    ``e``).  Runs where both sides are consecutive (along the operand, or with ``host_order``
    along the host positions: see :func:`~gruc.runtime.kernels.runs_by_address`) are copied by
    compiled loops in *address* order, so tile memory (tiles far apart) streams while the small
    host array takes the scattered side; operands without long runs go element by element."""

    def __init__(self, operand: Operand, positions: np.ndarray | None = None, *,
                 host_order: bool = False) -> None:
        self.dtype = operand.dtype
        self.index = operand.index.reshape(-1)
        host = np.arange(len(self.index), dtype=np.int64) if positions is None else positions
        self.host = host.view()
        self.host.flags.writeable = False  # read-only like the index: one compiled _move_index
        self.bases, self.positions, self.lengths = runs_by_address(self.index, self.host,
                                                                   host_order=host_order)
        self.runs = len(self.lengths) * SEGMENT_MIN_AVERAGE <= len(self.index)
        self.half = operand.dtype is HALF
        self.words = np.empty(len(self.index), np.uint16) if self.half else None

    def _memory(self, memory: DeviceMemory) -> np.ndarray:
        view = memory.view(self.dtype)
        return view.view(np.uint16) if self.half else view

    def read(self, memory: DeviceMemory, into: np.ndarray) -> None:
        """``into`` (contiguous float32) receives the operand's values."""
        host = self.words if self.half else into.reshape(-1)
        if self.runs:
            _move_runs(self._memory(memory), self.bases, host, self.positions, self.lengths)
        else:
            _move_index(self._memory(memory), self.index, host, self.host)
        if self.half:
            np.copyto(into.reshape(-1), self.words.view(np.float16))

    def write(self, memory: DeviceMemory, values: np.ndarray) -> None:
        """The operand's elements = ``values`` (contiguous float32, rounded to the operand type)."""
        host = values.reshape(-1)
        if self.half:
            np.copyto(self.words.view(np.float16), host)
            host = self.words
        if self.runs:
            _move_runs(host, self.positions, self._memory(memory), self.bases, self.lengths)
        else:
            _move_index(host, self.host, self._memory(memory), self.index)

    def add(self, memory: DeviceMemory, into: np.ndarray) -> None:
        """``into`` (contiguous float32) += the operand's values (float operands only)."""
        data, flat = memory.view(self.dtype), into.reshape(-1)
        if self.runs:
            _add_runs(data, self.bases, self.positions, self.lengths, flat)
        else:
            _add_index(data, self.index, self.host, flat)

    def add_scaled(self, memory: DeviceMemory, values: np.ndarray, factor: np.float32) -> None:
        """The operand's elements += ``factor * values`` in one pass over tile memory (float
        operands only; the same float32 roundings as multiplying, then adding)."""
        data, flat = memory.view(self.dtype), values.reshape(-1)
        if self.runs:
            _add_scaled_runs(data, self.bases, self.positions, self.lengths, flat, factor)
        else:
            _add_scaled_index(data, self.index, self.host, flat, factor)


class SharedRead:
    """Reads an operand into a host array: from the host array another step last filled with it,
    when that cannot be stale (:class:`~gruc.runtime.kernels.HostCopy`), else from tile memory.
    With ``offer``, the array read into is held for later readers: it must be one only this
    reader writes."""

    def __init__(self, operand: Operand, copies: HostCopies, *, offer: bool) -> None:
        self.transfer = Transfer(operand)
        self.copy = copies.of(operand)
        self.offer = offer

    def __call__(self, memory: DeviceMemory, into: np.ndarray) -> None:
        self.copy.take(memory, into, self.transfer.read, offer=self.offer)
