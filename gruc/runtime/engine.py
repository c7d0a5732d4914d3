"""The Engine: compile a graph's programs for the simulated IPU, run them, move tensors to and from
the host, and report memory and cycles (Poplar's ``Engine``).

Compiling runs the pass pipeline (``gruc.passes.DEFAULT_PIPELINE`` unless another is given;
``pipeline=""`` runs none), verifies the module, plans tile memory, lowers every step to
memory addresses and checks each address lies in memory the plan gave its tensor
(:mod:`gruc.runtime.verify_memory`); each step's cost is estimated when the report (or a trace)
first needs it — a program that is only run never does.  Running executes on the
simulated tile memory with the chosen backend — ``"numba"`` (compiled kernels, the default) or
``"numpy"`` (the reference interpreter) — and counts executed steps, which the report turns into
cycles and exchange bytes; ``checked=True`` bounds-checks every access before it runs, the
addresses dynamic offsets select included (:mod:`gruc.runtime.checked`).
:func:`compile_program` is the compile without lowering, for plan-only studies (:mod:`gruc.plan`).
Several programs share one device state, as on the IPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Sequence

import numpy as np

from gruc.errors import GrucOutOfMemory, GrucProgramError, GrucTypeError, GrucValueError
from gruc.ir.graph import Graph, to_storage
from gruc.ir.heap import deferred_full_collections, note_release
from gruc.ir.module import Module
from gruc.ir.program import Program
from gruc.ir.verify import check_initialized
from gruc.memory.plan import MemoryPlan
from gruc.memory.planner import plan_memory
from gruc.passes.rewrite import require_valid, verified
from gruc.runtime import codelets  # noqa: F401  (fills the vertex tables)
from gruc.runtime.checked import CheckedInterpreter
from gruc.runtime.cost import StepCost, step_costs
from gruc.runtime.footprint import MEMORY_MODELS, Footprint, memory_footprint
from gruc.runtime.interp import Interpreter
from gruc.runtime.lower import DeviceMemory, Operand, lower
from gruc.runtime.page_data import ReportDetails
from gruc.runtime.report import Report, memory_lines, overflow_lines
from gruc.runtime.trace import chrome_trace, write_chrome_trace
from gruc.runtime.verify_memory import verify_memory
from gruc.text import plural

BACKENDS = ("numba", "numpy")


@dataclass(frozen=True, eq=False)
class CompiledProgram:
    """Everything compiling decides before lowering: the module after the pipeline, its memory
    plan and the static cost of one execution of each step."""

    module: Module
    plan: MemoryPlan
    costs: tuple[StepCost, ...] | None
    """None when compiled with ``costs=False``."""
    seconds: float
    footprint: Footprint | None = None
    """Every byte of every tile by category (with the costs, which it needs)."""


@deferred_full_collections()
def compile_program(graph: Graph, programs: Sequence[Program] | Program, *,
                    pipeline: str | None = None, strict_memory: bool = False,
                    costs: bool = True, memory_model: str = "poplar") -> CompiledProgram:
    """Run the pipeline, verify, plan memory and (with ``costs``) cost every step and count
    every tile's memory by category (:mod:`gruc.runtime.footprint`, ``memory_model``) —
    without lowering to addresses.

    This is the part of an :class:`Engine`'s compile that its report depends on; planning studies
    (:mod:`gruc.plan`) call it alone, since lowering and kernel preparation only serve running.
    An engine leaves the costs to its report, which computes them when first asked (unless
    ``strict_memory``: whether a tile fits needs its whole footprint).
    """
    if memory_model not in MEMORY_MODELS:
        raise GrucValueError(f"memory model {memory_model!r} is not one of: "
                             + ", ".join(MEMORY_MODELS))
    if isinstance(programs, Program):
        programs = [programs]
    start = time.perf_counter()
    module = verified(Module(graph, list(programs)))
    if pipeline is None:
        from gruc.passes import DEFAULT_PIPELINE

        pipeline = DEFAULT_PIPELINE
    if pipeline:
        from gruc.passes.pipeline import run_pipeline

        module = run_pipeline(module, pipeline).module
    require_valid(module)  # free for a pass's output: valid by contract
    plan = plan_memory(module)
    step_cost = step_costs(module.graph, plan.liveness.steps) if costs or strict_memory else None
    footprint = (memory_footprint(module, plan, step_cost, memory_model)
                 if step_cost is not None else None)
    if strict_memory:
        check_fits(footprint)
    compiled = CompiledProgram(module, plan, step_cost if costs else None,
                               time.perf_counter() - start, footprint)
    note_release(compiled)  # its graph is garbage for the cyclic collector once it is gone
    return compiled


def check_fits(footprint: Footprint) -> None:
    """Raise :class:`GrucOutOfMemory` naming the worst tile, with the memory report, if some tile
    does not fit."""
    if footprint.fits:
        return
    overflows = footprint.tiles_over_capacity
    worst = max(overflows, key=lambda o: (o.bytes, -o.tile))
    raise GrucOutOfMemory(f"out of memory: {worst}; {plural(len(overflows), 'tile')} over "
                          "capacity in all",
                          (*memory_lines(footprint.target, footprint), *overflow_lines(footprint)))


def check_engine_args(graph: Graph, programs: Sequence[Program] | Program, pipeline: object,
                      strict_memory: object, backend: object) -> dict[str, str]:
    """``Engine``'s arguments, checked before compiling: each bad one is named with what is
    allowed, and a program that reads a tensor before anything writes it is refused here, naming
    the tensor.  Returns the host reads whose tensor nothing writes, which ``read_tensor``
    refuses (see ``gruc.ir.verify.check_initialized``)."""
    if backend not in BACKENDS:
        raise GrucValueError(f"unknown backend {backend!r}; allowed: {', '.join(BACKENDS)}")
    if pipeline is not None and not isinstance(pipeline, str):
        raise GrucTypeError(f"pipeline must be a pipeline string such as 'dce,plan-memory' (or "
                            f"None for the default), got {pipeline!r}")
    if not isinstance(strict_memory, (bool, np.bool_)):
        raise GrucTypeError(f"strict_memory must be True or False, got {strict_memory!r}")
    if not isinstance(programs, (Program, list, tuple)):
        raise GrucTypeError(f"programs must be a Program or a list of Programs, got "
                            f"{type(programs).__name__}")
    return check_initialized(Module(graph, [programs] if isinstance(programs, Program)
                                    else programs))


class Engine:
    """Compile ``programs`` of ``graph`` and run them on a simulated IPU."""

    @deferred_full_collections()
    def __init__(self, graph: Graph, programs: Sequence[Program] | Program, *,
                 pipeline: str | None = None, strict_memory: bool = False,
                 backend: str = "numba", checked: bool = False,
                 memory_model: str = "poplar") -> None:
        self._unwritten_reads = check_engine_args(graph, programs, pipeline, strict_memory, backend)
        if not isinstance(checked, (bool, np.bool_)):
            raise GrucTypeError(f"checked must be True or False, got {checked!r}")
        start = time.perf_counter()
        compiled = compile_program(graph, programs, pipeline=pipeline, strict_memory=strict_memory,
                                   costs=False, memory_model=memory_model)
        self.memory_model = memory_model
        module, plan = compiled.module, compiled.plan
        self.compiled = compiled
        """The module after the pipeline and its memory plan, held as long as the engine: its
        release then tells the heap that the engine's graph is garbage (``note_release``)."""
        self.executable = lower(module, plan)
        verify_memory(module, plan, self.executable, lazy=True)  # before any index is read
        self.memory = DeviceMemory(self.executable.num_tiles, self.executable.tile_stride)
        for operand, values in self.executable.constants:
            self.memory.write(operand, values)
        interpreter = partial(CheckedInterpreter, module=module, plan=plan) if checked \
            else Interpreter  # checked: bounds-check every access before it runs
        if backend == "numba":
            from gruc.runtime.kernels import NUMBA_VERTICES, CompiledCopy

            self.interpreter = interpreter(self.executable, self.memory, NUMBA_VERTICES,
                                           CompiledCopy())
        else:
            self.interpreter = interpreter(self.executable, self.memory)
        self.backend = backend
        self.checked = bool(checked)
        self._last_run: tuple[int, ...] | None = None
        """The entry programs of the last invocation (:meth:`run`), in order."""
        self.compile_seconds = time.perf_counter() - start

    @property
    def module(self) -> Module:
        return self.compiled.module

    @property
    def plan(self) -> MemoryPlan:
        return self.compiled.plan

    @cached_property
    def costs(self) -> tuple[StepCost, ...]:
        """The static cost of one execution of each step, estimated when first asked for (by
        the report or a trace): a program that is only run never needs it."""
        return step_costs(self.module.graph, self.plan.liveness.steps)

    @cached_property
    def footprint(self) -> Footprint:
        """Every tile's memory by category, counted when first asked for (it needs the costs)."""
        if self.compiled.footprint is not None:
            return self.compiled.footprint
        return memory_footprint(self.module, self.plan, self.costs, self.memory_model)

    @cached_property
    def report(self) -> Report:
        """Memory, exchange and cycles; its step counts follow the runs made so far."""
        details = ReportDetails(self.module, self.plan, self.executable, self._trace_if_run)
        return Report(self.module.graph.target, self.footprint, self.plan.liveness.steps,
                      self.costs, self.interpreter.step_counts, self.compile_seconds, details)

    def _trace_if_run(self) -> dict | None:
        """The trace of the last run, None before any (the report page then says so)."""
        return None if self._last_run is None else self.chrome_trace()

    @property
    def printed(self) -> list[tuple[str, np.ndarray]]:
        """``(label, value)`` of every ``PrintTensor`` executed so far."""
        return self.interpreter.printed

    def chrome_trace(self, program: int | Sequence[int] | None = None) -> dict:
        """Chrome trace JSON (as a dict) of the last run (or of ``program``, or of several
        programs end to end, with the last run's loop trips and branches).  Before any run there
        is nothing to trace: its loops' trips and branches are unknown."""
        if self._last_run is None:
            raise GrucProgramError("no run to trace: run the engine first (a compiled but unrun "
                                   "engine has a report of its memory, not a trace)")
        programs = self._last_run if program is None else self._program_numbers(program)
        names = [step.text for step in self.plan.liveness.steps]
        return chrome_trace(self.executable, self.costs, self.module.graph.target, programs,
                            self.interpreter.loop_trips, self.interpreter.branches, names)

    def write_trace(self, path, program: int | Sequence[int] | None = None) -> None:
        """Write :meth:`chrome_trace` to ``path`` atomically."""
        write_chrome_trace(path, self.chrome_trace(program))

    def _program_numbers(self, programs) -> tuple[int, ...]:
        """One entry program number, or several in order (at least one)."""
        if isinstance(programs, (list, tuple)):
            if not programs:
                raise GrucValueError("no program to run: give at least one program number")
            return tuple(self._program_number(program) for program in programs)
        return (self._program_number(programs),)

    def _program_number(self, program) -> int:
        count = len(self.executable.programs)
        if isinstance(program, (bool, np.bool_)) or not isinstance(program, (int, np.integer)) \
                or not 0 <= program < count:
            raise GrucValueError(f"program {program!r} does not exist; this engine has programs "
                                 f"0..{count - 1}")
        return int(program)

    def count_run(self, counts: np.ndarray) -> None:
        """Account one run without executing it: ``counts`` holds how often that run would
        execute each step, derived from the program tree by whoever knows what the data would
        do to its loops and branches (:func:`gruc.plan.layer.layer_step_counts`).  The report's
        cycles, exchange and per-step executions then read as after that run — what a
        ``--compile-only`` profile wants.  Device memory is untouched and there is still no run
        to trace; kernels that keep gathered operands only re-read them more often."""
        counts = np.asarray(counts)
        steps = self.interpreter.step_counts
        if counts.shape != steps.shape or counts.dtype.kind not in "iu" or np.any(counts < 0):
            raise GrucValueError(f"count_run needs {len(steps)} non-negative integer step counts "
                                 f"(one per step), got shape {list(counts.shape)} of "
                                 f"{counts.dtype}")
        steps += counts

    def run(self, program: int | Sequence[int] = 0) -> None:
        """Run entry program ``program`` on the device state, or several in order as one
        invocation: a tool that runs its forward and then its backward program (poplibs'
        ``fully_connected_layer``) is one run, and its trace lays them end to end."""
        programs = self._program_numbers(program)
        for number in programs:
            self.interpreter.run(number)
        self._last_run = programs

    def _stream(self, table: dict[str, Operand], name: str, what: str) -> Operand:
        if name not in table:
            known = ", ".join(sorted(table)) or "none"
            raise GrucValueError(f"no {what} named {name!r}; {what}s: {known}")
        return table[name]

    def write_tensor(self, name: str, values) -> None:
        """Copy host ``values`` into the tensor of host write ``name`` (shapes must match)."""
        operand = self._stream(self.executable.host_writes, name, "host write")
        try:
            array = np.asarray(values)
        except ValueError:  # a ragged nested list
            raise GrucValueError(f"host write {name!r} needs an array of shape "
                                 f"{list(operand.shape)}; the values given are ragged "
                                 "(rows of different lengths)") from None
        if array.shape != operand.shape:
            raise GrucValueError(f"host write {name!r} expects shape {list(operand.shape)}, "
                                 f"got {list(array.shape)}")
        if array.dtype.kind not in "biuf":
            raise GrucTypeError(f"host write {name!r} needs numbers, got dtype {array.dtype}")
        self.memory.write(operand, to_storage(array, operand.dtype, f"host write {name!r}"))

    def read_tensor(self, name: str) -> np.ndarray:
        """A host copy of the tensor of host read ``name``."""
        operand = self._stream(self.executable.host_reads, name, "host read")
        if name in self._unwritten_reads:
            raise GrucProgramError(f"host read {name!r} reads {self._unwritten_reads[name]}, "
                                   "which no program, host write or constant ever writes")
        return self.memory.read(operand).copy()
