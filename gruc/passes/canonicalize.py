"""canonicalize: one spelling for programs that mean the same, so later passes see straight lines.

Why.  Builders nest freely — poplibs appends a ``Sequence`` per helper call, a loop over one step
wraps it in a block, a ``Repeat(1, ...)`` falls out of a shard of one time step — and every level
hides neighbours from the passes that work on straight-line sequences (``inplace-fusion`` fuses a
producer only into consumers of the *same* Sequence).  Rules, applied bottom-up in one walk:

* a Sequence inside a Sequence is spliced into it, and an empty Sequence disappears;
* ``Repeat(0, body)`` and a loop, branch or ``Repeat`` whose body is empty do nothing: removed;
* ``Repeat(1, body)`` is ``body``;
* ``If`` on a constant predicate is the branch it picks; ``RepeatWhileTrue`` on a constant false
  predicate is its condition, run once.  (A predicate is constant when it is an element of a
  ``graph.add_constant`` tensor; anything a program or the host writes is not decidable here.)

A removed loop or branch reads its predicate no more, which changes no value.  Function bodies are
left as they are (see :mod:`gruc.passes.rewrite`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gruc.ir.module import Module
from gruc.ir.program import If, Program, Repeat, RepeatWhileTrue, Sequence
from gruc.ir.tensor import Tensor
from gruc.passes.rewrite import pass_output, rebuild_programs, require_valid

__all__ = ["Canonicalize"]


def _is_empty(node: Program) -> bool:
    return isinstance(node, Sequence) and not node.programs


def _constant_truth(predicate: Tensor) -> bool | None:
    """The predicate's value if it is an element of a constant, else None (undecidable)."""
    (variable,) = predicate.variables()
    if not variable.is_constant:
        return None
    at = int(predicate.flat_ids()[0]) - variable.first_id
    return bool(variable.constant.reshape(-1)[at])


def _canonical(node: Program) -> Program | None:
    """One node by the rules of the module, its children already canonical (:func:`rebuild` walks
    bottom-up); None for a node that does nothing.  A Sequence with nothing to splice comes back as
    itself, so untouched subtrees keep their identity."""
    if isinstance(node, Sequence):
        items = [item for child in node.programs
                 for item in (child.programs if isinstance(child, Sequence) else (child,))]
        if not items:
            return None
        if len(items) == len(node.programs) and all(a is b for a, b in zip(items, node.programs)):
            return node
        return Sequence(*items)
    if isinstance(node, Repeat):
        if node.count == 0 or _is_empty(node.body):
            return None
        return node.body if node.count == 1 else node
    if isinstance(node, If):
        truth = _constant_truth(node.predicate)
        if truth is not None:
            chosen = node.then if truth else node.otherwise
            return None if _is_empty(chosen) else chosen
        return None if _is_empty(node.then) and _is_empty(node.otherwise) else node
    if isinstance(node, RepeatWhileTrue) and _constant_truth(node.predicate) is False:
        return None if _is_empty(node.condition) else node.condition
    return node


@dataclass(frozen=True)
class Canonicalize:
    """Flatten sequences, drop programs that do nothing, decide constant branches."""

    name: ClassVar[str] = "canonicalize"

    def apply(self, module: Module) -> Module:
        require_valid(module)
        return pass_output(rebuild_programs(module, _canonical))
