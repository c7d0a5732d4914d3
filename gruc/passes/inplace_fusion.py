"""inplace-fusion: fuse chains of elementwise compute sets, and compute in place where an operand dies.

Why.  Every compute set is a BSP superstep — a sync of all tiles however little it computes — and
every intermediate result needs bytes while it is live.  poplibs fuses an expression tree into one
generated codelet only when one builder call sees the whole tree and the operands allow it; a
broadcast bias, or a result one call produces and the next consumes, costs a superstep and a
temporary per operation.  The GRU cell is that case: ``sigmoid(ru + bias)`` and ``tanh(c + bias)``.

Fusion.  A ``Map`` alone in its compute set whose output is a whole temporary variable ``T`` is
substituted into the elementwise compute sets reading ``T`` (one untiled Map / MapInPlace each) and
disappears with ``T``: its tree replaces the placeholders that read ``T``, its operands are read
through the consumer's own view of ``T`` (the view operations replayed on each), so element ``k``
still meets element ``k``.  Legal only if (poplibs' codelet rules, plus moving work later in time):

* ``T`` is written by that step alone and read only by consumers later in the *same* Sequence (each
  step occurring once) — the entry programs and the bodies of the functions they call are searched
  alike — and is not host-visible or constant;
* each consumer reads ``T`` through a view of ``T`` alone, on the tiles of its own output — the
  same mapping, so the work stays on its tiles and the exchange does not change;
* nothing between producer and consumer writes (or ``WriteUndef`` s) a variable the producer reads;
* no operand overlaps the output except element for element (it becomes the in-place ``_1``);
* at most 20 distinct operands remain.

A HALF temporary rounded its values when stored; a ``cast(..., f16)`` keeps that rounding, so
fused results equal unfused ones bit for bit.

In place.  A ``Map`` whose output is a whole variable ``D`` and whose operand ``X`` (a view of one
variable ``V`` without repeated elements, of ``D``'s type and tiles) *dies there* updates ``X``
instead: ``D`` is replaced everywhere by ``X`` and the vertex becomes a ``MapInPlace``.  From the
liveness analysis: ``V`` is not live after the step, ``V`` and ``D`` occupy memory together at that
step only, and neither is declared dead while the other holds a value (poplibs' in-place rule).
Host-visible and constant variables are never merged.

A function body fused (the GRU cell under ``rnnCodeReuse``, the default for long sequences) is
not edited, since modules that fused nothing may call it too: the graph gets a new function with
the fused body, and this module's calls run that one.  A body's temporary is fused only when
nothing outside that body touches it, so every call of the new function computes what the old
one did.  The in-place half reaches bodies the same way: liveness records at a body's steps the
union over every calling context, so an operand dead after a body's step there is dead after it
at every call site, and the merge renames the two variables in this module's programs and in
the new bodies alike.

Rewrites that involve disjoint steps (fusion) or variables (in place) are applied in one batch,
their analyses being independent; batches repeat until nothing changes.  Options ``fuse`` and
``in-place`` switch the halves.  Measured in ``benchmarks/passes.py``.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gruc.analysis.liveness import Liveness
from gruc.ir import expr as ex
from gruc.ir.effects import EffectTable
from gruc.ir.graph import Graph
from gruc.ir.module import Module
from gruc.ir.program import Execute, Program, Sequence
from gruc.ir.tensor import Tensor, Variable
from gruc.passes.elementwise_steps import (ElementwiseStep, ElementwiseVertex, elementwise_step,
                                           plan_elementwise_vertex, substitute_placeholders)
from gruc.passes.rebase import Rebase
from gruc.passes.rewrite import (SubtreeWrites, host_variables, liveness_of, pass_output,
                                 rebuild_with_called_functions, replacing, require_valid, shaped,
                                 walk_functions, walk_programs, whole_variable)

__all__ = ["InplaceFusion"]

class _Uses:
    """Where every variable is read and written in a module (by node occurrence)."""

    def __init__(self, module: Module) -> None:
        self.effects = EffectTable(module.graph)
        self.count = Counter(id(node) for node in module.walk())
        self.readers: dict[int, list[Program]] = defaultdict(list)
        self.writers: dict[int, list[Program]] = defaultdict(list)
        for node in module.walk():
            effect = self.effects.of(node)
            for v in effect.reads:
                self.readers[v].append(node)
            for v in effect.writes | effect.kills:
                self.writers[v].append(node)
        self.host = host_variables(module.graph)
        self.subtree_writes = SubtreeWrites(self.effects)


def _fused_plan(graph: Graph, consumer: ElementwiseStep, producer: ElementwiseStep,
                temp: Variable) -> ElementwiseVertex | None:
    """The consumer with the producer's expression in place of its reads of ``temp``; None where
    they do not fuse, or the fused tree could nest deeper than an expression may."""
    value = producer.expr
    if temp.dtype.storage != temp.dtype.compute:  # keep the rounding the temporary's store did
        value = ex.Cast(value, temp.dtype)
    if ex.nesting(consumer.expr) + ex.nesting(value) > ex.MAX_PARSE_DEPTH:
        return None
    operands: list[Tensor] = []

    def slot(tensor: Tensor) -> ex.PlaceHolder:
        operands.append(tensor)
        return ex.PlaceHolder(len(operands))

    home = graph.element_tiles(consumer.dest)
    values: dict[int, ex.Expr] = {}
    for k, operand in enumerate(consumer.operands, 1):
        variables = operand.variables()
        if all(v is not temp for v in variables):
            values[k] = slot(operand)
            continue
        if len(variables) != 1 or not np.array_equal(graph.element_tiles(operand), home):
            return None
        through_view = [Rebase(graph, {temp.index: shaped(source, temp.shape)}).tensor(operand)
                        for source in producer.operands]
        values[k] = substitute_placeholders(value, {j: slot(t) for j, t in
                                                    enumerate(through_view, 1)})
    expression = substitute_placeholders(consumer.expr, values)
    return plan_elementwise_vertex(consumer.dest, operands, expression)


@dataclass(frozen=True, eq=False)
class _Fusion:
    """A producer to remove and its consumers with their fused vertices."""

    producer: Execute
    consumers: tuple[tuple[ElementwiseStep, ElementwiseVertex], ...]

    @property
    def nodes(self) -> set[int]:
        return {id(self.producer)} | {id(consumer.node) for consumer, _ in self.consumers}


def _fusion_at(graph: Graph, uses: _Uses, items: list[Program], at: int) -> _Fusion | None:
    """The fusion of the producer at ``items[at]`` (a Sequence's items) into its consumers."""
    producer = elementwise_step(items[at])
    if producer is None or producer.in_place or uses.count[id(producer.node)] != 1:
        return None
    temp = whole_variable(producer.dest)
    if temp is None or temp.is_constant or temp.index in uses.host or \
            [id(n) for n in uses.writers[temp.index]] != [id(producer.node)]:
        return None
    readers = {id(n) for n in uses.readers[temp.index]}
    positions = [j for j in range(at + 1, len(items)) if id(items[j]) in readers]
    if not positions or len(positions) != len(uses.readers[temp.index]) or \
            any(uses.count[id(items[j])] != 1 for j in positions):
        return None
    producer_variables = {v.index for t in producer.operands for v in t.variables()}
    written: set[int] = set()
    consumers = []
    previous = at
    for j in positions:
        for between in items[previous + 1:j]:
            written |= uses.subtree_writes.of(between)
        consumer = elementwise_step(items[j])
        if written & producer_variables or consumer is None:
            return None
        plan = _fused_plan(graph, consumer, producer, temp)
        if plan is None:
            return None
        consumers.append((consumer, plan))
        written |= uses.subtree_writes.of(items[j])
        previous = j
    return _Fusion(producer.node, tuple(consumers))


def _fuse_batch(module: Module) -> Module | None:
    """Every fusion the module allows whose steps no other fusion of the batch involves (each
    one's analysis holds whatever the others do); None if there is none."""
    uses = _Uses(module)
    replacements: dict[int, Program | None] = {}
    for node in module.walk():
        if not isinstance(node, Sequence) or uses.count[id(node)] != 1:
            continue
        for at in range(len(node.programs)):
            fusion = _fusion_at(module.graph, uses, node.programs, at)
            if fusion is None or fusion.nodes & replacements.keys():
                continue
            replacements[id(fusion.producer)] = None
            for consumer, plan in fusion.consumers:
                name = consumer.node.compute_set.name
                replacements[id(consumer.node)] = Execute(plan.add_to(module.graph, name))
    return rebuild_with_called_functions(module, replacing(replacements)) if replacements \
        else None


def _holds_result(graph: Graph, liveness: Liveness, kills: dict[int, int], operand: Tensor,
                  dest: Variable, home: np.ndarray, step: int) -> bool:
    """Can ``operand``'s bytes hold ``dest``'s value (see the module docstring)?  ``kills`` has
    the steps that declare each variable dead: neither may be declared dead while the other holds
    a value, since after the merge that would free the other's bytes."""
    variables = operand.variables()
    held = variables[0]
    if len(variables) != 1 or operand.dtype != dest.dtype or held is dest or held.is_constant or \
            held.index in liveness.always_live or operand.has_repeats() or \
            not np.array_equal(graph.element_tiles(operand), home):
        return False
    dies_here = not liveness.live_out[step] >> held.index & 1
    held_steps, dest_steps = liveness.live_steps(held.index), liveness.live_steps(dest.index)
    return (dies_here and held_steps & dest_steps == 1 << step
            and not kills[held.index] & dest_steps and not kills[dest.index] & held_steps)


def _in_place_vertex(rebase: Rebase, work: ElementwiseStep) -> ElementwiseVertex | None:
    """``work``'s vertex over the rebased tensors if it then updates an operand in place."""
    vertex = plan_elementwise_vertex(rebase.tensor(work.dest),
                                     [rebase.tensor(t) for t in work.operands], work.expr)
    return vertex if vertex is not None and vertex.in_place else None


def _in_place_batch(module: Module) -> Module | None:
    """Every in-place rewrite the module allows whose two variables no other rewrite of the batch
    involves (each one's liveness facts hold whatever the others do); None if there is none."""
    graph = module.graph
    liveness = liveness_of(module)
    runs: dict[int, list[int]] = defaultdict(list)  # the steps that execute each compute set
    kills: dict[int, int] = defaultdict(int)
    for step in liveness.steps:
        if isinstance(step.node, Execute):
            runs[id(step.node.compute_set)].append(step.index)
        for v in step.effect.kills:
            kills[v] |= 1 << step.index
    merges: dict[int, Tensor] = {}
    chosen: list[ElementwiseStep] = []
    involved: set[int] = set()
    for node in itertools.chain(walk_programs(module), walk_functions(module)):
        work = elementwise_step(node)
        if work is None or work.in_place or len(runs[id(node.compute_set)]) != 1:
            continue
        dest = whole_variable(work.dest)
        if dest is None or dest.index in liveness.always_live | involved:
            continue
        home = graph.element_tiles(work.dest)
        for operand in work.operands:
            held = operand.variables()[0]
            if held.index in involved or not _holds_result(
                    graph, liveness, kills, operand, dest, home, runs[id(node.compute_set)][0]):
                continue
            if _in_place_vertex(Rebase(graph, {dest.index: shaped(operand, dest.shape)}), work):
                merges[dest.index] = shaped(operand, dest.shape)
                chosen.append(work)
                involved |= {dest.index, held.index}
                break
    if not merges:
        return None
    rebase = Rebase(graph, merges)
    for work in chosen:
        vertex = _in_place_vertex(rebase, work)
        rebase.use(work.node.compute_set, vertex.add_to(graph, work.node.compute_set.name))
    return rebuild_with_called_functions(module, rebase.node)


@dataclass(frozen=True)
class InplaceFusion:
    """Fuse elementwise chains into one vertex per tile; update dying operands in place."""

    name: ClassVar[str] = "inplace-fusion"
    fuse: bool = True
    """Substitute single-use elementwise temporaries into their consumers."""
    in_place: bool = True
    """Write out-of-place elementwise results over an operand that dies there."""

    def apply(self, module: Module) -> Module:
        """Fusion batches until none applies (a fused consumer may be the next producer), then
        in-place batches likewise; each half only if enabled."""
        require_valid(module)
        for enabled, rewrite in ((self.fuse, _fuse_batch), (self.in_place, _in_place_batch)):
            while enabled:
                rewritten = rewrite(module)
                if rewritten is None:
                    break
                module = pass_output(rewritten)
        return pass_output(module)
