"""The reference engine: a plain numpy interpreter of lowered programs — the meaning of every vertex.

Vertex semantics are one function per kind in :data:`NUMPY_VERTICES`, filled with ``@numpy_vertex``
(autodidax's rule table).  Each *prepares* a lowered vertex once, at engine construction, into a
callable that reads its operands from device memory through their element indices, computes with
the definitions in :mod:`gruc.ir.expr` (or numpy), and writes back.  The numba backend registers
its own table and falls back to this one for kinds it does not speed up; a differential test holds
the two together.

:class:`Interpreter` walks the executable tree (blocks, loops, branches, calls) and counts every
step it executes; the counts are what the cost model multiplies into cycles and exchange bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from gruc.errors import GrucProgramError
from gruc.ir.vertices import VertexKind
from gruc.runtime.lower import (Block, Branch, CallFunction, CopyStep, DeviceMemory, Executable,
                                ExecuteStep, LoweredVertex, Loop, MarkStep, Operand, PrintStep,
                                WhileLoop)

Prepared = Callable[[DeviceMemory], None]
PrepareVertex = Callable[[LoweredVertex], Prepared]


@dataclass
class RunHooks:
    """What a whole-executable preparation hook may ask of the interpreter at run time."""

    step_counts: np.ndarray
    """Executions of each step so far (they only grow): watched to tell whether a step ran."""
    before_step: dict[int, list[Prepared]] = field(default_factory=dict)
    """Callables run before an Execute or Copy step, by step number (e.g. to write back a value a
    kernel kept on the host, before a step that touches its tensor)."""
    after_run: list[Prepared] = field(default_factory=list)
    """Callables run when a program finishes: device memory is complete between runs."""


PrepareExecutable = Callable[[Executable, RunHooks], dict[int, Prepared | None]]
"""A whole-executable preparation hook: given the executable and the interpreter's
:class:`RunHooks`, returns prepared callables for some lowered vertices, by ``id`` of the
:class:`LoweredVertex` (they replace the table's preparation of those vertices).
``None`` marks a vertex another vertex's callable runs along with its own (a group of vertices
prepared as one kernel call), so the interpreter does not call anything for it."""
NUMPY_VERTICES: dict[VertexKind, PrepareVertex] = {}


def numpy_vertex(kind: VertexKind) -> Callable[[PrepareVertex], PrepareVertex]:
    """Register the numpy definition of vertex kind ``kind``."""

    def register(fn: PrepareVertex) -> PrepareVertex:
        NUMPY_VERTICES[kind] = fn
        return fn

    return register


def _flat(memory: DeviceMemory, operand: Operand) -> np.ndarray:
    return memory.view(operand.dtype)[operand.index]


def numpy_copy(memory: DeviceMemory, step: CopyStep) -> None:
    """Element-by-element copy (reads everything before writing, so overlaps are safe)."""
    memory.view(step.dst.dtype)[step.dst.index] = _flat(memory, step.src)


class Interpreter:
    """Walks an :class:`Executable` over a :class:`DeviceMemory`, counting executed steps."""

    def __init__(self, executable: Executable, memory: DeviceMemory,
                 vertices: dict[VertexKind, PrepareVertex] | None = None,
                 copy: Callable[[DeviceMemory, CopyStep], None] = numpy_copy) -> None:
        self.executable = executable
        self.memory = memory
        self.copy = copy
        table = NUMPY_VERTICES if vertices is None else vertices
        self.hooks = RunHooks(np.zeros(executable.num_steps, dtype=np.int64))
        self.step_counts = self.hooks.step_counts
        overrides: dict[int, Prepared | None] = {}
        for hook in getattr(table, "executable_hooks", ()):  # a backend's cross-step fast paths
            overrides.update(hook(executable, self.hooks))
        self.prepared: dict[int, tuple[Prepared, ...]] = {}
        for leaf in executable.leaves:
            if isinstance(leaf, ExecuteStep):
                prepared = (overrides[id(v)] if id(v) in overrides else self._prepare(table, v)
                            for v in leaf.vertices)
                self.prepared[leaf.step] = tuple(run for run in prepared if run is not None)
        self.loop_trips: dict[int, int] = {}
        """Iterations of each RepeatWhileTrue in the last run, by ``id`` of the lowered loop."""
        self.branches: dict[int, bool] = {}
        """Whether each If took its then-branch in the last run, by ``id`` of the lowered branch."""
        self.printed: list[tuple[str, np.ndarray]] = []

    @staticmethod
    def _prepare(table: dict[VertexKind, PrepareVertex], vertex: LoweredVertex) -> Prepared:
        prepare = table.get(vertex.kind) or NUMPY_VERTICES.get(vertex.kind)
        if prepare is None:
            raise GrucProgramError(f"no engine implements vertex kind {vertex.kind.name!r}")
        return prepare(vertex)

    def run(self, program: int) -> None:
        """Run entry program ``program``.  ``loop_trips`` and ``branches`` then describe this run
        only, and the after-run hooks run even when it fails, so device memory is complete between
        runs."""
        self.loop_trips.clear()
        self.branches.clear()
        try:
            self.block(self.executable.programs[program])
        finally:
            for complete in self.hooks.after_run:
                complete(self.memory)

    def predicate(self, operand: Operand) -> bool:
        return bool(_flat(self.memory, operand)[0])

    def block(self, block: Block) -> None:
        """Run ``block``'s items in order.  One loop dispatching on the exact item type, not a
        method per kind: the interpreter's overhead per step is what a long loop body pays
        thousands of times."""
        for item in block.items:
            kind = type(item)
            if kind is ExecuteStep:
                self.step_counts[item.step] += 1
                for run in self.hooks.before_step.get(item.step, ()):
                    run(self.memory)
                for run in self.prepared[item.step]:
                    run(self.memory)
            elif kind is CopyStep:
                self.step_counts[item.step] += 1
                for run in self.hooks.before_step.get(item.step, ()):
                    run(self.memory)
                self.copy(self.memory, item)
            elif kind is Loop:
                for _ in range(item.count):
                    self.block(item.body)
            elif kind is WhileLoop:
                trips = 0
                while True:
                    self.block(item.condition)
                    self.step_counts[item.step] += 1
                    if not self.predicate(item.predicate):
                        break
                    self.block(item.body)
                    trips += 1
                self.loop_trips[id(item)] = trips
            elif kind is Branch:
                self.step_counts[item.step] += 1
                taken = self.predicate(item.predicate)
                self.branches[id(item)] = taken
                self.block(item.then if taken else item.otherwise)
            elif kind is CallFunction:
                self.block(self.executable.functions[item.function])
            elif kind is PrintStep:
                self.step_counts[item.step] += 1
                self.printed.append((item.label, self.memory.read(item.operand).copy()))
            elif kind is MarkStep:
                self.step_counts[item.step] += 1
            else:
                self.block(item)  # a nested Block
