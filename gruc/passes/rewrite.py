"""What the rewriting passes share: rebuilding program trees, rebasing tensors, step facts, and the
elementwise (Map / MapInPlace) steps that fusion and in-place rewrites take apart and rebuild.

Graph policy (one for all passes).  A pass returns a *new* :class:`Module` whose programs are new
trees; the graph is shared with the caller and only ever *extended*.  A pass adds variables, views
and compute sets, and never edits or deletes what the caller built, so the caller's tensors and
programs keep their meaning: running the original programs on the same graph still gives the
original results.  Consequences worth knowing:

* a compute set or variable a pass replaced stays in the graph; nothing executes or uses it any
  more, so it costs no cycles and no memory (``plan-memory`` gives unused variables no bytes), and
  the printed module still lists it;
* frozen program nodes are replaced, never edited, and a ``Sequence`` (mutable, and possibly still
  held by the user) is copied rather than changed;
* a function body is graph state that every module over the graph may call, so passes whose rewrite
  depends on how *this* module uses a value (fusion, dce, copy-elim) leave function bodies alone;
  only a rewrite that is right for every caller (``exchange``) replaces a body;
* a pass verifies the module it is given unless another pass made it (valid in, valid out), so a
  pipeline verifies its input once, and invalid input fails naming the first pass.

The one exception is ``shard``: what it changes is the *placement* of existing variables (host
streams included), which extending cannot do, so it returns a module over a copy of the graph and
leaves the caller's alone.  Take the graph of a pass's result from the result (``module.graph``).

Why here and not in each pass: every pass must rebuild trees the same way (keeping the identity of
untouched subtrees, which analyses key on), and tensor substitution through views is subtle enough
to be written once.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np

from gruc.ir import expr as ex
from gruc.ir.effects import EffectTable
from gruc.ir.graph import ComputeSet, Graph, Vertex
from gruc.ir.module import Module
from gruc.ir.program import (Call, Copy, Execute, If, PrintTensor, Program, Repeat,
                             RepeatWhileTrue, Sequence, WriteUndef)
from gruc.ir.tensor import Tensor, Variable
from gruc.ir.verify import verify
from gruc.passes.liveness import Liveness, analyse_liveness, mask_of

_PASS_OUTPUTS: "weakref.WeakSet[Module]" = weakref.WeakSet()
"""Modules some pass returned (see :func:`require_valid`)."""
_LIVENESS: "weakref.WeakKeyDictionary[Module, Liveness]" = weakref.WeakKeyDictionary()


def require_valid(module: Module) -> None:
    """Verify a module a pass is given, unless a pass made it.

    Valid in, valid out is every pass's contract (tests hold passes to it with verify-each), so
    within a pipeline only the first pass pays for verifying — a whole-module check that costs as
    much as a pass on a large graph."""
    if module not in _PASS_OUTPUTS:
        verify(module)


def pass_output(module: Module) -> Module:
    """``module`` as a pass returns it: valid by contract, and recorded as such.  A module the pass
    was given (the caller's, whose programs the caller may still change) is returned as a new
    Module over the same programs, so only modules made by passes are ever trusted."""
    if module not in _PASS_OUTPUTS:
        module = Module(module.graph, module.programs)
        _PASS_OUTPUTS.add(module)
    return module


def liveness_of(module: Module) -> Liveness:
    """:func:`analyse_liveness` of ``module``, remembered for modules passes made (their programs
    never change), so the next pass in a pipeline does not analyse the same module again."""
    if module not in _PASS_OUTPUTS:
        return analyse_liveness(module)
    if module not in _LIVENESS:
        _LIVENESS[module] = analyse_liveness(module)
    return _LIVENESS[module]


Rewrite = Callable[[Program], Program | None]
"""Called on every node after its children were rebuilt: the node to put in its place, the node
itself to keep it, or None to remove it."""


def replacing(replacements: dict[int, Program | None]) -> Rewrite:
    """A rewrite putting ``replacements[id(node)]`` (None: nothing) in place of those nodes."""
    return lambda node: replacements[id(node)] if id(node) in replacements else node


def with_children(node: Program, children: list[Program]) -> Program:
    """The same kind of node as ``node`` over new ``children`` (in ``node.children()`` order)."""
    if isinstance(node, Sequence):
        return Sequence(*children)
    if isinstance(node, Repeat):
        return Repeat(node.count, children[0])
    if isinstance(node, RepeatWhileTrue):
        return RepeatWhileTrue(children[0], node.predicate, children[1])
    if isinstance(node, If):
        return If(node.predicate, children[0], children[1])
    return node


def rebuild(node: Program, rewrite: Rewrite) -> Program | None:
    """``node`` with ``rewrite`` applied bottom-up.  A removed child of a Sequence disappears; a
    removed loop body or branch becomes an empty Sequence.  Untouched subtrees keep their identity."""
    children = node.children()
    if children:
        rebuilt = [rebuild(child, rewrite) for child in children]
        if isinstance(node, Sequence):
            kept = [child for child in rebuilt if child is not None]
            if len(kept) != len(children) or any(a is not b for a, b in zip(kept, children)):
                node = Sequence(*kept)
        else:
            filled = [Sequence() if child is None else child for child in rebuilt]
            if any(a is not b for a, b in zip(filled, children)):
                node = with_children(node, filled)
    return rewrite(node)


def rebuild_programs(module: Module, rewrite: Rewrite) -> Module:
    """A module over the same graph whose entry programs are rebuilt with ``rewrite``."""
    programs = [rebuild(program, rewrite) for program in module.programs]
    return Module(module.graph, [Sequence() if p is None else p for p in programs])


def walk_programs(module: Module) -> Iterator[Program]:
    """Every node of the entry programs (not the function bodies), pre-order, with repeats."""
    for program in module.programs:
        yield from program.walk()


def walk_functions(module: Module) -> Iterator[Program]:
    """Every node of the graph's function bodies, pre-order."""
    for function in module.graph.functions:
        yield from function.program.walk()


def whole_variable(tensor: Tensor) -> Variable | None:
    """The variable ``tensor`` is, element for element in row-major order (else None)."""
    variables = tensor.variables()
    if len(variables) != 1:
        return None
    variable = variables[0]
    covers = (tensor.contiguous_start() == variable.first_id
              and tensor.num_elements == variable.num_elements)
    return variable if covers else None


def shaped(tensor: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``tensor`` in ``shape`` (row-major), without a reshape view when it already has it."""
    return tensor if tensor.shape == shape else tensor.reshape(shape)


def host_variables(graph: Graph) -> frozenset[int]:
    """Indices of the variables a host stream names (their values are seen from outside)."""
    return frozenset(v.index for table in (graph.host_writes, graph.host_reads)
                     for tensor in table.values() for v in tensor.variables())


def variables_touched(effects: EffectTable, nodes: Iterable[Program]) -> frozenset[int]:
    """Variables some leaf among ``nodes`` reads, writes or declares dead."""
    touched: set[int] = set()
    for node in nodes:
        touched |= effects.of(node).touched
    return frozenset(touched)


class SubtreeWrites:
    """Variables a whole subtree may write or declare dead (``WriteUndef``), functions included."""

    def __init__(self, effects: EffectTable) -> None:
        self.effects = effects
        self._cache: dict[int, frozenset[int]] = {}

    def of(self, node: Program) -> frozenset[int]:
        key = id(node)
        if key not in self._cache:
            self._cache[key] = frozenset()  # a function calling itself adds nothing new
            effect = self.effects.of(node)
            found = set(effect.writes | effect.kills)
            if isinstance(node, Call):
                found |= self.of(node.function.program)
            for child in node.children():
                found |= self.of(child)
            self._cache[key] = frozenset(found)
        return self._cache[key]


def dead_writers(module: Module, liveness: Liveness, kinds: tuple[type, ...]) -> set[int]:
    """``id`` of each entry-program step of ``kinds`` whose results nothing reads.

    A step is dead when every variable it writes is neither live after it (at every place it
    occurs) nor always-live (host streams, constants, values carried between runs).  Steps inside
    function bodies are not considered (see the module docstring)."""
    always = mask_of(liveness.always_live)
    in_functions = {id(node) for node in walk_functions(module)}
    alive: set[int] = set()
    candidates: set[int] = set()
    for step in liveness.steps:
        node = step.node
        if not isinstance(node, kinds) or id(node) in in_functions:
            continue
        if mask_of(step.effect.writes) & (liveness.live_out[step.index] | always):
            alive.add(id(node))
        else:
            candidates.add(id(node))
    return candidates - alive


def remove_dead_steps(module: Module, kinds: tuple[type, ...]) -> Module:
    """The module without its dead steps of ``kinds`` (:func:`dead_writers`), repeated until none
    is left: removing a step can leave the steps that fed it unread."""
    while True:
        dead = dead_writers(module, liveness_of(module), kinds)
        if not dead:
            return module
        module = pass_output(rebuild_programs(module, replacing(dict.fromkeys(dead))))


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


# ---- elementwise steps: the Map / MapInPlace vertices fusion and in-place rewrites rebuild ------
@dataclass(frozen=True, eq=False)
class ElementwiseStep:
    """An ``Execute`` of a compute set holding one untiled Map / MapInPlace: dest = expr(operands)."""

    node: Execute
    dest: Tensor
    operands: tuple[Tensor, ...]
    """``_k`` is ``operands[k-1]``; for MapInPlace ``operands[0]`` is ``dest``."""
    expr: ex.Expr
    """With every constant typed, so the tree keeps its types wherever it is moved."""
    in_place: bool


def elementwise_step(node: Program) -> ElementwiseStep | None:
    """``node`` as an elementwise step, or None if it is not one."""
    if not isinstance(node, Execute) or len(node.compute_set.vertices) != 1:
        return None
    vertex = node.compute_set.vertices[0]
    if vertex.tile is not None or vertex.kind.name not in ("Map", "MapInPlace"):
        return None
    in_place = vertex.kind.name == "MapInPlace"
    dest = vertex.fields["inout" if in_place else "out"]
    operands = ((dest,) if in_place else ()) + tuple(vertex.fields["ins"])
    expression = ex.bind_const_types(vertex.params["expr"], [t.dtype for t in operands])
    return ElementwiseStep(node, dest, operands, expression, in_place)


def substitute_placeholders(expression: ex.Expr, values: dict[int, ex.Expr]) -> ex.Expr:
    """``expression`` with each placeholder ``_k`` replaced by ``values[k]``."""
    if isinstance(expression, ex.PlaceHolder):
        return values[expression.index]
    return ex.with_children(expression, [substitute_placeholders(child, values)
                                         for child in ex.children(expression)])


@dataclass(frozen=True, eq=False)
class ElementwiseVertex:
    """A Map (or, ``in_place``, a MapInPlace with ``dest`` as ``inout``) to add to a graph."""

    dest: Tensor
    ins: tuple[Tensor, ...]
    expr: ex.Expr
    in_place: bool

    def add_to(self, graph: Graph, name: str) -> ComputeSet:
        cs = graph.add_compute_set(name)
        fields = {"inout" if self.in_place else "out": self.dest, "ins": list(self.ins)}
        graph.add_vertex(cs, "MapInPlace" if self.in_place else "Map", fields, expr=self.expr)
        return cs


def plan_elementwise_vertex(dest: Tensor, operands: list[Tensor],
                            expression: ex.Expr) -> ElementwiseVertex | None:
    """One vertex computing ``dest = expression(operands)``: unused operands dropped, operands over
    the same elements merged, one equal to ``dest`` made the in-place ``_1``.  None if an operand
    overlaps ``dest`` other than element for element, or too many operands remain."""
    kept, kept_ids = [dest], [dest.flat_ids()]  # kept[0] is the output itself
    dest_variables = {v.index for v in dest.variables()}
    slot: dict[int, int] = {}
    for k in ex.placeholders(expression):
        tensor, ids = operands[k - 1], operands[k - 1].flat_ids()
        same = [m for m, other in enumerate(kept_ids) if np.array_equal(ids, other)]
        if not same:
            if dest_variables & {v.index for v in tensor.variables()} and \
                    np.intersect1d(ids, kept_ids[0]).size:
                return None
            kept.append(tensor)
            kept_ids.append(ids)
        slot[k] = same[0] if same else len(kept) - 1
    in_place = 0 in slot.values()
    if len(kept) - 1 + in_place > ex.MAX_PLACEHOLDER:
        return None
    values = {k: ex.PlaceHolder(m + 1 if in_place else m) for k, m in slot.items()}
    return ElementwiseVertex(dest, tuple(kept[1:]), substitute_placeholders(expression, values),
                             in_place)
