"""The memory plan the planner makes (:mod:`gruc.memory.planner`), and what the rest of the
compiler reads of it: blocks, per-tile figures, and the runs every address is derived from.

The report and the memory model read per-tile figures and blocks here; lowering asks for
addresses through :class:`gruc.runtime.addresses.PlanAddresses`, whose compiled walks read the
plan's runs (``runs``, ``segments``), never a per-element table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gruc.analysis.liveness import Liveness
from gruc.errors import GrucValueError
from gruc.ir.graph import Graph
from gruc.text import plural

__all__ = ["MemoryPlan", "TileOverflow"]

@dataclass(frozen=True)
class TileOverflow:
    """A tile whose planned memory exceeds its capacity."""

    tile: int
    bytes: int
    """Highest allocated address on the tile (total including gaps)."""
    capacity: int
    largest: tuple[tuple[str, int], ...]
    """The largest variables on the tile: ``(name, bytes on this tile)``, largest first."""

    def __str__(self) -> str:
        shown = ", ".join(f"{name} ({nbytes} B)" for name, nbytes in self.largest)
        return (f"tile {self.tile} needs {self.bytes} bytes but has {self.capacity} "
                f"(largest tensors there: {shown})")


@dataclass(frozen=True, eq=False)
class MemoryPlan:
    """Where every allocated variable lives: one block per (variable, tile), and per-tile totals.

    Block arrays are parallel, sorted by (variable, tile).  Per-tile arrays have one entry per
    tile of the target.  All arrays are read-only.
    """

    liveness: Liveness
    num_tiles: int
    capacity: int
    """Bytes per tile (``target.bytes_per_tile``)."""
    alignment: int
    block_variable: np.ndarray
    block_tile: np.ndarray
    block_offset: np.ndarray
    block_nbytes: np.ndarray
    """Exact bytes of each block (``count * dtype.size``)."""
    block_size: np.ndarray
    """Bytes each block is accounted at (``block_nbytes`` rounded up to ``alignment``)."""
    always_live_bytes: np.ndarray
    not_always_live_bytes: np.ndarray
    """Per tile: peak over steps of the bytes of the not-always-live blocks live at the step."""
    total_bytes: np.ndarray
    """Per tile: the highest address its tensor data reaches, gaps included (the interleaved
    region, if the tile has data there, starts at ``target.interleaved_memory_start``)."""
    tiles_over_capacity: tuple[TileOverflow, ...]
    """Tiles whose tensor data alone exceeds their memory (the runtime's memory model adds the
    rest Poplar puts on a tile: :mod:`gruc.runtime.footprint`)."""
    allocated: frozenset[int]
    """Indices of the variables that received blocks."""
    num_signatures: int
    """Distinct tile signatures actually planned (the rest reused a plan)."""
    block_interleaved: np.ndarray
    """Whether each block lies in the interleaved region."""
    region_ends: np.ndarray
    """``[2, tiles]``: the highest offset tensor data reaches in each region, from its start."""
    interleaved_base: int
    """Host offset of a tile's interleaved region (region 0's largest extent, aligned)."""
    tile_signature: np.ndarray
    """Per tile: the number of its planned signature (-1: no tensor data)."""
    signature_not_always_live_by_step: np.ndarray
    """``[signatures, steps]``: not-always-live bytes a signature's tiles occupy at each step."""
    graph: Graph = field(repr=False)
    """The graph whose variables the plan places."""
    runs: np.ndarray = field(repr=False)
    """Runs of consecutive elements of a variable on one tile, sorted by global id (variables own
    increasing id ranges), one row each: first id, length, tile, byte offset on the tile, element
    size, and the bytes a row of the variable adds on that tile (a row is one cache line's read
    when a walk looks a run up).  Every address query walks these (:class:`gruc.runtime.addresses.PlanAddresses`):
    a per-element table of the whole module would hold hundreds of millions of addresses for a
    long sequence.  A stretch of a variable's rows laid out alike (all of them, or a sharded
    sequence's shard) has runs for its first row only."""
    segments: np.ndarray = field(repr=False)
    """One row per stretch of an allocated variable, by first id: first id, period (elements of
    a row whose runs ``runs`` holds, all of the variable's if its rows are not laid out alike),
    rows.  A variable is one stretch, or one per range of rows mapped from one row's tiles."""

    # ---- queries --------------------------------------------------------------------------------
    @property
    def fits(self) -> bool:
        return not self.tiles_over_capacity

    @property
    def max_total_bytes(self) -> int:
        return int(self.total_bytes.max()) if self.num_tiles else 0

    @property
    def host_extent(self) -> int:
        """Bytes of a tile's host buffer: region 0, then region 1 from ``interleaved_base``."""
        return self.interleaved_base + int(self.region_ends[1].max(initial=0))

    def not_always_live_by_step(self, tile: int) -> np.ndarray:
        """Not-always-live tensor bytes ``tile`` occupies at each step."""
        signature = int(self.tile_signature[tile])
        if signature < 0:
            return np.zeros(self.liveness.num_steps, dtype=np.int64)
        return self.signature_not_always_live_by_step[signature]

    def _block_index(self, variable: int) -> tuple[int, int]:
        lo = int(np.searchsorted(self.block_variable, variable, side="left"))
        hi = int(np.searchsorted(self.block_variable, variable, side="right"))
        return lo, hi

    def blocks(self, variable: int) -> list[tuple[int, int, int]]:
        """``(tile, offset, nbytes)`` of each block of ``variable`` (an index), by tile."""
        lo, hi = self._block_index(variable)
        return list(zip(self.block_tile[lo:hi].tolist(), self.block_offset[lo:hi].tolist(),
                        self.block_nbytes[lo:hi].tolist()))

    def offset(self, variable: int, tile: int) -> int:
        """Byte offset on ``tile`` of ``variable``'s block there."""
        lo, hi = self._block_index(variable)
        at = lo + int(np.searchsorted(self.block_tile[lo:hi], tile))
        if at >= hi or self.block_tile[at] != tile:
            name = self.graph.variables[variable].name
            raise GrucValueError(f"variable {name!r} has no elements on tile {tile}")
        return int(self.block_offset[at])

    def tile_blocks(self, tile: int) -> list[tuple[str, int, int, bool]]:
        """``(variable name, offset, nbytes, always_live)`` of every block on ``tile``, by offset."""
        keep = np.flatnonzero(self.block_tile == tile)
        keep = keep[np.lexsort((self.block_variable[keep], self.block_offset[keep]))]
        always = self.liveness.always_live
        return [(self.graph.variables[v].name, off, nb, v in always) for v, off, nb in
                zip(self.block_variable[keep].tolist(), self.block_offset[keep].tolist(),
                    self.block_nbytes[keep].tolist())]

    def summary(self) -> str:
        """A few lines: bytes per category and tiles that do not fit."""
        used = self.total_bytes > 0
        lines = [f"memory plan: {int(used.sum())} of {self.num_tiles} tiles used, "
                 f"{len(self.allocated)} variables, {len(self.block_variable)} blocks, "
                 f"{self.num_signatures} distinct tile layouts",
                 f"  always-live bytes     total {int(self.always_live_bytes.sum())}, "
                 f"max/tile {int(self.always_live_bytes.max(initial=0))}",
                 f"  not-always-live peak  total {int(self.not_always_live_bytes.sum())}, "
                 f"max/tile {int(self.not_always_live_bytes.max(initial=0))}",
                 f"  total incl. gaps      max/tile {self.max_total_bytes} of {self.capacity}"]
        if self.tiles_over_capacity:
            lines.append(f"  {plural(len(self.tiles_over_capacity), 'tile')} over capacity, e.g. "
                         f"{self.tiles_over_capacity[0]}")
        return "\n".join(lines)
