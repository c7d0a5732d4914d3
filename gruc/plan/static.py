"""Plan-only cycles: how often each step would run, counted from the program tree, not by running.

Why: a run's cycles and exchange bytes are its executed step counts times the static per-step
costs (:mod:`gruc.runtime.cost`).  A planning study wants those numbers without building device
memory, preparing kernels or executing anything, so the counts are derived here from the control
structure alone and give *the same* report as a run of the same program:

* a leaf step (``Execute``, ``Copy``, ``WriteUndef``, ``PrintTensor``, ``Sync``) runs once each
  time its parent runs; ``Repeat(n, body)`` multiplies the body's counts by ``n``;
* ``Call(f)`` adds ``f``'s counts once per call (a function's steps are numbered once and shared
  by every call site, as in liveness and lowering);
* data-dependent control flow needs the caller to say what the data would do: the trip count of
  each ``RepeatWhileTrue`` (its condition and predicate run ``trips + 1`` times, its body
  ``trips`` times — the interpreter's accounting) and the branch each ``If`` takes, both keyed by
  the index of the loop's or branch's predicate step.

The counts walk the analysis tree that liveness was computed over and keeps
(:attr:`~gruc.analysis.liveness.Liveness.program_trees`), whose leaves carry the step numbers, so
they land on the steps liveness, lowering and the cost model number by construction.
"""

from __future__ import annotations

import time
from typing import Mapping, Sequence as Seq

import numpy as np

from gruc.analysis.liveness import Liveness
from gruc.analysis.steps import IfNode, LeafNode, RepeatNode, SequenceNode, Step, WhileNode
from gruc.errors import GrucValueError
from gruc.ir.graph import Graph
from gruc.ir.program import If, Program, RepeatWhileTrue
from gruc.runtime.engine import CompiledProgram, compile_program
from gruc.runtime.page_data import ReportDetails
from gruc.runtime.report import Report


class StaticProgram:
    """The step-numbered control tree of a compiled module, without any data: the analysis trees
    its liveness was computed over."""

    def __init__(self, liveness: Liveness) -> None:
        self.steps = liveness.steps
        self.programs = liveness.program_trees
        self.functions = liveness.function_trees
        self.loop_steps = frozenset(s.index for s in self.steps
                                    if isinstance(s.node, RepeatWhileTrue))
        self.branch_steps = frozenset(s.index for s in self.steps if isinstance(s.node, If))

    def loops(self, program: int = 0) -> list[Step]:
        """Predicate steps of the ``RepeatWhileTrue`` loops of entry program ``program``, in
        program order (loops inside called functions are not included)."""
        found: list[Step] = []

        def visit(item) -> None:
            if isinstance(item, WhileNode):
                visit(item.cond)
                found.append(self.steps[item.pred.step])
                visit(item.body)
            elif isinstance(item, SequenceNode):
                for child in item.items:
                    visit(child)
            elif isinstance(item, RepeatNode):
                visit(item.body)
            elif isinstance(item, IfNode):
                visit(item.then)
                visit(item.otherwise)

        visit(self.programs[self._program(program)])
        return found

    def _program(self, program: int) -> int:
        if not isinstance(program, (int, np.integer)) or not 0 <= program < len(self.programs):
            raise GrucValueError(f"program {program!r} does not exist; there are programs "
                                 f"0..{len(self.programs) - 1}")
        return int(program)

    def step_counts(self, runs: Seq[int] = (0,), *, trips: Mapping[int, int] | None = None,
                    branches: Mapping[int, bool] | None = None) -> np.ndarray:
        """Executions of every step over running the entry programs ``runs`` in order."""
        trips, branches = dict(trips or {}), dict(branches or {})
        for key, value in trips.items():
            if key not in self.loop_steps:
                raise GrucValueError(f"trips names step {key!r}, which is not the predicate of a "
                                     f"RepeatWhileTrue (those are steps {sorted(self.loop_steps)})")
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise GrucValueError(f"trip count {value!r} of the loop at step {key} must be an "
                                     "integer >= 0")
        for key in branches:
            if key not in self.branch_steps:
                raise GrucValueError(f"branches names step {key!r}, which is not the predicate of "
                                     f"an If (those are steps {sorted(self.branch_steps)})")
        counter = _Counter(self, trips, branches)
        counts = np.zeros(len(self.steps), dtype=np.int64)
        for program in runs:
            counter.add(self.programs[self._program(program)], 1, counts)
        return counts


MAX_STEP_COUNT = 2 ** 63 - 1
"""The most executions of one step a plan counts (its counts are 64-bit integers)."""


class _Counter:
    """Counts executions per step from a :class:`StaticProgram` and the answers the data would give:
    ``trips`` of each RepeatWhileTrue and ``branches`` of each If, by predicate step.  A function's
    counts for one call are computed once (``per_call``) and scaled at every call site."""
    def __init__(self, static: StaticProgram, trips: dict[int, int],
                 branches: dict[int, bool]) -> None:
        self.static = static
        self.trips = trips
        self.branches = branches
        self.per_call: dict[int, np.ndarray] = {}

    def _missing(self, step: int, what: str, give: str) -> GrucValueError:
        where = self.static.steps[step]
        return GrucValueError(f"{what} at step {step} ({where.where}) depends on data; a plan-only "
                              f"count needs {give}")

    def bump(self, counts: np.ndarray, step: int, times: int) -> None:
        """``counts[step] += times``, refusing counts a 64-bit integer cannot hold (nested
        repeats multiply: two of 2^32 make 2^64)."""
        total = int(counts[step]) + times
        if total > MAX_STEP_COUNT:
            where = self.static.steps[step]
            raise GrucValueError(f"step {step} ({where.where}) would run {total} times; a plan "
                                 f"counts at most {MAX_STEP_COUNT} executions of a step")
        counts[step] = total

    def add(self, item, times: int, counts: np.ndarray) -> None:
        """Count ``times`` executions of ``item`` into ``counts`` (per step).  Multiplies through
        loop counts rather than unrolling them, so a 2,000-step loop costs what one step does."""
        if times == 0:
            return
        if isinstance(item, LeafNode):
            self.bump(counts, item.step, times)
        elif isinstance(item, SequenceNode):
            for child in item.items:
                self.add(child, times, counts)
        elif isinstance(item, RepeatNode):
            self.add(item.body, times * item.count, counts)
        elif isinstance(item, WhileNode):
            step = item.pred.step
            if step not in self.trips:
                raise self._missing(step, "the RepeatWhileTrue loop",
                                    f"its trip count (trips={{{step}: n}})")
            trips = int(self.trips[step])
            self.add(item.cond, times * (trips + 1), counts)
            self.bump(counts, step, times * (trips + 1))
            self.add(item.body, times * trips, counts)
        elif isinstance(item, IfNode):
            step = item.pred.step
            if step not in self.branches:
                raise self._missing(step, "the If", f"the branch it takes "
                                                    f"(branches={{{step}: True}})")
            self.bump(counts, step, times)
            self.add(item.then if self.branches[step] else item.otherwise, times, counts)
        else:  # CallNode
            if item.function not in self.per_call:
                once = np.zeros(len(self.static.steps), dtype=np.int64)
                self.add(self.static.functions[item.function], 1, once)
                self.per_call[item.function] = once
            for step in np.flatnonzero(self.per_call[item.function]):
                self.bump(counts, int(step), times * int(self.per_call[item.function][step]))


def plan_report(compiled: CompiledProgram, counts: np.ndarray, seconds: float) -> Report:
    """The report of ``compiled`` as if its steps had run ``counts`` times."""
    plan = compiled.plan
    return Report(compiled.module.graph.target, compiled.footprint, plan.liveness.steps,
                  compiled.costs, counts, seconds, ReportDetails(compiled.module, plan))


def plan_program(graph: Graph, programs: Seq[Program] | Program, *, runs: Seq[int] = (0,),
                 trips: Mapping[int, int] | None = None,
                 branches: Mapping[int, bool] | None = None,
                 pipeline: str | None = None, memory_model: str = "poplar",
                 strict_memory: bool = False) -> Report:
    """Compile ``programs`` without lowering or running and report them as if the entry programs
    ``runs`` had run: memory, exchange and cycles equal an :class:`~gruc.runtime.engine.Engine`'s
    report after the same runs (``trips`` / ``branches``: see :meth:`StaticProgram.step_counts`;
    ``strict_memory``: refuse programs that do not fit).
    """
    start = time.perf_counter()
    compiled = compile_program(graph, programs, pipeline=pipeline, memory_model=memory_model,
                               strict_memory=strict_memory)
    static = StaticProgram(compiled.plan.liveness)
    counts = static.step_counts(runs, trips=trips, branches=branches)
    return plan_report(compiled, counts, time.perf_counter() - start)
