"""Lowering: turn a planned module into an executable tree over real tile-memory addresses.

Every tensor a step touches is resolved, once and when first needed (:class:`Operand`), to the
typed element index of each of its elements in the simulated memory (``address // dtype.size``;
see :class:`DeviceMemory`).  Engines then run
on those indices only: nothing at run time looks at views, mappings or names.  Because the
addresses come from the memory plan, tensors the planner let share bytes really share them, and a
wrong plan corrupts results — which is what makes every numerical test a test of the planner.

The executable mirrors the program tree (blocks, loops, branches, calls) and is built from the
analysis tree the liveness analysis numbered steps on (:class:`~gruc.analysis.steps.StepTree`), so
its leaves carry liveness's step numbers by construction and the cost model and the report speak
of the same steps.  Tile memory is laid out tile after tile, ``tile_stride`` bytes apart: the
most any tile of the plan uses, rounded up to an odd number of cache lines
(:func:`host_tile_stride`) — not the target's ``bytes_per_tile`` — from a page boundary of the
host.  Planned addresses keep their meaning (``tile * bytes_per_tile + offset``, as the report
shows them); only the host image is packed, so a program that uses 20 KB of each 624 KB tile
touches 30 MB of host memory, not 900 MB, and its tensors spread over all tiles stay in cache.  A
program over capacity still runs (as on Poplar's IPUModel) while the report says it would not
fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, Callable, Union

import numpy as np

from gruc.analysis.liveness import Liveness
from gruc.analysis.steps import IfNode, LeafNode, RepeatNode, SequenceNode, WhileNode
from gruc.errors import GrucProgramError
from gruc.ir.graph import Graph, Vertex
from gruc.ir.module import Module
from gruc.ir.program import Copy, Execute, PrintTensor, Sync, WriteUndef
from gruc.ir.tensor import Tensor
from gruc.ir.vertices import VertexKind
from gruc.memory.plan import MemoryPlan
from gruc.runtime.addresses import PlanAddresses
from gruc.runtime.row_runs import RowRuns
from gruc.types import ALL_TYPES, DType

TILE_STRIDE_ALIGNMENT = 64
"""Simulated tiles start on cache-line boundaries (and so on every type's alignment)."""
HOST_PAGE = 4096
"""Device memory starts on a page boundary of the host (and so on a cache line)."""


def host_tile_stride(max_tile_bytes: int) -> int:
    """Bytes between two tiles in the host image: the most any tile uses, rounded up to an *odd*
    number of cache lines.  A tensor spread over the tiles is a piece per tile, one stride apart,
    and a cache picks a line's set from the address bits above the line; a stride of an even
    number of lines leaves those pieces fewer sets (2,304 lines, the 512 training layer's, put
    1,024 tiles' pieces in 8 of a 2 MB L2's 2,048 sets), so they evict one another and what
    the step needs next (that layer ran 5 % faster with one line more per tile).  An odd number
    of lines visits every set of any power-of-two count."""
    lines = -(-max(max_tile_bytes, 1) // TILE_STRIDE_ALIGNMENT)
    return (lines | 1) * TILE_STRIDE_ALIGNMENT


def _run_lengths(positions: np.ndarray, total: int) -> np.ndarray:
    """The length of each run of ``total`` elements that begin at ``positions`` (ascending)."""
    lengths = np.empty_like(positions)
    lengths[:-1] = positions[1:] - positions[:-1]
    lengths[-1:] = total - positions[-1:]
    return lengths


class Operand:
    """A tensor resolved to typed element indices into device memory (flattened order).

    Lowering makes operands *lazy*: ``index`` is computed from the memory plan the first time
    something reads it, then kept.  An engine reads the indices of what it runs and no more, so
    an operand no engine reads costs nothing: a long sequence's host streams until the host uses
    them, the exchange buffers of matmuls the numba backend moves itself.  Whoever must see an
    index before an engine does (:func:`gruc.runtime.verify_memory.verify_memory`) asks to be
    called with it through :meth:`on_resolve`.
    """

    __slots__ = ("dtype", "shape", "tensor", "_index", "_resolve", "_resolve_runs",
                 "_resolve_row_runs", "_checks")

    def __init__(self, dtype: DType, index: np.ndarray | None, shape: tuple[int, ...],
                 tensor: Tensor | None = None, resolve: Callable[[], np.ndarray] | None = None,
                 resolve_runs: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None,
                 resolve_row_runs: Callable[[], RowRuns | None] | None = None) -> None:
        self.dtype = dtype
        self.shape = shape
        self.tensor = tensor
        """The tensor it was resolved from: lets fast paths reason about variables, not addresses
        (the memory plan lets tensors with disjoint lifetimes share addresses)."""
        self._index = index
        self._resolve = resolve
        self._resolve_runs = resolve_runs
        self._resolve_row_runs = resolve_row_runs
        self._checks: list[Callable[["Operand"], None]] = []

    @property
    def index(self) -> np.ndarray:
        """The element indices, resolved and read-only from the first read.  Every check registered
        with :meth:`on_resolve` passes before any caller sees them; a failed one leaves the operand
        unresolved, so no one ever reads an unchecked index."""
        if self._index is None:
            index = self._resolve()
            index.flags.writeable = False
            self._index = index
            try:  # a failed check leaves the operand unresolved: no one reads an unchecked index
                for check in self._checks:
                    check(self)
            except BaseException:
                self._index = None
                raise
            self._resolve, self._checks = None, []
        return self._index

    def index_runs(self) -> tuple[np.ndarray, np.ndarray]:
        """``index`` as its runs of consecutive indices: the flat position where each begins
        (ascending) and its first index.  Unless the index is resolved already, it is neither
        computed nor kept: a slice group's bases are a long sequence's columns, a run or two per
        row.  The checks run on the runs (one that cannot resolves the index and checks that)."""
        if self._index is not None or self._resolve_runs is None:
            index = self.index.reshape(-1)
            positions = np.flatnonzero(np.diff(index, prepend=index[:1] - 2) != 1)
            return positions, index[positions]
        positions, firsts = self._resolve_runs()
        if any(getattr(check, "runs", None) is None for check in self._checks):
            self.index  # noqa: B018  (a check that cannot take runs: all run on the index)
        elif self._checks:
            lengths = _run_lengths(positions, math.prod(self.shape))
            for check in self._checks:
                check.runs(self, firsts, lengths)
            self._checks = []
        return positions, firsts

    def row_runs(self) -> RowRuns | None:
        """The first row's :meth:`index_runs` and how far each run moves a row, if every row is
        the first moved run by run (see :meth:`PlanAddresses.row_index_runs`); else None.  Nothing
        per row is computed: a slice group over a long sequence keeps one row's pieces.  The
        checks see the first and the last row: a run's rows lie address by address between
        those two, in one block when both ends are in one (an operand whose checks cannot take
        runs gets None, and is resolved and checked as a whole by whoever falls back)."""
        if self._index is not None or self._resolve_row_runs is None \
                or any(getattr(check, "runs", None) is None for check in self._checks):
            return None
        found = self._resolve_row_runs()
        if found is None:
            return None
        positions, firsts, moves = found
        if self._checks:
            lengths = _run_lengths(positions, math.prod(self.shape[1:]))
            last_row = firsts + (self.shape[0] - 1) * moves
            for check in self._checks:
                check.runs(self, np.concatenate((firsts, last_row)),
                           np.concatenate((lengths, lengths)))
            self._checks = []
        return found

    @property
    def resolved(self) -> bool:
        """Whether ``index`` has been computed (reading it computes it)."""
        return self._index is not None

    def on_resolve(self, check: Callable[["Operand"], None]) -> None:
        """Call ``check(self)`` with the index as soon as there is one (now, if there is)."""
        if self.resolved:
            check(self)
        else:
            self._checks.append(check)


@dataclass(frozen=True, eq=False)
class LoweredVertex:
    """A vertex with its fields as operands; ``fields[name]`` is an Operand or a tuple of them."""

    vertex: Vertex
    fields: dict[str, Union[Operand, tuple[Operand, ...]]]

    @property
    def kind(self) -> VertexKind:
        return self.vertex.kind

    @property
    def params(self) -> dict[str, Any]:
        return self.vertex.params


@dataclass(frozen=True, eq=False)
class ExecuteStep:
    step: int
    name: str
    vertices: tuple[LoweredVertex, ...]


@dataclass(frozen=True, eq=False)
class CopyStep:
    step: int
    src: Operand
    dst: Operand


@dataclass(frozen=True, eq=False)
class MarkStep:
    """A step that moves no data (WriteUndef, Sync) but is counted and costed."""

    step: int
    what: str


@dataclass(frozen=True, eq=False)
class PrintStep:
    step: int
    label: str
    operand: Operand


@dataclass(frozen=True, eq=False)
class Block:
    items: tuple


@dataclass(frozen=True, eq=False)
class Loop:
    count: int
    body: Block


@dataclass(frozen=True, eq=False)
class WhileLoop:
    condition: Block
    step: int
    predicate: Operand
    body: Block


@dataclass(frozen=True, eq=False)
class Branch:
    step: int
    predicate: Operand
    then: Block
    otherwise: Block


@dataclass(frozen=True, eq=False)
class CallFunction:
    function: int


@dataclass(frozen=True, eq=False)
class Executable:
    """What an engine runs: entry programs and functions over one memory image."""

    programs: tuple[Block, ...]
    functions: tuple[Block, ...]
    host_writes: dict[str, Operand]
    host_reads: dict[str, Operand]
    constants: tuple[tuple[Operand, np.ndarray], ...]
    """Constant variables and the values to load before the first run."""
    num_tiles: int
    tile_stride: int
    num_steps: int
    leaves: tuple = field(default=())
    """Every leaf step object, indexed by step number."""
    step_writes: tuple[frozenset[int], ...] = field(default=())
    """Indices of the variables each step writes or declares dead (``WriteUndef``), by step."""
    step_reads: tuple[frozenset[int], ...] = field(default=())
    """Indices of the variables each step reads, by step."""

    @cached_property
    def _writers_by_variable(self) -> dict[int, list[int]]:
        by_variable: dict[int, list[int]] = {}
        for step, written in enumerate(self.step_writes):
            for variable in written:
                by_variable.setdefault(variable, []).append(step)
        return by_variable

    def writers_of(self, variables) -> list[int]:
        """The steps that write or kill any of ``variables`` (indices), ascending: asked for every
        operand a kernel may keep, so answered from an index built once, not a scan of steps."""
        index = self._writers_by_variable
        return sorted({step for variable in variables for step in index.get(variable, ())})


class _Lowering:
    """Lowers one module for one memory plan: every tensor becomes an operand at its planned
    addresses (tiles ``tile_stride`` bytes apart), and the executable is built from the analysis
    tree liveness was computed over, so every leaf has the step number liveness gave it."""
    def __init__(self, module: Module, plan: MemoryPlan, liveness: Liveness) -> None:
        self.graph: Graph = module.graph
        self.plan = plan
        self.addresses = PlanAddresses(plan)
        self.liveness = liveness
        self.steps = liveness.steps
        self.tile_stride = host_tile_stride(plan.host_extent)
        self.leaves: list = [None] * len(self.steps)
        self._field_operands: dict[int, tuple[Tensor, Operand]] = {}

    def operand(self, tensor: Tensor) -> Operand:
        return Operand(tensor.dtype, None, tensor.shape, tensor,
                       partial(self.addresses.element_indices, tensor, self.tile_stride),
                       partial(self.addresses.index_runs, tensor, self.tile_stride),
                       partial(self.addresses.row_index_runs, tensor, self.tile_stride))

    def field_operand(self, tensor: Tensor) -> Operand:
        """The operand of a vertex field, one per tensor object: fields that share a tensor share
        its indices, resolved once (a time loop's 1,024 slice vertices a step read one offset).
        Host streams keep operands of their own, resolved only when the host uses them."""
        known = self._field_operands.get(id(tensor))
        if known is None:  # the tensor is kept with its operand, so its id is not reused
            known = self._field_operands[id(tensor)] = (tensor, self.operand(tensor))
        return known[1]

    def vertex(self, vertex: Vertex) -> LoweredVertex:
        fields = {}
        for name, value in vertex.fields.items():
            fields[name] = (tuple(self.field_operand(t) for t in value)
                            if isinstance(value, tuple) else self.field_operand(value))
        return LoweredVertex(vertex, fields)

    def leaf(self, step: int):
        """The lowered form of leaf step ``step``, by the program node liveness numbered."""
        node = self.steps[step].node
        if isinstance(node, Execute):
            cs = node.compute_set
            lowered = ExecuteStep(step, cs.name, tuple(self.vertex(v) for v in cs.vertices))
        elif isinstance(node, Copy):
            lowered = CopyStep(step, self.operand(node.src), self.operand(node.dst))
        elif isinstance(node, (WriteUndef, Sync)):
            lowered = MarkStep(step, type(node).__name__)
        elif isinstance(node, PrintTensor):
            lowered = PrintStep(step, node.label, self.operand(node.tensor))
        else:
            raise GrucProgramError(f"cannot lower program node {type(node).__name__}")
        self.leaves[step] = lowered
        return lowered

    def predicate(self, pred: LeafNode, what: str) -> tuple[int, Operand]:
        """The step of a loop's or branch's predicate read, marked as a leaf, and the operand of
        the predicate tensor (held by the ``RepeatWhileTrue`` / ``If`` the step was numbered
        for)."""
        step = pred.step
        self.leaves[step] = MarkStep(step, what)
        return step, self.operand(self.steps[step].node.predicate)

    def block(self, node) -> Block:
        lowered = self.node(node)
        return lowered if isinstance(lowered, Block) else Block((lowered,))

    def node(self, node):
        """The lowered form of the analysis node ``node``: the program tree's shape, with each
        leaf, ``while`` predicate and ``If`` predicate at the step its analysis node carries."""
        if isinstance(node, LeafNode):
            return self.leaf(node.step)
        if isinstance(node, SequenceNode):
            return Block(tuple(self.node(item) for item in node.items))
        if isinstance(node, RepeatNode):
            return Loop(node.count, self.block(node.body))
        if isinstance(node, WhileNode):
            condition = self.block(node.cond)
            step, predicate = self.predicate(node.pred, "RepeatWhileTrue predicate")
            return WhileLoop(condition, step, predicate, self.block(node.body))
        if isinstance(node, IfNode):
            step, predicate = self.predicate(node.pred, "If predicate")
            return Branch(step, predicate, self.block(node.then), self.block(node.otherwise))
        return CallFunction(node.function)  # CallNode

    def run(self) -> Executable:
        """The executable: entry programs, then function bodies (the order liveness numbers steps
        in), with host streams, the allocated constants and each step's reads and writes."""
        programs = tuple(self.block(tree) for tree in self.liveness.program_trees)
        functions = tuple(self.block(tree) for tree in self.liveness.function_trees)
        graph = self.graph
        return Executable(
            programs=programs, functions=functions,
            host_writes={n: self.operand(t) for n, t in graph.host_writes.items()},
            host_reads={n: self.operand(t) for n, t in graph.host_reads.items()},
            constants=tuple((self.operand(v), v.constant) for v in graph.variables
                            if v.is_constant and v.index in self.plan.allocated),
            num_tiles=graph.target.num_tiles, tile_stride=self.tile_stride,
            num_steps=len(self.steps), leaves=tuple(self.leaves),
            step_writes=tuple(step.effect.writes | step.effect.kills for step in self.steps),
            step_reads=tuple(step.effect.reads for step in self.steps))


def lower(module: Module, plan: MemoryPlan) -> Executable:
    """Resolve every step of ``module`` to memory addresses according to ``plan``."""
    return _Lowering(module, plan, plan.liveness).run()


def aligned_array(shape: int | tuple[int, ...], dtype, alignment: int = TILE_STRIDE_ALIGNMENT, *,
                  zeroed: bool = False) -> np.ndarray:
    """A new array whose data starts on an ``alignment``-byte boundary (a cache line by default).
    numpy's arrays start where malloc puts them, 16 bytes past a line, so a loop's 64-byte vector
    loads and stores each touch two lines."""
    dtype = np.dtype(dtype)
    nbytes = math.prod((shape,) if isinstance(shape, int) else shape) * dtype.itemsize
    block = (np.zeros if zeroed else np.empty)(nbytes + alignment, np.uint8)
    start = -block.ctypes.data % alignment
    return block[start:start + nbytes].view(dtype).reshape(shape)


class DeviceMemory:
    """The simulated tile memory: one byte buffer, tile after tile, with a typed view per type.

    The buffer is allocated zeroed but untouched pages cost nothing, so a 1472-tile target whose
    program uses a few tiles' worth of memory stays cheap.
    """

    def __init__(self, num_tiles: int, tile_stride: int) -> None:
        self.raw = aligned_array(num_tiles * tile_stride, np.uint8, HOST_PAGE, zeroed=True)
        """The buffer, from a page boundary: numpy's big arrays start 16 bytes past one (malloc's
        header), which put every tile 16 bytes past a cache line, so a 64-byte piece of a tensor
        spanned two lines (aligned, the 256 GRU layer's forward ran 4 % faster)."""
        self.views = {t.name: self.raw.view(t.storage) for t in ALL_TYPES}
        self.host_writes = 0
        """How many times the host wrote (:meth:`write`): caches of tile data watch it."""

    def view(self, dtype: DType) -> np.ndarray:
        return self.views[dtype.name]

    def read(self, operand: Operand) -> np.ndarray:
        return self.view(operand.dtype)[operand.index].reshape(operand.shape)

    def write(self, operand: Operand, values: np.ndarray) -> None:
        self.host_writes += 1
        self.view(operand.dtype)[operand.index] = np.asarray(values).reshape(-1)
