"""The numbers behind the HTML report (:mod:`gruc.runtime.page`) and the variables of a report's
JSON, gathered from a compiled program.

Why a module of its own: the page is a browser's work as much as Python's.  Its charts of all
tiles are drawn from per-tile arrays, but a tile's own page (its memory map, its variables and
their lifetimes) is drawn on demand when the tile is clicked, from compact arrays embedded once
— every block of every variable, by tile, as little-endian integers in base64 — rather than one
chart per tile written out in advance (an ipu2 has 1,472 tiles; a page of 1,472 charts would not
open).  So this module decides what the page knows, in what units and layout, and
:mod:`gruc.runtime.page` only draws it.

Addresses are a tile's device addresses, as Poplar's memory map shows them: the always-live
categories that are not tensor data (vertex code, vertex state, control and exchange code) lie
at the bottom of the non-interleaved region, then the plan's non-interleaved tensor blocks, then
room for the exchange's landing buffers where they need more than the plan's region holds; the
interleaved region starts at ``target.interleaved_memory_start`` (or right after a
non-interleaved region that outgrew it), and the plan's interleaved blocks lie there
(:mod:`gruc.runtime.footprint`).  The highest address a tile's map reaches is its total
including gaps.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from gruc.errors import GrucValueError
from gruc.ir.module import Module
from gruc.ir.printer import format_type
from gruc.ir.program import Execute
from gruc.memory.plan import MemoryPlan
from gruc.runtime.footprint import ALWAYS_LIVE_CATEGORIES, Footprint
from gruc.runtime.lower import (Block, Branch, CallFunction, CopyStep, Executable, ExecuteStep,
                                Loop, MarkStep, PrintStep, WhileLoop)
from gruc.runtime.viz import tile_grid

if TYPE_CHECKING:
    from gruc.runtime.report import Report

NOT_ALWAYS_LIVE_LABEL = "variable (not always live)"
ALWAYS_LIVE_LABEL = "variable (always live)"
GAPS = "gaps"
CATEGORY_COLOURS = {
    ALWAYS_LIVE_LABEL: "#2b6cb0", "constant": "#63b3ed", "vertexCode": "#805ad5",
    "vertexInstanceState": "#b794f4", "vertexFieldData": "#d6bcfa", "controlCode": "#975a16",
    "internalExchangeCode": "#d69e2e", NOT_ALWAYS_LIVE_LABEL: "#dd6b20", "message": "#e53e3e",
    GAPS: "#cbd5e0"}
"""Every category a tile's memory is counted in, bottom to top of its stacked bar (Poplar's
always-live categories, then the not-always-live ones at the tile's peak, then the gaps up to
its highest address), with its colour on every chart of the page."""
CATEGORIES = tuple(CATEGORY_COLOURS)
FIXED_CATEGORIES = ALWAYS_LIVE_CATEGORIES[2:]
"""Always-live categories that are not tensor data: they lie at the bottom of the
non-interleaved region (code can only be fetched from there)."""


@dataclass(frozen=True, eq=False)
class ReportDetails:
    """What a report needs besides its figures to draw its page and list its variables: the
    compiled module and its memory plan, and from an engine the lowered program tree and the
    trace of its last run (None before a run: its loops' trips are unknown)."""

    module: Module
    plan: MemoryPlan
    executable: Executable | None = None
    trace: Callable[[], dict | None] | None = None


def b64(values: np.ndarray, dtype: str) -> str:
    """``values`` as little-endian ``dtype`` bytes in base64: how the page embeds long arrays
    (a third of the size of JSON numbers, decoded by a typed array view in the browser)."""
    array = np.ascontiguousarray(values, dtype=np.dtype(dtype).newbyteorder("<"))
    return base64.b64encode(array.tobytes()).decode("ascii")


def step_runs(steps: np.ndarray) -> list[int]:
    """The ascending step numbers ``steps`` as runs, flat: ``[first, last, first, last, ...]``
    (a variable live over a loop body is one run, not a list of every step)."""
    if not len(steps):
        return []
    breaks = np.flatnonzero(np.diff(steps) != 1)
    firsts = np.concatenate(([steps[0]], steps[breaks + 1]))
    lasts = np.concatenate((steps[breaks], [steps[-1]]))
    return np.column_stack((firsts, lasts)).reshape(-1).tolist()


# ---- memory by category, per tile -------------------------------------------------------------
def tile_categories(footprint: Footprint) -> dict[str, np.ndarray]:
    """Per category (:data:`CATEGORIES`), bytes on each tile; they add up to each tile's total
    including gaps."""
    always, later = footprint.always_live, footprint.not_always_live
    result = {ALWAYS_LIVE_LABEL: always["variable"]}
    result.update({name: always[name] for name in ALWAYS_LIVE_CATEGORIES[1:]})
    result[NOT_ALWAYS_LIVE_LABEL] = later["variable"]
    result["message"] = later["message"]
    result[GAPS] = (footprint.total_including_gaps - footprint.always_live_bytes
                    - footprint.not_always_live_peak).clip(min=0)
    return {name: np.asarray(values, dtype=np.int64) for name, values in result.items()}


def fixed_bytes(footprint: Footprint) -> np.ndarray:
    """Per tile: bytes of the non-tensor always-live categories (the bottom of its memory)."""
    return sum(footprint.always_live[name] for name in FIXED_CATEGORIES).astype(np.int64)


def non_interleaved_end(plan: MemoryPlan, footprint: Footprint) -> np.ndarray:
    """Per tile: the end of its non-interleaved region in use: the fixed categories, then the
    plan's tensor data, or the room tensor data and landing buffers need at the tile's peak
    where that is more (as :func:`gruc.runtime.footprint.memory_footprint` counts it)."""
    ends = plan.region_ends.astype(np.int64)
    return fixed_bytes(footprint) + np.maximum(
        ends[0], plan.always_live_bytes.astype(np.int64) + footprint.not_always_live_peak
        - ends[1])


def region_bases(plan: MemoryPlan, footprint: Footprint) -> tuple[np.ndarray, np.ndarray]:
    """Per tile: the device address where the plan's non-interleaved tensor data starts (after
    the fixed categories) and where its interleaved region starts
    (``interleaved_memory_start``, or after a non-interleaved region that outgrew it)."""
    start = footprint.target.interleaved_memory_start
    return fixed_bytes(footprint), np.maximum(non_interleaved_end(plan, footprint), start)


def device_addresses(plan: MemoryPlan, footprint: Footprint) -> np.ndarray:
    """The device address of every block of ``plan`` (its order)."""
    fixed, interleaved = region_bases(plan, footprint)
    tiles = plan.block_tile.astype(np.int64)
    offsets = plan.block_offset.astype(np.int64)
    return np.where(plan.block_interleaved, interleaved[tiles] + offsets - plan.interleaved_base,
                    fixed[tiles] + offsets)


# ---- liveness ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LiveBytes:
    """Bytes of tensor data held at each step (every array per step)."""

    total: np.ndarray
    """On all tiles together: always-live blocks and the not-always-live blocks live then."""
    always: int
    """Of always-live blocks on all tiles (held at every step)."""
    max_tile: np.ndarray
    """On the tile holding the most at that step."""


def live_bytes(plan: MemoryPlan) -> LiveBytes:
    """Tensor bytes held at each step, from the plan's blocks and the liveness (a loop body's
    steps appear once, as in the IR)."""
    liveness = plan.liveness
    always_live = np.zeros(liveness.num_variables, dtype=bool)
    always_live[list(liveness.always_live)] = True
    temporary = np.flatnonzero(~always_live[plan.block_variable])
    variables = np.unique(plan.block_variable[temporary])
    live = liveness.step_matrix(variables.tolist()) if len(variables) else \
        np.zeros((0, liveness.num_steps), dtype=bool)
    row = np.searchsorted(variables, plan.block_variable[temporary])
    tiles, sizes = plan.block_tile[temporary], plan.block_size[temporary]
    total = np.zeros(liveness.num_steps, dtype=np.int64)
    busiest = np.zeros(liveness.num_steps, dtype=np.int64)
    always_by_tile = plan.always_live_bytes.astype(np.int64)
    for step in range(liveness.num_steps):
        held = live[row, step] if len(row) else np.zeros(0, dtype=bool)
        on_tile = np.bincount(tiles[held], weights=sizes[held], minlength=plan.num_tiles)
        total[step] = int(on_tile.sum())
        busiest[step] = int((always_by_tile + on_tile).max(initial=0))
    always = int(always_by_tile.sum())
    return LiveBytes(total + always, always, busiest)


def landing_by_step(report: "Report") -> list[tuple[int, np.ndarray]]:
    """``(step, bytes each tile receives)`` of the compute sets that read operands held on
    other tiles: the landing buffers (``message``) those steps hold."""
    return [(step.index, cost.bytes_in_by_tile) for step, cost in zip(report.steps, report.costs)
            if isinstance(step.node, Execute) and cost.bytes_in_by_tile.any()]


# ---- variables ---------------------------------------------------------------------------------
def variable_rows(module: Module, plan: MemoryPlan) -> list[dict[str, Any]]:
    """One row per variable holding memory: its name, type, bytes over all tiles, liveness
    (always-live, or its live steps as runs), whether it is a constant or interleaved, and its
    placement as runs of consecutive tiles holding equal blocks at an equal offset (``[first
    tile, tiles, bytes each, offset]``): what a comparison of two reports needs to say which
    variables moved, in a few numbers per variable where mappings are regular."""
    graph, liveness = module.graph, plan.liveness
    variables = sorted(plan.allocated)
    live = liveness.step_matrix(variables) if variables else None
    rows = []
    for k, index in enumerate(variables):
        variable = graph.variables[index]
        lo, hi = np.searchsorted(plan.block_variable, [index, index + 1]).tolist()
        tiles = plan.block_tile[lo:hi].astype(np.int64)
        nbytes = plan.block_nbytes[lo:hi].astype(np.int64)
        offsets = plan.block_offset[lo:hi].astype(np.int64)
        starts = np.flatnonzero(np.concatenate(([True], (np.diff(tiles) != 1)
                                                | (np.diff(nbytes) != 0) | (np.diff(offsets) != 0))))
        counts = np.diff(np.concatenate((starts, [len(tiles)])))
        always = index in liveness.always_live
        rows.append({
            "name": variable.name, "type": format_type(variable.dtype, variable.shape),
            "bytes": int(nbytes.sum()), "tiles": int(len(tiles)), "always_live": always,
            "constant": bool(variable.is_constant),
            "interleaved": bool(plan.block_interleaved[lo:hi].any()) if hi > lo else False,
            "live_steps": [] if always else step_runs(np.flatnonzero(live[k])),
            "placement": np.column_stack((tiles[starts], counts, nbytes[starts],
                                          offsets[starts])).tolist()})
    return rows


# ---- the program tree --------------------------------------------------------------------------
def tree_of(executable: Executable, module: Module) -> list:
    """The lowered program tree as nested JSON: a step is its number, a group is ``{"t": title,
    "c": children}`` (programs, functions, loops with their counts, ``while`` and ``if`` with
    their predicate steps, calls by function name)."""
    functions = module.functions

    def item(node) -> list:
        if isinstance(node, (ExecuteStep, CopyStep, MarkStep, PrintStep)):
            return [node.step]
        if isinstance(node, Block):
            return [child for part in node.items for child in item(part)]
        if isinstance(node, Loop):
            return [{"t": f"repeat {node.count}", "c": item(node.body)}]
        if isinstance(node, WhileLoop):
            return [{"t": "repeat while true",
                     "c": [*item(node.condition), node.step, {"t": "body", "c": item(node.body)}]}]
        if isinstance(node, Branch):
            return [{"t": "if", "c": [node.step, {"t": "then", "c": item(node.then)},
                                      {"t": "else", "c": item(node.otherwise)}]}]
        if isinstance(node, CallFunction):
            return [{"t": f"call function {functions[node.function].name}", "c": []}]
        raise GrucValueError(f"the program tree cannot show {type(node).__name__}")

    groups = [{"t": f"program {k}", "c": item(block)}
              for k, block in enumerate(executable.programs)]
    groups += [{"t": f"function {function.name}", "c": item(block)}
               for function, block in zip(functions, executable.functions)]
    return groups


# ---- the trace ---------------------------------------------------------------------------------
TRACE_KINDS = ("exchange", "compute", "sync", "loop")
"""Phases of a tile track in the trace view, numbered from 1 (0: nothing happens); ``loop`` is
a loop's iterations after the first, drawn as one span (as ``gruc trace`` draws them)."""


def trace_data(trace: dict) -> dict[str, Any]:
    """The phases of every tile track of a Chrome trace (:mod:`gruc.runtime.trace`: at most 64
    tracks per IPU, a track's phases those of its group's busiest tile) as compact arrays, and
    the steps of the first tile track with their times (what is running at a given time)."""
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    labels = {(e["pid"], e["tid"]): f"IPU {e['pid']} {e['args']['name']}"
              for e in trace["traceEvents"] if e["name"] == "thread_name" and e["tid"] > 0}
    tracks = sorted(labels)
    row_of = {track: k for k, track in enumerate(tracks)}
    kind_of = {kind: k + 1 for k, kind in enumerate(TRACE_KINDS)}
    phases = [e for e in events if e["tid"] > 0 and e["cat"] in kind_of]
    first = tracks[0] if tracks else None
    steps = [e for e in events if (e["pid"], e["tid"]) == first and e["cat"] == "step"]
    return {
        "rows": [labels[t] for t in tracks],
        "end": max((e["ts"] + e["dur"] for e in events), default=0.0),
        "row": b64([row_of[(e["pid"], e["tid"])] for e in phases], "int32"),
        "kind": b64([kind_of[e["cat"]] for e in phases], "int32"),
        "start": b64([e["ts"] for e in phases], "float64"),
        "dur": b64([e["dur"] for e in phases], "float64"),
        "loops": [[e["ts"], e["dur"], e["name"]] for e in events
                  if e["tid"] == 0 and e["pid"] == 0 and e["name"].startswith("iterations")],
        "stepStart": b64([e["ts"] for e in steps], "float64"),
        "stepDur": b64([e["dur"] for e in steps], "float64"),
        "step": b64([e["args"]["step"] for e in steps], "int32"),
        "tilesPerTrack": trace["otherData"]["tiles_per_track"],
    }


# ---- everything the page embeds ------------------------------------------------------------------
def page_data(report: "Report", details: ReportDetails, title: str) -> dict[str, Any]:
    """Every number the page draws (see the module docstring), as JSON-ready values."""
    plan, footprint, target = details.plan, report.footprint, report.target
    categories = tile_categories(footprint)
    addresses = device_addresses(plan, footprint)
    order = np.lexsort((addresses, plan.block_tile))
    tile_start = np.searchsorted(plan.block_tile[order], np.arange(target.num_tiles + 1))
    rows = variable_rows(details.module, plan)
    index_of = {index: k for k, index in enumerate(sorted(plan.allocated))}
    live = live_bytes(plan)
    landing = landing_by_step(report)
    fixed, interleaved = region_bases(plan, footprint)
    counts = report.step_counts.tolist()
    trace = details.trace() if details.trace is not None else None
    return {
        "title": title, "target": target.describe(), "tilesPerIpu": target.tiles_per_ipu,
        "numIpus": target.num_ipus, "numTiles": target.num_tiles,
        "grid": list(tile_grid(target.tiles_per_ipu)),
        "capacity": target.bytes_per_tile,
        "interleavedStart": target.interleaved_memory_start,
        "categories": [{"name": name, "colour": colour} for name, colour in
                       CATEGORY_COLOURS.items()],
        "tiles": {name: values.tolist() for name, values in categories.items()},
        "total": footprint.total_including_gaps.astype(np.int64).tolist(),
        "peakStep": footprint.peak_step.astype(np.int64).tolist(),
        "tensorBase": fixed.tolist(), "interleavedBase": interleaved.tolist(),
        "nonInterleavedEnd": non_interleaved_end(plan, footprint).tolist(),
        "cycles": {"compute": report.compute_cycles_by_tile.tolist(),
                   "exchange": report.exchange_cycles_by_tile.tolist(),
                   "sync": report.sync_cycles_by_tile.tolist()},
        "variables": {key: [row[key] for row in rows] for key in
                      ("name", "type", "bytes", "always_live", "constant", "interleaved",
                       "live_steps")},
        "blocks": {"tileStart": b64(tile_start, "int32"),
                   "variable": b64([index_of[v] for v in plan.block_variable[order].tolist()],
                                   "int32"),
                   "address": b64(addresses[order], "int32"),
                   "nbytes": b64(plan.block_nbytes[order], "int32")},
        "steps": [{"where": s.where, "what": s.text, "executions": n,
                   "compute": c.compute_cycles, "exchange": c.exchange_cycles,
                   "sync": c.sync_cycles, "exchangeBytes": c.exchange_bytes}
                  for s, c, n in zip(report.steps, report.costs, counts)],
        "live": {"total": live.total.tolist(), "always": live.always,
                 "maxTile": live.max_tile.tolist()},
        "landing": {"steps": [step for step, _ in landing],
                    "bytes": b64(np.concatenate([b for _, b in landing]) if landing else [],
                                 "int32")},
        "tree": tree_of(details.executable, details.module) if details.executable else [],
        "trace": trace_data(trace) if trace is not None else None,
        "ran": bool(report.step_counts.any()),
    }
