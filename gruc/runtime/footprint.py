"""Tile memory as Poplar counts it: every category, per tile, and where it lies.

The memory plan (:mod:`gruc.memory.planner`) places tensor data.  A Poplar tile holds more,
and Poplar's memory report counts all of it (category names as in its graph profile):

* ``variable`` / ``constant``: tensor data, from the plan: always-live, and the not-always-live
  bytes of each step;
* ``message``: the exchange's landing buffers.  A vertex reads only its own tile's memory, so
  operands held elsewhere are copied to its tile before its compute set runs and live there while
  it runs (poplin: "poplar will rearrange the data using exchange code ... this rearrangement
  happens on every tile that receives the data").  Not always live: a step's received bytes add
  to that step's not-always-live bytes; a ``Copy`` program writes straight into its destination;
* ``vertexInstanceState`` / ``vertexFieldData``: each vertex's record on its tile (a pointer and
  a count per field, 4-byte aligned) and its out-of-line arrays (edge-pointer lists, worklists),
  once per vertex of every compute set the program runs, however often it runs;
* ``vertexCode``: each codelet's machine code, once on every tile that runs it;
* ``controlCode``: the instructions that step each tile through the program: a sync and a branch
  per superstep on every tile, a launch per vertex a tile runs, loop and call bookkeeping;
* ``internalExchangeCode``: each exchange's code on the tiles that take part: an entry and a
  return, and per message a send or a receive set-up.

A device whose program is not compiled to IPU code (``target.compile_ipu_code`` false: poplibs'
test IPUModels) holds no code: its vertex, control and exchange code are zero, as in its profile.

Everything but tensor data and landing buffers is always live and non-interleaved (code can only
be fetched from non-interleaved memory).  A tile's highest address (``totalIncludingGaps``) is its
non-interleaved end — the always-live categories, then its tensor data and buffers — or, if it
holds interleaved data, the interleaved region's start plus what lies there.  Sources and
formulas per category: ``docs/memory-model.md``.

``model="tensors"`` keeps tensor data alone (gruc's figures before this model), for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gruc.errors import GrucValueError
from gruc.ir.codelets.dynamic import DYNAMIC_SLICE, DYNAMIC_UPDATE
from gruc.ir.codelets.elementwise import MAP, MAP_IN_PLACE
from gruc.ir.codelets.matmul import (FIELD_N, MATMUL_PARTIALS, MATMUL_REDUCE, MATMUL_REDUCE_ACC,
                                     block_tiles, blocking_of, method_of)
from gruc.ir.codelets.reduce import REDUCE, REDUCE_UPDATE
from gruc.ir.codelets.transpose import TRANSPOSE, can_use_fast_transpose, tile_blocks
from gruc.ir.graph import Graph, Vertex
from gruc.ir.module import Module
from gruc.ir.program import Call, Copy, Execute, If, Repeat, RepeatWhileTrue
from gruc.ir.vertices import VertexKind
from gruc.memory.plan import MemoryPlan, TileOverflow
from gruc.memory.planner import LARGEST_SHOWN, tile_total
from gruc.runtime.cost import StepCost
from gruc.target import Target

MEMORY_MODELS = ("poplar", "tensors")

ALWAYS_LIVE_CATEGORIES = ("variable", "constant", "vertexCode", "vertexInstanceState",
                          "vertexFieldData", "controlCode", "internalExchangeCode")
"""Always-live categories, in the order reports list them."""

NOT_ALWAYS_LIVE_CATEGORIES = ("variable", "message")
"""Not-always-live categories: tensor data, and the exchange's landing buffers."""

INSTRUCTION_BYTES = 4
"""Every Colossus instruction is 32 bits (pairs issue as 64-bit bundles)."""

SPAN_BYTES = 8
"""A vertex field's record: a 32-bit pointer and a 32-bit element count (Poplar's ``SPAN``)."""

POINTER_BYTES = 4
"""One entry of an edge-pointer list (``ONE_PTR``)."""

COUNT_BYTES = 2
"""A vertex's 16-bit count field (``unsigned short``)."""

CONTROL_INSTRUCTIONS = {"superstep": 2, "vertex": 2, "repeat": 3, "call": 2, "branch": 2}
"""Control code per program element, in instructions: every tile syncs and branches to its next
step at each superstep; a tile launches each vertex it runs with ``setzi`` (its state's address)
and ``run``; a ``Repeat`` sets its counter, counts down and branches back; a ``Call`` calls and
returns; an ``If`` / ``RepeatWhileTrue`` tests its predicate and branches."""

EXCHANGE_INSTRUCTIONS = {"entry": 2, "message": 2}
"""Exchange code per exchange a tile takes part in: a call into it and a return, then per
message it sends a ``send`` and its set-up, per message it receives the incoming pointer's
set-up (``delaypic`` / ``sendpicp``): two instructions each."""

AMP_RECORD_BYTES = 32
"""``ConvPartial1x1Out``'s record: four vector pointers and seven 16-bit counts, padded."""

AMP_WORKLIST_BYTES = 36
"""Its worklists: three 16-bit entries (output offset, count, input offset) for each of the six
workers."""

CODE_BYTES: dict[VertexKind, int] = {
    MATMUL_REDUCE: 384,
    MATMUL_REDUCE_ACC: 384,
    MAP: 320,
    MAP_IN_PLACE: 320,
    DYNAMIC_SLICE: 384,
    DYNAMIC_UPDATE: 384,
    REDUCE: 640,
    REDUCE_UPDATE: 640,
}
"""Code bytes of each kind's codelet, counted (instructions x 4 bytes) from poplibs' assembly for
it, or, for codelets poplibs compiles from C++ (generated elementwise expressions), from the
assembly of the popops vertex doing the same work; see ``docs/memory-model.md``."""

PARTIALS_CODE_BYTES = {"AMP": 1024, "MAC": 640}
"""Code bytes of a ``MatMulPartials`` codelet, by its conv method: ``ConvPartial1x1Out`` (AMP)
or ``ConvPartialHorizontalMac`` (MAC)."""

DEFAULT_CODE_BYTES = 384
"""Code bytes of a codelet not in :data:`CODE_BYTES`."""


@dataclass(frozen=True, eq=False)
class Footprint:
    """Every byte Poplar would put on every tile, by category (see the module docstring)."""

    target: Target
    model: str
    always_live: dict[str, np.ndarray]
    """Per always-live category, bytes per tile (int64)."""
    not_always_live: dict[str, np.ndarray]
    """Per not-always-live category, each tile's bytes at its peak step."""
    not_always_live_peak: np.ndarray
    """Per tile: the most not-always-live bytes at any step (tensor data plus landing buffers)."""
    peak_step: np.ndarray
    """Per tile: the step of that peak (-1: none)."""
    interleaved_bytes: np.ndarray
    """Per tile: bytes of its interleaved region in use (gaps included)."""
    total_including_gaps: np.ndarray
    """Per tile: its highest address in use."""
    largest: dict[int, tuple[tuple[str, int], ...]]
    """Per over-capacity tile: its largest tensors."""

    @cached_property
    def always_live_bytes(self) -> np.ndarray:
        return sum(self.always_live.values())

    @cached_property
    def tiles_over_capacity(self) -> tuple[TileOverflow, ...]:
        capacity = self.target.bytes_per_tile
        return tuple(TileOverflow(tile, int(self.total_including_gaps[tile]), capacity,
                                  self.largest.get(tile, ()))
                     for tile in np.flatnonzero(self.total_including_gaps > capacity).tolist())

    @property
    def tiles_used(self) -> int:
        """Tiles holding tensor data or running vertices (every tile holds control code)."""
        used = (self.always_live["variable"] + self.always_live["constant"]
                + self.always_live["vertexInstanceState"] + self.not_always_live_peak) > 0
        return int(np.count_nonzero(used))

    @property
    def fits(self) -> bool:
        return not np.any(self.total_including_gaps > self.target.bytes_per_tile)

    @property
    def max_tile_bytes(self) -> int:
        return int(self.total_including_gaps.max(initial=0))

    def total_memory(self) -> int:
        """Poplar's total: every tile's always-live bytes plus its not-always-live peak."""
        return int(self.always_live_bytes.sum()) + int(self.not_always_live_peak.sum())


# ---- vertex state and code --------------------------------------------------------------------
def _vertex_tiles(graph: Graph, vertex: Vertex) -> np.ndarray:
    """The tiles a vertex runs on: its own, or those holding elements of its split field."""
    if vertex.tile is not None:
        return np.array([vertex.tile], dtype=np.int64)
    return np.unique(graph.element_tiles(vertex.fields[vertex.kind.split])).astype(np.int64)


def _record_bytes(vertex: Vertex) -> tuple[int, int]:
    """A vertex's state on one tile: its record and its out-of-line field data, in bytes."""
    record, data = 0, 0
    for name, spec in vertex.kind.fields.items():
        if name not in vertex.fields:
            continue
        if spec.vector:
            record += POINTER_BYTES
            data += SPAN_BYTES * len(vertex.fields[name])
        else:
            record += SPAN_BYTES
    return -(-record // 4) * 4, data


def _matmul_state(vertex: Vertex, num_tiles: int) -> tuple[np.ndarray, np.ndarray]:
    """``ConvPartial1x1Out``'s record and arrays on each block's tile: a pointer per input group,
    per weights group pair and per output group, and the worklists."""
    geometry = blocking_of(vertex)
    method = method_of(vertex)
    gb, kb, mb, nb = geometry.block_dims()
    out_chans = mb if vertex.params["orientation"] == FIELD_N else nb
    n_in = -(-kb // method.in_chans_per_group)
    n_out = -(-out_chans // method.partial_chans_per_group)
    arrays = POINTER_BYTES * gb * (n_in + n_in * n_out + n_out) + AMP_WORKLIST_BYTES
    tiles = block_tiles(vertex).reshape(-1)
    record = np.bincount(tiles, minlength=num_tiles) * AMP_RECORD_BYTES
    data = np.bincount(tiles, weights=arrays.reshape(-1), minlength=num_tiles)
    return record.astype(np.int64), data.astype(np.int64)


def _reduce_state(vertex: Vertex, tiles: np.ndarray, num_tiles: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``ReduceAdd``'s record (output and partials pointers, counts) and its list of one pointer
    per partial row."""
    depth = vertex.fields["partials"].shape[1]
    record, data = np.zeros(num_tiles, np.int64), np.zeros(num_tiles, np.int64)
    record[tiles] = 2 * SPAN_BYTES
    data[tiles] = POINTER_BYTES * depth
    return record, data


def _transpose_state(graph: Graph, vertex: Vertex, num_tiles: int, workers: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The vertices popops' ``addTransposeVertices`` puts on each tile holding ``N`` blocks:
    one fast ``Transpose`` / ``TransposeSupervisor`` (two block vectors and four 16-bit counts),
    or a ``Transpose2d`` per worker share (a vector of source-block pointers, a pointer to the
    destination pointers and two 16-bit sizes), whose lists hold a pointer per block each way."""
    out = vertex.fields["out"]
    rows, cols, blocks = tile_blocks(vertex, np.bincount(graph.element_tiles(out),
                                                         minlength=num_tiles))
    record, data = np.zeros(num_tiles, np.int64), np.zeros(num_tiles, np.int64)
    for count in np.unique(blocks[blocks > 0]).tolist():
        on = blocks == count
        if can_use_fast_transpose(out.dtype.size == 2, rows, cols, count):
            record[on] = 2 * SPAN_BYTES + 4 * COUNT_BYTES
        else:
            record[on] = min(count, workers) * (SPAN_BYTES + POINTER_BYTES + 2 * COUNT_BYTES)
            data[on] = 2 * POINTER_BYTES * count
    return record, data


Codelet = tuple[VertexKind, str]
"""A codelet as a tile holds its code: the vertex kind, and which of the kind's codelets (a matrix
product's conv method and input type, a map's expression; empty for a kind of one codelet)."""


def codelet_of(vertex: Vertex) -> Codelet:
    """The codelet a vertex runs (a generated elementwise codelet per distinct expression)."""
    kind = vertex.kind
    if kind is MATMUL_PARTIALS:
        return kind, f"{method_of(vertex).kind}:{vertex.fields['a'].dtype.name}"
    if kind in (MAP, MAP_IN_PLACE):
        return kind, repr(vertex.params["expr"])
    return kind, ""


def _code_bytes(codelet: Codelet) -> int:
    kind, variant = codelet
    if kind is MATMUL_PARTIALS:
        return PARTIALS_CODE_BYTES[variant.split(":")[0]]
    return CODE_BYTES.get(kind, DEFAULT_CODE_BYTES)


# ---- control and exchange code ----------------------------------------------------------------
def _control_elements(module: Module) -> dict[str, int]:
    """How many Repeat, Call and branch nodes the module's code holds (each function once)."""
    nodes = list(module.walk())
    return {"repeat": sum(isinstance(node, Repeat) for node in nodes),
            "call": sum(isinstance(node, Call) for node in nodes),
            "branch": sum(isinstance(node, (If, RepeatWhileTrue)) for node in nodes)}


class _Counter:
    """Builds a module's footprint from its plan and step costs."""

    def __init__(self, module: Module, plan: MemoryPlan, costs: tuple[StepCost, ...]) -> None:
        self.module, self.plan, self.costs = module, plan, costs
        self.graph = module.graph
        self.target = module.graph.target
        self.num_tiles = self.target.num_tiles

    def zeros(self) -> np.ndarray:
        return np.zeros(self.num_tiles, dtype=np.int64)

    def vertices(self) -> dict[str, np.ndarray]:
        """Vertex state, field data and code of every compute set the module runs."""
        state, data, code = self.zeros(), self.zeros(), self.zeros()
        codelets: dict[Codelet, np.ndarray] = {}
        seen: set[int] = set()
        launches = self.zeros()
        for step in self.plan.liveness.steps:
            node = step.node
            if not isinstance(node, Execute) or id(node.compute_set) in seen:
                continue
            seen.add(id(node.compute_set))
            for vertex in node.compute_set.vertices:
                tiles = _vertex_tiles(self.graph, vertex)
                if vertex.kind is MATMUL_PARTIALS:
                    record, arrays = _matmul_state(vertex, self.num_tiles)
                elif vertex.kind in (MATMUL_REDUCE, MATMUL_REDUCE_ACC):
                    record, arrays = _reduce_state(vertex, tiles, self.num_tiles)
                elif vertex.kind is TRANSPOSE:
                    record, arrays = _transpose_state(self.graph, vertex, self.num_tiles,
                                                      self.target.num_worker_contexts)
                else:
                    size, extra = _record_bytes(vertex)
                    record, arrays = self.zeros(), self.zeros()
                    record[tiles], arrays[tiles] = size, extra
                state += record
                data += arrays
                launches[tiles] += 1
                mask = codelets.setdefault(codelet_of(vertex), np.zeros(self.num_tiles, bool))
                mask[tiles] = True
        for codelet, mask in codelets.items():
            code += mask * _code_bytes(codelet)
        self.launches = launches
        return {"vertexCode": code, "vertexInstanceState": state, "vertexFieldData": data}

    def control(self) -> np.ndarray:
        """Control code: supersteps and control nodes on every tile, launches on the tiles that
        run vertices (:data:`CONTROL_INSTRUCTIONS`)."""
        steps = sum(1 for step in self.plan.liveness.steps
                    if isinstance(step.node, (Execute, Copy)))
        nodes = _control_elements(self.module)
        fixed = (steps * CONTROL_INSTRUCTIONS["superstep"]
                 + sum(CONTROL_INSTRUCTIONS[name] * count for name, count in nodes.items()))
        return INSTRUCTION_BYTES * (fixed + CONTROL_INSTRUCTIONS["vertex"] * self.launches)

    def exchange_code(self) -> np.ndarray:
        """Exchange code of every exchange step, once (a loop body's exchanges are stored once):
        entry and return where a tile takes part, set-up per message (:data:`EXCHANGE_...`)."""
        total = self.zeros()
        for cost in self.costs:
            messages = cost.peers_in_by_tile + cost.peers_out_by_tile
            total += np.where(messages > 0, EXCHANGE_INSTRUCTIONS["entry"]
                              + EXCHANGE_INSTRUCTIONS["message"] * messages, 0)
        return INSTRUCTION_BYTES * total

    def landing_by_step(self) -> list[tuple[int, np.ndarray]]:
        """``(step, bytes each tile receives)`` of the compute sets whose vertices read operands
        held on other tiles: those bytes land in buffers on the reading tiles."""
        return [(step.index, cost.bytes_in_by_tile)
                for step, cost in zip(self.plan.liveness.steps, self.costs)
                if isinstance(step.node, Execute) and cost.bytes_in_by_tile.any()]

    def peaks(self, landing: list[tuple[int, np.ndarray]]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per tile: the not-always-live peak with landing buffers, its tensor part, its step."""
        plan = self.plan
        table = plan.signature_not_always_live_by_step
        used = plan.tile_signature >= 0
        tensors_at = np.zeros((self.num_tiles, table.shape[1]), dtype=np.int64)
        tensors_at[used] = table[plan.tile_signature[used]]
        total_at = tensors_at.copy()
        for step, received in landing:
            total_at[:, step] += received
        if not total_at.shape[1]:
            return self.zeros(), self.zeros(), np.full(self.num_tiles, -1, dtype=np.int64)
        peak_step = total_at.argmax(axis=1)
        rows = np.arange(self.num_tiles)
        return total_at[rows, peak_step], tensors_at[rows, peak_step], \
            np.where(total_at.max(axis=1) > 0, peak_step, -1)


def _largest(plan: MemoryPlan, tiles: list[int]) -> dict[int, tuple[tuple[str, int], ...]]:
    """The largest tensors on each of ``tiles``, largest first."""
    result = {}
    for tile in tiles:
        blocks = sorted(plan.tile_blocks(tile), key=lambda b: (-b[2], b[0]))[:LARGEST_SHOWN]
        result[tile] = tuple((name, nbytes) for name, _, nbytes, _ in blocks)
    return result


def memory_footprint(module: Module, plan: MemoryPlan, costs: tuple[StepCost, ...],
                     model: str = "poplar") -> Footprint:
    """The footprint of a compiled module (see the module docstring)."""
    if model not in MEMORY_MODELS:
        raise GrucValueError(f"memory model {model!r} is not one of: {', '.join(MEMORY_MODELS)}")
    graph = module.graph
    target = graph.target
    counter = _Counter(module, plan, costs)
    constants = {index for index, variable in enumerate(graph.variables) if variable.is_constant}
    constant_bytes = counter.zeros()
    for index in constants & set(plan.allocated):
        for tile, _, nbytes in plan.blocks(index):
            constant_bytes[tile] += nbytes
    always = {"variable": plan.always_live_bytes - constant_bytes, "constant": constant_bytes}
    if model == "tensors":
        always.update({name: counter.zeros() for name in ALWAYS_LIVE_CATEGORIES[2:]})
        peak, tensors, step = plan.not_always_live_bytes, plan.not_always_live_bytes, \
            np.full(target.num_tiles, -1, dtype=np.int64)
        total = plan.total_bytes
    else:
        always.update(counter.vertices())
        always["controlCode"] = counter.control()
        always["internalExchangeCode"] = counter.exchange_code()
        if not target.compile_ipu_code:  # nothing compiled: no code in the device's memory
            for name in ("vertexCode", "controlCode", "internalExchangeCode"):
                always[name] = counter.zeros()
        peak, tensors, step = counter.peaks(counter.landing_by_step())
        fixed = sum(always[name] for name in ALWAYS_LIVE_CATEGORIES[2:])
        ends = plan.region_ends.copy()
        ends[0] = fixed + np.maximum(ends[0], plan.always_live_bytes + peak
                                     - plan.region_ends[1])
        total = tile_total(ends, target.interleaved_memory_start)
    overflowing = np.flatnonzero(total > target.bytes_per_tile).tolist()
    return Footprint(target, model, always, {"variable": tensors, "message": peak - tensors},
                     peak, step, plan.region_ends[1].copy(), total,
                     _largest(plan, overflowing[:16]))
