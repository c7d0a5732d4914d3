"""Matmul codelets (``MatMulPartials``, ``MatMulReduce``, ``MatMulReduceAcc``) on both engines, with
their cycle and exchange estimates.

Both engines run all the blocks of a vertex together — never a Python call per tile.

numpy (the definition): for each sub-grid of equally shaped blocks, gather every tile's ``a`` and
``b`` blocks through precomputed index arrays and multiply all blocks in one batched
``numpy.matmul``; scatter the partials to their tiles.  The reduction gathers the partials, sums over the k blocks and
writes the output.

numba (the fast path): the partials of k block ``ik`` on all tiles together form the product of
A's columns and B's rows of that k block, so the engine gathers A and B once from tile memory
(runs of consecutive addresses copied by compiled loops), computes every k block's partials with
one BLAS call per block (:mod:`gruc.runtime.blas`: MKL where installed, else ``numpy.matmul``
over ``[g, Pk]``), and scatters them to their tiles — the same sums as the definition, at BLAS
speed.  Half data is moved as raw 16-bit words
and converted by numpy, since numba cannot load float16.  When the executable shows that a step's
float partials are read only by the reduction in the very next step, the two are fused
(:func:`_prepare_partials`): one BLAS call over all of k, the output written directly, the
partials never scattered nor gathered.  An operand that provably did not change since the step
last gathered it (the weights, in an RNN loop) is not gathered again, nor, with MKL, packed again
for BLAS (:class:`~gruc.runtime.blas.WeightsProduct`); one that another product step gathered
since it last changed is copied from that step's host array
(:class:`~gruc.runtime.transfer.SharedRead`).
A weight-gradient accumulator (``MatMulReduceAcc`` in a loop) is kept on the host between steps
and takes its per-step products in stacks: one product over the k of many steps, at full BLAS
rate (see ``_kept_accumulation``).

Estimates: a tile's partial products cost what poplin's vertex for them costs (the AMP's
``ConvPartial1x1Out`` or horizontal MACs, :mod:`gruc.ir.codelets.conv_costs`); a reduction stage
what poplin's ``ReduceAdd`` costs for the tile's outputs and partials (a cast when there is one
partial of another type).  Exchange: every element of a tile's ``a`` and ``b``
blocks that lives on another tile is received by it (once per tile that uses it); every partial
that is not on its output element's tile is received there, and a ``scale`` tensor goes to every
output tile.
"""

from __future__ import annotations

import itertools
from functools import partial
from typing import Callable

import numpy as np

from gruc.ir.codelets.conv_costs import (amp_partials_cycles, cast_cycles, mac_partials_cycles,
                                         reduce_add_cycles)
from gruc.ir.codelets.matmul import (FIELD_N, Blocking, block_tiles, block_view, blocking_of,
                                     method_of)
from gruc.ir.graph import Graph, Vertex
from gruc.runtime.cost import Traffic, cycle_estimator, exchange_estimator
from gruc.runtime.blas import Product, WeightsProduct, library_name
from gruc.runtime.interp import Prepared, RunHooks, numpy_vertex
from gruc.runtime.kernels import HostCopies, Unchanged, numba_executable_hook, numba_vertex
from gruc.runtime.lower import (Block, Branch, CopyStep, DeviceMemory, Executable, ExecuteStep,
                                Loop, LoweredVertex, Operand, PrintStep, WhileLoop, aligned_array)
from gruc.runtime.transfer import SharedRead, Transfer
from gruc.target import Target
from gruc.types import FLOAT, HALF

F32 = np.float32


# ---- numpy: the definition --------------------------------------------------------------------
@numpy_vertex("MatMulPartials")
def _numpy_partials(vertex: LoweredVertex) -> Prepared:
    """The definition of ``MatMulPartials``: each tile's ``a`` and ``b`` blocks gathered from tile
    memory, multiplied in float32 and rounded once into its ``partials`` block."""
    a, b, p = (vertex.fields[name] for name in ("a", "b", "partials"))
    geometry = blocking_of(vertex.vertex)
    G, M, K, N = geometry.shape
    a3, b3 = a.index.reshape(G, M, K), b.index.reshape(G, K, N)
    p4 = p.index.reshape(geometry.partials_shape)
    work = []
    for pg, pk, pm, pn in geometry.parts():
        # operand blocks [cg, c., c., gb, rows, cols] as seen by every tile [cg, ck, cm, cn, ...]
        a_blocks = block_view(a3, (pg, pm, pk)).transpose(0, 2, 1, 3, 4, 5)[:, :, :, None]
        b_blocks = block_view(b3, (pg, pk, pn))[:, :, None]
        p_blocks = block_view(p4, (pg, pk.in_blocks(), pm, pn))[..., 0, :, :]
        work.append((a_blocks, b_blocks, p_blocks))
    p_type = p.dtype.storage

    def run(memory: DeviceMemory) -> None:
        va, vb, vp = (memory.view(op.dtype) for op in (a, b, p))
        for a_blocks, b_blocks, p_blocks in work:
            product = np.matmul(va[a_blocks].astype(F32), vb[b_blocks].astype(F32))
            vp[p_blocks] = product.astype(p_type)

    return run


def _reduce_parts(vertex: LoweredVertex) -> tuple[Operand, Operand, Operand | None, float]:
    scale = vertex.fields.get("scale")
    return vertex.fields["out"], vertex.fields["partials"], scale, float(vertex.params.get("k", 1))


def _factor(memory: DeviceMemory, scale: Operand | None, k: float) -> np.float32:
    """``k * scale[0]`` in float32 (the scale tensor read at run time)."""
    if scale is None:
        return F32(k)
    return F32(k) * F32(memory.view(scale.dtype)[scale.index[0]])


@numpy_vertex("MatMulReduce")
@numpy_vertex("MatMulReduceAcc")
def _numpy_reduce(vertex: LoweredVertex) -> Prepared:
    """The definition of ``MatMulReduce`` and ``MatMulReduceAcc``: the ``Pk`` partials of each
    output summed in float32; the Acc kind adds ``k * scale[0]`` times the sum to the output, also
    in float32, and either rounds once into the output's type."""
    out, p, scale, k = _reduce_parts(vertex)
    accumulate = vertex.kind == "MatMulReduceAcc"
    shape = p.shape

    def run(memory: DeviceMemory) -> None:
        partials = memory.view(p.dtype)[p.index].reshape(shape).astype(F32)
        total = partials.sum(axis=1, dtype=F32).reshape(-1)
        view = memory.view(out.dtype)
        if accumulate:
            total = view[out.index].astype(F32) + _factor(memory, scale, k) * total
        view[out.index] = total.astype(out.dtype.storage)

    return run


# ---- numba: grouped BLAS over tile memory ----------------------------------------------------
class _Operands:
    """A partials vertex's ``a`` and ``b`` read into host arrays (``SharedRead``), each read
    again only if it may have changed since the last step read it
    (:class:`~gruc.runtime.kernels.Unchanged`)."""

    def __init__(self, vertex: LoweredVertex, step: int, executable: Executable,
                 step_counts: np.ndarray, copies: HostCopies) -> None:
        G, M, K, N = blocking_of(vertex.vertex).shape
        self.a, self.b = aligned_array((G, M, K), F32), aligned_array((G, K, N), F32)
        self.moves = [(SharedRead(vertex.fields[name], copies, offer=True),
                       Unchanged(vertex.fields[name], executable, step_counts, step), host)
                      for name, host in (("a", self.a), ("b", self.b))]

    def gather(self, memory: DeviceMemory) -> bool:
        """Both operands as they are now; True if ``b`` was read again (it may have changed)."""
        a_move, b_move = self.moves
        self._move(memory, *a_move)
        return self._move(memory, *b_move)

    @staticmethod
    def _move(memory: DeviceMemory, read: SharedRead, unchanged: Unchanged,
              host: np.ndarray) -> bool:
        """Reads one operand into ``host`` unless it is unchanged; True if it was read."""
        if unchanged(memory):
            return False
        read(memory, host)
        return True


def _partials(vertex: LoweredVertex, operands: _Operands) -> Prepared:
    """The partials of every k block, one batched BLAS call per block size, scattered to tiles."""
    geometry = blocking_of(vertex.vertex)
    G, M, K, N = geometry.shape
    p_out = Transfer(vertex.fields["partials"])
    a, b = operands.a, operands.b
    partials = np.empty(geometry.partials_shape, F32)
    library = library_name()
    products = []
    for part in geometry.k.parts():  # one batched product per k block size
        end = part.start + part.count * part.size
        products.append(Product(a[:, :, part.start:end].reshape(G, M, part.count, part.size)
                                .transpose(0, 2, 1, 3),
                                b[:, part.start:end].reshape(G, part.count, part.size, N),
                                partials[:, part.first:part.first + part.count], library))

    def run(memory: DeviceMemory) -> None:
        operands.gather(memory)
        for product in products:
            product()
        p_out.write(memory, partials)

    return run


@numba_vertex("MatMulReduce")
@numba_vertex("MatMulReduceAcc")
def _numba_reduce(vertex: LoweredVertex) -> Prepared:
    """Float partials are added straight from tile memory into the output's host copy (no
    ``[G, Pk, M, N]`` buffer); half partials are read as words, converted, then summed."""
    out, p, scale, k = _reduce_parts(vertex)
    accumulate = vertex.kind == "MatMulReduceAcc"
    G, Pk, M, N = p.shape
    o_io = Transfer(out)
    total = aligned_array((G, M, N), F32)
    current = aligned_array(total.shape, F32) if accumulate else None
    if p.dtype is HALF:
        p_in, partials = Transfer(p), aligned_array(p.shape, F32)
    else:
        flat = np.arange(G * Pk * M * N, dtype=np.int64)
        p_in = Transfer(p, positions=flat // (Pk * M * N) * (M * N) + flat % (M * N))

    def run(memory: DeviceMemory) -> None:
        if p.dtype is HALF:
            p_in.read(memory, partials)
            np.sum(partials, axis=1, out=total)
        else:
            total.fill(0)
            p_in.add(memory, total)
        if accumulate:
            o_io.read(memory, current)
            np.multiply(total, _factor(memory, scale, k), out=total)
            np.add(current, total, out=current)
            o_io.write(memory, current)
        else:
            o_io.write(memory, total)

    return run


# ---- numba: a partials step and its reduction fused into one product ------------------------
# The float partials of a k-split product are a temporary whose only reader is the reduction in the
# next step.  When the executable shows exactly that, the partials vertex computes the whole
# product with one BLAS call over all of k (float32; only the summation order differs from the
# definition) into a host buffer, and the reduction writes it to the output: the partials are
# neither scattered to tile memory nor gathered back.  The partials' tile memory is left as it
# was, which nothing can observe (checked below, by variable: the memory plan may give the
# partials' addresses to other tensors at other times, and those are written before being read).
def _blocks(executable: Executable):
    """Every Block of the executable's programs and functions, nested ones included."""
    stack = list(executable.programs) + list(executable.functions)
    while stack:
        item = stack.pop()
        if isinstance(item, Block):
            yield item
            stack.extend(item.items)
        elif isinstance(item, Loop):
            stack.append(item.body)
        elif isinstance(item, WhileLoop):
            stack.extend((item.condition, item.body))
        elif isinstance(item, Branch):
            stack.extend((item.then, item.otherwise))


def _predicates(executable: Executable) -> list[Operand]:
    found = []
    for block in _blocks(executable):
        found.extend(item.predicate for item in block.items
                     if isinstance(item, (WhileLoop, Branch)))
    return found


def _field_tensors(vertex: LoweredVertex, skip: str | None = None):
    for name, value in vertex.vertex.fields.items():
        if name != skip:
            yield from (value if isinstance(value, tuple) else (value,))


def _fusible_pairs(executable: Executable) -> list[tuple[LoweredVertex, LoweredVertex]]:
    """(partials, reduce) vertex pairs whose float partials only that reduce, in the step right
    after the partials' step of the same block, ever reads."""
    candidates = []
    for block in _blocks(executable):
        for first, second in zip(block.items, block.items[1:]):
            if not (isinstance(first, ExecuteStep) and isinstance(second, ExecuteStep)):
                continue
            for producer in first.vertices:
                if producer.kind != "MatMulPartials":
                    continue
                p = producer.fields["partials"]
                if p.dtype is not FLOAT:
                    continue  # half partials are rounded before the sum: keep the definition
                for consumer in second.vertices:
                    q = consumer.fields.get("partials") if consumer.kind in (
                        "MatMulReduce", "MatMulReduceAcc") else None
                    if (q is not None and q.dtype is p.dtype and q.shape == p.shape
                            and np.array_equal(q.index, p.index)):
                        candidates.append((producer, consumer))
                        break
    if not candidates:
        return []
    # who refers to which variable, over every vertex of every step
    users: dict[int, set[int]] = {}
    for leaf in executable.leaves:
        if isinstance(leaf, ExecuteStep):
            for vertex in leaf.vertices:
                for tensor in _field_tensors(vertex):
                    for variable in tensor.variables():
                        users.setdefault(id(variable), set()).add(id(vertex))
    # variables read other than by vertices (copies, prints, predicates, host reads)
    others = [leaf.src for leaf in executable.leaves if isinstance(leaf, CopyStep)]
    others += [leaf.operand for leaf in executable.leaves if isinstance(leaf, PrintStep)]
    others += _predicates(executable) + list(executable.host_reads.values())
    read_elsewhere = {id(v) for operand in others for v in operand.tensor.variables()}
    pairs, taken = [], set()
    for producer, consumer in candidates:
        if id(producer) in taken or id(consumer) in taken:
            continue
        variables = producer.vertex.fields["partials"].variables()
        if any(v.is_constant for v in variables):
            continue
        mine = {id(v) for v in variables}
        if any(id(v) in mine for t in _field_tensors(producer, "partials") for v in t.variables()):
            continue
        if any(id(v) in mine for t in _field_tensors(consumer, "partials") for v in t.variables()):
            continue
        if mine & read_elsewhere:
            continue  # a copy, print, predicate or host read sees the partials
        taken.update((id(producer), id(consumer)))
        pairs.append((producer, consumer))
    # A partials variable may be shared by several pairs (each time shard's loop has its own pair
    # over the same scratch), so long as every vertex that uses it is in a fused pair: each
    # reduction reads exactly what its own partials step wrote, and nothing else reads it.
    while True:
        fused = {id(vertex) for pair in pairs for vertex in pair}
        kept = [(producer, consumer) for producer, consumer in pairs
                if not any(users.get(id(v), set()) - fused
                           for v in producer.vertex.fields["partials"].variables())]
        if len(kept) == len(pairs):
            return pairs
        pairs = kept


def _fused_product(operands: _Operands, product: np.ndarray) -> Prepared:
    """The partials vertex's replacement: ``product`` = the whole ``[G, M, N]`` product (``b``,
    the weights in a loop, packed once for as long as it does not change)."""
    weights_product = WeightsProduct(operands.a, operands.b, product)

    def run(memory: DeviceMemory) -> None:
        weights_product(b_changed=operands.gather(memory))

    return run


def _fused_reduce(consumer: LoweredVertex, product: np.ndarray) -> Prepared:
    """The reduction's replacement: the output (scaled and accumulated for ``MatMulReduceAcc``)
    from ``product``, the sum over k already taken."""
    out, _, scale, k = _reduce_parts(consumer)
    o_io = Transfer(out)
    if consumer.kind != "MatMulReduceAcc":
        return lambda memory: o_io.write(memory, product)
    if out.dtype is FLOAT:
        return lambda memory: o_io.add_scaled(memory, product, _factor(memory, scale, k))
    current = aligned_array(product.shape, F32)
    total = aligned_array(product.shape, F32)

    def run(memory: DeviceMemory) -> None:
        o_io.read(memory, current)
        np.multiply(product, _factor(memory, scale, k), out=total)
        np.add(current, total, out=current)
        o_io.write(memory, current)

    return run


# A weight-gradient accumulator (``MatMulReduceAcc``) is read, added to and written back on every
# step of the loop that owns it: a scattered read-modify-write of the whole weight shape in tile
# memory, per step.  When only Execute and Copy steps touch it besides, the kernel keeps its value
# on the host instead — loaded when tile memory may have changed (:class:`Unchanged`), added to in
# float32 — and writes it back before any other step touches its variables and when the program
# ends.  Writing back while the variable is dead can only land on bytes no live variable holds:
# the planner never shares a live variable's bytes.
#
# Nothing reads a kept accumulator between write-backs, so its products need not be taken one step
# at a time either.  A weight gradient's product is a thin one — the batch (32, 64) is its k — on
# which BLAS runs at half its rate.  The operands are gathered at their step (the values the
# definition multiplies) and stacked; the products of up to :data:`DEFERRED_DEPTH` k-elements
# worth of steps are then taken as one product over the joined k, before a write-back or when the
# stack is full: the same sum of products in another order, at full BLAS speed.
DEFERRED_DEPTH = 1024
"""The k extent (steps x the product's k) at which stacked products are multiplied out."""
DEFERRED_BYTES = 64 << 20
"""At most this many bytes of stacked operands per kept accumulator."""


def _transposed_reader(operand: Operand, G: int, M: int, K: int
                       ) -> Callable[[DeviceMemory, np.ndarray], None]:
    """Reads a ``[G, M, K]`` operand into a host ``[G, K, M]`` array (its blocks transposed).

    A weight gradient's ``a`` is the transpose of a step's activations, so in tile memory it runs
    along ``M``: read straight into the transposed layout, its runs stay runs.  An operand laid
    out the other way is read in its own order and transposed on the host."""
    transposed = np.arange(G * K * M, dtype=np.int64).reshape(G, K, M).transpose(0, 2, 1)
    across = Transfer(operand, transposed.reshape(-1), host_order=True)
    along = Transfer(operand)
    if len(across.lengths) <= len(along.lengths):
        return across.read
    scratch = aligned_array((G, M, K), F32)

    def read(memory: DeviceMemory, into: np.ndarray) -> None:
        along.read(memory, scratch)
        np.copyto(into, scratch.transpose(0, 2, 1))

    return read


class _DeferredProducts:
    """The ``a`` and ``b`` of partials vertices of one shape over successive steps, multiplied out
    together.  ``a`` is stacked transposed (``[steps, G, K, M]``) like ``b`` (``[steps, G, K,
    N]``): the steps then join along k with no copy, and BLAS takes the joined ``a`` transposed."""

    def __init__(self, shape: tuple[int, int, int, int]) -> None:
        G, M, K, N = self.shape = shape
        step_bytes = G * (M * K + K * N) * F32().itemsize
        depth = max(1, min(-(-DEFERRED_DEPTH // K), DEFERRED_BYTES // step_bytes))
        self.a, self.b = aligned_array((depth, G, K, M), F32), aligned_array((depth, G, K, N), F32)
        self.joined_a = aligned_array((G, depth, K, M), F32) if G > 1 else None
        self.joined_b = aligned_array((G, depth, K, N), F32) if G > 1 else None
        self.product = aligned_array((G, M, N), F32)
        self.count = 0
        self.library = library_name()

    def readers(self, producer: LoweredVertex, copies: HostCopies) -> dict[str, Callable]:
        """The ``gather`` keywords reading a partials vertex's operands into the stacks (a slot
        of a stack is overwritten later: it is not offered to other readers)."""
        G, M, K, _ = self.shape
        return {"a_in": _transposed_reader(producer.fields["a"], G, M, K),
                "b_in": SharedRead(producer.fields["b"], copies, offer=False)}

    def gather(self, memory: DeviceMemory, a_in: Callable, b_in: Callable) -> None:
        """A partials step: its operands, as they are now."""
        a_in(memory, self.a[self.count])
        b_in(memory, self.b[self.count])

    def commit(self, factor: np.float32) -> bool:
        """The reduction step: this step's product counts ``factor`` times; True when full."""
        if factor != 1:
            np.multiply(self.b[self.count], factor, out=self.b[self.count])
        self.count += 1
        return self.count == len(self.a)

    def _joined(self, stack: np.ndarray, joined: np.ndarray | None) -> np.ndarray:
        """The first ``count`` steps of a stack as ``[G, count * K, columns]``."""
        n, (_, G, K, _) = self.count, stack.shape
        if joined is None:  # one group: the steps are already consecutive
            return stack[:n].reshape(1, n * K, -1)
        joined[:, :n] = stack[:n].transpose(1, 0, 2, 3)
        return joined.reshape(G, -1, joined.shape[-1])[:, :n * K]

    def add_to(self, kept: np.ndarray) -> None:
        """``kept`` += every stacked product; the stack is emptied."""
        if self.count == 0:
            return
        a = self._joined(self.a, self.joined_a).transpose(0, 2, 1)
        Product(a, self._joined(self.b, self.joined_b), self.product, self.library)()
        np.add(kept, self.product, out=kept)
        self.count = 0


_Pair = tuple[LoweredVertex, LoweredVertex, int]
"""A fused (partials, accumulating reduction) pair and the reduction's step."""


def _same_accumulator(pairs: list[_Pair]) -> list[list[_Pair]]:
    """``pairs`` grouped by the bytes they accumulate into and their product's shape.

    One weight gradient is accumulated by as many loops as the time sequence has shards; they
    share one host copy and one stack, so the products are joined in the same groups, and the
    result has the same bits, however the sequence is split."""
    groups: list[list[_Pair]] = []
    for pair in pairs:
        out, shape = _reduce_parts(pair[1])[0], blocking_of(pair[0].vertex).shape
        for group in groups:
            first = _reduce_parts(group[0][1])[0]
            if (blocking_of(group[0][0].vertex).shape == shape and first.shape == out.shape
                    and np.array_equal(first.index, out.index)):
                group.append(pair)
                break
        else:
            groups.append([pair])
    return groups


def _kept_accumulation(members: list[_Pair], executable: Executable, hooks: RunHooks,
                       copies: HostCopies) -> dict[int, Prepared]:
    """The partials and reduction callables of the ``members`` (accumulating into the same
    bytes), kept on the host between write-backs; empty if they cannot be kept."""
    out = _reduce_parts(members[0][1])[0]
    if out.dtype is not FLOAT:
        return {}
    variables = frozenset(v.index for v in out.tensor.variables())
    steps = frozenset(step for _, _, step in members)
    touching = [s for s, (read, written) in enumerate(zip(executable.step_reads,
                                                          executable.step_writes))
                if s not in steps and (read | written) & variables]
    if any(not isinstance(executable.leaves[s], (ExecuteStep, CopyStep)) for s in touching):
        return {}
    o_io = Transfer(out)
    unchanged = Unchanged(out, executable, hooks.step_counts, members[0][2], kept_by=steps)
    deferred = _DeferredProducts(blocking_of(members[0][0].vertex).shape)
    kept = np.empty_like(deferred.product)
    dirty = [False]

    def write_back(memory: DeviceMemory) -> None:
        if dirty[0]:
            deferred.add_to(kept)
            o_io.write(memory, kept)
            dirty[0] = False

    def reduction(consumer: LoweredVertex) -> Prepared:
        _, _, scale, k = _reduce_parts(consumer)

        def run(memory: DeviceMemory) -> None:
            if not unchanged(memory):  # nothing is stacked: a write-back preceded the change
                o_io.read(memory, kept)
            if deferred.commit(_factor(memory, scale, k)):
                deferred.add_to(kept)
            dirty[0] = True
        return run

    for other in touching:
        hooks.before_step.setdefault(other, []).append(write_back)
    hooks.after_run.append(write_back)
    prepared: dict[int, Prepared] = {}
    for producer, consumer, _ in members:
        prepared[id(producer)] = partial(deferred.gather, **deferred.readers(producer, copies))
        prepared[id(consumer)] = reduction(consumer)
    return prepared


@numba_executable_hook
def _prepare_partials(executable: Executable, hooks: RunHooks) -> dict[int, Prepared]:
    """Every partials vertex, fused with its reduction where :func:`_fusible_pairs` allows."""
    pairs = _fusible_pairs(executable)
    fused = {id(producer): consumer for producer, consumer in pairs}
    steps = {id(v): leaf.step for leaf in executable.leaves if isinstance(leaf, ExecuteStep)
             for v in leaf.vertices}
    accumulating = [(producer, consumer, steps[id(consumer)]) for producer, consumer in pairs
                    if consumer.kind == "MatMulReduceAcc"]
    prepared: dict[int, Prepared] = {}
    copies = HostCopies(executable, hooks.step_counts)
    for members in _same_accumulator(accumulating):
        prepared.update(_kept_accumulation(members, executable, hooks, copies))
    for leaf in executable.leaves:
        if not isinstance(leaf, ExecuteStep):
            continue
        for vertex in leaf.vertices:
            if vertex.kind != "MatMulPartials" or id(vertex) in prepared:
                continue
            consumer = fused.get(id(vertex))
            operands = _Operands(vertex, leaf.step, executable, hooks.step_counts, copies)
            if consumer is None:
                prepared[id(vertex)] = _partials(vertex, operands)
                continue
            G, M, _, N = blocking_of(vertex.vertex).shape
            product = aligned_array((G, M, N), F32)
            prepared[id(vertex)] = _fused_product(operands, product)
            prepared[id(consumer)] = _fused_reduce(consumer, product)
    return prepared


# ---- cycles and exchange ----------------------------------------------------------------------
@cycle_estimator("MatMulPartials")
def _partials_cycles(vertex: Vertex, elements: np.ndarray, target: Target) -> np.ndarray:
    """Per tile: poplin's estimate of its vertex for its block (field, channel groups)."""
    geometry = blocking_of(vertex)
    method = method_of(vertex)
    gb, kb, mb, nb = geometry.block_dims()
    field, out_chans = (nb, mb) if vertex.params["orientation"] == FIELD_N else (mb, nb)
    in_groups = -(-kb // method.in_chans_per_group)
    out_groups = -(-out_chans // method.partial_chans_per_group)
    float_acts = vertex.fields["a"].dtype is FLOAT
    float_partials = vertex.fields["partials"].dtype is FLOAT
    if method.kind == "AMP":
        cycles = amp_partials_cycles(field, in_groups, out_groups, gb, method, float_acts,
                                     float_partials,
                                     target.conv_unit_coeff_load_bytes_per_cycle // 2)
    else:
        cycles = mac_partials_cycles(field, in_groups, out_groups, gb, method, float_acts,
                                     float_partials)
    return np.bincount(block_tiles(vertex).reshape(-1), weights=cycles.reshape(-1),
                       minlength=target.num_tiles).astype(np.int64)


@cycle_estimator("MatMulReduce")
@cycle_estimator("MatMulReduceAcc")
def _reduce_cycles(vertex: Vertex, elements: np.ndarray, target: Target) -> np.ndarray:
    """Per tile: poplin's ``ReduceAdd`` of the tile's outputs over the partial rows (the Acc kind
    adds its output as one more row); one row of another type is a cast."""
    out, partials = vertex.fields["out"], vertex.fields["partials"]
    depth = partials.shape[1] + (vertex.kind.name == "MatMulReduceAcc")
    if depth == 1:
        return cast_cycles(elements, target.vector_width(partials.dtype),
                           target.vector_width(out.dtype))
    return reduce_add_cycles(elements, np.full_like(elements, depth), out.dtype is FLOAT,
                             partials.dtype is FLOAT)


def _operand_exchange(graph: Graph, tensor, tiles: np.ndarray, geometry: Blocking, letters: str,
                      traffic: Traffic) -> None:
    """Account an operand's blocks going to every tile that uses them.

    ``letters`` names the operand's axes (``"gmk"`` or ``"gkn"``); ``tiles`` is the block grid
    ``[Pg, Pk, Pm, Pn]``, whose axis missing from ``letters`` lists the users of a block.  Blocks
    lie on distinct tiles, so a tile receives each element of its blocks at most once.
    """
    axes = {"g": geometry.g, "k": geometry.k, "m": geometry.m, "n": geometry.n}
    (over,) = set(axes) - set(letters)
    order = ["gkmn".index(x) for x in letters] + ["gkmn".index(over)]
    shape = [axes[x].size for x in letters]
    element_tiles = graph.element_tiles(tensor).astype(np.int64).reshape(shape)
    element_ids = tensor.flat_ids().reshape(shape)
    size = tensor.dtype.size
    for parts in itertools.product(*(axes[x].parts() for x in letters)):
        blocks = block_view(element_tiles, parts)
        blocks = blocks.reshape(blocks.shape[:3] + (-1,))  # [c, c, c, elements of a block]
        ids = block_view(element_ids, parts).reshape(blocks.shape)
        select = [slice(None)] * 4
        for x, part in zip(letters, parts):
            select["gkmn".index(x)] = slice(part.first, part.first + part.count)
        users = tiles[tuple(select)].transpose(order)  # [c, c, c, users]
        wanted = np.zeros(blocks.shape, dtype=bool)  # needed by some tile but its own
        for u in range(users.shape[3]):
            receiver = np.broadcast_to(users[..., u:u + 1], blocks.shape)
            away = blocks != receiver
            traffic.receives(receiver[away], blocks[away], size)
            wanted |= away
        traffic.sends(blocks[wanted], size, ids[wanted])  # each element sent once


@exchange_estimator("MatMulPartials")
def _partials_exchange(vertex: Vertex, graph: Graph, traffic: Traffic) -> None:
    """What a ``MatMulPartials`` vertex moves: the ``a`` and ``b`` block elements a tile lacks."""
    geometry = blocking_of(vertex)
    tiles = block_tiles(vertex)
    _operand_exchange(graph, vertex.fields["a"], tiles, geometry, "gmk", traffic)
    _operand_exchange(graph, vertex.fields["b"], tiles, geometry, "gkn", traffic)


@exchange_estimator("MatMulReduce")
@exchange_estimator("MatMulReduceAcc")
def _reduce_exchange(vertex: Vertex, graph: Graph, traffic: Traffic) -> None:
    """What a matmul reduction moves: every partial not on its output element's tile, and the
    ``scale`` element to every other tile holding outputs."""
    out, partials = vertex.fields["out"], vertex.fields["partials"]
    home = graph.element_tiles(out).astype(np.int64).reshape(out.shape)
    where = graph.element_tiles(partials).astype(np.int64).reshape(partials.shape)
    home = np.broadcast_to(home[:, None], where.shape)
    away = where != home
    traffic.transfers(home[away], where[away], partials.dtype.size,
                      partials.flat_ids().reshape(where.shape)[away])
    scale = vertex.fields.get("scale")
    if scale is not None:
        source = int(graph.element_tiles(scale)[0])
        readers = np.unique(home)
        readers = readers[readers != source]
        traffic.transfers(readers, np.full_like(readers, source), scale.dtype.size,
                          np.full_like(readers, int(scale.flat_ids()[0])))
