"""shard: split an RNN's time loop into shards, each shard's steps on a tile set of its own.

Why.  An RNN keeps whole sequences on chip: the inputs, the outputs and, for training, the
intermediates of every time step.  poplibs stores each sequence *time-major on every tile*, so the
loop's dynamic slice of step ``t`` reads only local memory; the price is that a tile holds its
columns for all ``S`` steps, and a long sequence on the few tiles one step's columns need runs out
of memory.  Sharding cuts the time axis into ``N`` ranges and gives each range its own, disjoint
tile set, so a tile holds ``S / N`` steps instead of ``S``: the sequence bytes per tile fall by
``N``, at the cost of ``N`` loops instead of one (a counter reset and a sync each), of the cell's
step rows crossing from the shard's tiles to the cell's, and of using more tiles.  The results do
not change: every step still runs the same cell on the same values, in the same order.

What it splits.  The module's ``TimeLoop`` nodes (:class:`~gruc.ir.program.TimeLoop`): each
names its counter, its direction and the time steps it covers; :mod:`gruc.analysis.time_loops`
reads off the body which rows of which *sequence tensors* (the bases of its ``DynamicSlice`` /
``DynamicUpdate`` vertices at the counter) every step touches, and checks the node's claims.
A variable copied element for element, on the same tiles, to or from a sequence (the host's
input of a layer) follows its placement.

What it does (``N`` shards, poplibs' bounds :func:`~gruc.rnn_geometry.shard_time_bounds`):

* placement: the element of step ``t`` in shard ``k`` moves from tile ``x`` to ``x - k`` (mod the
  tile count).  This is poplibs' ``(tileOfShard + 1) * maxShards - 1 - shard`` (dithered) read
  relative to shard 0, so it needs no layer sizes, and it reproduces what ``rnn`` builds with
  ``num_shards=N``.  The shard tile sets of each tensor must be disjoint, so ``N`` is at most the
  smallest cyclic gap between the tiles one step uses (poplibs' ``maxShards``);
* the time loop becomes ``N`` time loops (in reverse order for a reverse loop), shard ``k`` of
  ``N`` each, starting the counter afresh and slicing its rows of every base, its slice and
  update vertices on the shard's tiles (a slice fills a row buffer there and a Copy moves the
  row on: a vertex writes only its own tile).  The rest of the body — the cell, its state and
  its row buffers — is shared by all shards, as with poplibs' code reuse, so there is no state
  to hand over between shards.

Placement is the one thing the shared-graph policy (:mod:`gruc.passes.rewrite`) does not let a pass
change, and host-visible sequences must move too; so this pass works on a copy of the whole graph
(:func:`~gruc.ir.graph_copy.copy_module`, whose tile table is copied when this pass first moves a
tile) and returns a module over that copy — use the result's ``graph``.  The caller's graph and
programs are untouched.

``num-shards``: the count (1 .. the largest that fits).  0 (the default) is poplibs' GRU memory
heuristic read off the IR: as many shards as let the sequence tensors of the busiest tile take
10% of its memory, at most the largest count that fits (``getNumShards``, ``getMaxShards``).
A module whose time loops are already split (they say shard ``j`` of ``k``: built with
``shards=k``) is left as it is for 0 or ``k`` and refused otherwise.  Variable-length time
loops (a ``RepeatWhileTrue`` inside) are refused unless left as they are.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gruc.analysis.time_loops import SlicedLoop, find_time_loops
from gruc.errors import GrucOptionError, GrucProgramError, expect
from gruc.ir.graph import ComputeSet, Graph
from gruc.ir.graph_copy import copy_module
from gruc.ir.mapping import TileMapping
from gruc.ir.module import Module
from gruc.ir.program import Copy, Execute, Program, Repeat, Sequence, TimeLoop
from gruc.ir.tensor import Tensor, Variable, concat
from gruc.passes.rebase import add_vertex_like
from gruc.passes.rewrite import (pass_output, rebuild, rebuild_programs, replacing,
                                 require_valid)
from gruc.rnn_geometry import GRU_OPERAND_MEMORY_FRACTION, shard_time_bounds

__all__ = ["Shard", "sequence_variables", "shard_count"]

def sequence_variables(module: Module) -> list[Variable]:
    """The sequence tensors of the module's time loops and the variables that follow them."""
    loops, _ = find_time_loops(module)
    shard = _placement(module, loops, 1)
    graph = module.graph
    return [graph.variables[v] for v in np.unique(graph.variable_of_id(np.flatnonzero(shard >= 0)))]


def shard_count(module: Module) -> int | None:
    """How many shards the module's fixed-length time loops are split into (None: it has none),
    whether the layer was built sharded or this pass split it."""
    loops, _ = find_time_loops(module)
    return _current(loops) if loops else None


def _placement(module: Module, loops: list[SlicedLoop], count: int) -> np.ndarray:
    """The shard of every element id (-1: not a sequence element) for ``count`` shards."""
    graph = module.graph
    last = graph.variables[-1]
    shard = np.full(last.first_id + last.num_elements, -1, dtype=np.int64)
    for loop in loops:
        length = shard_time_bounds(loop.steps, count)[0][1]
        for v, (ids, rows) in loop.rows.items():
            clash = (shard[ids] >= 0) & (shard[ids] != rows // length)
            expect(not clash.any(), GrucProgramError,
                   f"sequence tensor {graph.variables[v].name!r} is cut at different time steps "
                   "by two time loops")
            shard[ids] = rows // length
    old = graph.element_tiles_of_ids(np.arange(len(shard)))
    copies = [n for n in module.walk() if isinstance(n, Copy)]
    while True:  # variables copied element for element, on the same tiles, follow a sequence
        proposals: dict[int, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
        for copy in copies:
            src, dst = copy.src.flat_ids(), copy.dst.flat_ids()
            same = old[src] == old[dst]
            for a, b in ((src, dst), (dst, src)):
                take = same & (shard[a] >= 0) & (shard[b] < 0)
                for v in np.unique(graph.variable_of_id(b[take])):
                    mine = take & (graph.variable_of_id(b) == v)
                    proposals[int(v)].append((b[mine], shard[a][mine]))
        added = False
        for v, parts in proposals.items():
            variable = graph.variables[v]
            ids, shards = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            pairs = np.unique(np.stack([ids, shards]), axis=1)
            if variable.is_constant or np.any(shard[variable.first_id:variable.first_id
                                                    + variable.num_elements] >= 0) \
                    or pairs.shape[1] != variable.num_elements \
                    or len(np.unique(pairs[0])) != variable.num_elements:
                continue
            shard[pairs[0]] = pairs[1]
            added = True
        if not added:
            return shard


def _max_shards(module: Module, loops: list[SlicedLoop], shard: np.ndarray) -> int:
    """poplibs' ``getMaxShards`` read off the placement: disjoint shifted tile sets, each
    shard keeping at least one step of the shortest loop."""
    graph = module.graph
    tiles_total = graph.target.num_tiles
    fitting = tiles_total
    for v in np.unique(graph.variable_of_id(np.flatnonzero(shard >= 0))):
        variable = graph.variables[v]
        tiles = np.unique(graph.element_tiles(variable))
        gaps = np.diff(np.append(tiles, tiles[0] + tiles_total))
        fitting = min(fitting, int(gaps.min()))
    steps = min(loop.steps for loop in loops)
    per_shard = -(-steps // fitting)
    return -(-steps // per_shard)


def _heuristic(module: Module, shard: np.ndarray, max_shards: int) -> int:
    """poplibs' GRU rule: the sequence bytes of the busiest tile within 10% of its memory."""
    graph = module.graph
    ids = np.flatnonzero(shard >= 0)
    sizes = np.array([v.dtype.size for v in graph.variables])[graph.variable_of_id(ids)]
    per_tile = np.bincount(graph.element_tiles_of_ids(ids), weights=sizes)
    budget = graph.target.bytes_per_tile * GRU_OPERAND_MEMORY_FRACTION
    return max(1, min(math.ceil(per_tile.max(initial=0) / budget), max_shards))


def _current(loops: list[SlicedLoop]) -> int:
    """How many shards the loops are split into already: what their time loops say."""
    counts = {loop.node.shards for loop in loops}
    expect(len(counts) == 1, GrucProgramError,
           f"the time loops split their sequences into different shard counts {sorted(counts)}")
    return counts.pop()


def _shard_compute_set(graph: Graph, cs: ComputeSet, begin: int, end: int, k: int) -> Program:
    """Shard ``k``'s version of a slice / update compute set: each vertex on the tile of its
    rows.  A vertex writes only its own tile, so a slice lands in a row buffer there and one Copy
    per type then moves the rows to the cell's buffers (poplibs' code-reuse argument copy)."""
    new = graph.add_compute_set(cs.name)
    moves: dict[object, list[tuple[Tensor, Tensor]]] = defaultdict(list)
    for vertex in cs.vertices:
        rows = vertex.fields["base"].slice(begin, end)
        tiles = np.unique(graph.element_tiles(rows))
        fields, tile = {**vertex.fields, "base": rows}, vertex.tile
        if len(tiles) == 1 and tiles[0] != vertex.tile:
            tile = int(tiles[0])
            if "out" in fields:
                window = fields["out"]
                buffer = graph.add_variable(window.dtype, window.shape, f"{cs.name}/shard{k}")
                graph.set_tile_mapping(buffer, tile)
                fields["out"] = buffer
                moves[window.dtype].append((buffer.flatten(), window.flatten()))
        add_vertex_like(graph, new, vertex, fields, tile=tile)
    copies = [Copy(concat([b for b, _ in pairs]), concat([w for _, w in pairs]))
              for pairs in moves.values()]
    return Sequence(Execute(new), *copies) if copies else Execute(new)


def _shard_loop(graph: Graph, loop: SlicedLoop, count: int) -> Sequence:
    """``loop`` as one time loop per shard, each slicing its rows with vertices on the shard's
    tiles."""
    bounds = shard_time_bounds(loop.steps, count)
    order = range(count) if loop.step == 1 else range(count - 1, -1, -1)
    items: list[Program] = []
    for k in order:
        begin, end = bounds[k]
        if begin == end:
            continue
        replaced = {id(cs): _shard_compute_set(graph, cs, begin, end, k) for cs in loop.dynamic}
        body = rebuild(loop.loop.body, lambda n: replaced[id(n.compute_set)]
                       if isinstance(n, Execute) and id(n.compute_set) in replaced else n)
        first = 0 if loop.step == 1 else end - begin - 1
        start = graph.add_constant(loop.counter.dtype, (1,), first - loop.step * loop.advance_first,
                                   f"{loop.counter.name}/shard{k}_start")
        graph.set_tile_mapping(start, TileMapping.from_element_tiles(
            graph.element_tiles(loop.counter)))
        items.append(TimeLoop(Copy(start, loop.counter), Repeat(end - begin, body),
                              loop.node.reverse, loop.node.first_step + begin, end - begin, k,
                              count))
    return Sequence(*items)


@dataclass(frozen=True)
class Shard:
    """Split RNN time loops into shards on disjoint tile sets (poplibs' sequence sharding)."""

    name: ClassVar[str] = "shard"
    num_shards: int = 0
    """Shards per time loop; 0: poplibs' memory heuristic (see the module docstring)."""

    def __post_init__(self) -> None:
        expect(isinstance(self.num_shards, int) and not isinstance(self.num_shards, bool)
               and self.num_shards >= 0, GrucOptionError,
               f"option 'num-shards' must be an integer >= 1 (or 0 for poplibs' heuristic), "
               f"got {self.num_shards!r}")

    def apply(self, module: Module) -> Module:
        """Find the time loops, decide the count (asked, already built, or the heuristic), and
        split them on a copy of the graph, since placement changes (see the module docstring)."""
        require_valid(module)
        loops, variable = find_time_loops(module)
        if not loops:
            expect(self.num_shards <= 1 and not variable, GrucProgramError,
                   "found no fixed-length time loop to shard" + (
                       " (variable-length loops are not sharded)" if variable else ""))
            return pass_output(module)
        current = _current(loops)
        shard = _placement(module, loops, 1)
        most = _max_shards(module, loops, shard) if current == 1 else current
        wanted = self.num_shards or (current if current > 1 else _heuristic(module, shard, most))
        if wanted == current:
            return pass_output(module)
        expect(current == 1, GrucProgramError,
               f"the time loops are already split into {current} shards; shard splits whole "
               f"loops only: ask for num-shards={current} or build the layer with one shard")
        expect(not variable, GrucProgramError,
               "variable-length time loops (RepeatWhileTrue) are not sharded by this pass; build "
               "the layer with the shard count instead")
        expect(wanted <= most, GrucOptionError,
               f"option 'num-shards' is {wanted}, but at most {most} shards fit (the sequence "
               f"tensors' tile sets must stay disjoint and every shard needs a step); allowed "
               f"1..{most}")
        module = copy_module(module, erase_unused=False)
        graph = module.graph
        loops, _ = find_time_loops(module)
        shard = _placement(module, loops, wanted)
        for v in np.unique(graph.variable_of_id(np.flatnonzero(shard >= 0))):
            variable = graph.variables[v]
            ids = np.arange(variable.first_id, variable.first_id + variable.num_elements)
            tiles = (graph.element_tiles_of_ids(ids) - shard[ids]) % graph.target.num_tiles
            graph.set_tile_mapping(variable, TileMapping.from_element_tiles(tiles))
        replacements: dict[int, Program | None] = {}
        for loop in loops:
            replacements[id(loop.node)] = _shard_loop(graph, loop, wanted)
        return pass_output(rebuild_programs(module, replacing(replacements)))
