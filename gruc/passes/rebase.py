"""Substituting tensors for variables through a module: every view over a replaced variable rebuilt
over its replacement, every compute set that mentions one rebuilt as a new compute set.

Why a module of its own: copy elimination (a copy's destination read as its source) and in-place
fusion (a temporary replaced by the tensor it is written into) both rename storage, and doing it
through views — a slice of a reshape of a replaced variable must become the same slice of the same
reshape of its replacement — is subtle enough to be written once.  Vertices are added again
through ``Graph.add_vertex``, so every rebuilt vertex is checked like one a user added.
"""

from __future__ import annotations

from gruc.ir.graph import ComputeSet, Graph, Vertex
from gruc.ir.module import Module
from gruc.ir.program import Copy, Execute, If, PrintTensor, Program, RepeatWhileTrue, WriteUndef
from gruc.ir.tensor import Tensor, Variable
from gruc.passes.rewrite import rebuild_programs


class Rebase:
    """Substitute tensors for variables everywhere in a module's entry programs.

    ``replacements`` maps a variable's index to a tensor of the variable's shape and type; every
    view over the variable is rebuilt over the replacement (the same view operations, so element
    ``k`` of a view still means element ``k``).  Compute sets that mention a replaced variable are
    rebuilt as new compute sets (once each, however often they run).
    """

    def __init__(self, graph: Graph, replacements: dict[int, Tensor]) -> None:
        self.graph = graph
        self.replacements = replacements
        self._tensors: dict[int, Tensor] = {}
        self._compute_sets: dict[int, ComputeSet] = {}

    def use(self, cs: ComputeSet, replacement: ComputeSet) -> None:
        """Put ``replacement`` wherever ``cs`` runs (a compute set the caller rebased itself)."""
        self._compute_sets[id(cs)] = replacement

    def tensor(self, tensor: Tensor) -> Tensor:
        """``tensor`` over the replacements, memoised by id so a shared view is rebuilt once.  A
        tensor nothing under it changed comes back as itself: callers tell "unchanged" by
        identity."""
        key = id(tensor)
        if key not in self._tensors:
            if not self._mentions(tensor):
                result = tensor
            elif isinstance(tensor, Variable):
                result = self.replacements.get(tensor.index, tensor)
            else:
                sources = [self.tensor(source) for source in tensor.sources]
                result = tensor if all(a is b for a, b in zip(sources, tensor.sources)) else \
                    self._view(tensor, sources)
            self._tensors[key] = result
        return self._tensors[key]

    def _mentions(self, tensor: Tensor) -> bool:
        """Whether ``tensor`` is a view over a replaced variable (only those change: a module's
        views are mostly over other variables, and need not be walked)."""
        return any(v.index in self.replacements for v in tensor.variables())

    @staticmethod
    def _view(tensor: Tensor, sources: list[Tensor]) -> Tensor:
        """``tensor``'s view over ``sources``.  Sources of the same shapes and type as before make
        a view of the same shape and type, which needs no checking again (a rebased compute set
        rebuilds thousands of views)."""
        if all(a.shape == b.shape and a.dtype == b.dtype and a.graph is b.graph
               for a, b in zip(sources, tensor.sources)):
            return Tensor(tensor.graph, tensor.shape, tensor.dtype, tensor.op, tuple(sources))
        return Tensor.apply_view(tensor.op, sources)

    def _field(self, value: Tensor | tuple[Tensor, ...]) -> Tensor | tuple[Tensor, ...]:
        if isinstance(value, tuple):
            rebased = tuple(self.tensor(t) for t in value)
            return value if all(a is b for a, b in zip(rebased, value)) else rebased
        return self.tensor(value)

    def compute_set(self, cs: ComputeSet) -> ComputeSet:
        """``cs`` over the replacements, rebuilt once however often it runs; ``cs`` itself when no
        field changes, so the Executes of untouched compute sets stay as they are."""
        key = id(cs)
        if key not in self._compute_sets:
            if not any(self._mentions(t) for v in cs.vertices for value in v.fields.values()
                       for t in (value if isinstance(value, tuple) else (value,))):
                self._compute_sets[key] = cs
                return cs
            fields = [{name: self._field(value) for name, value in v.fields.items()}
                      for v in cs.vertices]
            if all(new[name] is value for v, new in zip(cs.vertices, fields)
                   for name, value in v.fields.items()):
                self._compute_sets[key] = cs
            else:
                self._compute_sets[key] = copy_compute_set(self.graph, cs, fields)
        return self._compute_sets[key]

    def node(self, node: Program) -> Program:
        """One program node with its tensors and compute set rebased (children untouched)."""
        if isinstance(node, Execute):
            cs = self.compute_set(node.compute_set)
            return node if cs is node.compute_set else Execute(cs)
        if isinstance(node, Copy):
            src, dst = self.tensor(node.src), self.tensor(node.dst)
            return node if src is node.src and dst is node.dst else Copy(src, dst)
        if isinstance(node, WriteUndef):
            tensor = self.tensor(node.tensor)
            return node if tensor is node.tensor else WriteUndef(tensor)
        if isinstance(node, PrintTensor):
            tensor = self.tensor(node.tensor)
            return node if tensor is node.tensor else PrintTensor(node.label, tensor)
        if isinstance(node, (If, RepeatWhileTrue)):
            predicate = self.tensor(node.predicate)
            if predicate is node.predicate:
                return node
            if isinstance(node, If):
                return If(predicate, node.then, node.otherwise)
            return RepeatWhileTrue(node.condition, predicate, node.body)
        return node

    def module(self, module: Module) -> Module:
        return rebuild_programs(module, self.node)


def copy_compute_set(graph: Graph, cs: ComputeSet,
                     fields: list[dict[str, Tensor | tuple[Tensor, ...]]]) -> ComputeSet:
    """A new compute set named like ``cs`` with the same vertices over new ``fields`` (one dict per
    vertex), added through ``Graph.add_vertex`` so each vertex is checked again."""
    new = graph.add_compute_set(cs.name)
    for vertex, vertex_fields in zip(cs.vertices, fields):
        add_vertex_like(graph, new, vertex, vertex_fields)
    return new


def add_vertex_like(graph: Graph, cs: ComputeSet, vertex: Vertex,
                    fields: dict[str, Tensor | tuple[Tensor, ...]],
                    tile: int | None = None) -> Vertex:
    """A vertex of ``vertex``'s kind, tile (unless ``tile`` moves it) and parameters over
    ``fields``, added to ``cs``."""
    connected = {name: list(value) if isinstance(value, tuple) else value
                 for name, value in fields.items()}
    return graph.add_vertex(cs, vertex.kind, connected,
                            tile=vertex.tile if tile is None else tile, **vertex.params)
