"""dce: remove compute sets and copies whose results nothing reads.

Why.  Builders compute what a layer *might* need — a training forward pass saves intermediates, a
helper returns a tensor its caller drops — and every such step still costs a superstep, and its
result still costs bytes while it is written.  A step is dead when every variable it writes is dead
right after it: not read before being overwritten on any path (the liveness analysis, loops and
calls included), and not always-live (host-visible, constant, or carried from one run to the next,
which the host may read back).  ``Execute`` and ``Copy`` steps are the candidates; ``WriteUndef``,
``PrintTensor`` (an observable effect) and ``Sync`` stay.

Removing a step can kill the steps that fed it, so the pass repeats until nothing changes.  Steps
inside function bodies are kept (see :mod:`gruc.passes.rewrite`).

Then what nothing uses any more goes from the graph too: the compute sets no step executes (those
removed here, and those earlier passes replaced), the functions nothing calls, and the variables
no step, vertex or host stream names — a variable still mapped but only ever written by a removed
step included.  The caller's graph may still run them, so the result is a module over a graph of
its own holding the rest (:func:`~gruc.ir.graph_copy.without_unused`; none is made when nothing is
unused): what a module prints after ``dce`` is what it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gruc.ir.graph_copy import without_unused
from gruc.ir.module import Module
from gruc.ir.program import Copy, Execute
from gruc.passes.rewrite import pass_output, remove_dead_steps, require_valid

__all__ = ["DeadCodeElimination"]


@dataclass(frozen=True)
class DeadCodeElimination:
    """Remove ``Execute`` and ``Copy`` steps whose results are never read, then erase what nothing
    uses from the module's graph."""

    name: ClassVar[str] = "dce"

    def apply(self, module: Module) -> Module:
        require_valid(module)
        return pass_output(without_unused(remove_dead_steps(module, (Execute, Copy))))
