"""copy-elim: remove copies that move nothing anyone needs.

Why.  A ``Copy`` is a superstep of its own (exchange plus sync) and its destination needs bytes on
every tile it spans, often for a long time: the RNN builder copies the whole input sequence into
its time-major sequence tensor, which then lives through the entire loop.  Three kinds of copy do
no useful work:

* a *self-copy*, whose source and destination are the same elements in the same order (what a
  builder produces when a tensor is handed to itself, or what forwarding below leaves behind);
* a *dead* copy, whose destination is never read before being overwritten on any path (liveness
  over the whole program, loops and calls included) and is not always-live — host-visible,
  constant, or carried from one run to the next.  This is ``dce`` restricted to copies, so the
  cleanup can run on its own; the compute sets that fed a removed copy are ``dce``'s business;
* a *duplicate*: the destination is a whole variable ``D`` that only this copy writes, each of its
  elements on the same tile as the source element it receives, and no variable of the source is
  written (or declared dead) at any step where ``D`` holds a value.  Then the source already holds
  ``D``'s value wherever and whenever it is needed: every use of ``D`` is *forwarded* to the source
  (the same views replayed on it), the copy becomes a self-copy and goes, and ``D`` needs no bytes.
  A destination that is host-visible, constant, or used in a function body is never forwarded.

Copies inside function bodies are kept (see :mod:`gruc.passes.rewrite`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import ClassVar

from gruc.analysis.liveness import Liveness
from gruc.ir.effects import EffectTable
from gruc.ir.layout import same_ids
from gruc.ir.module import Module
from gruc.ir.program import Copy, Program
from gruc.ir.tensor import Tensor
from gruc.passes.rebase import Rebase
from gruc.passes.rewrite import (liveness_of, pass_output, rebuild_programs, remove_dead_steps,
                                 require_valid, shaped, variables_touched, walk_functions,
                                 whole_variable)

__all__ = ["CopyElimination"]


def _without_self_copies(node: Program) -> Program | None:
    if isinstance(node, Copy) and same_ids(node.src.layout(), node.src.shape, node.dst.layout(),
                                           node.dst.shape):
        return None
    return node


def _forwardable(module: Module, liveness: Liveness, copy: Copy, step: int,
                 writes_at: dict[int, list[int]], in_functions: frozenset[int]) -> bool:
    """Is ``copy``'s destination a duplicate of its source (see the module docstring)?"""
    dest = whole_variable(copy.dst)
    graph = module.graph
    if dest is None or dest.index in liveness.always_live or dest.index in in_functions:
        return False
    sources = {v.index for v in copy.src.variables()}
    if dest.index in sources or writes_at[dest.index] != [step] or copy.src.has_repeats():
        return False
    if not graph.same_tiles(copy.src, copy.dst):
        return False
    holding = liveness.live_steps(dest.index)
    return not any(holding >> s & 1 for v in sources for s in writes_at[v] if s != step)


def _forward_batch(module: Module) -> Module | None:
    """The module with every duplicate copy's destination forwarded to its source, taking copies
    whose variables no other of the batch involves (each one's facts hold whatever the others
    do); None if there is none."""
    liveness = liveness_of(module)
    in_functions = variables_touched(EffectTable(module.graph), walk_functions(module))
    function_nodes = {id(node) for node in walk_functions(module)}
    writes_at: dict[int, list[int]] = defaultdict(list)
    for step in liveness.steps:
        for v in step.effect.writes | step.effect.kills:
            writes_at[v].append(step.index)
    forwards: dict[int, Tensor] = {}
    involved: set[int] = set()
    for step in liveness.steps:
        copy = step.node
        if not isinstance(copy, Copy) or id(copy) in function_nodes or \
                not _forwardable(module, liveness, copy, step.index, writes_at, in_functions):
            continue
        dest = whole_variable(copy.dst)
        variables = {dest.index} | {v.index for v in copy.src.variables()}
        if not variables & involved:
            forwards[dest.index] = shaped(copy.src, dest.shape)
            involved |= variables
    if not forwards:
        return None
    return rebuild_programs(Rebase(module.graph, forwards).module(module), _without_self_copies)


@dataclass(frozen=True)
class CopyElimination:
    """Remove self-copies, copies nobody reads, and copies that duplicate their source in place."""

    name: ClassVar[str] = "copy-elim"
    forward: bool = True
    """Forward uses of a duplicate's destination to its source (the third rule)."""

    def apply(self, module: Module) -> Module:
        """The rules in order: self-copies, then dead copies, then duplicates forwarded batch by
        batch (each batch's leftover self-copies removed with it) until a batch finds none."""
        require_valid(module)
        module = pass_output(rebuild_programs(module, _without_self_copies))
        module = remove_dead_steps(module, (Copy,))
        while self.forward:
            forwarded = _forward_batch(module)
            if forwarded is None:
                break
            module = pass_output(forwarded)
        return module
