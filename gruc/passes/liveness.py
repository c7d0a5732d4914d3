"""Liveness: which variables hold a value that is still needed, at every step of a module.

Why: tile memory is allocated at compile time, and two variables may share bytes only if they are
never *live* at the same time (Poplar's not-always-live category).  This analysis is the basis of
``plan-memory``: it numbers the leaf steps of a module, runs a backward dataflow over the program
tree, and says which variables occupy memory at each step.  It never changes the module.

Steps.  Every leaf node of the program tree gets one number, in program order: ``Execute``,
``Copy``, ``WriteUndef``, ``PrintTensor``, ``Sync``, and the predicate read of ``If`` /
``RepeatWhileTrue`` (numbered before the branches / before the body, after the loop condition).
The entry programs are numbered first, in order, then every function of the graph (in
``graph.functions`` order, then any function a ``Call`` names that the graph does not list), each
exactly once however many ``Call`` sites name it.  A program object used at several places of a
tree is numbered at each place.

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

from gruc.errors import GrucProgramError
from gruc.ir.effects import Effect, EffectTable
from gruc.ir.graph import Function, Graph
from gruc.ir.module import Module
from gruc.ir.program import (Call, Copy, Execute, If, PrintTensor, Program, Repeat,
                             RepeatWhileTrue, Sequence, Sync, WriteUndef)
from gruc.ir.tensor import Tensor, Variable

__all__ = ["Step", "Liveness", "analyse_liveness", "bits_of", "mask_of"]


def mask_of(indices: Iterable[int]) -> int:
    """The bitset (Python int) with bits ``indices`` set."""
    mask = 0
    for i in indices:
        mask |= 1 << i
    return mask


def bits_of(mask: int) -> list[int]:
    """Indices of the set bits of a bitset, ascending."""
    if mask <= 0:
        return []
    raw = np.frombuffer(mask.to_bytes((mask.bit_length() + 7) // 8, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")).tolist()


def _describe_tensor(tensor: Tensor) -> str:
    if isinstance(tensor, Variable):
        return tensor.name
    return "view(" + ", ".join(v.name for v in tensor.variables()) + ")"


def _describe_node(node: Program) -> str:
    if isinstance(node, Execute):
        return f"Execute {node.compute_set.name}"
    if isinstance(node, Copy):
        return f"Copy {_describe_tensor(node.src)} -> {_describe_tensor(node.dst)}"
    if isinstance(node, WriteUndef):
        return f"WriteUndef {_describe_tensor(node.tensor)}"
    if isinstance(node, PrintTensor):
        return f"PrintTensor {node.label!r} {_describe_tensor(node.tensor)}"
    if isinstance(node, Sync):
        return "Sync"
    if isinstance(node, If):
        return f"If predicate {_describe_tensor(node.predicate)}"
    if isinstance(node, RepeatWhileTrue):
        return f"RepeatWhileTrue predicate {_describe_tensor(node.predicate)}"
    return type(node).__name__


@dataclass(frozen=True, eq=False)
class Step:
    """One numbered leaf step of the linearised module."""

    index: int
    node: Program
    """The program node (for ``If`` / ``RepeatWhileTrue``: the node whose predicate is read)."""
    where: str
    """Path in the program tree, e.g. ``program 0/repeat 10/then``."""
    effect: Effect

    @property
    def text(self) -> str:
        """What the step does, e.g. ``Copy a -> view(b)``."""
        return _describe_node(self.node)

    def __str__(self) -> str:
        return f"{self.index}: {self.where}: {self.text}"


# ---- the analysis tree: the program tree with step numbers and per-occurrence identity ----------
class _Leaf:
    __slots__ = ("step", "keep", "gen")

    def __init__(self, step: int, effect: Effect) -> None:
        self.step = step
        self.keep = ~mask_of(effect.full_writes | effect.kills)
        self.gen = mask_of(effect.reads)


class _Seq:
    __slots__ = ("items",)

    def __init__(self, items: list) -> None:
        self.items = items


class _Repeat:
    __slots__ = ("count", "body")

    def __init__(self, count: int, body) -> None:
        self.count, self.body = count, body


class _While:
    __slots__ = ("cond", "pred", "body")

    def __init__(self, cond, pred: _Leaf, body) -> None:
        self.cond, self.pred, self.body = cond, pred, body


class _If:
    __slots__ = ("pred", "then", "otherwise")

    def __init__(self, pred: _Leaf, then, otherwise) -> None:
        self.pred, self.then, self.otherwise = pred, then, otherwise


class _Call:
    __slots__ = ("function",)

    def __init__(self, function: int) -> None:
        self.function = function


class _Linearise:
    """Numbers the leaf steps and builds the analysis tree."""

    def __init__(self, module: Module) -> None:
        self.effects = EffectTable(module.graph)
        self.steps: list[Step] = []
        self.function_index: dict[int, int] = {}
        self.functions: list[Function] = []
        self.function_trees: list = []
        self.callees: list[set[int]] = []
        for function in module.graph.functions:
            self._function(function)
        self.program_trees = [self._node(p, f"program {k}", None)
                              for k, p in enumerate(module.programs)]
        done = 0
        while done < len(self.functions):  # number functions after the entry programs
            function = self.functions[done]
            self.function_trees.append(self._node(function.program, f"function {function.name}",
                                                  done))
            done += 1

    def _function(self, function: Function) -> int:
        key = id(function)
        if key not in self.function_index:
            self.function_index[key] = len(self.functions)
            self.functions.append(function)
            self.callees.append(set())
        return self.function_index[key]

    def _leaf(self, node: Program, where: str) -> _Leaf:
        effect = self.effects.of(node)
        step = Step(len(self.steps), node, where, effect)
        self.steps.append(step)
        return _Leaf(step.index, effect)

    def _node(self, node: Program, where: str, caller: int | None):
        if isinstance(node, Sequence):
            return _Seq([self._node(p, where, caller) for p in node.programs])
        if isinstance(node, Repeat):
            return _Repeat(node.count, self._node(node.body, f"{where}/repeat {node.count}", caller))
        if isinstance(node, RepeatWhileTrue):
            inner = f"{where}/while"
            cond = self._node(node.condition, inner, caller)
            pred = self._leaf(node, inner)
            return _While(cond, pred, self._node(node.body, inner, caller))
        if isinstance(node, If):
            pred = self._leaf(node, where)
            return _If(pred, self._node(node.then, f"{where}/then", caller),
                       self._node(node.otherwise, f"{where}/else", caller))
        if isinstance(node, Call):
            index = self._function(node.function)
            if caller is not None:
                self.callees[caller].add(index)
            return _Call(index)
        if node.children():
            raise GrucProgramError(f"liveness does not know the program node "
                                   f"{type(node).__name__} (it has nested programs)")
        return self._leaf(node, where)

    def check_no_recursion(self) -> None:
        state = [0] * len(self.functions)  # 0 new, 1 on the stack, 2 done

        def visit(f: int) -> None:
            state[f] = 1
            for g in sorted(self.callees[f]):
                if state[g] == 1:
                    raise GrucProgramError(f"function {self.functions[g].name!r} calls itself "
                                           f"(through {self.functions[f].name!r}); Poplar "
                                           "functions cannot recurse")
                if state[g] == 0:
                    visit(g)
            state[f] = 2

        for f in range(len(self.functions)):
            if state[f] == 0:
                visit(f)


class _Dataflow:
    """Backward liveness over the analysis tree, recording per-step live-in and live-out."""

    def __init__(self, num_steps: int, function_trees: list) -> None:
        self.live_in = [0] * num_steps
        self.live_out = [0] * num_steps
        self.function_trees = function_trees
        self.memo: dict[tuple[int, int], int] = {}

    def transfer(self, node, out: int) -> int:
        if isinstance(node, _Leaf):
            live = (out & node.keep) | node.gen
            self.live_in[node.step] |= live
            self.live_out[node.step] |= out
            return live
        key = (id(node), out)
        found = self.memo.get(key)
        if found is not None:
            return found
        if isinstance(node, _Seq):
            live = out
            for item in reversed(node.items):
                live = self.transfer(item, live)
        elif isinstance(node, _Repeat):
            body_out = out
            while True:
                body_in = self.transfer(node.body, body_out)
                grown = out | body_in
                if grown == body_out:
                    break
                body_out = grown
            live = body_in if node.count > 0 else out
        elif isinstance(node, _While):
            cond_in = 0
            while True:
                pred_out = out | self.transfer(node.body, cond_in)
                new_cond_in = self.transfer(node.cond, self.transfer(node.pred, pred_out))
                if new_cond_in == cond_in:
                    break
                cond_in = new_cond_in
            live = cond_in
        elif isinstance(node, _If):
            joined = self.transfer(node.then, out) | self.transfer(node.otherwise, out)
            live = self.transfer(node.pred, joined)
        else:  # _Call
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

    def is_always_live(self, variable: int) -> bool:
        return variable in self.always_live

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
    lin = _Linearise(module)
    lin.check_no_recursion()
    flow = _Dataflow(len(lin.steps), lin.function_trees)
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
        live_in=tuple(flow.live_in), live_out=tuple(flow.live_out))


def _index_of(graph: Graph, variable: Variable) -> int:
    return int(graph.variable_of_id(np.array([variable.first_id], dtype=np.int64))[0])
