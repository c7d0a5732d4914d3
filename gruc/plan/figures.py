"""Figures a paper can use, on every planning row: what the plan cost the host, and how well
the planned layer would use the IPU.

**Host cost.**  :func:`measured` wraps one plan: the CPU seconds of the process planning it
(``time.process_time``: the worker's, whatever else the machine runs) and the plan's peak
resident memory.  On Linux the kernel's high-water mark is reset before the plan (writing ``5``
to ``/proc/self/clear_refs``) and ``VmHWM`` read from ``/proc/self/status`` after it, so the peak
is this plan's (the process's memory at the plan's start included: what a host must have free
to plan it in that process).  A full collection the previous plans put off
(:mod:`gruc.ir.heap`) is paid before the reset, not inside the plan: a plan that did not fit
left its graph as garbage, and counted into the next plan's peak it made a serial study's rows
read 20.8 GB where the plan alone peaks at 7.3 GB (training H = I = 2,636 after 2,900).  Where
the reset is not possible (another OS, a kernel that refuses it) the figure is ``ru_maxrss``,
the process's peak since it started — a worker's over all the plans it made so far — and the
row's ``peak_rss_scope`` says ``worker`` instead of ``plan``.

**Use of the IPU.**  The layer's FLOPs (poplibs' estimate for a GRU phase, the products' own
count) per cycle, against the target's peak: every tile's accumulating matrix product (AMP)
units, each doing :data:`MACS_PER_CONV_UNIT_PER_CYCLE` multiply-accumulates per cycle (two
FLOPs each).  The units a tile uses depend on the input and partials types
(:class:`~gruc.target.Target`'s ``conv_units_*``), as in poplin's planner.  The peaks are
Graphcore's published ones: ipu2 62.5 TFLOPS in float and 250 in half, ipu1 31.1 and 124.5.
The exchange and sync shares are those kinds' part of the plan's cycles (cycles = compute +
exchange + sync, the report's split).

**Per phase.**  A GRU layer's rows split cycles, utilisation and shares by phase (fwd, bwd, wu:
:func:`phase_cycles`), attributing each step to the phase that wrote it — the GRU layer names
every compute set and variable under the name of the poplibs call that made it (``gru/``,
``gru_bwd_wu/``, the update's ``gru_bwd_wu/wu/``: :func:`gruc.plan.layer.step_phase`), so the
gates a recomputing layer (``--recomputation-mode full``) rebuilds count in the backward pass,
where they run, and the phases add up to the whole.  The fully connected layer and gemm rows
have whole-layer figures only.
"""

from __future__ import annotations

import resource
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from gruc.analysis.steps import Step
from gruc.ir.heap import collect_if_owed, release_free_heap
from gruc.runtime.report import Cycles, Report
from gruc.target import Target
from gruc.types import FLOAT, dtype_of

MACS_PER_CONV_UNIT_PER_CYCLE = {"float": 1, "half": 4}
"""Multiply-accumulates one AMP unit completes per cycle, by input type.  From the AMP vertex's
inner loop (:mod:`gruc.ir.codelets.conv_costs`): a tile's units take one input vector of
``conv_unit_pipeline_depth`` x (elements of a 64-bit load) channels per field element, in 8
cycles for float inputs and 4 for half: 16 units x 8 inputs / 8 = 16 float MACs a cycle, 16 x 16
/ 4 = 64 half ones."""

PHASES = ("fwd", "bwd", "wu")
"""The phases a training GRU layer's figures are split into."""

CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")


def amp_units(target: Target, data_type: str, partials_type: str | None) -> int:
    """AMP units a tile uses for products of ``data_type`` with ``partials_type`` partials
    (None: float, poplibs' default)."""
    if dtype_of(data_type) == FLOAT:
        return target.conv_units_float
    if partials_type is None or dtype_of(partials_type) == FLOAT:
        return target.conv_units_half_float_partials
    return target.conv_units_half_half_partials


def amp_peak_flops_per_cycle(target: Target, data_type: str, partials_type: str | None) -> int:
    """FLOPs the whole target's AMP units can do in one cycle (see the module)."""
    per_unit = MACS_PER_CONV_UNIT_PER_CYCLE[dtype_of(data_type).name]
    return target.num_tiles * amp_units(target, data_type, partials_type) * per_unit * 2


@dataclass
class Usage:
    """What one plan cost the host (see :func:`measured`)."""

    cpu_seconds: float = 0.0
    peak_rss_bytes: int | None = None
    peak_rss_scope: str | None = None
    """``plan``: the peak of this plan; ``worker``: of the process so far (no reset)."""


def _reset_peak() -> bool:
    """Reset this process's resident high-water mark; False where that is not possible."""
    try:
        CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def _peak_bytes() -> int | None:
    """``VmHWM`` of ``/proc/self/status`` in bytes; None where there is none."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@contextmanager
def measured() -> Iterator[Usage]:
    """Measure the CPU seconds and peak resident memory of the block (see the module)."""
    usage = Usage()
    collect_if_owed()  # the previous plan's garbage is not this plan's memory
    release_free_heap()  # nor the heap it freed
    reset = _reset_peak()
    start = time.process_time()
    try:
        yield usage
    finally:
        usage.cpu_seconds = time.process_time() - start
        peak = _peak_bytes() if reset else None
        if peak is not None:
            usage.peak_rss_bytes, usage.peak_rss_scope = peak, "plan"
        else:  # ru_maxrss: kilobytes on Linux, bytes on macOS
            maximum = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            scale = 1 if sys.platform == "darwin" else 1024
            usage.peak_rss_bytes, usage.peak_rss_scope = maximum * scale, "worker"


def phase_cycles(report: Report, phase_of: Callable[[Step], str | None]) -> dict[str, Cycles]:
    """The report's cycles by phase: each step's executions x costs summed under
    ``phase_of(step)``; a step it names no phase for (a sync, a loop's control) counts in the
    phase of the step before it, so the phases add up to the whole."""
    totals: dict[str, list[int]] = {}
    current = None
    for step, cost, count in zip(report.steps, report.costs, report.step_counts.tolist()):
        current = phase_of(step) or current
        if count and current is not None:
            total = totals.setdefault(current, [0, 0, 0])
            total[0] += count * cost.compute_cycles
            total[1] += count * cost.exchange_cycles
            total[2] += count * cost.sync_cycles
    return {phase: Cycles(*values) for phase, values in totals.items()}


def _ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator`` to six significant digits (None for a zero denominator)."""
    return float(f"{numerator / denominator:.6g}") if denominator else None


def use_values(cycles: Cycles, flops: int, peak: int, suffix: str = "") -> dict[str, Any]:
    """Utilisation and the exchange and sync shares of ``cycles`` doing ``flops`` against a
    target of ``peak`` FLOPs a cycle, as row columns ending in ``suffix``."""
    return {f"utilisation{suffix}": _ratio(flops, cycles.total * peak),
            f"exchange_share{suffix}": _ratio(cycles.exchange, cycles.total),
            f"sync_share{suffix}": _ratio(cycles.sync, cycles.total)}


def figure_values(report: Report, flops: int, peak: int,
                  phases: dict[str, tuple[Cycles, int]]) -> dict[str, Any]:
    """The row columns of :data:`FIGURE_COLUMNS` from a plan's report, its FLOPs, the target's
    peak FLOPs a cycle and the plan's ``phases`` (``{phase: (cycles, flops)}``, empty for a
    layer without them)."""
    target = report.target
    values: dict[str, Any] = {"amp_peak_flops_per_cycle": peak,
                              "exchange_peak_bytes_per_cycle":
                                  target.num_tiles * target.exchange_bytes_per_cycle,
                              "flops_per_cycle": _ratio(flops, report.cycles.total),
                              **use_values(report.cycles, flops, peak)}
    for phase in PHASES:
        cycles, phase_flops = phases.get(phase, (None, 0))
        values[f"cycles_{phase}"] = None if cycles is None else cycles.total
        values.update(use_values(cycles, phase_flops, peak, f"_{phase}") if cycles is not None
                      else {f"{name}_{phase}": None for name in USE_NAMES})
    return values


USE_NAMES = ("utilisation", "exchange_share", "sync_share")

FIGURE_COLUMNS = ("amp_peak_flops_per_cycle", "exchange_peak_bytes_per_cycle", "flops_per_cycle",
                  *USE_NAMES,
                  *(f"{name}_{phase}" for phase in PHASES
                    for name in ("cycles", *USE_NAMES)))
"""Columns of the IPU's use: the target's AMP peak FLOPs per cycle and exchange peak (every tile
sending at the exchange's rate), the plan's FLOPs per cycle,
its utilisation (the ratio of the two) and exchange and sync shares of the cycles, then the
cycles and those three by phase (empty where the layer has no such phase)."""

USAGE_COLUMNS = ("cpu_seconds", "peak_rss_bytes", "peak_rss_scope")
"""Columns of the host's cost of the plan (:func:`measured`)."""
