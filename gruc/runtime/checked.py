"""Checked runs: ``Engine(..., checked=True)`` bounds-checks every access just before it happens.

Why.  The compile-time memory check (:mod:`gruc.runtime.verify_memory`) proves every *static*
address of a lowered program safe, once.  A checked run is the guard mode the fuzz tests run
under: before each execution of each vertex and copy it checks, against the memory plan, the
element indices the step is about to touch — the index arrays as they are at that moment, and the
addresses known only then: the window a ``DynamicSlice`` / ``DynamicUpdate`` selects from the
offsets in memory.  A violation raises :class:`~gruc.errors.GrucMemoryError` naming the step,
vertex, field and address, before a single byte is moved, instead of corrupting a neighbour.
The rules are the compile-time ones (allocation of the named tensor, the vertex's own tile for
what it writes), so a checked run accepts exactly the programs an unchecked one runs safely, and
gives bit-identical results.

How.  The interpreter is not modified: :class:`CheckedInterpreter` hands it a vertex table whose
every entry prepares a vertex with the backend's own implementation (numba, or the numpy
definition) and wraps the prepared callable in a guard; the backend's whole-executable hooks
(fused steps) are wrapped the same way, and so is the copy.  Both backends work unchanged.

Cost.  Per access and execution, the compile-time check's compiled pass over its indices (about
one extra read of every index a step uses): checked runs are for tests and debugging, not speed.

Out-of-range dynamic offsets do not raise.  The IR defines them (``gruc.ir.codelets.dynamic``):
with an offset past its dimension the vertex does nothing, as poplibs' update codelet does and as
its slice codelet does when ``remapOutOfBoundIndices`` is off.  Such a vertex touches no memory, so
there is nothing out of bounds to catch; raising would make a checked run reject a program its
unchecked run executes as specified, and the two would no longer agree — the very comparison the
fuzz tests make.  Yet a skipped slice leaves its output *undefined* on poplibs, so a program that
relies on one is suspect: every skip is recorded in :attr:`CheckedInterpreter.skipped_windows`
(step, vertex, offsets), for a test to assert there were none, or exactly the expected ones.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from gruc.errors import GrucMemoryError
from gruc.ir.codelets.dynamic import DYNAMIC_SLICE, DYNAMIC_UPDATE
from gruc.ir.module import Module
from gruc.ir.vertices import VertexKind
from gruc.memory.plan import MemoryPlan
from gruc.runtime.interp import (NUMPY_VERTICES, Interpreter, Prepared, PrepareVertex,
                                 numpy_copy)
from gruc.runtime.lower import (CopyStep, DeviceMemory, Executable, ExecuteStep, LoweredVertex,
                                Operand)
from gruc.runtime.verify_memory import (Access, Regions, copy_accesses, describe_vertex,
                                        vertex_accesses)

DYNAMIC_WINDOWS = {DYNAMIC_SLICE: "out", DYNAMIC_UPDATE: "update"}
"""Vertex kinds whose addresses depend on data, and the field holding their window."""


@dataclass(frozen=True)
class SkippedWindow:
    """A dynamic slice or update that did nothing because an offset was out of range."""

    step: int
    vertex: str
    offsets: tuple[int, ...]


class _Guard:
    """The checks of one vertex or copy: its accesses, checked in full every time it runs."""

    def __init__(self, regions: Regions, where: str, accesses: list[Access]) -> None:
        self.regions = regions
        self.where = where
        self.accesses = accesses

    def check(self, access: Access) -> None:
        problem = self.regions.explain(access)
        if problem is not None:
            raise GrucMemoryError(f"checked run: {self.where}: {problem}")

    def __call__(self) -> None:
        for access in self.accesses:
            self.check(access)


class _Window:
    """The data-dependent access of a dynamic slice or update: the base rows its offsets pick.

    Computed here from the offsets in memory and the kind's definition (window row ``i`` is base
    row ``(offset + i) mod N`` per sliced dim), independently of the engines' implementations."""

    def __init__(self, lowered: LoweredVertex, base_access: Access, step: int, where: str,
                 skipped: list[SkippedWindow]) -> None:
        base: Operand = lowered.fields["base"]
        window: Operand = lowered.fields[DYNAMIC_WINDOWS[lowered.kind]]
        self.offset: Operand = lowered.fields["offset"]
        self.base_dtype = base.dtype
        self.sizes = np.array(base.shape[:-1], dtype=np.int64)
        self.rows = base.index.reshape(-1, base.shape[-1])
        self.coords = np.indices(window.shape[:-1]).reshape(len(self.sizes), -1)
        self.base_access = base_access
        self.step, self.where, self.skipped = step, where, skipped

    def access(self, memory: DeviceMemory) -> Access | None:
        """What the vertex will touch in ``base`` now, or None if it will do nothing."""
        offsets = memory.view(self.offset.dtype)[self.offset.index].astype(np.int64)
        if np.any(offsets < 0) or np.any(offsets >= self.sizes):
            self.skipped.append(SkippedWindow(self.step, self.where, tuple(offsets.tolist())))
            return None
        picked = np.ravel_multi_index(tuple((self.coords + offsets[:, None])
                                            % self.sizes[:, None]), tuple(self.sizes))
        touched = self.rows[picked].reshape(-1)
        return self.base_access._replace(
            what=f"{self.base_access.what} (window at offsets {offsets.tolist()})",
            operand=Operand(self.base_dtype, touched, touched.shape))


class _GuardedTable(dict):
    """A vertex table preparing with ``inner`` (falling back to the numpy definitions), each
    prepared callable wrapped by the interpreter's guard, and ``inner``'s whole-executable hooks
    run through the interpreter (which wraps what they return)."""

    def __init__(self, inner: dict[VertexKind, PrepareVertex],
                 interpreter: "CheckedInterpreter") -> None:
        super().__init__()
        for kind in {*NUMPY_VERTICES, *inner}:
            self[kind] = self._wrapped(inner.get(kind) or NUMPY_VERTICES[kind], interpreter)
        self.executable_hooks = [partial(interpreter._hooked, hook)
                                 for hook in getattr(inner, "executable_hooks", ())]

    @staticmethod
    def _wrapped(prepare: PrepareVertex, interpreter: "CheckedInterpreter") -> PrepareVertex:
        return lambda lowered: interpreter._wrap(id(lowered), prepare(lowered))


class CheckedInterpreter(Interpreter):
    """An :class:`Interpreter` whose every vertex and copy is bounds-checked before it runs."""

    def __init__(self, executable: Executable, memory: DeviceMemory,
                 vertices: dict[VertexKind, PrepareVertex] | None = None,
                 copy: Callable[[DeviceMemory, CopyStep], None] = numpy_copy, *,
                 module: Module, plan: MemoryPlan, require_local: bool = False) -> None:
        self.regions = Regions(plan, module.graph, executable.tile_stride)
        self.skipped_windows: list[SkippedWindow] = []
        """Every dynamic slice or update skipped for an out-of-range offset, in run order."""
        self._guards: dict[int, Callable[[DeviceMemory], None]] = {}
        self._companions: dict[int, list[int]] = defaultdict(list)
        """Vertices a hook prepared as part of another's callable, by ``id`` of that other one:
        their guards run before it."""
        copy_guards: dict[int, _Guard] = {}
        steps = plan.liveness.steps
        for leaf in executable.leaves:
            if isinstance(leaf, ExecuteStep):
                for position, lowered in enumerate(leaf.vertices):
                    self._guards[id(lowered)] = self._vertex_guard(leaf, position, lowered,
                                                                   require_local)
            elif isinstance(leaf, CopyStep):
                node = steps[leaf.step].node
                copy_guards[leaf.step] = _Guard(self.regions, f"step {leaf.step} (Copy)",
                                                copy_accesses(leaf, node.src, node.dst))

        def checked_copy(memory: DeviceMemory, step: CopyStep) -> None:
            copy_guards[step.step]()
            copy(memory, step)

        super().__init__(executable, memory,
                         _GuardedTable(NUMPY_VERTICES if vertices is None else vertices, self),
                         checked_copy)

    def _vertex_guard(self, leaf: ExecuteStep, position: int, lowered: LoweredVertex,
                      require_local: bool) -> Callable[[DeviceMemory], None]:
        """The guard of one vertex: its static accesses, checked at every execution.  A dynamic
        slice or update also has the base rows its offsets select checked then, the only time they
        are known; a skipped one (offsets out of range) is recorded, not refused."""
        where = f"step {leaf.step}, {describe_vertex(lowered, position, leaf.name)}"
        accesses = vertex_accesses(lowered, require_local)
        guard = _Guard(self.regions, where, accesses)
        if lowered.kind not in DYNAMIC_WINDOWS:
            return lambda memory: guard()
        base = next(a for a in accesses if a.what == "field 'base'")
        window = _Window(lowered, base, leaf.step, where, self.skipped_windows)

        def dynamic(memory: DeviceMemory) -> None:
            guard()
            touched = window.access(memory)
            if touched is not None:
                guard.check(touched)

        return dynamic

    def _hooked(self, hook, executable: Executable, *args) -> dict[int, Prepared | None]:
        """Run a backend hook, and wrap what it prepared.  A vertex it marks ``None`` runs inside
        another vertex's callable; its guard goes before the first callable of its step (or,
        should its step have none, before every callable the hook made)."""
        prepared = hook(executable, *args)
        idle = {key for key, run in prepared.items() if run is None}
        if idle:
            runners = [key for key, run in prepared.items() if run is not None]
            for leaf in executable.leaves:
                if isinstance(leaf, ExecuteStep):
                    keys = [id(v) for v in leaf.vertices]
                    companions = [key for key in keys if key in idle]
                    if not companions:
                        continue
                    first = next((key for key in keys if key not in idle), None)
                    for runner in [first] if first is not None else runners:
                        self._companions[runner].extend(companions)
        return {key: None if run is None else self._wrap(key, run)
                for key, run in prepared.items()}

    def _wrap(self, key: int, run: Prepared) -> Prepared:
        """``run`` behind the guards of its vertex and of the vertices a hook folded into it, all
        checked before any of them touches memory."""
        guards = [self._guards[k] for k in (*self._companions.get(key, ()), key)]

        def checked(memory: DeviceMemory) -> None:
            for guard in guards:
                guard(memory)
            run(memory)

        return checked
