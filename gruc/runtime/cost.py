"""The cycle model: what each step costs on each tile, as BSP supersteps.

Every step that moves data is one bulk-synchronous superstep: an **exchange** phase (remote
operands and inter-tile copies move at ``target.exchange_bytes_per_cycle`` per tile, slower across
IPUs), a **compute** phase (each tile runs its vertices; the superstep waits for the busiest tile),
and a **sync**.  The estimates are per step and per tile, computed once at compile time from the
IR and the target; the engine multiplies them by how often each step ran.

Vertex compute estimates live in :data:`CYCLE_ESTIMATORS`, one function per vertex kind (beside
the kinds, like poplibs' ``*CycleEstimators.cpp``): given the vertex and the elements each tile
computes, the cycles each tile spends.  An elementwise vertex costs a fixed overhead plus, per
vector of elements, the summed cost of its operations; the six worker contexts of a tile share
the work in a barrel, so a tile issues about one vector operation per cycle overall.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from gruc.ir.graph import Graph, Vertex
from gruc.ir.mapping import distinct
from gruc.ir.program import Copy, Execute, PrintTensor, WriteUndef
from gruc.passes.liveness import Step
from gruc.target import Target

VERTEX_OVERHEAD_CYCLES = 50
"""Fixed cost of starting a vertex on a tile (supervisor dispatch of the workers)."""

COPY_BYTES_PER_CYCLE = 8
"""On-tile memory copies move one 64-bit word per cycle."""

Estimator = Callable[[Vertex, np.ndarray, Target], np.ndarray]
CYCLE_ESTIMATORS: dict[str, Estimator] = {}

ExchangeEstimator = Callable[[Vertex, Graph], tuple[np.ndarray, np.ndarray, bool]]
"""Bytes each tile receives and sends for a vertex, and whether any of them crosses IPUs."""
EXCHANGE_ESTIMATORS: dict[str, ExchangeEstimator] = {}
"""Exchange of kinds whose fields do not pair element by element with the split field (a matmul's
operand blocks go to every tile that uses them); other kinds get the elementwise rule."""


def cycle_estimator(kind: str) -> Callable[[Estimator], Estimator]:
    """Register the compute-cycle estimator of vertex kind ``kind``."""

    def register(fn: Estimator) -> Estimator:
        CYCLE_ESTIMATORS[kind] = fn
        return fn

    return register


def exchange_estimator(kind: str) -> Callable[[ExchangeEstimator], ExchangeEstimator]:
    """Register the exchange estimator of vertex kind ``kind``."""

    def register(fn: ExchangeEstimator) -> ExchangeEstimator:
        EXCHANGE_ESTIMATORS[kind] = fn
        return fn

    return register


def elementwise_cycles(elements: np.ndarray, vector_width: int, per_vector: int) -> np.ndarray:
    """Per-tile cycles of elementwise work: overhead plus vectors times cost (0 where idle)."""
    vectors = -(-elements // vector_width)
    return np.where(elements > 0, VERTEX_OVERHEAD_CYCLES + vectors * per_vector, 0)


@dataclass(frozen=True, eq=False)
class StepCost:
    """The static cost of one execution of a step."""

    compute_by_tile: np.ndarray
    """Cycles each tile computes (int64, one per tile)."""
    bytes_in_by_tile: np.ndarray
    """Exchange bytes each tile receives."""
    bytes_out_by_tile: np.ndarray
    """Exchange bytes each tile sends."""
    compute_cycles: int
    exchange_cycles: int
    sync_cycles: int

    @property
    def total_cycles(self) -> int:
        return self.compute_cycles + self.exchange_cycles + self.sync_cycles

    @property
    def exchange_bytes(self) -> int:
        return int(self.bytes_in_by_tile.sum())


class _StepCoster:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.target = graph.target
        self.num_tiles = graph.target.num_tiles

    def zeros(self) -> np.ndarray:
        return np.zeros(self.num_tiles, dtype=np.int64)

    def remote(self, tensor, home: np.ndarray | int, bytes_in: np.ndarray, bytes_out: np.ndarray,
               crossing: list[bool]) -> None:
        """Account the elements of ``tensor`` whose tile differs from ``home`` (per element, or
        one tile for all: a vertex's)."""
        away = self.graph.element_tiles(tensor) != home
        if not np.any(away):
            return
        ids = tensor.flat_ids()[away]
        receivers = home[away] if isinstance(home, np.ndarray) else home
        pairs = distinct(ids * self.num_tiles + receivers)  # one transfer per (element, receiver)
        receivers = pairs % self.num_tiles
        senders = self.graph.element_tiles_of_ids(pairs // self.num_tiles).astype(np.int64)
        size = tensor.dtype.size
        bytes_in += np.bincount(receivers, minlength=self.num_tiles) * size
        bytes_out += np.bincount(senders, minlength=self.num_tiles) * size
        per_ipu = self.target.tiles_per_ipu
        crossing.append(bool(np.any(receivers // per_ipu != senders // per_ipu)))

    def vertex(self, vertex: Vertex, compute: np.ndarray, bytes_in: np.ndarray,
               bytes_out: np.ndarray, crossing: list[bool]) -> None:
        if vertex.tile is None:
            home = self.graph.element_tiles(vertex.fields[vertex.kind.split]).astype(np.int64)
            elements = np.bincount(home, minlength=self.num_tiles)
        else:
            elements = self.zeros()
            elements[vertex.tile] = max(t.num_elements for _, t in vertex.tensors())
        estimator = CYCLE_ESTIMATORS.get(vertex.kind.name)
        if estimator is None:
            compute += elementwise_cycles(elements, 1, 1)
        else:
            compute += estimator(vertex, elements, self.target)
        exchange = EXCHANGE_ESTIMATORS.get(vertex.kind.name)
        if exchange is not None:
            received, sent, crosses = exchange(vertex, self.graph)
            bytes_in += received
            bytes_out += sent
            crossing.append(crosses)
            return
        for _, tensor in vertex.tensors():
            if vertex.tile is None:
                self.remote(tensor, home, bytes_in, bytes_out, crossing)
            else:
                self.remote(tensor, vertex.tile, bytes_in, bytes_out, crossing)

    def copy(self, node: Copy, compute: np.ndarray, bytes_in: np.ndarray, bytes_out: np.ndarray,
             crossing: list[bool]) -> None:
        dst_tiles = self.graph.element_tiles(node.dst).astype(np.int64)
        src_tiles = self.graph.element_tiles(node.src).astype(np.int64)
        local = dst_tiles == src_tiles
        local_bytes = np.bincount(dst_tiles[local], minlength=self.num_tiles) * node.dst.dtype.size
        compute += np.where(local_bytes > 0, -(-local_bytes // COPY_BYTES_PER_CYCLE), 0)
        self.remote(node.src, dst_tiles, bytes_in, bytes_out, crossing)

    def step(self, step: Step) -> StepCost:
        node = step.node
        compute, bytes_in, bytes_out = self.zeros(), self.zeros(), self.zeros()
        crossing: list[bool] = []
        sync = self.target.sync_cycles
        if isinstance(node, Execute):
            for vertex in node.compute_set.vertices:
                self.vertex(vertex, compute, bytes_in, bytes_out, crossing)
        elif isinstance(node, Copy):
            self.copy(node, compute, bytes_in, bytes_out, crossing)
        elif isinstance(node, (WriteUndef, PrintTensor)):
            sync = 0
        # Sync, and the predicate read of If / RepeatWhileTrue: a sync, nothing computed or moved
        rate = (self.target.inter_ipu_exchange_bytes_per_cycle if any(crossing)
                else self.target.exchange_bytes_per_cycle)
        exchange = int(np.ceil(max(int(bytes_in.max(initial=0)), int(bytes_out.max(initial=0)))
                               / rate))
        if any(crossing):
            sync = max(sync, self.target.inter_ipu_sync_cycles)
        return StepCost(compute, bytes_in, bytes_out, int(compute.max(initial=0)), exchange, sync)


def step_costs(graph: Graph, steps: tuple[Step, ...]) -> tuple[StepCost, ...]:
    """The static cost of one execution of every numbered step."""
    coster = _StepCoster(graph)
    return tuple(coster.step(step) for step in steps)
