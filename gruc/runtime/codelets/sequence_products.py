"""Input projections of a sliced sequence, taken ahead for a chunk of time steps.

An RNN step slices its input sequence at the loop counter (``DynamicSlice``) and multiplies the
slice by a weight matrix.  The product's rows are the batch (16-64), so BLAS streams the whole
weight matrix for little work, and between two steps the rest of a step's work pushes the weights
out of cache: measured here, a 32-row product with 512x1536 weights took 350-410 us after other
traffic against 270-300 us back to back.  Nothing in the product depends on the recurrence, so the
numba backend takes it ahead for a chunk of steps: the chunk's sequence rows are gathered through
the slice's own piece tables in one compiled pass and multiplied in one batched call, one product
per step back to back with the weights in cache, and each step then hands its rows to the
reduction.  Each step's product is the same BLAS call on the same rows as at its own step, so the
bits are the step's own, however the loop is chunked or sharded (one product over all the rows
would run faster still, but BLAS rounds a row differently with the number of rows around it).

Exactness.  A fused product qualifies when its ``a`` is exactly the windows of one-row slice
vertices with one offset (every element of ``a`` written by one of them, nothing else), the slice
step comes earlier in the same loop body, and the steps in between are plain Execute / Copy steps
that write neither ``a``, nor the offset, nor the sliced sequence.  When the step runs with the
offset in range, ``a`` then holds the sequence's row at the offset, so the product is that row's
projection.  A table is used only while neither the sequence nor the weights can have changed
since it was taken (the execution counts of every step writing their variables, and the host's
writes: exact for the reasons :class:`~gruc.runtime.kernels.Unchanged` gives), and is dropped at
the end of every run, so each run computes its own.  Otherwise — an offset out of range, a table
that went stale before half of it was used (then never again for that vertex) — the step takes
its own product.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from gruc.runtime.codelets.dynamic import flat_indices, piece_tables, rows_table
from gruc.runtime.interp import RunHooks
from gruc.runtime.kernels import executable_blocks
from gruc.runtime.lower import (CopyStep, DeviceMemory, Executable, ExecuteStep, Loop,
                                LoweredVertex, MarkStep, Operand)
from gruc.types import FLOAT

TABLE_BYTES = 64 << 20
"""At most this many bytes of gathered sequence rows and their products at once."""
MIN_TRIPS = 4
"""Loops of fewer iterations take their products step by step (a table would not pay)."""


@njit(cache=True, nogil=True)
def _gather_rows(data, row_pieces, widths, positions, first, count, row_size,
                 host):  # pragma: no cover (compiled)
    """Rows ``first .. first + count`` of the sequence, each in ``a``'s element order, into
    ``host`` one after another: piece ``p`` of row ``r`` goes to ``positions[p]`` of its row."""
    pieces = widths.shape[0]
    for r in range(count):
        entry = (first + r) * pieces
        at = r * row_size
        for p in range(pieces):
            source = row_pieces[entry + p]
            target = at + positions[p]
            for m in range(widths[p]):
                host[target + m] = data[source + np.uint64(m)]


def _loop_of(executable: Executable, step: int) -> tuple[Loop, int] | None:
    """The counted loop whose body holds leaf ``step`` directly, and its position there."""
    for block in executable_blocks(executable):
        for item in block.items:
            if isinstance(item, Loop):
                for position, leaf in enumerate(item.body.items):
                    if getattr(leaf, "step", None) == step and isinstance(leaf, ExecuteStep):
                        return item, position
    return None


def _variables(operand: Operand) -> frozenset[int]:
    return frozenset(v.index for v in operand.tensor.variables())


def _one_row_windows(vertices: list[LoweredVertex], window_field: str) -> bool:
    """Whether float slice / update ``vertices`` each move one row of a ``[rows, columns]`` base,
    all at one single-element offset, over the same number of rows: a time step's window."""
    offset = vertices[0].fields["offset"]
    rows = vertices[0].fields["base"].shape[0]
    return offset.index.size == 1 and all(
        len(v.fields["base"].shape) == 2 and v.fields[window_field].shape[0] == 1
        and v.fields["base"].shape[0] == rows and v.fields["base"].dtype is FLOAT
        and np.array_equal(v.fields["offset"].index, offset.index) for v in vertices)


def _feeding_slices(executable: Executable, body: list, position: int, a: Operand
                    ) -> list[LoweredVertex] | None:
    """The one-row, one-offset slice vertices of an earlier step of ``body`` whose windows are
    ``a``'s variables, if the steps from there to ``position`` leave ``a`` as they wrote it."""
    mine = _variables(a)
    for back in range(position - 1, -1, -1):
        item = body[back]
        if not isinstance(item, (ExecuteStep, CopyStep)):
            return None
        writes = executable.step_writes[item.step]
        slices = [v for v in item.vertices if v.kind == "DynamicSlice"
                  and _variables(v.fields["out"]) & mine] if isinstance(item, ExecuteStep) else []
        if not slices:
            if writes & mine:
                return None
            continue
        if any(v.kind != "DynamicSlice" for v in item.vertices):
            return None  # only slices (of this sequence or others) may write in that step
        offset = slices[0].fields["offset"]
        sequence = frozenset().union(*(_variables(v.fields["base"]) for v in slices))
        between = frozenset().union(*(executable.step_writes[body[k].step]
                                      for k in range(back + 1, position)))
        if not _one_row_windows(slices, "out") or between & (mine | _variables(offset) | sequence):
            return None
        return slices
    return None


def _row_pieces(vertices: list[LoweredVertex], window_field: str, operand: Operand
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For one-row slice or update ``vertices`` over a sequence of ``[rows, columns]`` bases:
    the address of each piece of every sequence row (row after row), the pieces' widths, and
    where each piece starts in ``operand``'s element order — or None unless the vertices'
    windows are exactly ``operand``'s elements, each once."""
    index = operand.index.reshape(-1)
    windows, window_at = flat_indices([v.fields[window_field] for v in vertices])
    order = np.argsort(index, kind="stable")
    ordered = index[order]
    found = np.minimum(np.searchsorted(ordered, windows), len(ordered) - 1)
    if (len(windows) != len(index) or np.any(np.diff(ordered) == 0)
            or not np.array_equal(ordered[found], windows)):
        return None
    rows = vertices[0].fields["base"].shape[0]
    bases, base_at = flat_indices([v.fields["base"] for v in vertices])
    columns = np.array([v.fields["base"].shape[1] for v in vertices], np.int64)
    widths, width_start, base_pieces, base_start, positions, _ = piece_tables(
        bases, base_at, order[found].astype(np.int64), window_at,
        np.full(len(vertices), rows, np.int64), np.ones(len(vertices), np.int64), columns)
    return (rows_table(rows, base_pieces, base_start, width_start), widths,
            positions.astype(np.int64))


class SequenceProjection:
    """Rows of one step's product ``a @ b``, from a table over a chunk of the sequence's rows."""

    def __init__(self, producer: LoweredVertex, slices: list[LoweredVertex], trips: int,
                 executable: Executable, hooks: RunHooks) -> None:
        self.a = producer.fields["a"]
        _, self.M, self.K = self.a.shape
        self.N = producer.fields["b"].shape[2]
        self.slices = slices
        self.offset = slices[0].fields["offset"]
        self.rows = slices[0].fields["base"].shape[0]
        row_bytes = self.M * (self.K + self.N) * 4
        self.chunk = max(1, min(trips, self.rows, TABLE_BYTES // row_bytes))
        watched = _variables(producer.fields["b"]).union(
            *(_variables(v.fields["base"]) for v in slices))
        self.writers = np.array([s for s, written in enumerate(executable.step_writes)
                                 if written & watched], dtype=np.int64)
        self.step_counts = hooks.step_counts
        self.pieces: tuple | None = None  # built on first use: engines that never run pay nothing
        self.gathered = self.table = np.empty(0, np.float32)
        self.usable = True
        self.version: tuple | None = None
        self.first = self.count = self.served = 0
        hooks.after_run.append(self._forget)

    def _forget(self, memory: DeviceMemory) -> None:
        self.version = None

    def rows_at(self, memory: DeviceMemory, b: np.ndarray) -> np.ndarray | None:
        """This step's ``[1, M, N]`` product, with ``b`` the current weights; None if the step
        must take its own."""
        if not self.usable:
            return None
        t = int(memory.view(self.offset.dtype)[self.offset.index.reshape(-1)[0]])
        if not 0 <= t < self.rows:
            return None
        version = (id(memory), memory.host_writes, int(self.step_counts[self.writers].sum()))
        if version != self.version or not self.first <= t < self.first + self.count:
            if not self._refill(memory, b, t, version):
                return None
        self.served += 1
        return self.table[t - self.first:t - self.first + 1]

    def _refill(self, memory: DeviceMemory, b: np.ndarray, t: int, version: tuple) -> bool:
        if self.version is not None and 2 * self.served < self.count:
            self.usable = False  # tables go stale before they are used: not worth taking
            return False
        if self.pieces is None:
            self.pieces = _row_pieces(self.slices, "out", self.a)
            if self.pieces is None:
                self.usable = False
                return False
            self.gathered = np.empty((self.chunk, self.M, self.K), np.float32)
            self.table = np.empty((self.chunk, self.M, self.N), np.float32)
        descending = self.version is not None and t == self.first - 1
        first = max(0, t - self.chunk + 1) if descending else min(t, self.rows - self.chunk)
        _gather_rows(memory.view(FLOAT), *self.pieces, first, self.chunk, self.M * self.K,
                     self.gathered.reshape(-1))
        np.matmul(self.gathered, b[0], out=self.table)  # one product per step: its own bits
        self.version, self.first, self.count, self.served = version, first, self.chunk, 0
        return True


def sequence_projection(executable: Executable, hooks: RunHooks, step: int,
                        producer: LoweredVertex) -> SequenceProjection | None:
    """A table for the fused product ``producer`` (of leaf ``step``) if its ``a`` is a slice of a
    sequence (see the module doc), else None."""
    a, b = producer.fields["a"], producer.fields["b"]
    if a.shape[0] != 1 or a.dtype is not FLOAT or b.dtype is not FLOAT:
        return None
    found = _loop_of(executable, step)
    if found is None or found[0].count < MIN_TRIPS:
        return None
    loop, position = found
    slices = _feeding_slices(executable, list(loop.body.items), position, a)
    if slices is None or math.prod(a.shape) == 0:
        return None
    return SequenceProjection(producer, slices, loop.count, executable, hooks)


# ---- products stored into a sequence ----------------------------------------------------------
# The backward pass's input gradient is the mirror image: each step multiplies its gate gradients
# by the input weights and stores the product into the input-gradient sequence at the counter
# (``DynamicUpdate``), and nothing else ever reads the product.  So the numba backend keeps each
# step's ``a`` (as the definition reads it, at its step) and where the update step would put the
# product, and multiplies a stack of steps back to back before anything else can see the
# sequence: before a step that touches it, when the stack is full, when the weights change and
# when the run ends.  Each product is still its step's own BLAS call (same bits); the product's
# own tile buffer is left as it was, which nothing can observe (its only reader is the update,
# emulated here; the memory plan may give its bytes to others at other times, so writing it
# late could only do harm).
STACK_BYTES = 4 << 20
"""At most this many bytes of stacked ``a`` operands and their products per stored product."""


@njit(cache=True, nogil=True)
def _scatter_rows(data, row_pieces, widths, positions, rows, row_size,
                  host):  # pragma: no cover (compiled)
    """Slot ``i`` of ``host`` (in the operand's element order) into sequence row ``rows[i]``,
    slot after slot, so a row stored twice keeps the later; slots with row -1 store nothing."""
    pieces = widths.shape[0]
    for i in range(rows.shape[0]):
        if rows[i] < 0:
            continue
        entry = rows[i] * pieces
        at = i * row_size
        for p in range(pieces):
            target = row_pieces[entry + p]
            source = at + positions[p]
            for m in range(widths[p]):
                data[target + np.uint64(m)] = host[source + m]


class StoredProducts:
    """Fused products ``a @ b`` whose only reader is one-row update vertices storing them into a
    sequence, taken for a stack of steps at once (see above).  ``operands`` is the pair's gathered
    ``a`` and ``b`` (``moves``: transfer, unchanged check and host array of each)."""

    def __init__(self, operands, updates: list[LoweredVertex], pieces: tuple,
                 touching: list[int], hooks: RunHooks) -> None:
        self.operands = operands
        self.offset = updates[0].fields["offset"]
        self.sequence_rows = updates[0].fields["base"].shape[0]
        self.pieces = pieces
        _, M, K = operands.a.shape
        N = operands.b.shape[2]
        depth = max(1, STACK_BYTES // (M * (K + N) * 4))
        self.a = np.empty((depth, M, K), np.float32)
        self.products = np.empty((depth, M, N), np.float32)
        self.rows = np.full(depth, -1, np.int64)
        self.count = 0
        for step in touching:
            hooks.before_step.setdefault(step, []).append(self.flush)
        hooks.after_run.append(self.flush)

    def partials(self, memory: DeviceMemory) -> None:
        """The product's step: its ``a`` as it is now joins the stack; weights that changed since
        the stack began multiply out the stack first, with the weights it was stacked under."""
        a_transfer = self.operands.moves[0][0]
        b_transfer, b_unchanged, b = self.operands.moves[1]
        if not b_unchanged(memory):
            self.flush(memory)
            b_transfer.read(memory, b)
        if self.count == len(self.a):
            self.flush(memory)
        a_transfer.read(memory, self.a[self.count])
        self.rows[self.count] = -1
        self.count += 1

    def store(self, memory: DeviceMemory) -> None:
        """The update step: the row this step's product goes to (none if out of range)."""
        t = int(memory.view(self.offset.dtype)[self.offset.index.reshape(-1)[0]])
        self.rows[self.count - 1] = t if 0 <= t < self.sequence_rows else -1

    def flush(self, memory: DeviceMemory) -> None:
        """Every stacked product into its row, in step order; the stack is emptied."""
        n, self.count = self.count, 0
        if n:
            np.matmul(self.a[:n], self.operands.b[0], out=self.products[:n])
            _scatter_rows(memory.view(FLOAT), *self.pieces, self.rows[:n],
                          self.products[0].size, self.products.reshape(-1))


def _body_position(body: list, step: int) -> int | None:
    return next((k for k, item in enumerate(body) if getattr(item, "step", None) == step), None)


def stored_products(executable: Executable, hooks: RunHooks, producer: tuple[LoweredVertex, int],
                    consumer: tuple[LoweredVertex, int], operands) -> dict | None:
    """The callables of a fused (partials, reduction) pair, each with its leaf's step, whose
    product only a later update step of the same loop body reads — stored by a
    :class:`StoredProducts` (the update step's vertices' callables included) — else None."""
    (partials, p_step), (reduction, r_step) = producer, consumer
    out, a = reduction.fields["out"], partials.fields["a"]
    if (reduction.kind != "MatMulReduce" or out.dtype is not FLOAT or a.shape[0] != 1
            or a.dtype is not FLOAT or partials.fields["b"].dtype is not FLOAT):
        return None
    found = _loop_of(executable, p_step)
    if found is None or found[0].count < MIN_TRIPS:
        return None
    body = list(found[0].body.items)
    mine = _variables(out)
    readers = [s for s, read in enumerate(executable.step_reads) if read & mine]
    writers = [s for s, written in enumerate(executable.step_writes) if written & mine]
    host = list(executable.host_reads.values()) + list(executable.host_writes.values())
    if writers != [r_step] or len(readers) != 1 or any(_variables(op) & mine for op in host):
        return None
    p_at = found[1]
    r_at, u_at = (_body_position(body, s) for s in (r_step, readers[0]))
    if None in (r_at, u_at) or not p_at < r_at < u_at:
        return None
    updates = list(body[u_at].vertices)
    if any(v.kind != "DynamicUpdate" for v in updates) or not _one_row_windows(updates, "update"):
        return None
    sequence = frozenset().union(*(_variables(v.fields["base"]) for v in updates))
    touches = [r | w for r, w in zip(executable.step_reads, executable.step_writes)]
    if any(touches[body[k].step] & sequence for k in range(p_at + 1, u_at)):
        return None  # a step between would see the sequence before the product is stored
    touching = [s for s, used in enumerate(touches) if used & sequence and s != readers[0]]
    if any(not isinstance(executable.leaves[s], (ExecuteStep, CopyStep, MarkStep))
           for s in touching):
        return None  # a print or a predicate reads it with no chance to write the stack out
    pieces = _row_pieces(updates, "update", out)
    if pieces is None:
        return None
    stored = StoredProducts(operands, updates, pieces, touching, hooks)
    prepared = {id(partials): stored.partials, id(reduction): None, id(updates[0]): stored.store}
    prepared.update((id(v), None) for v in updates[1:])
    return prepared
