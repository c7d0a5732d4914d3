"""The memory check: every address a lowered step touches lies in memory the plan gave its tensor,
on the right tile.

Why.  Lowering turns each operand into element indices into one device buffer, and the numba
kernels then index that buffer with no bounds checks (numpy's fancy indexing checks only the
*buffer's* end).  An index that strays — a plan and a lowering that disagree, a pass that rewires
a field wrongly, a hand-built or tampered executable — would silently read or overwrite another
tensor's bytes or another tile's, and surface, if ever, as a wrong number far away.  On the IPU
such an access cannot happen: a vertex sees only its own tile, and the compiler allocated every
field.  This check gives the simulator the same guarantee for every static address an engine
reads, once: when an :class:`~gruc.runtime.engine.Engine` compiles for the indices already
computed, and for the others (lowering computes indices lazily, see
:class:`~gruc.runtime.lower.Operand`) the moment they are computed, before anything can read them
— an index no engine ever reads is never computed, so there is nothing to check.
:mod:`gruc.runtime.checked` repeats the check at run time for the addresses only known then.

Rules, for every *access* (a field of an executed vertex, a Copy's source and destination, an
If / RepeatWhileTrue predicate, a PrintTensor, host streams and constants):

* allocation: each element's bytes ``[a, a + size)`` lie inside one block the plan allocated, on
  the tile holding ``a``, to a variable of the tensor the access names (a view of several
  variables may use any of theirs) — nothing outside the device, between blocks, or in another
  tensor's bytes;
* tile, with ``require_local`` (a module the ``exchange`` pass made local): every field of a
  tiled vertex lies on the vertex's tile, and every field of an untiled (elementwise) vertex shaped
  like its ``split`` field lies, element by element, on the tile of the split element it pairs
  with — the tile that instance runs on.  Without it, a vertex may read and write elements on
  other tiles (gruc's IR allows it and the engine prices it as exchange: a dynamic slice whose
  columns span tiles writes some of its window remotely), so an engine's compile checks the
  allocation rule only.  Fields a kind exchanges itself (a matmul's operand blocks) and copies,
  which *are* the exchange, need only the allocation rule: a copy's source and destination each
  lie in their own tensor's memory, on whatever tiles that is.

Not checked: which element of its tensor's block an index picks.  A permutation inside a tensor's
own memory gives wrong results, not a memory-safety breach, and the numerical tests catch it.

Cost.  One compiled pass per access (:func:`_first_violation`): a run of consecutive addresses
— most operands are a few runs per tile — costs one block lookup and a compare per element, and
nothing is allocated, so the check adds a few percent to an engine's compile.  An operand read
as runs (:meth:`~gruc.runtime.lower.Operand.index_runs`, a slice group's long bases) is checked a
run at a time, one block lookup each; a run not wholly inside one allowed block is checked
element by element.  Only a failing access is looked at again, in numpy, to name every bad
element in the message.
"""

from __future__ import annotations

import gc
from typing import Iterator, NamedTuple

import numpy as np
from numba import njit

from gruc.errors import GrucVerifyError
from gruc.ir.graph import Graph
from gruc.ir.module import Module
from gruc.ir.tensor import Tensor, Variable
from gruc.memory.plan import MemoryPlan
from gruc.runtime.lower import (Block, Branch, CopyStep, Executable, ExecuteStep, Loop,
                                LoweredVertex, Operand, PrintStep, WhileLoop)

ANY_TILE = -1
"""An access whose elements may lie on any tile (where their variables have blocks)."""


class Access(NamedTuple):
    """One operand a step reads or writes, and where its elements may lie (a tuple: an engine
    compile makes tens of thousands)."""

    what: str
    """How a message names it: ``field 'out'``, ``Copy source``, ..."""
    operand: Operand
    variables: tuple[int, ...]
    """Indices of the variables the operand's tensor views: its bytes lie in their blocks."""
    tile: int = ANY_TILE
    """Every element lies on this tile (``ANY_TILE``: no constraint beyond the allocation)."""
    pair: Operand | None = None
    """Element ``k`` lies on the tile of ``pair``'s element ``k`` (an elementwise split field)."""


def variables_of(tensor: Tensor) -> tuple[int, ...]:
    """Indices of the variables ``tensor`` views (most views are a chain over one variable)."""
    while len(tensor.sources) == 1:
        tensor = tensor.sources[0]
    if isinstance(tensor, Variable):
        return (tensor.index,)
    return tuple(v.index for v in tensor.variables())


def vertex_accesses(vertex: LoweredVertex, require_local: bool = False) -> list[Access]:
    """The accesses of a lowered vertex, with the tile rules of the module docstring."""
    ir = vertex.vertex
    kind = ir.kind
    split = vertex.fields[kind.split] if kind.split is not None else None
    result = []
    for name, value in vertex.fields.items():
        vector = isinstance(value, tuple)
        operands, tensors = (value, ir.fields[name]) if vector else ((value,), (ir.fields[name],))
        for k, (operand, tensor) in enumerate(zip(operands, tensors)):
            tile, pair = ANY_TILE, None
            if require_local and ir.tile is not None:
                tile = ir.tile
            elif require_local and name != kind.split and split is not None \
                    and operand.shape == split.shape:
                pair = split
            label = f"{name}[{k}]" if vector else name
            result.append(Access(f"field {label!r}", operand, variables_of(tensor), tile, pair))
    return result


def copy_accesses(step: CopyStep, src: Tensor, dst: Tensor) -> list[Access]:
    return [Access("Copy source", step.src, variables_of(src)),
            Access("Copy destination", step.dst, variables_of(dst))]


def describe_vertex(vertex: LoweredVertex, position: int, compute_set: str) -> str:
    where = f"tile {vertex.vertex.tile}" if vertex.vertex.tile is not None else \
        f"the tiles of its {vertex.vertex.kind.split!r} field"
    return f"vertex {position} ({vertex.kind.name} on {where}) of compute set {compute_set!r}"


_NO_PAIR = np.zeros(0, np.int64)
_NO_PAIR.flags.writeable = False  # read-only, as a pair's index is: one compiled check


def _int64(index: np.ndarray) -> np.ndarray:
    """Indices as int64 (lowering makes them so), keeping the compiled check monomorphic."""
    return index if index.dtype == np.int64 else index.astype(np.int64)


@njit(cache=True, nogil=True)
def _holding_block(address, nbytes, stride, num_tiles, variables, tile,
                   blocks):  # pragma: no cover (compiled)
    """``(start, end)`` addresses of the block holding bytes ``[address, address + nbytes)``:
    allocated to one of ``variables`` on the tile of ``address`` (which must be ``tile`` unless
    that is negative); ``(-1, -1)`` if there is none (a binary search per variable)."""
    keys, starts, ends = blocks[0], blocks[1], blocks[2]
    on = address // stride
    if on < 0 or on >= num_tiles or (tile >= 0 and on != tile):
        return -1, -1
    for variable in variables:
        key = variable * num_tiles + on
        at = np.searchsorted(keys, key)
        if at < keys.shape[0] and keys[at] == key and starts[at] <= address \
                and address + nbytes <= ends[at]:
            return starts[at], ends[at]
    return -1, -1


@njit(cache=True, nogil=True)
def _first_violation(index, size, stride, num_tiles, variables, tile, pair, pair_size,
                     blocks):  # pragma: no cover (compiled)
    """The rules of the module docstring over one access, run by run: each run of consecutive
    addresses costs a compare per element, and a block lookup unless it lies in the block of the
    run before.  ``blocks`` is ``[keys, starts, ends]``; ``tile`` < 0 means any; ``pair`` may be
    empty."""
    n = index.shape[0]
    start = end = -1  # the block the previous run lay in: strided views revisit it run after run
    i = 0
    while i < n:
        address = index[i] * size
        on = address // stride
        if not (start <= address and address + size <= end):
            start, end = _holding_block(address, size, stride, num_tiles, variables, tile, blocks)
            if end < 0:
                return i
        j = i + 1
        following = index[i] + 1
        last = (end - size) // size  # the highest element index inside the block
        while j < n and index[j] == following and following <= last:
            j += 1
            following += 1
        if pair.shape[0]:
            for k in range(i, j):
                if pair[k] * pair_size // stride != on:
                    return k
        i = j
    return -1


@njit(cache=True, nogil=True)
def _first_run_outside(firsts, lengths, size, stride, num_tiles, variables, tile,
                       blocks):  # pragma: no cover (compiled)
    """The first run of consecutive indices (``firsts``, ``lengths``) not wholly inside one
    block the rules allow, or -1: a block lookup per run, none per element."""
    for r in range(firsts.shape[0]):
        if _holding_block(firsts[r] * size, lengths[r] * size, stride, num_tiles, variables,
                          tile, blocks)[1] < 0:
            return r
    return -1


def _expand(first: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions ``first[r] .. first[r] + lengths[r] - 1`` of every run ``r``, joined."""
    total = int(lengths.sum())
    before = np.cumsum(lengths) - lengths
    return np.repeat(first - before, lengths) + np.arange(total, dtype=np.int64)


class Regions:
    """The plan's blocks as lowering lays them out: tile after tile, ``tile_stride`` bytes apart."""

    def __init__(self, plan: MemoryPlan, graph: Graph, tile_stride: int) -> None:
        self.graph = graph
        self.stride = int(tile_stride)
        self.num_tiles = plan.num_tiles
        self.keys = plan.block_variable * plan.num_tiles + plan.block_tile
        """Sorted: the plan's blocks are sorted by (variable, tile)."""
        self.starts = plan.block_tile * self.stride + plan.block_offset
        self.ends = self.starts + plan.block_nbytes
        self.blocks = np.ascontiguousarray(np.stack([self.keys, self.starts, self.ends]),
                                           dtype=np.int64)
        """Keys, start and end addresses, as the compiled check takes them."""
        self._variables: dict[tuple[int, ...], np.ndarray] = {}

    def _block(self, variable, tile) -> tuple[np.ndarray, np.ndarray]:
        """Position of the block of (``variable``, ``tile``) (arrays), and whether it exists."""
        key = variable * self.num_tiles + tile
        if not len(self.keys):
            return np.zeros(np.shape(key), np.int64), np.zeros(np.shape(key), bool)
        pos = np.minimum(np.searchsorted(self.keys, key), len(self.keys) - 1)
        return pos, (tile >= 0) & (tile < self.num_tiles) & (self.keys[pos] == key)

    def _inside(self, variables, lo, hi, tile) -> np.ndarray:
        """Whether bytes ``[lo, hi)`` lie inside the block on ``tile`` of one of ``variables``."""
        inside = np.zeros(np.shape(lo), dtype=bool)
        for variable in variables:
            pos, found = self._block(variable, tile)
            inside |= found & (self.starts[pos] <= lo) & (hi <= self.ends[pos])
        return inside

    def first_bad(self, access: Access) -> int:
        """Position of the first element of ``access`` that breaks a rule, or -1: one compiled
        pass, the fast answer to *whether* (:meth:`violations` says *which*, for messages)."""
        operand, pair = access.operand, access.pair
        return _first_violation(_int64(operand.index), operand.dtype.size, self.stride,
                                self.num_tiles, self._variable_array(access), access.tile,
                                _NO_PAIR if pair is None else _int64(pair.index),
                                0 if pair is None else pair.dtype.size, self.blocks)

    def all_runs_inside(self, access: Access, firsts: np.ndarray, lengths: np.ndarray) -> bool:
        """Whether each run of consecutive indices of the access lies wholly in one block the
        rules allow: enough to pass it (a run across two allowed blocks, or a paired access,
        needs the element by element check)."""
        return access.pair is None and _first_run_outside(
            firsts, lengths, access.operand.dtype.size, self.stride, self.num_tiles,
            self._variable_array(access), access.tile, self.blocks) < 0

    def _variable_array(self, access: Access) -> np.ndarray:
        """The access's variables as the compiled checks take them (made once per set)."""
        variables = self._variables.get(access.variables)
        if variables is None:
            variables = self._variables[access.variables] = np.array(access.variables, np.int64)
        return variables

    def _ok(self, access: Access, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        tile = lo // self.stride
        ok = (hi - 1) // self.stride == tile
        if access.tile != ANY_TILE:
            ok &= tile == access.tile
        return ok & self._inside(access.variables, lo, hi, tile)

    def violations(self, access: Access) -> np.ndarray:
        """Positions of the elements of ``access`` that break a rule (sorted; empty if none)."""
        index = access.operand.index
        size = access.operand.dtype.size
        n = len(index)
        if n == 0:
            return np.zeros(0, np.int64)
        breaks = np.flatnonzero(np.diff(index) != 1) + 1
        first = np.concatenate(([0], breaks))
        last = np.concatenate((breaks, [n])) - 1
        failed = np.flatnonzero(~self._ok(access, index[first] * size, index[last] * size + size))
        positions = np.zeros(0, np.int64)
        if len(failed):  # element by element: a run may straddle two variables' adjacent blocks
            positions = _expand(first[failed], last[failed] - first[failed] + 1)
            address = index[positions] * size
            positions = positions[~self._ok(access, address, address + size)]
        if access.pair is not None:
            pair = access.pair
            away = index * size // self.stride != pair.index * pair.dtype.size // self.stride
            positions = np.union1d(positions, np.flatnonzero(away))
        return positions

    def explain(self, access: Access) -> str | None:
        """None if ``access`` keeps the rules, else what is wrong (:meth:`describe`)."""
        first = self.first_bad(access)
        if first < 0:
            return None
        bad = self.violations(access)
        return self.describe(access, bad if len(bad) else np.array([first]))

    def describe(self, access: Access, bad: np.ndarray) -> str:
        """What is wrong with the elements ``bad`` of ``access``, naming addresses and regions."""
        size = access.operand.dtype.size
        addresses = access.operand.index[bad] * size
        k, address = int(bad[0]), int(addresses[0])
        tile, offset = divmod(address, self.stride)
        names = [self.graph.variables[v].name for v in access.variables]
        head = (f"{access.what} element {k} at byte address {address} (tile {tile}, offset "
                f"{offset})")
        if not 0 <= tile < self.num_tiles:
            reason = f"is outside the device memory (tiles 0..{self.num_tiles - 1})"
        elif access.tile != ANY_TILE and tile != access.tile:
            reason = f"is on tile {tile}, but the vertex runs on tile {access.tile}"
        elif access.pair is not None and tile != (home := int(access.pair.index[k])
                                                  * access.pair.dtype.size // self.stride):
            reason = f"is on tile {tile}, but the split element it pairs with is on tile {home}"
        else:
            regions = []
            base = tile * self.stride
            for variable, name in zip(access.variables, names):
                pos, found = self._block(variable, tile)
                regions.append(f"{name!r} holds bytes [{int(self.starts[pos]) - base}, "
                               f"{int(self.ends[pos]) - base}) there" if found
                               else f"{name!r} has no memory there")
            reason = (f"is outside the memory allocated on tile {tile} to the tensor it names "
                      f"({'; '.join(regions)})")
        return (f"{head} {reason}; {len(bad)} of {len(access.operand.index)} elements are bad, "
                f"at byte addresses {int(addresses.min())}..{int(addresses.max()) + size - 1}")


def _predicates(block: Block) -> Iterator[tuple[int, Operand]]:
    """``(step, predicate)`` of every If and RepeatWhileTrue in ``block``, nested ones too."""
    for item in block.items:
        if isinstance(item, Block):
            yield from _predicates(item)
        elif isinstance(item, Loop):
            yield from _predicates(item.body)
        elif isinstance(item, WhileLoop):
            yield item.step, item.predicate
            yield from _predicates(item.condition)
            yield from _predicates(item.body)
        elif isinstance(item, Branch):
            yield item.step, item.predicate
            yield from _predicates(item.then)
            yield from _predicates(item.otherwise)


def _accesses(module: Module, plan: MemoryPlan, executable: Executable,
              require_local: bool) -> Iterator[tuple[object, str, Access]]:
    """``(culprit, where, access)`` for every access of the executable; ``culprit`` is the IR
    object the verifier's context shows, ``where`` names the step."""
    graph, steps = module.graph, plan.liveness.steps
    for leaf in executable.leaves:
        if isinstance(leaf, ExecuteStep):
            for position, lowered in enumerate(leaf.vertices):
                for access in vertex_accesses(lowered, require_local):
                    yield lowered.vertex, (leaf, position), access
        elif isinstance(leaf, CopyStep):
            node = steps[leaf.step].node
            for access in copy_accesses(leaf, node.src, node.dst):
                yield node, f"step {leaf.step}", access
        elif isinstance(leaf, PrintStep):
            node = steps[leaf.step].node
            yield node, f"step {leaf.step}", Access(f"PrintTensor {leaf.label!r}", leaf.operand,
                                                    variables_of(node.tensor))
    for block in (*executable.programs, *executable.functions):
        for step, predicate in _predicates(block):
            node = steps[step].node
            yield node, f"step {step}", Access(f"{type(node).__name__} predicate", predicate,
                                               variables_of(node.predicate))
    for what, lowered, streams in (("host write", executable.host_writes, graph.host_writes),
                                   ("host read", executable.host_reads, graph.host_reads)):
        for name, operand in lowered.items():
            yield None, "host streams", Access(f"{what} {name!r}", operand,
                                               variables_of(streams[name]))
    constants = [v for v in graph.variables if v.is_constant and v.index in plan.allocated]
    for variable, (operand, _) in zip(constants, executable.constants):
        yield None, "constants", Access(f"constant {variable.name!r}", operand, (variable.index,))


class _Deferred:
    """The check of an access whose operands are not resolved yet: run when the first of them is,
    so it precedes every read of their indices (:meth:`Operand.on_resolve`).  It reads the other
    operand's index too (a split field's pair), which resolves it: an operand is never read
    unchecked because its pair was never needed."""

    def __init__(self, regions: Regions, module: Module, culprit: object, where: object,
                 access: Access) -> None:
        self.regions, self.module, self.culprit, self.where, self.access = \
            regions, module, culprit, where, access
        self.passed = False
        """Set once the access checks out: resolving the pair from inside the check calls it
        again, and the outer call then has nothing left to do."""

    def __call__(self, _: Operand) -> None:
        if self.passed:
            return
        if self.regions.first_bad(self.access) >= 0:
            _fail(self.regions, self.module, self.culprit, self.where, self.access)
        self.passed = True

    def runs(self, operand: Operand, firsts: np.ndarray, lengths: np.ndarray) -> None:
        """The check given the operand's index as runs (:meth:`Operand.index_runs`): runs each
        wholly inside an allowed block pass; anything else is checked element by element."""
        if not self.passed and not self.regions.all_runs_inside(self.access, firsts, lengths):
            self(operand)  # resolves the index: the exact rule, and the message if it fails
        self.passed = True


def _fail(regions: Regions, module: Module, culprit: object, where: object,
          access: Access) -> None:
    """Raise the GrucVerifyError of a refused access: the step and vertex, what the access touches
    and why it may not, and the IR around ``culprit`` (built only on failure: the excerpt prints the
    whole module)."""
    from gruc.ir.verify import _context  # the verifier's IR excerpt, only built on failure

    if isinstance(where, tuple):
        leaf, position = where
        where = f"step {leaf.step}, {describe_vertex(leaf.vertices[position], position, leaf.name)}"
    context = _context(module, culprit) if culprit is not None else ""
    problem = regions.explain(access)
    raise GrucVerifyError(f"memory check: {where}: {problem}" + (f"\n{context}" if context else ""))


def verify_memory(module: Module, plan: MemoryPlan, executable: Executable, *,
                  require_local: bool = False, lazy: bool = False) -> None:
    """Raise :class:`GrucVerifyError` naming the step, vertex (or copy), field, tile and bad
    address range if some access of ``executable`` (lowered from ``module`` with ``plan``) breaks
    a rule of the module docstring; return None otherwise.

    With ``lazy`` (what an :class:`~gruc.runtime.engine.Engine` asks for), an access whose
    operands are not resolved yet is checked when their indices are first computed, before anyone
    can read them, and the error is raised by whatever reads them — usually the engine's
    preparation, for a host stream the first ``write_tensor``; an index nothing reads is never
    computed, nor checked.  Without it, every index is computed and checked now."""
    regions = Regions(plan, module.graph, executable.tile_stride)
    checked: set[tuple] = set()  # vertices sharing an operand (a step's slices read one offset)
    collecting = gc.isenabled()
    gc.disable()  # tens of thousands of small acyclic tuples: no cycles to find, but with a big
    try:          # graph alive, every collection they trigger walks it (half this check's time)
        for culprit, where, access in _accesses(module, plan, executable, require_local):
            rule = (id(access.operand), access.variables, access.tile, id(access.pair))
            if rule in checked:  # the same rule on the same operands: the same answer
                continue
            checked.add(rule)
            operands = [o for o in (access.operand, access.pair) if o is not None]
            if not lazy or all(o.resolved for o in operands):
                if regions.first_bad(access) >= 0:
                    _fail(regions, module, culprit, where, access)
                continue
            check = _Deferred(regions, module, culprit, where, access)
            for operand in operands:
                operand.on_resolve(check)
    finally:
        if collecting:
            gc.enable()
