"""The report: where memory and cycles went, per tile and per step, with Poplar-like keys.

A :class:`Report` reads the memory plan (bytes per tile, by liveness category), the static step
costs and the step execution counts the engine has accumulated over its runs.  Before any run it
is a *plan-only* report: memory is complete, cycles are those of the runs so far (none);
:mod:`gruc.plan` builds reports whose counts are derived from the program tree instead, equal to
those of a run.  The JSON
form uses the names PopVision users know: always-live and not-always-live bytes by tile, total
memory including gaps, and cycles split into compute, exchange and sync, in all and by tile (a
tile's sync includes waiting for the busiest tile, so its three add up to the total).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from gruc.analysis.steps import Step
from gruc.errors import GrucValueError
from gruc.files import write_text_atomically
from gruc.memory.plan import TileOverflow
from gruc.runtime.cost import StepCost
from gruc.runtime.footprint import Footprint
from gruc.target import Target
from gruc.text import plural

if TYPE_CHECKING:
    from gruc.runtime.page_data import ReportDetails


@dataclass(frozen=True)
class Cycles:
    """Cycle totals by kind."""

    compute: int
    exchange: int
    sync: int

    @property
    def total(self) -> int:
        return self.compute + self.exchange + self.sync


def memory_lines(target: Target, footprint: Footprint) -> list[str]:
    """The memory part of a report's summary: whether the layer fits, how full the fullest tile
    is, and the bytes by category — all a compile refused as out of memory can show."""
    over = len(footprint.tiles_over_capacity)
    fullest = footprint.max_tile_bytes
    always, peak = footprint.always_live_bytes, footprint.not_always_live_peak
    return [
        f"target            {target.describe()}",
        f"fits              {'yes' if footprint.fits else 'NO'}"
        + ("" if footprint.fits else f" ({plural(over, 'tile')} over capacity)"),
        f"tiles used        {footprint.tiles_used} of {target.num_tiles}",
        f"max tile memory   {fullest} B of {target.bytes_per_tile} B "
        f"({100.0 * fullest / target.bytes_per_tile:.1f}%)",
        f"always-live       {int(always.sum())} B total, {int(always.max(initial=0))} B max "
        "per tile",
        f"not-always-live   {int(peak.sum())} B total peak, {int(peak.max(initial=0))} B max "
        "per tile",
        f"total memory      {footprint.total_memory()} B (Poplar's: always-live + each tile's "
        "not-always-live peak)",
        *category_lines(target, footprint),
    ]


def category_lines(target: Target, footprint: Footprint) -> list[str]:
    """Memory by category, all tiles, and on the fullest tile."""
    if footprint.model == "tensors":
        return ["  by category     tensors only (--memory-model tensors)"]
    tile = int(np.argmax(footprint.total_including_gaps)) if target.num_tiles else 0
    lines = [f"  by category     all tiles / fullest tile ({tile}):"]
    shown = dict(footprint.always_live)
    for name, values in footprint.not_always_live.items():
        shown[f"{name} (not always live)" if name == "variable" else name] = values
    for name, values in shown.items():
        lines.append(f"    {name:<34}{int(values.sum()):>12} B {int(values[tile]):>9} B")
    interleaved = int(footprint.interleaved_bytes[tile])
    if interleaved:
        lines.append(f"    {'interleaved region in use':<34}{'':>12}   {interleaved:>9} B "
                     f"(from byte {target.interleaved_memory_start})")
    return lines


def overflow_lines(footprint: Footprint, shown: int = 3) -> list[str]:
    """The first ``shown`` tiles over capacity, each with its bytes and largest tensors."""
    return [f"  over capacity: {overflow}" for overflow in footprint.tiles_over_capacity[:shown]]


class Report:
    """Memory, exchange and cycle figures of a compiled (and maybe run) program."""

    def __init__(self, target: Target, footprint: Footprint, steps: tuple[Step, ...],
                 costs: tuple[StepCost, ...], step_counts: np.ndarray, compile_seconds: float,
                 details: "ReportDetails | None" = None) -> None:
        self.target = target
        self.details = details
        """The compiled module and plan behind the figures (and from an engine its program tree
        and trace): what the page and the JSON's variables are made from."""
        self.footprint = footprint
        self.steps = steps
        self.costs = costs
        self.step_counts = step_counts
        self.compile_seconds = compile_seconds

    # ---- memory -------------------------------------------------------------------------------
    @property
    def fits(self) -> bool:
        return self.footprint.fits

    @property
    def tiles_over_capacity(self) -> tuple[TileOverflow, ...]:
        return self.footprint.tiles_over_capacity

    @property
    def always_live_bytes(self) -> np.ndarray:
        """Per tile: always-live bytes (tensors, code, vertex state, control and exchange code)."""
        return self.footprint.always_live_bytes

    @property
    def not_always_live_max_bytes(self) -> np.ndarray:
        """Per tile: peak bytes of not-always-live tensors and exchange buffers over the steps."""
        return self.footprint.not_always_live_peak

    @property
    def total_bytes(self) -> np.ndarray:
        """Per tile: its highest address in use (gaps, and the interleaved region's start,
        included)."""
        return self.footprint.total_including_gaps

    @property
    def max_tile_bytes(self) -> int:
        return self.footprint.max_tile_bytes

    @property
    def total_memory(self) -> int:
        """Poplar's total memory: always-live bytes plus each tile's not-always-live peak."""
        return self.footprint.total_memory()

    def memory_by_category(self) -> dict[str, int]:
        """Bytes of each category over all tiles (not-always-live ones at each tile's peak)."""
        result = {name: int(values.sum()) for name, values in self.footprint.always_live.items()}
        for name, values in self.footprint.not_always_live.items():
            key = name if name != "variable" else "variable (not always live)"
            result[key] = int(values.sum())
        return result

    # ---- exchange and cycles --------------------------------------------------------------------
    def _weighted(self, attribute: str) -> np.ndarray:
        """Per tile: the steps' ``attribute`` (per execution) times their counts, in 64-bit
        integers; refused if some tile's total could exceed them (astronomical repeat counts)
        rather than wrapped around."""
        total = np.zeros(self.target.num_tiles, dtype=np.int64)
        bound = 0
        for count, cost in zip(self.step_counts.tolist(), self.costs):
            if count:
                per_tile = getattr(cost, attribute)
                bound += count * int(per_tile.max(initial=0))
                if bound > np.iinfo(np.int64).max:
                    raise GrucValueError(f"per-tile {attribute} totals exceed 64-bit integers "
                                         f"(a step runs {count} times): too many executions to "
                                         "count")
                total += count * per_tile
        return total

    @property
    def exchange_bytes_by_tile(self) -> np.ndarray:
        """Per tile: bytes received over all executed steps."""
        return self._weighted("bytes_in_by_tile")

    @property
    def exchange_bytes(self) -> int:
        """Bytes moved between tiles over all executed steps."""
        return int(sum(c * cost.exchange_bytes for c, cost in zip(self.step_counts.tolist(),
                                                                    self.costs)))

    @property
    def cycles(self) -> Cycles:
        counts = self.step_counts.tolist()
        return Cycles(
            compute=sum(c * cost.compute_cycles for c, cost in zip(counts, self.costs)),
            exchange=sum(c * cost.exchange_cycles for c, cost in zip(counts, self.costs)),
            sync=sum(c * cost.sync_cycles for c, cost in zip(counts, self.costs)))

    @property
    def compute_cycles_by_tile(self) -> np.ndarray:
        """Per tile: cycles computing over all executed steps."""
        return self._weighted("compute_by_tile")

    @property
    def exchange_cycles_by_tile(self) -> np.ndarray:
        """Per tile: cycles exchanging over all executed steps (its own traffic, not the step's
        busiest tile's)."""
        return self._weighted("exchange_by_tile")

    @property
    def sync_cycles_by_tile(self) -> np.ndarray:
        """Per tile: cycles in syncs or waiting for busier tiles over all executed steps (see
        :class:`~gruc.runtime.cost.StepCost`); each tile's compute, exchange and sync add up to
        the total cycles."""
        return self._weighted("sync_by_tile")

    @property
    def seconds(self) -> float:
        """Simulated device time of the runs so far."""
        return self.cycles.total / self.target.clock_hz

    # ---- output -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The report as ``report.json`` holds it: plain JSON types, keys named after Poplar's
        profile where one exists, so tools written for Poplar reports find their way."""
        cycles = self.cycles
        return {
            "target": self.target.model_dump(),
            "memory": {
                "fits": self.fits,
                "bytes_per_tile": self.target.bytes_per_tile,
                "total_capacity": self.target.total_memory,
                "always_live_bytes_by_tile": self.always_live_bytes.tolist(),
                "not_always_live_max_bytes_by_tile": self.not_always_live_max_bytes.tolist(),
                "total_including_gaps_by_tile": self.total_bytes.tolist(),
                "max_tile_bytes": self.max_tile_bytes,
                "always_live_bytes": int(self.always_live_bytes.sum()),
                "not_always_live_max_bytes": int(self.not_always_live_max_bytes.sum()),
                "total_memory": self.total_memory,
                "model": self.footprint.model,
                "interleaved_bytes_by_tile": self.footprint.interleaved_bytes.tolist(),
                "always_live_by_category": {
                    name: values.tolist() for name, values in self.footprint.always_live.items()},
                "not_always_live_peak_by_category": {
                    name: values.tolist()
                    for name, values in self.footprint.not_always_live.items()},
                "tiles_over_capacity": [
                    {"tile": o.tile, "bytes": o.bytes, "capacity": o.capacity,
                     "largest": [{"name": n, "bytes": b} for n, b in o.largest]}
                    for o in self.tiles_over_capacity],
            },
            "exchange": {"total_bytes": self.exchange_bytes,
                         "bytes_received_by_tile": self.exchange_bytes_by_tile.tolist()},
            "cycles": {"compute": cycles.compute, "exchange": cycles.exchange,
                       "sync": cycles.sync, "total": cycles.total,
                       "compute_by_tile": self.compute_cycles_by_tile.tolist(),
                       "exchange_by_tile": self.exchange_cycles_by_tile.tolist(),
                       "sync_by_tile": self.sync_cycles_by_tile.tolist(),
                       "seconds": self.seconds},
            "steps": [{"index": s.index, "where": s.where, "what": s.text,
                       "executions": int(n), "compute_cycles": c.compute_cycles,
                       "exchange_cycles": c.exchange_cycles, "sync_cycles": c.sync_cycles,
                       "exchange_bytes": c.exchange_bytes}
                      for s, c, n in zip(self.steps, self.costs, self.step_counts.tolist())],
            "compile_seconds": self.compile_seconds,
            **({} if self.details is None else {"variables": self._variables()}),
        }

    def _variables(self) -> list[dict[str, Any]]:
        """Every variable holding memory, with its bytes, liveness and placement: what ``gruc
        viz --compare`` needs to say which variables moved between two reports."""
        from gruc.runtime.page_data import variable_rows

        return variable_rows(self.details.module, self.details.plan)

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The report as JSON text; written atomically to ``path`` if given."""
        text = json.dumps(self.to_dict(), indent=1, sort_keys=True)
        if path is not None:
            write_text_atomically(path, text)
        return text

    def to_html(self, path: str | os.PathLike | None = None, title: str = "gruc report") -> str:
        """The interactive report page (:mod:`gruc.runtime.page`): one self-contained HTML file
        that opens offline; written atomically to ``path`` if given.  A report made without its
        program (``details`` None) has nothing to draw a tile's page from and is refused."""
        if self.details is None:
            raise GrucValueError("this report was made without its compiled program, so it has "
                                 "no page: build it with an Engine or gruc.plan.plan_program")
        from gruc.runtime.page import html_report

        text = html_report(self, self.details, title)
        if path is not None:
            write_text_atomically(path, text)
        return text

    def summary_lines(self) -> list[str]:
        """The few lines every command prints after a compile or run: memory, cycles,
        exchange, and the worst tile, so a glance says whether the layer fits and why not."""
        cycles = self.cycles
        lines = [
            *memory_lines(self.target, self.footprint),
            f"exchange          {self.exchange_bytes} B",
            f"cycles            {cycles.total} total = {cycles.compute} compute + "
            f"{cycles.exchange} exchange + {cycles.sync} sync "
            f"({self.seconds * 1e6:.1f} us at {self.target.clock_hz / 1e9:.2f} GHz)"
            if self.step_counts.any() else
            "cycles            none counted: no step has run (a compiled, unrun program)",
        ]
        if self.step_counts.any():
            lines.append(self._busiest_tile_line())
        lines.append(f"compile           {self.compile_seconds:.3f} s")
        return lines + overflow_lines(self.footprint)

    def _busiest_tile_line(self) -> str:
        """The tile that computes and exchanges the most, and how long it waits: the share of
        the run every other tile waits at least as long."""
        compute, exchange = self.compute_cycles_by_tile, self.exchange_cycles_by_tile
        tile = int(np.argmax(compute + exchange))
        sync = int(self.sync_cycles_by_tile[tile])
        return (f"busiest tile      {tile}: {int(compute[tile])} compute + {int(exchange[tile])} "
                f"exchange + {sync} sync ({100.0 * sync / max(self.cycles.total, 1):.1f}% waiting)")

    def print_summary(self, file: TextIO | None = None) -> None:
        print("\n".join(self.summary_lines()), file=file or sys.stdout)

    def print_profile_summary(self, file: TextIO | None = None, show_execution_steps: bool = False) -> None:
        """Poplar's ``printProfileSummary``: the summary, and optionally every step's cost."""
        out = file or sys.stdout
        self.print_summary(out)
        if show_execution_steps:
            print("execution steps (executions x cycles: compute / exchange / sync):", file=out)
            for s, c, n in zip(self.steps, self.costs, self.step_counts.tolist()):
                print(f"  {s.index:>4} {n:>7} x {c.compute_cycles:>7} / {c.exchange_cycles:>6} / "
                      f"{c.sync_cycles:>5}  {s.where}: {s.text}", file=out)
