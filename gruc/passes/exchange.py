"""exchange: every operand a vertex reads from another tile arrives by an explicit Copy first.

Why.  On the IPU a vertex touches only its own tile's memory; what lives elsewhere is moved by the
exchange phase of the superstep into a buffer on the reading tile, and that buffer is tile memory
like any other.  Builders (like Poplar users) connect vertices to tensors wherever they live, and
the engine prices such reads as exchange.  This pass makes the exchange part of the program: for
each compute set with remote fields it

* adds a *receive buffer* per remote field tensor: a new variable of the field's shape and type,
  each element on the tile that reads it (the vertex's tile, or for an elementwise vertex the tile
  of the element it pairs with in the kind's ``split`` field);
* reconnects the vertex to the buffer (in a new compute set: the caller's is left as it was);
* copies the remote tensors into their buffers before the compute set, and buffers of written
  fields (``Output`` / ``InOut``) back to where the tensors live after it — one ``Copy`` per
  element type each way, so each direction is one superstep.

Then ``verify(module, require_local=True)`` holds: the vertices touch their own tile only.  The
bytes that cross tiles do not change: they move in the copies instead of the compute set, and the
report counts them per tile as before (a ``Copy`` counts one transfer per element and receiving
tile, as an elementwise vertex does).  What changes is visible, which is the point: the buffers
take memory while they are live, each direction costs a sync, and local elements of a partly
remote field are copied on their tile too.

Fields not paired element by element with the ``split`` field of an untiled vertex (a matmul's
operand blocks, which land in its own ``received`` field, and its partial sums) are the kind's own
exchange and are left as they are.  Unlike the other passes, this one also rewrites function
bodies — a receive copy is right for every caller — by giving the function its new body.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from gruc.ir.graph import ComputeSet, Graph, Vertex
from gruc.ir.mapping import TileMapping
from gruc.ir.module import Module
from gruc.ir.program import Copy, Execute, Program, Sequence
from gruc.ir.tensor import Tensor, concat
from gruc.ir.vertices import Direction
from gruc.passes.rebase import copy_compute_set
from gruc.passes.rewrite import pass_output, rebuild, rebuild_programs, require_valid

__all__ = ["Exchange"]


def _flat(tensor: Tensor) -> Tensor:
    return tensor if tensor.rank == 1 else tensor.flatten()


def _copies(pairs: list[tuple[Tensor, Tensor]]) -> list[Copy]:
    """One Copy per element type moving every ``(src, dst)`` pair (flattened and joined)."""
    by_type: dict[object, list[tuple[Tensor, Tensor]]] = defaultdict(list)
    for src, dst in pairs:
        by_type[src.dtype].append((src, dst))
    return [Copy(concat([_flat(s) for s, _ in group]), concat([_flat(d) for _, d in group]))
            for group in by_type.values()]


def _home(graph: Graph, vertex: Vertex, tensor: Tensor) -> np.ndarray | None:
    """The tile each element of ``tensor`` is used on by ``vertex``; None if the kind places it."""
    if vertex.tile is not None:
        return np.full(tensor.num_elements, vertex.tile, dtype=np.int32)
    split = vertex.fields[vertex.kind.split]
    return graph.element_tiles(split) if tensor.shape == split.shape else None


class _LocalComputeSet:
    """One compute set made local: its new vertices' fields and the copies around it."""

    def __init__(self, graph: Graph, cs: ComputeSet) -> None:
        self.graph = graph
        self.cs = cs
        self.copy_in: list[tuple[Tensor, Tensor]] = []
        self.copy_out: list[tuple[Tensor, Tensor]] = []
        self._received: dict[tuple[int, bytes], Tensor] = {}
        """Buffers of read-only fields by (tensor, home tiles): a tensor read twice on the same
        tiles is received once."""
        self.fields = [self._vertex_fields(vertex) for vertex in cs.vertices]

    def _vertex_fields(self, vertex: Vertex) -> dict[str, Tensor | tuple[Tensor, ...]]:
        """The vertex's fields made local (:meth:`_local`), a vector field tensor by tensor (buffers
        labelled ``name0``, ``name1``, ...)."""
        connected: dict[str, Tensor | tuple[Tensor, ...]] = {}
        for name, value in vertex.fields.items():
            direction = vertex.kind.fields[name].direction
            if isinstance(value, tuple):
                connected[name] = tuple(self._local(vertex, f"{name}{k}", direction, t)
                                        for k, t in enumerate(value))
            else:
                connected[name] = self._local(vertex, name, direction, value)
        return connected

    def _local(self, vertex: Vertex, label: str, direction: Direction, tensor: Tensor) -> Tensor:
        """``tensor`` itself if it is where ``vertex`` uses it, else a buffer on those tiles."""
        home = _home(self.graph, vertex, tensor)
        if home is None or np.array_equal(self.graph.element_tiles(tensor), home):
            return tensor
        key = (id(tensor), home.tobytes())
        if direction is Direction.INPUT and key in self._received:
            return self._received[key]
        buffer = self.graph.add_variable(tensor.dtype, tensor.shape, f"{self.cs.name}/{label}.local")
        self.graph.set_tile_mapping(buffer, TileMapping.from_element_tiles(home))
        if direction.reads:
            self.copy_in.append((tensor, buffer))
        if direction.writes:
            self.copy_out.append((buffer, tensor))
        else:
            self._received[key] = buffer
        return buffer

    def program(self) -> Callable[[], Program] | None:
        """What replaces each ``Execute`` of the compute set: copy in, execute, copy out (None if
        the compute set is local already)."""
        if not self.copy_in and not self.copy_out:
            return None
        before, after = _copies(self.copy_in), _copies(self.copy_out)
        local = Execute(copy_compute_set(self.graph, self.cs, self.fields))
        return lambda: Sequence(*before, local, *after)


@dataclass(frozen=True)
class Exchange:
    """Turn reads and writes of other tiles' memory into copies through receive buffers."""

    name: ClassVar[str] = "exchange"

    def apply(self, module: Module) -> Module:
        """Make every executed compute set local: it is analysed once however many Executes name it,
        and each of them becomes its own copy-in, execute, copy-out Sequence.  Function bodies are
        rewritten in place, as the functions live in the shared graph."""
        require_valid(module)
        replacements: dict[int, Callable[[], Program] | None] = {}

        def rewrite(node: Program) -> Program:
            if not isinstance(node, Execute):
                return node
            key = id(node.compute_set)
            if key not in replacements:
                replacements[key] = _LocalComputeSet(module.graph, node.compute_set).program()
            replacement = replacements[key]
            return node if replacement is None else replacement()

        for function in module.graph.functions:
            function.program = rebuild(function.program, rewrite)
        return pass_output(rebuild_programs(module, rewrite))
