"""The numba engine's fast paths across a product's steps: a partials step and the reduction
stages after it fused into one BLAS product, and a weight gradient accumulated on the host with
its products taken many steps at a time.

The IR keeps poplin's program — partial products written to tile memory, reduced in stages, a
``matMulAcc``'s product then added with ``scaledAddTo`` — so that memory and cycles are
Poplar's; these paths only change how the host computes the same values (the same float32
products, summed in another order), where the executable shows that nothing else could see the
difference.  Both are whole-executable hooks of the numba backend
(:func:`~gruc.runtime.kernels.numba_executable_hook`); the numpy engine runs the definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from gruc.ir.codelets.elementwise import MAP_IN_PLACE
from gruc.ir.codelets.matmul import (MATMUL_PARTIALS, MATMUL_REDUCE, MATMUL_REDUCE_ACC,
                                     blocking_of)
from gruc.ir.expr import Binary, BinaryOp, Const, PlaceHolder
from gruc.runtime.blas import Product, WeightsProduct, library_name
from gruc.runtime.codelets.matmul import F32, _factor, _Operands, _partials, _reduce_parts
from gruc.runtime.interp import Prepared, RunHooks
from gruc.runtime.kernels import HostCopies, Unchanged, numba_executable_hook
from gruc.runtime.lower import (Block, Branch, CopyStep, DeviceMemory, Executable, ExecuteStep,
                                Loop, LoweredVertex, Operand, PrintStep, WhileLoop, aligned_array)
from gruc.runtime.transfer import SharedRead, Transfer
from gruc.types import FLOAT


# ---- numba: a partials step and its reductions fused into one product -----------------------
# The float partials of a k-split product are a temporary whose only readers are the reduction
# stages in the next steps (each stage's rows read only by the next).  When the executable shows
# exactly that, the partials vertex computes the whole product with one BLAS call over all of k
# (float32; only the summation order differs from the definition) into a host buffer, the
# intermediate stages do nothing, and the last reduction writes the product to the output: the
# partials and the stages' rows are neither scattered to tile memory nor gathered back.  The partials' tile memory is left as it
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


_Chain = tuple[LoweredVertex, tuple[LoweredVertex, ...], LoweredVertex]
"""A partials vertex, the vertices of its intermediate reduction stages, and its last reduction
(which writes the product)."""


def _reductions_of(step: ExecuteStep, variables: set[int]) -> list[LoweredVertex]:
    """The reduction vertices of ``step`` that add float partials held in ``variables``."""
    found = []
    for vertex in step.vertices:
        q = vertex.fields.get("partials") if vertex.kind in (MATMUL_REDUCE,
                                                              MATMUL_REDUCE_ACC) else None
        if q is not None and q.dtype is FLOAT and {id(v) for v in q.tensor.variables()} \
                <= variables:
            found.append(vertex)
    return found


def _chain_from(items: list, at: int, producer: LoweredVertex, users: dict[int, set[int]]
                ) -> _Chain | None:
    """The reduction stages that follow ``producer`` (in ``items[at]``) step by step and add all
    of its partials, ending in one reduction of the whole product; None if there are none.  A
    stage is intermediate while every user of what it writes is a reduction of the next step."""
    G, M, _, N = blocking_of(producer.vertex).shape
    current = producer.fields["partials"]
    held = {id(v) for v in current.tensor.variables()}
    total = len(current.index)
    middle: list[LoweredVertex] = []
    for position in range(at + 1, len(items)):
        step = items[position]
        if not isinstance(step, ExecuteStep):
            return None
        stage = _reductions_of(step, held)
        if not stage or sum(len(v.fields["partials"].index) for v in stage) != total:
            return None  # the partials are not all added up here
        written = {id(v) for r in stage for v in r.fields["out"].tensor.variables()}
        writers = {id(r) for r in stage}
        later = set().union(*(users.get(v, set()) for v in written)) - writers
        following = items[position + 1] if position + 1 < len(items) else None
        nexts = {id(r) for r in _reductions_of(following, written)} \
            if isinstance(following, ExecuteStep) else set()
        if later and later <= nexts and not any(r.kind is MATMUL_REDUCE_ACC for r in stage):
            middle.extend(stage)  # an intermediate stage: only the next stage reads its rows
            held, total = written, sum(len(r.fields["out"].index) for r in stage)
            continue
        if len(stage) == 1 and stage[0].fields["out"].shape == (G, M, N):
            return producer, tuple(middle), stage[0]
        return None
    return None


@dataclass(frozen=True)
class _Readers:
    """Who refers to each variable (by ``id``): the vertices of every step, and whether anything
    else reads it (a copy, a print, a predicate, a host read)."""

    users: dict[int, set[int]]
    elsewhere: frozenset[int]

    @classmethod
    def of(cls, executable: Executable) -> "_Readers":
        users: dict[int, set[int]] = {}
        for leaf in executable.leaves:
            if isinstance(leaf, ExecuteStep):
                for vertex in leaf.vertices:
                    for tensor in _field_tensors(vertex):
                        for variable in tensor.variables():
                            users.setdefault(id(variable), set()).add(id(vertex))
        others = [leaf.src for leaf in executable.leaves if isinstance(leaf, CopyStep)]
        others += [leaf.operand for leaf in executable.leaves if isinstance(leaf, PrintStep)]
        others += _predicates(executable) + list(executable.host_reads.values())
        return cls(users, frozenset(id(v) for operand in others
                                    for v in operand.tensor.variables()))

    def only(self, variables, vertices) -> bool:
        """Whether ``variables`` are used by none but ``vertices`` and read by nothing else."""
        allowed = {id(v) for v in vertices}
        return not any(self.users.get(id(v), set()) - allowed or id(v) in self.elsewhere
                       or v.is_constant for v in variables)


def _fusible_chains(executable: Executable, readers: _Readers | None = None) -> list[_Chain]:
    """Partials vertices with the reduction stages that add their float partials step after
    step, whose partials and intermediate rows nothing else ever reads."""
    readers = readers or _Readers.of(executable)
    users = readers.users
    candidates = []
    for block in _blocks(executable):
        items = list(block.items)
        for at, first in enumerate(items):
            if not isinstance(first, ExecuteStep):
                continue
            for producer in first.vertices:
                if producer.kind is MATMUL_PARTIALS and producer.fields["partials"].dtype \
                        is FLOAT:
                    chain = _chain_from(items, at, producer, users)
                    if chain is not None:
                        candidates.append(chain)
    if not candidates:
        return []
    read_elsewhere = readers.elsewhere
    chains, taken = [], set()
    for chain in candidates:
        producer, middle, last = chain
        vertices = (producer, *middle, last)
        if any(id(v) in taken for v in vertices):
            continue
        scratch = _scratch_variables(chain)
        if any(v.is_constant for v in scratch):
            continue
        mine = {id(v) for v in scratch}
        if any(id(v) in mine for t in _field_tensors(producer, "partials") for v in t.variables()):
            continue
        if any(id(v) in mine for t in _field_tensors(last, "partials") for v in t.variables()):
            continue
        if mine & read_elsewhere:
            continue  # a copy, print, predicate or host read sees the partials
        taken.update(id(v) for v in vertices)
        chains.append(chain)
    # A partials variable may be shared by several chains (each time shard's loop has its own
    # chain over the same scratch), so long as every vertex that uses it is in a fused chain:
    # each reduction reads exactly what its own partials step wrote, and nothing else reads it.
    while True:
        fused = {id(vertex) for producer, middle, last in chains
                 for vertex in (producer, *middle, last)}
        kept = [chain for chain in chains
                if not any(users.get(id(v), set()) - fused for v in _scratch_variables(chain))]
        if len(kept) == len(chains):
            return chains
        chains = kept


def _scratch_variables(chain: _Chain) -> list:
    """The variables a fused chain leaves unwritten: the partials and the intermediate rows."""
    producer, middle, _ = chain
    return list(producer.vertex.fields["partials"].variables()) + [
        v for vertex in middle for v in vertex.vertex.fields["out"].variables()]


def _nothing(memory: DeviceMemory) -> None:
    """An intermediate reduction stage of a fused chain: its rows are never read."""


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
    if consumer.kind is not MATMUL_REDUCE_ACC:
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


@dataclass(frozen=True)
class _Accumulation:
    """A product added, step after step, into one float tensor: its partials vertex, the vertex
    whose step adds it (``out += k * scale * product``), and the vertices whose work that
    absorbs (reduction stages, a product written only to be added)."""

    producer: LoweredVertex
    adder: LoweredVertex
    step: int
    out: Operand
    scale: Operand | None
    k: float
    absorbed: tuple[LoweredVertex, ...] = ()


def _scaled_add(vertex: LoweredVertex) -> tuple[Operand, Operand, Operand | None, float] | None:
    """``(out, added, scale, k)`` when ``vertex`` is popops' ``scaledAddTo`` as gruc builds it
    (``out = out + added * k`` or ``out + added * scale``, a one-element scale); else None."""
    expr = vertex.params.get("expr") if vertex.kind is MAP_IN_PLACE else None
    if not (isinstance(expr, BinaryOp) and expr.op is Binary.ADD and expr.lhs == PlaceHolder(1)
            and isinstance(expr.rhs, BinaryOp) and expr.rhs.op is Binary.MUL
            and expr.rhs.lhs == PlaceHolder(2)):
        return None
    ins = vertex.fields["ins"]
    factor = expr.rhs.rhs
    if isinstance(factor, Const) and len(ins) == 1 and isinstance(factor.value, float):
        return vertex.fields["inout"], ins[0], None, factor.value
    if factor == PlaceHolder(3) and len(ins) == 2 and len(ins[1].index) \
            and np.all(ins[1].index == ins[1].index.reshape(-1)[0]):
        return vertex.fields["inout"], ins[0], ins[1], 1.0  # one element, broadcast
    return None


def _accumulations(executable: Executable, chains: list[_Chain], readers: _Readers
                   ) -> list[_Accumulation]:
    """The fused chains whose product is added into a float tensor: by an accumulating
    reduction (``MatMulReduceAcc``), or by a ``scaledAddTo`` in the very next step whose
    product nothing else reads (poplin's ``matMulAcc``)."""
    steps = {id(v): leaf for leaf in executable.leaves if isinstance(leaf, ExecuteStep)
             for v in leaf.vertices}
    following = {}
    for block in _blocks(executable):
        for first, second in zip(block.items, block.items[1:]):
            following[id(first)] = second
    found = []
    for producer, middle, last in chains:
        step = steps[id(last)]
        if last.kind is MATMUL_REDUCE_ACC:
            if not middle:
                out, _, scale, k = _reduce_parts(last)
                found.append(_Accumulation(producer, last, step.step, out, scale, k))
            continue
        product = last.fields["out"]
        after = following.get(id(step))
        if product.dtype is not FLOAT or not isinstance(after, ExecuteStep):
            continue
        for adder in after.vertices:
            parts = _scaled_add(adder)
            if parts is None or parts[0].dtype is not FLOAT:
                continue
            out, added, scale, k = parts
            if (np.array_equal(added.index.reshape(-1), product.index.reshape(-1))
                    and readers.only(product.tensor.variables(), (last, adder))):
                found.append(_Accumulation(producer, adder, after.step, out, scale, k,
                                           (*middle, last)))
                break
    return found


def _same_accumulator(members: list[_Accumulation]) -> list[list[_Accumulation]]:
    """``members`` grouped by the bytes they accumulate into and their product's shape.

    One weight gradient is accumulated by as many loops as the time sequence has shards; they
    share one host copy and one stack, so the products are joined in the same groups, and the
    result has the same bits, however the sequence is split."""
    groups: list[list[_Accumulation]] = []
    for member in members:
        shape = blocking_of(member.producer.vertex).shape
        for group in groups:
            first = group[0]
            if (blocking_of(first.producer.vertex).shape == shape
                    and first.out.shape == member.out.shape
                    and np.array_equal(first.out.index, member.out.index)):
                group.append(member)
                break
        else:
            groups.append([member])
    return groups


def _kept_accumulation(members: list[_Accumulation], executable: Executable, hooks: RunHooks,
                       copies: HostCopies) -> dict[int, Prepared]:
    """The partials, adding and absorbed vertices' callables of the ``members`` (accumulating
    into the same bytes), kept on the host between write-backs; empty if they cannot be kept."""
    out = members[0].out
    if out.dtype is not FLOAT:
        return {}
    variables = frozenset(v.index for v in out.tensor.variables())
    steps = frozenset(member.step for member in members)
    touching = [s for s, (read, written) in enumerate(zip(executable.step_reads,
                                                          executable.step_writes))
                if s not in steps and (read | written) & variables]
    if any(not isinstance(executable.leaves[s], (ExecuteStep, CopyStep)) for s in touching):
        return {}
    o_io = Transfer(out)
    unchanged = Unchanged(out, executable, hooks.step_counts, members[0].step, kept_by=steps)
    deferred = _DeferredProducts(blocking_of(members[0].producer.vertex).shape)
    kept = np.empty_like(deferred.product)
    dirty = [False]

    def write_back(memory: DeviceMemory) -> None:
        if dirty[0]:
            deferred.add_to(kept)
            o_io.write(memory, kept)
            dirty[0] = False

    def adding(member: _Accumulation) -> Prepared:
        def run(memory: DeviceMemory) -> None:
            if not unchanged(memory):  # nothing is stacked: a write-back preceded the change
                o_io.read(memory, kept)
            if deferred.commit(_factor(memory, member.scale, member.k)):
                deferred.add_to(kept)
            dirty[0] = True
        return run

    for other in touching:
        hooks.before_step.setdefault(other, []).append(write_back)
    hooks.after_run.append(write_back)
    prepared: dict[int, Prepared] = {}
    for member in members:
        prepared[id(member.producer)] = partial(deferred.gather,
                                                **deferred.readers(member.producer, copies))
        prepared[id(member.adder)] = adding(member)
        for vertex in member.absorbed:
            prepared[id(vertex)] = _nothing
    return prepared


@numba_executable_hook
def _prepare_partials(executable: Executable, hooks: RunHooks) -> dict[int, Prepared]:
    """Every partials vertex, fused with its reductions where :func:`_fusible_chains` allows,
    and accumulated on the host where :func:`_accumulations` finds it added up."""
    readers = _Readers.of(executable)
    chains = _fusible_chains(executable, readers)
    fused = {id(producer): (middle, last) for producer, middle, last in chains}
    prepared: dict[int, Prepared] = {}
    copies = HostCopies(executable, hooks.step_counts)
    for members in _same_accumulator(_accumulations(executable, chains, readers)):
        prepared.update(_kept_accumulation(members, executable, hooks, copies))
    for leaf in executable.leaves:
        if not isinstance(leaf, ExecuteStep):
            continue
        for vertex in leaf.vertices:
            if vertex.kind is not MATMUL_PARTIALS or id(vertex) in prepared:
                continue
            operands = _Operands(vertex, leaf.step, executable, hooks.step_counts, copies)
            if id(vertex) not in fused:
                prepared[id(vertex)] = _partials(vertex, operands)
                continue
            middle, last = fused[id(vertex)]
            G, M, _, N = blocking_of(vertex.vertex).shape
            product = aligned_array((G, M, N), F32)
            prepared[id(vertex)] = _fused_product(operands, product)
            for stage in middle:  # the product is already summed over k
                prepared[id(stage)] = _nothing
            prepared[id(last)] = _fused_reduce(last, product)
    return prepared
