"""Step numbering: every leaf of a module's program tree gets one number, in program order, and the
tree is rebuilt as an *analysis tree* whose leaves carry those numbers.

Why a module of its own: the numbers are the coordinates every later stage speaks in — liveness
says which variables are live at each step, the memory plan places them over steps, the cost
model and the report count and name steps — so the numbering is defined once, here, apart from
any one analysis over it.  The analysis tree is built once too: liveness keeps it
(:attr:`~gruc.analysis.liveness.Liveness.program_trees`), and lowering and plan-only step counting
walk it rather than the programs, so they number steps as liveness does by construction.

Steps are ``Execute``, ``Copy``, ``WriteUndef``, ``PrintTensor``, ``Sync``, and the predicate read
of ``If`` / ``RepeatWhileTrue`` (numbered before the branches / before the body, after the loop
condition).  The entry programs are numbered first, in order, then every function they call
(:attr:`~gruc.ir.module.Module.functions`: a function of the graph no program calls is not part of
the module), each exactly once however many ``Call`` sites name it.  A program object used at
several places of a tree is numbered at each place.  Variable sets are Python ints used as bitsets
over ``graph.variables`` indices (:func:`mask_of`, :func:`bits_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from gruc.errors import GrucProgramError
from gruc.ir.effects import Effect, EffectTable
from gruc.ir.graph import Function
from gruc.ir.module import Module
from gruc.ir.program import (Call, Copy, Execute, If, PrintTensor, Program, Repeat,
                             RepeatWhileTrue, Sequence, Sync, TimeLoop, WriteUndef)
from gruc.ir.tensor import Tensor, Variable

__all__ = ["CallNode", "IfNode", "LeafNode", "RepeatNode", "SequenceNode", "Step", "StepTree",
           "WhileNode", "bits_of", "mask_of"]


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
    """What a leaf step does in one line (:attr:`Step.text`), naming variables rather than views,
    which have no names of their own."""
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
class LeafNode:
    """A numbered step (its program node and effect are ``steps[step]``)."""

    __slots__ = ("step",)

    def __init__(self, step: int) -> None:
        self.step = step


class SequenceNode:
    """Items run in order."""

    __slots__ = ("items",)

    def __init__(self, items: list) -> None:
        self.items = items


class RepeatNode:
    """``body`` run ``count`` times (zero included)."""

    __slots__ = ("count", "body")

    def __init__(self, count: int, body) -> None:
        self.count, self.body = count, body


class WhileNode:
    """``cond``, the predicate read ``pred``, then ``body`` and round again while it holds."""

    __slots__ = ("cond", "pred", "body")

    def __init__(self, cond, pred: LeafNode, body) -> None:
        self.cond, self.pred, self.body = cond, pred, body


class IfNode:
    """The predicate read ``pred``, then one of the branches."""

    __slots__ = ("pred", "then", "otherwise")

    def __init__(self, pred: LeafNode, then, otherwise) -> None:
        self.pred, self.then, self.otherwise = pred, then, otherwise


class CallNode:
    """A call of function number ``function`` (its tree is in ``StepTree.function_trees``)."""

    __slots__ = ("function",)

    def __init__(self, function: int) -> None:
        self.function = function


class StepTree:
    """Numbers the leaf steps of a module and builds its analysis tree: ``program_trees`` (one per
    entry program), ``function_trees`` (one per function, in the order of
    :attr:`~gruc.ir.module.Module.functions`) and ``steps``."""

    def __init__(self, module: Module) -> None:
        self.effects = EffectTable(module.graph)
        self.steps: list[Step] = []
        self.function_index: dict[int, int] = {}
        self.functions: list[Function] = []
        self.function_trees: list = []
        self.callees: list[set[int]] = []
        for function in module.functions:
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

    def _leaf(self, node: Program, where: str) -> LeafNode:
        step = Step(len(self.steps), node, where, self.effects.of(node))
        self.steps.append(step)
        return LeafNode(step.index)

    def _node(self, node: Program, where: str, caller: int | None):
        """The analysis node of ``node``, numbering its leaves as steps in program order, each with
        its path ``where``.  A call records its callee under ``caller`` (for
        :meth:`check_no_recursion`); a node type with nested programs that this does not know is
        refused, never skipped."""
        if isinstance(node, (Sequence, TimeLoop)):  # a time loop runs as [reset, loop]
            return SequenceNode([self._node(p, where, caller) for p in node.children()])
        if isinstance(node, Repeat):
            return RepeatNode(node.count, self._node(node.body, f"{where}/repeat {node.count}", caller))
        if isinstance(node, RepeatWhileTrue):
            inner = f"{where}/while"
            cond = self._node(node.condition, inner, caller)
            pred = self._leaf(node, inner)
            return WhileNode(cond, pred, self._node(node.body, inner, caller))
        if isinstance(node, If):
            pred = self._leaf(node, where)
            return IfNode(pred, self._node(node.then, f"{where}/then", caller),
                       self._node(node.otherwise, f"{where}/else", caller))
        if isinstance(node, Call):
            index = self._function(node.function)
            if caller is not None:
                self.callees[caller].add(index)
            return CallNode(index)
        if node.children():
            raise GrucProgramError(f"liveness does not know the program node "
                                   f"{type(node).__name__} (it has nested programs)")
        return self._leaf(node, where)

    def check_no_recursion(self) -> None:
        """Refuse a function that calls itself, directly or not: Poplar functions cannot
        recurse, and the analyses that walk calls would not end."""
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
