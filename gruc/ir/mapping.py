"""Tile mappings as runs: which tile holds each element of a tensor, in structure-of-arrays form.

Poplar describes a mapping as, per tile, a list of element intervals.  gruc keeps the equivalent
as three int64 arrays of *runs* in the tensor's flattened element order — ``begins``, ``ends`` and
``tiles`` (``-1`` for unmapped elements) — so a mapping of a million-element tensor over 1472
tiles is a few thousand numbers, and every query is a numpy operation.  ``per_tile`` gives the
Poplar form when a caller wants it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

from gruc.errors import GrucIndexError, GrucMappingError, GrucTypeError

UNMAPPED = -1


def runs_of(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Begins and ends of the maximal runs of equal values in a 1-D array."""
    n = len(values)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    change = np.flatnonzero(values[1:] != values[:-1]) + 1
    begins = np.concatenate(([0], change)).astype(np.int64)
    ends = np.concatenate((change, [n])).astype(np.int64)
    return begins, ends


def consecutive_runs(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Begins and ends of the maximal runs where ``ids[k+1] == ids[k] + 1``."""
    n = len(ids)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    begins = np.concatenate(([0], breaks)).astype(np.int64)
    ends = np.concatenate((breaks, [n])).astype(np.int64)
    return begins, ends


def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values of an int64 array: O(n) with a mark array when the values are dense
    (ids of views almost always are), else by sorting.  Not ``np.unique``: numpy >= 2.3 dedupes
    with a hash table that takes ~20 s on the 16M distinct ids of a [1000, 64, 256] tensor."""
    if len(values) == 0:
        return values
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < 4 * len(values):
        mark = np.zeros(hi - lo + 1, dtype=bool)
        mark[values - lo] = True
        return np.flatnonzero(mark) + lo
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def _interval(interval: object, tile: int, num_elements: int) -> tuple[int, int]:
    """One ``(begin, end)`` of a per-tile mapping, checked against the tensor's size."""
    try:
        begin, end = (operator.index(v) for v in interval)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise GrucTypeError(f"tile {tile}'s interval {interval!r} must be a pair of integers "
                            "(begin, end)") from None
    if not 0 <= begin <= end <= num_elements:
        raise GrucIndexError(f"tile {tile}'s interval [{begin}, {end}) is out of range for "
                             f"{num_elements} elements (allowed 0 <= begin <= end <= "
                             f"{num_elements})")
    return begin, end


@dataclass(frozen=True, eq=False)
class TileMapping:
    """Runs of a flattened tensor's elements and the tile of each run.

    A mapping a graph returns (``Graph.get_tile_mapping``) also reads as Poplar's
    ``getTileMapping`` result, one list of ``(begin, end)`` intervals per tile of the target:
    ``mapping[tile]``, ``len(mapping)``, ``for intervals in mapping``."""

    begins: np.ndarray
    ends: np.ndarray
    tiles: np.ndarray
    num_elements: int
    num_tiles: int | None = None
    """The target's tile count, when known: what makes the per-tile list form complete."""

    @classmethod
    def from_element_tiles(cls, element_tiles: np.ndarray) -> "TileMapping":
        """Compress a per-element tile array into runs."""
        flat = np.asarray(element_tiles).reshape(-1)
        begins, ends = runs_of(flat)
        return cls(begins, ends, flat[begins].astype(np.int64), len(flat))

    @classmethod
    def from_per_tile(cls, per_tile: list[list[tuple[int, int]]], num_elements: int) -> "TileMapping":
        """Build from Poplar's form: ``per_tile[tile]`` lists ``(begin, end)`` intervals.

        Every interval must lie within ``[0, num_elements]`` and no element may be named by two
        intervals: numpy slicing would clip the first and let the last writer win the second,
        hiding the mistake in a mapping that looks complete."""
        if isinstance(per_tile, (str, bytes)) or not isinstance(per_tile, Iterable):
            raise GrucTypeError(f"a tile mapping is a tile number, a TileMapping or one list of "
                                f"(begin, end) intervals per tile; got {per_tile!r}")
        element_tiles = np.full(num_elements, UNMAPPED, dtype=np.int64)
        for tile, intervals in enumerate(per_tile):
            if isinstance(intervals, (str, bytes)) or not isinstance(intervals, Iterable):
                raise GrucTypeError(f"tile {tile}'s mapping must be a list of (begin, end) "
                                    f"intervals, got {intervals!r}")
            for interval in intervals:
                begin, end = _interval(interval, tile, num_elements)
                taken = element_tiles[begin:end] != UNMAPPED
                if np.any(taken):
                    element = begin + int(np.argmax(taken))
                    raise GrucMappingError(
                        f"element {element} is mapped twice, to tile "
                        f"{int(element_tiles[element])} and to tile {tile}; intervals must not "
                        "overlap")
                element_tiles[begin:end] = tile
        return cls.from_element_tiles(element_tiles)

    def element_tiles(self) -> np.ndarray:
        """The tile of every element (``-1`` where unmapped)."""
        return np.repeat(self.tiles, self.ends - self.begins)

    @property
    def is_complete(self) -> bool:
        return bool(np.all(self.tiles != UNMAPPED))

    def tiles_used(self) -> np.ndarray:
        """Sorted tiles that hold at least one element."""
        used = np.unique(self.tiles)
        return used[used != UNMAPPED]

    def elements_per_tile(self, num_tiles: int) -> np.ndarray:
        """Element count on each of ``num_tiles`` tiles."""
        mapped = self.tiles != UNMAPPED
        return np.bincount(self.tiles[mapped], weights=(self.ends - self.begins)[mapped],
                           minlength=num_tiles).astype(np.int64)

    def intervals_on(self, tile: int) -> list[tuple[int, int]]:
        """The ``(begin, end)`` runs on ``tile``, in element order."""
        keep = self.tiles == tile
        return list(zip(self.begins[keep].tolist(), self.ends[keep].tolist()))

    def per_tile(self, num_tiles: int) -> list[list[tuple[int, int]]]:
        """Poplar's ``getTileMapping`` form: one list of intervals per tile."""
        result: list[list[tuple[int, int]]] = [[] for _ in range(num_tiles)]
        for begin, end, tile in zip(self.begins.tolist(), self.ends.tolist(), self.tiles.tolist()):
            if tile != UNMAPPED:
                result[tile].append((begin, end))
        return result

    def __getitem__(self, tile: int) -> list[tuple[int, int]]:
        tile = operator.index(tile)
        count = self._tile_count()
        if not 0 <= tile < count:
            raise GrucIndexError(f"tile {tile} does not exist; the target has tiles 0..{count - 1}")
        return self.intervals_on(tile)

    def __len__(self) -> int:
        return self._tile_count()

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        return iter(self.per_tile(self._tile_count()))

    def _tile_count(self) -> int:
        if self.num_tiles is None:
            raise GrucTypeError("this TileMapping was made without a target, so it has no per-tile "
                                "list form; use per_tile(num_tiles) or get it from "
                                "Graph.get_tile_mapping")
        return self.num_tiles

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TileMapping):
            return NotImplemented
        return (self.num_elements == other.num_elements and np.array_equal(self.begins, other.begins)
                and np.array_equal(self.ends, other.ends) and np.array_equal(self.tiles, other.tiles))

    def __repr__(self) -> str:
        shown = ", ".join(f"{t}:[{b},{e})" for b, e, t in
                          zip(self.begins[:6].tolist(), self.ends[:6].tolist(), self.tiles[:6].tolist()))
        more = f", ... ({len(self.tiles)} runs)" if len(self.tiles) > 6 else ""
        return f"TileMapping({shown}{more})"


def linear_partition(num_elements: int, num_tiles: int, grain_size: int,
                     min_elements_per_tile: int) -> np.ndarray:
    """Element boundaries of poplibs' linear split (``splitRegions`` over one region).

    Elements are grouped in grains of ``grain_size``; grains are spread evenly over at most
    ``num_tiles`` partitions, but never so thin that a partition has fewer than
    ``min_elements_per_tile`` elements (rounded up to whole grains).  Partition ``k`` goes to tile
    ``k``, so tiles fill from 0 upward.  Returns ``bounds`` with partition ``k`` =
    ``[bounds[k], bounds[k+1])``.
    """
    if num_elements == 0:
        return np.zeros(1, np.int64)
    num_grains = -(-num_elements // grain_size)
    grains_per_tile = -(-num_grains // num_tiles)
    if min_elements_per_tile:
        min_grains = -(-min_elements_per_tile // grain_size)
        max_partitions = max(1, num_grains // min_grains)
        grains_per_tile = max(grains_per_tile, -(-num_grains // max_partitions))
    partitions = -(-num_grains // grains_per_tile)
    grain_bounds = (np.arange(partitions + 1, dtype=np.int64) * num_grains) // partitions
    return np.minimum(grain_bounds * grain_size, num_elements)
