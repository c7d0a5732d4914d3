"""The Engine: compile a graph's programs for the simulated IPU, run them, move tensors to and from
the host, and report memory and cycles (Poplar's ``Engine``).

Compiling runs the pass pipeline (``gruc.passes.DEFAULT_PIPELINE`` unless another is given;
``pipeline=""`` runs none), verifies the module, plans tile memory, lowers every step to
memory addresses and estimates each step's cost.  Running executes on the simulated tile memory
with the chosen backend — ``"numba"`` (compiled kernels, the default) or ``"numpy"`` (the reference
interpreter) — and counts executed steps, which the report turns into cycles and exchange bytes.
:func:`compile_program` is the compile without lowering, for plan-only studies (:mod:`gruc.plan`).
Several programs share one device state, as on the IPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gruc.errors import GrucOutOfMemory, GrucTypeError, GrucValueError
from gruc.ir.graph import Graph
from gruc.ir.module import Module
from gruc.ir.program import Program
from gruc.passes.plan_memory import MemoryPlan, plan_memory
from gruc.passes.rewrite import require_valid
from gruc.runtime import codelets  # noqa: F401  (fills the vertex tables)
from gruc.runtime.cost import StepCost, step_costs
from gruc.runtime.interp import Interpreter, numpy_copy
from gruc.runtime.lower import DeviceMemory, Operand, lower
from gruc.runtime.report import Report
from gruc.runtime.trace import chrome_trace, write_chrome_trace

BACKENDS = ("numba", "numpy")


@dataclass(frozen=True, eq=False)
class CompiledProgram:
    """Everything compiling decides before lowering: the module after the pipeline, its memory
    plan and the static cost of one execution of each step."""

    module: Module
    plan: MemoryPlan
    costs: tuple[StepCost, ...]
    seconds: float


def compile_program(graph: Graph, programs: Sequence[Program] | Program, *,
                    pipeline: str | None = None, strict_memory: bool = False) -> CompiledProgram:
    """Run the pipeline, verify, plan memory and cost every step — without lowering to addresses.

    This is the part of an :class:`Engine`'s compile that its report depends on; planning studies
    (:mod:`gruc.plan`) call it alone, since lowering and kernel preparation only serve running.
    """
    if isinstance(programs, Program):
        programs = [programs]
    start = time.perf_counter()
    module = Module(graph, list(programs))
    if pipeline is None:
        from gruc.passes import DEFAULT_PIPELINE

        pipeline = DEFAULT_PIPELINE
    if pipeline:
        from gruc.passes.pipeline import run_pipeline

        module = run_pipeline(module, pipeline).module
    require_valid(module)  # a pass's output is valid by contract: the pipeline verified its input
    plan = plan_memory(module)
    if strict_memory and not plan.fits:
        worst = max(plan.tiles_over_capacity, key=lambda o: (o.bytes, -o.tile))
        raise GrucOutOfMemory(f"out of memory: {worst}; {len(plan.tiles_over_capacity)} "
                              f"tile(s) over capacity in all")
    costs = step_costs(module.graph, plan.liveness.steps)
    return CompiledProgram(module, plan, costs, time.perf_counter() - start)


class Engine:
    """Compile ``programs`` of ``graph`` and run them on a simulated IPU."""

    def __init__(self, graph: Graph, programs: Sequence[Program] | Program, *,
                 pipeline: str | None = None, strict_memory: bool = False,
                 backend: str = "numba") -> None:
        if backend not in BACKENDS:
            raise GrucValueError(f"unknown backend {backend!r}; allowed: {', '.join(BACKENDS)}")
        start = time.perf_counter()
        compiled = compile_program(graph, programs, pipeline=pipeline, strict_memory=strict_memory)
        module, plan = compiled.module, compiled.plan
        self.module = module
        self.plan = plan
        self.executable = lower(module, plan)
        self.costs = compiled.costs
        self.memory = DeviceMemory(self.executable.num_tiles, self.executable.tile_stride)
        for operand, values in self.executable.constants:
            self.memory.write(operand, values)
        if backend == "numba":
            from gruc.runtime.kernels import NUMBA_VERTICES

            self.interpreter = Interpreter(self.executable, self.memory, NUMBA_VERTICES, numpy_copy)
        else:
            self.interpreter = Interpreter(self.executable, self.memory)
        self.backend = backend
        self._last_program = 0
        self.compile_seconds = time.perf_counter() - start
        self.report = Report(graph.target, plan, plan.liveness.steps, self.costs,
                             self.interpreter.step_counts, self.compile_seconds)

    @property
    def printed(self) -> list[tuple[str, np.ndarray]]:
        """``(label, value)`` of every ``PrintTensor`` executed so far."""
        return self.interpreter.printed

    def chrome_trace(self, program: int | None = None) -> dict:
        """Chrome trace JSON (as a dict) of the last run (or of ``program`` as last run)."""
        program = self._last_program if program is None else program
        names = [step.text for step in self.plan.liveness.steps]
        return chrome_trace(self.executable, self.costs, self.module.graph.target, program,
                            self.interpreter.loop_trips, self.interpreter.branches, names)

    def write_trace(self, path, program: int | None = None) -> None:
        """Write :meth:`chrome_trace` to ``path`` atomically."""
        write_chrome_trace(path, self.chrome_trace(program))

    def run(self, program: int = 0) -> None:
        """Run entry program ``program`` on the device state."""
        count = len(self.executable.programs)
        if not isinstance(program, (int, np.integer)) or not 0 <= program < count:
            raise GrucValueError(f"program {program!r} does not exist; this engine has programs "
                                 f"0..{count - 1}")
        self.interpreter.run(int(program))
        self._last_program = int(program)

    def _stream(self, table: dict[str, Operand], name: str, what: str) -> Operand:
        if name not in table:
            known = ", ".join(sorted(table)) or "none"
            raise GrucValueError(f"no {what} named {name!r}; {what}s: {known}")
        return table[name]

    def write_tensor(self, name: str, values) -> None:
        """Copy host ``values`` into the tensor of host write ``name`` (shapes must match)."""
        operand = self._stream(self.executable.host_writes, name, "host write")
        array = np.asarray(values)
        if array.shape != operand.shape:
            raise GrucValueError(f"host write {name!r} expects shape {list(operand.shape)}, "
                                 f"got {list(array.shape)}")
        if array.dtype.kind not in "biuf":
            raise GrucTypeError(f"host write {name!r} needs numbers, got dtype {array.dtype}")
        self.memory.write(operand, array.astype(operand.dtype.storage))

    def read_tensor(self, name: str) -> np.ndarray:
        """A host copy of the tensor of host read ``name``."""
        operand = self._stream(self.executable.host_reads, name, "host read")
        return self.memory.read(operand).copy()
