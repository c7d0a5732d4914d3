"""Plan-only GRU layers: the report a run of ``gruc gru`` would give, without running it.

:func:`plan_layer` builds the layer exactly as :func:`~gruc.tools.gru_layer.run_layer` does,
compiles it with the same pipeline (the engine's default unless told otherwise) up to the memory
plan and step costs — no lowering, no kernels — and counts steps statically
(:mod:`gruc.plan.static`).  The only data-dependent control flow of the layer is the time loop of
each shard when rows have lengths (``--variable-time-steps`` or ``--with-real-time-steps``): a
``RepeatWhileTrue`` that runs ``clamp(max(lengths) - begin, 0, steps)`` times for a shard of
``steps`` steps starting at ``begin`` — the loop limit the layer itself computes on tile 0, in
either direction.  Each such loop is held by a ``TimeLoop`` node that says its shard's first
step and steps, so the count is read off the program whatever its shards and phases.  The
lengths are the ones a run writes: the flag's values, or for real time steps the seeded random
lengths of :func:`~gruc.tools.gru_layer.host_data` — so the plan equals the run exactly, not
under a maximum-length assumption.

The layer is the ``gru`` kind of :data:`gruc.plan.layers.PLANNED_LAYERS`, whose rows
:func:`gruc.plan.layers.plan_row` makes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gruc.analysis.liveness import Liveness
from gruc.analysis.steps import Step
from gruc.errors import GrucProgramError
from gruc.ir.module import Module
from gruc.ir.program import Copy, Execute, If, RepeatWhileTrue, TimeLoop, WriteUndef
from gruc.passes.pipeline import parse_pipeline
from gruc.passes.shard import Shard, shard_count
from gruc.plan.figures import phase_cycles
from gruc.plan.planned import effective_pipeline
from gruc.plan.static import StaticProgram, plan_report
from gruc.popnn import gru
from gruc.runtime.engine import CompiledProgram, compile_program
from gruc.runtime.report import Cycles, Report
from gruc.text import plural
from gruc.tools.gru_layer import GruLayer, GruLayerConfig, build_layer, host_data

PLAN_IGNORED = ("backend", "rel_tolerance", "abs_tolerance", "weights_range")
"""Layer flags that change how a layer runs or is checked, never its plan."""

TUPLE_FIELDS = ("cell_order", "variable_time_steps")
"""Layer flags whose one value is a comma list; a sweep separates their alternatives by ``/``."""

LAYER_PHASES = {"fwd": ("fwd",), "bwd": ("fwd", "bwd"), "wu": ("fwd", "bwd", "wu"),
                "all": ("fwd", "bwd", "wu")}
"""The phases of a layer of each ``--phase``: ``wu`` and ``all`` build the same layer."""

CALL_PHASES = {"gru": "fwd", "augru": "fwd", "gru_bwd": "bwd", "augru_bwd": "bwd",
               "gru_bwd_wu": "bwd", "augru_bwd_wu": "bwd", "gru_wu": "wu", "augru_wu": "wu"}
"""The phase of each poplibs call by the name it gives what it builds (its default name, the
one :func:`~gruc.tools.gru_layer.build_layer` leaves); a ``.../wu/`` part of a backward call's
names is its weight update (``gru_bwd_wu/wu/...``, inside the backward loop or after it)."""

SEARCHABLE = ("sequence_size", "input_size", "output_size", "batch_size", "shards",
              "tiles_per_ipu", "ipus")
"""Integer layer flags ``find_max`` can search."""


def run_lengths(config: GruLayerConfig) -> np.ndarray | None:
    """The row lengths a run of the layer writes (None when the layer has no lengths)."""
    if config.variable_time_steps is not None:
        return np.asarray(config.variable_time_steps, dtype=np.int64)
    if config.with_real_time_steps:
        return host_data(config)[1]
    return None


def loop_trips(module: Module, loops: Sequence[Step], lengths: np.ndarray) -> dict[int, int]:
    """Trip count of each variable-length loop of the module (``loops``: their predicate steps),
    read off the time loop that holds it: the rows of its shard before the longest length
    (:meth:`~gruc.ir.program.TimeLoop.trips`), whichever its direction."""
    longest = int(np.max(lengths))
    by_loop = {id(node.loop): node.trips(longest) for node in module.walk()
               if isinstance(node, TimeLoop) and isinstance(node.loop, RepeatWhileTrue)}
    unknown = [step.index for step in loops if id(step.node) not in by_loop]
    if unknown:
        raise GrucProgramError(f"internal error: the loops of steps {unknown} are in no time "
                               "loop, so their trips are not known before a run")
    return {step.index: by_loop[id(step.node)] for step in loops}


def layer_step_counts(config: GruLayerConfig, module: Module, liveness: Liveness) -> np.ndarray:
    """How often one run of the layer's program 0, as compiled (``module``, whose ``liveness``
    numbers the steps), executes each step — counted from the program tree with the time loops'
    trips the layer's lengths give, equal to a run's counts."""
    static = StaticProgram(liveness)
    lengths = run_lengths(config)
    trips = {} if lengths is None else loop_trips(module, static.loops(0), lengths)
    return static.step_counts((0,), trips=trips)


def _written_name(step: Step) -> str | None:
    """The name of what a step writes or tests: its compute set, or its destination's first
    variable (None for a step without one, such as a sync)."""
    node = step.node
    if isinstance(node, Execute):
        return node.compute_set.name
    tensor = (node.dst if isinstance(node, Copy) else node.tensor if isinstance(node, WriteUndef)
              else node.predicate if isinstance(node, (If, RepeatWhileTrue)) else None)
    variables = [] if tensor is None else tensor.variables()
    return variables[0].name if variables else None


def step_phase(step: Step) -> str | None:
    """The phase (fwd, bwd, wu) of a step of a GRU layer's program, by the poplibs call that
    named what it writes (:data:`CALL_PHASES`); None for a step writing nothing named, or
    something no call made (a host tensor)."""
    name = _written_name(step)
    if name is None:
        return None
    parts = name.split("/")
    phase = CALL_PHASES.get(parts[0])
    if phase == "bwd" and "wu" in parts[1:]:
        return "wu"
    return phase


@dataclass
class LayerPlan:
    """A plan-only layer: what was built and the report a run would produce."""

    config: GruLayerConfig
    pipeline: str
    """The pipeline the layer was compiled with."""
    layer: GruLayer
    report: Report
    build_seconds: float
    compile_seconds: float
    shards: int
    """Shards per time loop in the compiled program: the layer's, unless the pipeline's shard
    pass chose another count."""

    @property
    def flops(self) -> int:
        """Floating-point operations of one run of the layer."""
        return self.layer.flops()

    def phases(self) -> dict[str, tuple[Cycles, int]]:
        """Cycles (:func:`~gruc.plan.figures.phase_cycles` by :func:`step_phase`) and poplibs'
        FLOPs of each phase the layer runs."""
        cycles = phase_cycles(self.report, step_phase)
        params = self.layer.params
        flops = {"fwd": gru.get_basic_gru_cell_fwd_flops(params),
                 "bwd": gru.get_basic_gru_cell_bwd_flops(params),
                 "wu": gru.get_basic_gru_cell_wu_flops(params)}
        return {phase: (cycles.get(phase, Cycles(0, 0, 0)), flops[phase])
                for phase in LAYER_PHASES[self.config.phase]}

    def describe(self) -> str:
        """The configuration in one line, for figures: ``GRU S=20 B=8 I=64 H=64 float, 1 shard``."""
        c = self.config
        return (f"GRU S={c.sequence_size} B={c.batch_size} I={c.input_size} H={c.output_size} "
                f"{c.data_type} {c.phase}, {plural(self.layer.num_shards, 'shard')}")


def compile_layer(config: GruLayerConfig, layer: GruLayer, pipeline: str | None = None,
                  strict_memory: bool = False) -> tuple[CompiledProgram, Report]:
    """A built layer compiled (not lowered: no kernel is prepared) and reported as one run would
    count its steps (``pipeline``: as :class:`~gruc.runtime.engine.Engine`'s; None runs the
    engine's default; ``strict_memory``: refuse a layer that does not fit)."""
    start = time.perf_counter()
    compiled = compile_program(layer.graph, layer.programs, pipeline=effective_pipeline(pipeline),
                               strict_memory=strict_memory, memory_model=config.memory_model)
    counts = layer_step_counts(config, compiled.module, compiled.plan.liveness)
    return compiled, plan_report(compiled, counts, time.perf_counter() - start)


def plan_layer(config: GruLayerConfig, pipeline: str | None = None) -> LayerPlan:
    """Build and compile the layer of ``config`` and report it as one run would, without running
    (``pipeline``: as :class:`~gruc.runtime.engine.Engine`'s; None runs the engine's default)."""
    pipeline = effective_pipeline(pipeline)
    start = time.perf_counter()
    layer = build_layer(config)
    built = time.perf_counter()
    compiled, report = compile_layer(config, layer, pipeline)
    shards = layer.num_shards
    if any(isinstance(step, Shard) for step in parse_pipeline(pipeline)):
        shards = shard_count(compiled.module) or shards
    return LayerPlan(config, pipeline, layer, report, built - start, report.compile_seconds,
                     shards)
