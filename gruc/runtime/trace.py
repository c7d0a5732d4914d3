"""Chrome trace (``chrome://tracing`` / Perfetto JSON) of the BSP execution of a program.

Tracks: ``pid`` is the IPU; ``tid`` 0 is the control track (programs, loops, branches, calls) and
``tid`` k ≥ 1 is tile group k-1.  On a small target a group is one tile; on a large one tiles are
grouped (at most :data:`MAX_TILE_TRACKS` tracks per IPU, a group's compute is its busiest tile), so
a 1,472-tile run stays loadable.  Each superstep on a tile track is one event with its exchange,
compute and sync phases nested inside; events on every track nest properly.

Loops are shown in full for their first iteration; the remaining iterations are one event each on
the control track and on every tile track ("iterations 2..N"), which keeps a 10,000-step loop to a
few events.  A ``RepeatWhileTrue`` uses the trip count of its last execution; an ``If`` the branch
it last took.  Time is in microseconds at the target's clock.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

import numpy as np

from gruc.runtime.cost import StepCost
from gruc.runtime.lower import (Block, Branch, CopyStep, Executable, ExecuteStep,
                                Loop, MarkStep, PrintStep, WhileLoop)
from gruc.files import write_text_atomically
from gruc.target import Target

MAX_TILE_TRACKS = 64
CONTROL_TRACK = 0
_GRID = float(2 ** 20)
"""Time grid of trace events, per microsecond (see :meth:`TraceBuilder.microseconds`)."""


class _TraceBuilder:
    """Builds the trace events of one run (see the module): tiles grouped into at most
    :data:`MAX_TILE_TRACKS` tracks per IPU, durations from the step costs and the run's trip counts
    and branches."""
    def __init__(self, executable: Executable, costs: tuple[StepCost, ...], target: Target,
                 loop_trips: dict[int, int], branches: dict[int, bool],
                 step_names: list[str]) -> None:
        self.executable = executable
        self.costs = costs
        self.target = target
        self.loop_trips = loop_trips
        self.branches = branches
        self.step_names = step_names
        self.us_per_cycle = 1e6 / target.clock_hz
        per_ipu = target.tiles_per_ipu
        self.group_size = -(-per_ipu // MAX_TILE_TRACKS)
        self.groups_per_ipu = -(-per_ipu // self.group_size)
        tiles = np.arange(target.num_tiles)
        self.track_of_tile = (tiles % per_ipu) // self.group_size
        self.ipu_of_tile = tiles // per_ipu
        self.events: list[dict[str, Any]] = []
        self._durations: dict[int, int] = {}

    # ---- durations in cycles ---------------------------------------------------------------
    def duration(self, item) -> int:
        """Cycles ``item`` takes, from the step costs and the trip counts of the run; memoised,
        since a loop's body and a called function are timed once however often they occur."""
        key = id(item)
        if key in self._durations:
            return self._durations[key]
        if isinstance(item, (ExecuteStep, CopyStep, MarkStep, PrintStep)):
            result = self.costs[item.step].total_cycles
        elif isinstance(item, Block):
            result = sum(self.duration(i) for i in item.items)
        elif isinstance(item, Loop):
            result = item.count * self.duration(item.body)
        elif isinstance(item, WhileLoop):
            trips = self.loop_trips.get(id(item), 0)
            check = self.duration(item.condition) + self.costs[item.step].total_cycles
            result = (trips + 1) * check + trips * self.duration(item.body)
        elif isinstance(item, Branch):
            taken = item.then if self.branches.get(id(item), True) else item.otherwise
            result = self.costs[item.step].total_cycles + self.duration(taken)
        else:  # CallFunction
            result = self.duration(self.executable.functions[item.function])
        self._durations[key] = result
        return result

    # ---- events -----------------------------------------------------------------------------
    def microseconds(self, cycle: int) -> float:
        """The time of ``cycle``, on a grid of 2^-20 µs (about a picosecond, well under a cycle):
        grid values subtract and add back exactly, so an event's ``ts + dur`` is its end cycle's
        time to the bit and events nest exactly as their cycles do (with plain products, one
        event could overrun its parent by a rounding step)."""
        return round(cycle * self.us_per_cycle * _GRID) / _GRID

    def event(self, name: str, start: int, cycles: int, pid: int, tid: int,
              category: str, args: dict | None = None) -> None:
        """One complete event (``ph: X``) of ``cycles`` from cycle ``start``, on the time grid so it
        nests exactly; an event of no cycles is left out."""
        if cycles <= 0:
            return
        begin = self.microseconds(start)
        record = {"name": name, "ph": "X", "ts": begin,
                  "dur": self.microseconds(start + cycles) - begin, "pid": pid, "tid": tid,
                  "cat": category}
        if args:
            record["args"] = args
        self.events.append(record)

    def control(self, name: str, start: int, cycles: int, category: str) -> None:
        for ipu in range(self.target.num_ipus):
            self.event(name, start, cycles, ipu, CONTROL_TRACK, category)

    def all_tiles(self, name: str, start: int, cycles: int) -> None:
        for ipu in range(self.target.num_ipus):
            for group in range(self.groups_per_ipu):
                self.event(name, start, cycles, ipu, group + 1, "loop")

    def busiest_in_groups(self, per_tile: np.ndarray) -> np.ndarray:
        """``[ipu, group]``: the largest of ``per_tile`` in each tile track's group."""
        busiest = np.zeros((self.target.num_ipus, self.groups_per_ipu), dtype=np.int64)
        np.maximum.at(busiest, (self.ipu_of_tile, self.track_of_tile), per_tile)
        return busiest

    def superstep(self, step: int, start: int) -> None:
        """One step on the control track and on every tile track, with its phases inside: exchange,
        then compute, then sync.  A track's exchange and compute are those of the busiest tile in
        its group (the compute phase starts when the step's busiest exchange ends)."""
        cost = self.costs[step]
        name = self.step_names[step]
        end = start + cost.total_cycles
        self.control(name, start, cost.total_cycles, "step")
        exchange, compute = (self.busiest_in_groups(per_tile)
                             for per_tile in (cost.exchange_by_tile, cost.compute_by_tile))
        for ipu in range(self.target.num_ipus):
            for group in range(self.groups_per_ipu):
                tid = group + 1
                self.event(name, start, cost.total_cycles, ipu, tid, "step",
                           {"step": step})
                self.event("exchange", start, int(exchange[ipu, group]), ipu, tid, "exchange")
                self.event("compute", start + cost.exchange_cycles, int(compute[ipu, group]),
                           ipu, tid, "compute")
                self.event("sync", end - cost.sync_cycles, cost.sync_cycles, ipu, tid, "sync")

    def walk(self, item, start: int) -> int:
        """Emit events for ``item`` starting at cycle ``start``; return its end."""
        if isinstance(item, (ExecuteStep, CopyStep, MarkStep, PrintStep)):
            self.superstep(item.step, start)
            return start + self.costs[item.step].total_cycles
        if isinstance(item, Block):
            for child in item.items:
                start = self.walk(child, start)
            return start
        total = self.duration(item)
        if isinstance(item, Loop):
            self.control(f"Repeat x{item.count}", start, total, "loop")
            if item.count:
                body_end = self.walk(item.body, start)
                self.later_iterations(body_end, start + total, item.count)
        elif isinstance(item, WhileLoop):
            trips = self.loop_trips.get(id(item), 0)
            self.control(f"RepeatWhileTrue x{trips}", start, total, "loop")
            at = self.walk(item.condition, start)
            self.superstep(item.step, at)
            at += self.costs[item.step].total_cycles
            if trips:
                body_end = self.walk(item.body, at)
                self.later_iterations(body_end, start + total, trips)
        elif isinstance(item, Branch):
            self.control("If", start, total, "branch")
            self.superstep(item.step, start)
            taken = item.then if self.branches.get(id(item), True) else item.otherwise
            self.walk(taken, start + self.costs[item.step].total_cycles)
        else:  # CallFunction
            self.control(f"Call f{item.function}", start, total, "call")
            self.walk(self.executable.functions[item.function], start)
        return start + total

    def later_iterations(self, first_end: int, loop_end: int, iterations: int) -> None:
        """One event for a loop's iterations after the first, whose steps are drawn once: a
        long loop stays a handful of events, and its time is still all accounted for."""
        if iterations > 1 and loop_end > first_end:
            name = f"iterations 2..{iterations}"
            self.control(name, first_end, loop_end - first_end, "loop")
            self.all_tiles(name, first_end, loop_end - first_end)

    def metadata(self) -> None:
        """Name the tracks: each IPU a process; its control track and each tile group
        (``tiles 4-7``, or ``tile 4``) a thread."""
        for ipu in range(self.target.num_ipus):
            self.events.append({"name": "process_name", "ph": "M", "pid": ipu, "tid": 0,
                                "args": {"name": f"IPU {ipu}"}})
            self.events.append({"name": "thread_name", "ph": "M", "pid": ipu, "tid": CONTROL_TRACK,
                                "args": {"name": "control"}})
            first = ipu * self.target.tiles_per_ipu
            for group in range(self.groups_per_ipu):
                lo = first + group * self.group_size
                hi = min(lo + self.group_size, first + self.target.tiles_per_ipu) - 1
                label = f"tile {lo}" if lo == hi else f"tiles {lo}-{hi}"
                self.events.append({"name": "thread_name", "ph": "M", "pid": ipu,
                                    "tid": group + 1, "args": {"name": label}})


def chrome_trace(executable: Executable, costs: tuple[StepCost, ...], target: Target,
                 programs: Sequence[int], loop_trips: dict[int, int], branches: dict[int, bool],
                 step_names: list[str]) -> dict[str, Any]:
    """The trace of one execution of each entry program of ``programs``, in order and end to
    end (one invocation of a tool), as a JSON-ready dict."""
    builder = _TraceBuilder(executable, costs, target, loop_trips, branches, step_names)
    builder.metadata()
    end = 0
    for program in programs:
        start, end = end, builder.walk(executable.programs[program], end)
        builder.control(f"program {program}", start, end - start, "program")
    builder.events.sort(key=lambda e: (e.get("ts", -1), -e.get("dur", 0)))
    return {"traceEvents": builder.events, "displayTimeUnit": "ns",
            "otherData": {"target": target.describe(),
                          "program": programs[0] if len(programs) == 1 else list(programs),
                          "cycles": end, "tiles_per_track": builder.group_size}}


def write_chrome_trace(path: str | os.PathLike, trace: dict[str, Any]) -> None:
    """Write a trace atomically."""
    write_text_atomically(path, json.dumps(trace))
