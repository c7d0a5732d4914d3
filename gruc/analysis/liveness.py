"""Liveness: which variables hold a value that is still needed, at every step of a module.

Why: tile memory is allocated at compile time, and two variables may share bytes only if they are
never *live* at the same time (Poplar's not-always-live category).  This analysis is the basis of
``plan-memory``: it numbers the leaf steps of a module, runs a backward dataflow over the program
tree, and says which variables occupy memory at each step.  It never changes the module.

Steps are numbered by :class:`~gruc.analysis.steps.StepTree` (entry programs first, then each
function once); the dataflow runs over the analysis tree it builds, and the result keeps that tree
(not the step tree's effect table), since lowering and plan-only counting walk it too.

Dataflow (backward, per step ``live_in = (live_out - full_writes - kills) | reads``):

* ``Sequence``: right to left.  ``If``: the join (union) of both branches, then the predicate read.
* ``Repeat(n, body)``, n >= 1: fixed point of ``out_body = out | in_body``, so a value written in
  iteration k and read in iteration k+1 stays live across the back edge; n == 0: the body never
  runs and the loop passes liveness through (the body is still analysed so its steps have sets).
* ``RepeatWhileTrue``: condition, predicate read, then either the body (and round again) or the
  exit, iterated to a fixed point; the body may run zero times.
* ``Call(f)``: ``f``'s tree is analysed with the caller's live-out as its live-out.  A function's
  steps are shared by all call sites, so what is recorded at each of them is the union over every
  calling context: a variable live across *any* call site (live after it and not overwritten
  by ``f``) is live at every step of ``f`` it passes through, and therefore can never share bytes
  with the callee's temporaries.  Results are memoised per (node, live-out), which also keeps
  nested loops from re-analysing their bodies exponentially.

A variable *occupies memory at step s* if it is live on entry to s (which covers the variables s
reads and those whose value passes through s) or written by s (a value nobody reads still needs
bytes while it is written).  Live on exit is not needed on top: whatever is live after s is live on
entry to the step that runs next, except a variable s declares dead (``WriteUndef``) that a later
*partial* write starts to rebuild — and that one holds no value during s.  Two variables
*interfere* if some step is in both occupancy sets, or if either is always-live.

Always-live (Poplar's category; one exclusive region for the whole execution): constants, every
variable a host write or host read names, and every variable live at the entry of an entry program
(read before written: it carries state between runs, or between programs).  Everything else is
not-always-live, with its set of occupied steps.

Sets are Python ints used as bitsets over ``graph.variables`` indices while the dataflow runs
(unions of thousands of variables are single big-int operations); the result stores the
per-variable step sets packed in a numpy array.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from gruc.analysis.steps import (IfNode, LeafNode, RepeatNode, SequenceNode, Step, StepTree,
                               WhileNode, bits_of, mask_of)
from gruc.ir.graph import Graph
from gruc.ir.module import Module
from gruc.ir.tensor import Variable

__all__ = ["Liveness", "analyse_liveness"]


class _Dataflow:
    """Backward liveness over the analysis tree, recording per-step live-in and live-out.  What a
    step does to a live set is held here, not on the tree, which outlives the dataflow (it is
    kept on :class:`Liveness`): ``keep`` clears what the step fully overwrites or kills, ``gen``
    adds what it reads."""

    def __init__(self, steps: list[Step], function_trees: list) -> None:
        self.keep = [~mask_of(step.effect.full_writes | step.effect.kills) for step in steps]
        self.gen = [mask_of(step.effect.reads) for step in steps]
        self.live_in = [0] * len(steps)
        self.live_out = [0] * len(steps)
        self.function_trees = function_trees
        self.memo: dict[tuple[int, int], int] = {}

    def transfer(self, node, out: int) -> int:
        """The variables live before ``node`` given those live after it (``out``, a bitset),
        recording each step's live-in and live-out on the way.  Loops iterate to a fixed point
        (a body's reads feed its own next iteration); results are memoised per (node, out),
        because a function called from many places, or a body revisited while a loop
        converges, would otherwise be walked again and again."""
        if isinstance(node, LeafNode):
            step = node.step
            live = (out & self.keep[step]) | self.gen[step]
            self.live_in[step] |= live
            self.live_out[step] |= out
            return live
        key = (id(node), out)
        found = self.memo.get(key)
        if found is not None:
            return found
        if isinstance(node, SequenceNode):
            live = out
            for item in reversed(node.items):
                live = self.transfer(item, live)
        elif isinstance(node, RepeatNode):
            body_out = out
            while True:
                body_in = self.transfer(node.body, body_out)
                grown = out | body_in
                if grown == body_out:
                    break
                body_out = grown
            live = body_in if node.count > 0 else out
        elif isinstance(node, WhileNode):
            cond_in = 0
            while True:
                pred_out = out | self.transfer(node.body, cond_in)
                new_cond_in = self.transfer(node.cond, self.transfer(node.pred, pred_out))
                if new_cond_in == cond_in:
                    break
                cond_in = new_cond_in
            live = cond_in
        elif isinstance(node, IfNode):
            joined = self.transfer(node.then, out) | self.transfer(node.otherwise, out)
            live = self.transfer(node.pred, joined)
        else:  # CallNode
            live = self.transfer(self.function_trees[node.function], out)
        self.memo[key] = live
        return live


def _step_masks_to_rows(masks: list[int], num_variables: int, num_steps: int) -> np.ndarray:
    """Transpose per-step variable bitsets into per-variable packed step rows (uint8, little)."""
    step_bytes = (num_steps + 7) // 8
    rows = np.zeros((num_variables, step_bytes), dtype=np.uint8)
    if num_variables == 0 or num_steps == 0:
        return rows
    var_bytes = (num_variables + 7) // 8
    packed = np.zeros((num_steps, var_bytes), dtype=np.uint8)
    for s, mask in enumerate(masks):
        if mask:
            raw = mask.to_bytes((mask.bit_length() + 7) // 8, "little")
            packed[s, :len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    chunk = 4096  # variables per block, so the unpacked matrix stays small
    for v0 in range(0, num_variables, chunk):
        v1 = min(v0 + chunk, num_variables)
        block = np.unpackbits(packed[:, v0 // 8:(v1 + 7) // 8], axis=1,
                              bitorder="little")[:, :v1 - v0]
        rows[v0:v1] = np.packbits(block.T, axis=1, bitorder="little")
    return rows


@dataclass(frozen=True, eq=False)
class Liveness:
    """The result of :func:`analyse_liveness` (read-only)."""

    steps: tuple[Step, ...]
    num_variables: int
    step_rows: np.ndarray
    """``[num_variables, ceil(num_steps / 8)]`` uint8: bit ``s`` (little-endian bit order) of row
    ``v`` says variable ``v`` occupies memory at step ``s``."""
    always_live: frozenset[int]
    """Indices of always-live variables."""
    used: frozenset[int]
    """Variables some step touches or a host stream names (the ones that need bytes)."""
    entry_live: tuple[frozenset[int], ...]
    """Per entry program: the variables live at its entry."""
    live_in: tuple[int, ...]
    """Per step: bitset of the variables live on entry to it."""
    live_out: tuple[int, ...]
    """Per step: bitset of the variables live on exit from it."""
    program_trees: tuple
    """Per entry program: its analysis tree (:class:`~gruc.analysis.steps.StepTree`), whose leaves
    carry the step numbers of :attr:`steps`.  Lowering and plan-only step counting walk these
    rather than the programs, so they number steps as liveness does by construction."""
    function_trees: tuple
    """The analysis tree of each function the module runs, indexed by ``CallNode.function`` (in
    the order of :attr:`~gruc.ir.module.Module.functions`)."""

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def not_always_live(self) -> frozenset[int]:
        """Used variables that are not always-live."""
        return self.used - self.always_live

    def live_steps(self, variable: int) -> int:
        """Bitset of the steps at which ``variable`` occupies memory (from the dataflow; an
        always-live variable is live everywhere whatever this says)."""
        return int.from_bytes(self.step_rows[variable].tobytes(), "little")

    def live_step_list(self, variable: int) -> list[int]:
        return bits_of(self.live_steps(variable))

    def step_matrix(self, variables: Iterable[int]) -> np.ndarray:
        """``[len(variables), num_steps]`` bool: where each of ``variables`` occupies memory."""
        index = np.asarray(list(variables), dtype=np.int64)
        bits = np.unpackbits(self.step_rows[index], axis=1, bitorder="little")
        return bits[:, :self.num_steps].astype(bool)

    def occupied_at(self, step: int) -> frozenset[int]:
        """Variables live on entry to ``step``, read or written by it."""
        effect = self.steps[step].effect
        return frozenset(bits_of(self.live_in[step])) | effect.writes | effect.reads

    def live_at(self, step: int) -> frozenset[int]:
        """Every variable holding memory at ``step``: the always-live ones and the occupants."""
        return self.occupied_at(step) | self.always_live

    def not_always_live_at(self, step: int) -> frozenset[int]:
        return self.occupied_at(step) - self.always_live

    def interferes(self, a: int, b: int) -> bool:
        """True if ``a`` and ``b`` (distinct) may not share bytes."""
        if a == b:
            return False
        if a in self.always_live or b in self.always_live:
            return True
        return bool(np.any(self.step_rows[a] & self.step_rows[b]))

    def describe(self, graph: Graph | None = None) -> str:
        """One line per step with the not-always-live variables occupying memory there."""
        lines = []
        for step in self.steps:
            live = sorted(self.not_always_live_at(step.index))
            names = [graph.variables[v].name for v in live] if graph is not None else live
            lines.append(f"{step}  | live: {', '.join(map(str, names))}")
        return "\n".join(lines)


def analyse_liveness(module: Module) -> Liveness:
    """Number the steps of ``module`` and compute which variables are live at each."""
    graph = module.graph
    lin = StepTree(module)
    lin.check_no_recursion()
    flow = _Dataflow(lin.steps, lin.function_trees)
    entry_live = []
    for tree in lin.program_trees:
        entry_live.append(flow.transfer(tree, 0))
    for tree in lin.function_trees:  # functions nobody calls still get step sets
        flow.transfer(tree, 0)

    num_variables = len(graph.variables)
    occupancy = []
    used = 0
    for step in lin.steps:
        effect = step.effect
        touched = mask_of(effect.reads | effect.writes)
        occupancy.append(flow.live_in[step.index] | touched)
        used |= touched | mask_of(effect.kills)
    host = 0
    for table in (graph.host_writes, graph.host_reads):
        for tensor in table.values():
            host |= mask_of(_index_of(graph, v) for v in tensor.variables())
    constants = mask_of(k for k, v in enumerate(graph.variables) if v.is_constant)
    always = host | constants
    for live in entry_live:
        always |= live
    used |= host
    rows = _step_masks_to_rows(occupancy, num_variables, len(lin.steps))
    rows.flags.writeable = False
    return Liveness(
        steps=tuple(lin.steps), num_variables=num_variables, step_rows=rows,
        always_live=frozenset(bits_of(always)), used=frozenset(bits_of(used)),
        entry_live=tuple(frozenset(bits_of(m)) for m in entry_live),
        live_in=tuple(flow.live_in), live_out=tuple(flow.live_out),
        program_trees=tuple(lin.program_trees), function_trees=tuple(lin.function_trees))


def _index_of(graph: Graph, variable: Variable) -> int:
    return int(graph.variable_of_id(np.array([variable.first_id], dtype=np.int64))[0])
