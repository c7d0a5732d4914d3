"""A graph's tile table: the tile of every element id, and the rows it need not store.

One growable int32 array indexed by global element id holds the tile of every element, so
mapping any view is a numpy gather or a strided view of it.  A variable whose rows (indices of
its first dim) all have the same tiles — a sequence laid out alike at every step, unmapped or
mapped from one row's tiles — is stored as its first row only: the table *repeats* that row over
the variable's ids.  A 2,000-step sequence then costs the table one step's tiles, and nothing
that reads its tiles through the table (a strided view folded into the first row, a gather
folding ids into it) pays for the other 1,999.  A range of its rows mapped from one row's tiles
(poplibs puts each shard of a sequence on tiles of its own, every step of the shard alike) cuts
the region in two or three, each repeating its own row (:meth:`TileTable.repeat_rows`): a
sharded sequence costs a row a shard.  Any other write to part of it first stores every row
(:meth:`TileTable.expand`).

A graph copied for a module of its own (:mod:`gruc.ir.graph_copy`) keeps its element ids, so its
table starts as the same array (:meth:`TileTable.shared`): copying it would cost a long layer's
hundreds of megabytes for tiles neither graph changes.  Either table copies the array before
its first write after that (copy on write): a pass that moves tiles (``shard``) or a caller
that goes on mapping its graph never changes the tiles the other graph reads.
"""

from __future__ import annotations

import math
import mmap
import sys

import numpy as np

from gruc.ir.layout import Shape, Strided, id_extent, materialise, strided_view
from gruc.ir.mapping import UNMAPPED

MAX_ELEMENTS = 1 << 34
"""The most elements a graph's variables may hold together: more than an IPU-POD16 holds (16
ipu2, 23,552 tiles of 624 KiB: 7.5 billion half elements, under 2^33), so a layer that could fit
one is never refused for its size.  Each element has an id in the graph's tile table (4 bytes
each, stored only where a variable's rows are not alike); a graph of a trillion elements would
take the process down."""
TABLE_RESERVE = MAX_ELEMENTS
"""Element ids a graph's tile table reserves address space for at once: all a graph may hold
(64 GB of address space, no memory), so the table never grows by copying what it stores (a
linearly mapped sequence of 1.6 billion elements copied at S = 100,000: 1.5 GB more at the peak
of the build and 2.8 s)."""
_MAP_NORESERVE = 0x4000 if sys.platform.startswith("linux") else 0
_MADV_POPULATE_WRITE = 23 if sys.platform.startswith("linux") else None
PREFAULT_BYTES = 64 << 20
"""Fault in at least this many bytes of new table rows in one system call before writing them."""


def _prefault(table: np.ndarray, begin: int, end: int) -> None:
    """Fault in the pages of ``table[begin:end]`` with one ``madvise`` (Linux 5.14+) instead of a
    fault per page while writing: 2-3x faster on this project's VMs, where a first touch of memory
    is slow (0.25 s for 940 MB, against 0.7 s).  Elsewhere, or refused, the write faults them."""
    memory = table.base
    if _MADV_POPULATE_WRITE is None or not isinstance(memory, mmap.mmap) \
            or (end - begin) * 4 < PREFAULT_BYTES:
        return
    first = begin * 4 // mmap.PAGESIZE * mmap.PAGESIZE
    try:
        memory.madvise(_MADV_POPULATE_WRITE, first, end * 4 - first)
    except OSError:
        pass


def _allocate(size: int) -> np.ndarray:
    """An int32 array of at least ``size`` for the tile table (zeros, no page touched yet), in
    ordinary pages, as long as :data:`TABLE_RESERVE` where the system lets a process reserve that
    much address space (on Linux; elsewhere the table is ``size`` long and grows by doubling).

    Reserved address space costs nothing until written, and a table that never outgrows it is
    never copied: at S=2,000 the last doubling copied 940 MB into fresh pages, 3.3 s of a 5.8 s
    build on this project's VMs, where first touches of memory are slow.  Where the reservation
    is refused (strict overcommit), the table is ``size`` long and grows by doubling.

    numpy asks the kernel for huge pages for every array over 4 MB, and where the kernel must
    compact memory to find one (``defrag=madvise``, as on this project's machines) a huge page's
    first touch costs 2-3 ms: a long sequence's table (hundreds of MB, written once, front to
    back) took 3-4 s of a 7 s build at S=2,000, and 0.3 s in ordinary pages.  An anonymous
    private map gets huge pages only if asked (or where the kernel gives them to every map)."""
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    attempts = [(max(size, TABLE_RESERVE), _MAP_NORESERVE)] if _MAP_NORESERVE else []
    for length, extra in attempts + [(max(size, 1), 0)]:
        try:
            memory = mmap.mmap(-1, length * 4, **({"flags": flags | extra} if flags else {}))
        except (OSError, OverflowError):
            continue
        return np.frombuffer(memory, dtype=np.int32)
    raise MemoryError(f"no memory for the tile table of {size} elements")


def repeats_its_rows(tiles: np.ndarray) -> bool:
    """Whether a view of element tiles is its first row over and over: the table's view of a
    sequence it stores as one step (stride 0 along the steps), which a caller may read once."""
    return tiles.ndim > 0 and len(tiles) > 1 and tiles.strides[0] == 0


class TileTable:
    """The tile of every element id (``UNMAPPED`` until mapped), for one graph."""

    def __init__(self) -> None:
        self.array = np.zeros(1024, dtype=np.int32)
        """The stored tiles: of every id but those of repeating regions past their first row."""
        self.size = 0
        """Ids handed out so far."""
        self._repeats: dict[int, tuple[int, int]] = {}
        """First id of each repeating region -> (its ids, its row length)."""
        self._bounds: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._shared = False
        """Whether another table may read ``array`` (see the module docstring)."""

    def shared(self) -> "TileTable":
        """A table of the same ids and tiles over the same array; both copy it before writing."""
        other = TileTable.__new__(TileTable)
        other.array, other.size, other._repeats = self.array, self.size, dict(self._repeats)
        other._bounds = self._bounds
        other._shared = self._shared = True
        return other

    def writable(self) -> np.ndarray:
        """``array``, to write tiles into: a copy of its stored ids first if another table may
        read it (the ids past a repeating region's first row are never stored: not copied)."""
        if self._shared:
            self.array, self._shared = self._stored_into(_allocate(self.size)), False
        return self.array

    def _stored_into(self, own: np.ndarray) -> np.ndarray:
        """``own`` (fresh zeros) with the stored ids of ``array`` copied in: the ids past a
        repeating region's first row are never stored, so never copied (nor their pages
        touched: a long sequence's table rows are address space, not memory)."""
        begin = 0
        for first in sorted(self._repeats):
            count, row = self._repeats[first]
            own[begin:first + row] = self.array[begin:first + row]
            begin = first + count
        own[begin:self.size] = self.array[begin:self.size]
        return own

    def add(self, count: int, row: int) -> int:
        """The first of ``count`` new ids, unmapped; with ``row < count`` (``row`` dividing
        ``count``) the region repeats one row of ``row`` ids until part of it is written."""
        first, needed = self.size, self.size + count
        self.writable()
        if needed > len(self.array):  # ids past ``needed`` are never read: left untouched,
            self.array = self._stored_into(_allocate(max(needed, 2 * len(self.array))))  # no pages
        stored = row if 0 < row < count else count
        _prefault(self.array, first, first + stored)
        self.array[first:first + stored] = UNMAPPED
        if stored < count:
            self._repeats[first] = (count, row)
            self._bounds = None
        self.size = needed
        return first

    def repeating_row(self, first: int, count: int | None = None) -> int | None:
        """The row length of the repeating region at ``first`` (of ``count`` ids, if given), or
        None if there is none: every id of it is stored, or its rows repeat region by region."""
        found = self._repeats.get(first)
        return None if found is None or count is not None and found[0] != count else found[1]

    def regions(self, first: int, count: int) -> list[tuple[int, int, int]]:
        """``(first id, ids, row length)`` of the repeating regions of the variable whose ids are
        ``[first, first + count)``, in id order: a variable lies in regions end to end (the first
        at its first id) or in none, so they are found one from the next."""
        found, begin = [], first
        while begin < first + count and begin in self._repeats:
            ids, row = self._repeats[begin]
            found.append((begin, ids, row))
            begin += ids
        return found

    def _regions_under(self, layout: Strided, shape: Shape,
                       spans: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
        """The repeating regions of the variables ``spans`` (first id, ids) that hold some id
        of a strided view of them (of at least one element)."""
        low, high = id_extent(layout, shape)
        return [region for first, count in spans for region in self.regions(first, count)
                if region[0] <= high and low < region[0] + region[1]]

    def region_of_view(self, layout: Strided, shape: Shape, spans: list[tuple[int, int]]
                       ) -> tuple[int, int, int] | None:
        """The one repeating region ``(first id, ids, row length)`` holding every id of a strided
        view (of at least one element) of the variables ``spans`` (first id, ids), or None."""
        under = self._regions_under(layout, shape, spans)
        if len(under) != 1:
            return None
        first, ids, _ = under[0]
        low, high = id_extent(layout, shape)
        return under[0] if first <= low and high < first + ids else None

    def repeat_rows(self, start: int, count: int, row_tiles: np.ndarray,
                    span: tuple[int, int]) -> bool:
        """Let the ids ``[start, start + count)`` of the variable ``span`` (first id, ids) repeat
        ``row_tiles`` (one row) from now on, if they are whole rows of one repeating region of
        that row length: the region is cut in up to three, the part before and the part after
        keeping its row (a sequence's shards mapped one after another, each from one row's
        tiles, cost a row each).  False (nothing changed) otherwise."""
        row = len(row_tiles)
        region = next(((begin, ids, length) for begin, ids, length in self.regions(*span)
                       if begin <= start < begin + ids), None)
        if region is None or not count or count % row:
            return False
        begin, ids, length = region
        end = start + count
        if length != row or (start - begin) % row or end > begin + ids:
            return False
        self.writable()
        del self._repeats[begin]
        if end < begin + ids:  # the rows after keep the region's row: stored again there
            self.array[end:end + row] = self.array[begin:begin + row]
            self._repeats[end] = (begin + ids - end, row)
        if start > begin:
            self._repeats[begin] = (start - begin, row)
        self.array[start:start + row] = row_tiles
        self._repeats[start] = (count, row)
        self._bounds = None
        return True

    def expand(self, first: int, count: int) -> None:
        """Store every row of the repeating regions within ``[first, first + count)``: before a
        write to part of them."""
        for begin, ids, row in self.regions(first, count):
            self.writable()
            del self._repeats[begin]
            _prefault(self.array, begin + row, begin + ids)
            self.array[begin:begin + ids].reshape(-1, row)[1:] = self.array[begin:begin + row]
            self._bounds = None

    def forget_rows(self, first: int, count: int) -> None:
        """Stop repeating the regions within ``[first, first + count)``: before a write to all
        of them."""
        for begin, ids, _ in self.regions(first, count):
            self.writable()
            del self._repeats[begin]
            _prefault(self.array, begin, begin + ids)
            self._bounds = None

    def view(self, layout: Strided, shape: Shape, spans: list[tuple[int, int]], *,
             gather: bool = True) -> np.ndarray | None:
        """The tiles of a strided view of the variables ``spans`` (first id, ids), shaped like
        it (read-only): a view of the table where it can be — of ids in one repeating region,
        folded into its first row — else, for a view stepping whole rows through several regions
        (a sharded sequence), region by region, else gathered; None without ``gather`` where it
        is no view of the table."""
        regions = self._regions_under(layout, shape, spans) if math.prod(shape) else []
        if regions:
            folded = self._folded(layout, shape, regions[0]) if len(regions) == 1 else None
            if folded is None:
                if not gather:
                    return None
                tiles = self._by_regions(layout, shape, regions)
                if tiles is None:
                    tiles = self.gather(materialise(layout, shape))
                tiles.flags.writeable = False
                return tiles
            layout = folded
        tiles = strided_view(self.array, 0, layout, shape)
        tiles.flags.writeable = False
        return tiles

    def _by_regions(self, layout: Strided, shape: Shape, regions: list[tuple[int, int, int]]
                    ) -> np.ndarray | None:
        """The tiles of a strided view stepping whole rows through several repeating regions,
        piece by piece (:meth:`row_pieces`); None for any other view."""
        pieces = self._pieces(layout, shape, regions)
        if pieces is None:
            return None
        result = np.empty(shape, dtype=self.array.dtype)
        for start, count, tiles in pieces:
            result[start:start + count] = tiles
        return result

    def row_pieces(self, layout: Strided, shape: Shape, spans: list[tuple[int, int]]
                   ) -> list[tuple[int, int, np.ndarray]] | None:
        """A strided view of the variables ``spans`` (first id, ids) whose first dim steps whole
        rows through several repeating regions (a sharded sequence), cut along that dim where it
        crosses into the next region: ``(first row, rows, tiles)`` per piece, each piece's tiles
        a view folded into its region's first row (its rows repeat).  None for a view in one
        region or none, or any other view."""
        regions = self._regions_under(layout, shape, spans) if math.prod(shape) else []
        return self._pieces(layout, shape, regions) if len(regions) > 1 else None

    def _pieces(self, layout: Strided, shape: Shape, regions: list[tuple[int, int, int]]
                ) -> list[tuple[int, int, np.ndarray]] | None:
        if not shape or not regions or not layout.strides[0]:
            return None
        rows = {row for _, _, row in regions}
        row = rows.pop()
        if rows or layout.strides[0] % row:
            return None
        pieces = []
        step, start = layout.strides[0], 0
        while start < shape[0]:
            offset = layout.offset + start * step
            region = next(((first, ids) for first, ids, _ in regions
                           if first <= offset < first + ids), None)
            if region is None:  # ids stored as they are
                return None
            first, ids = region
            count = min(shape[0] - start, (first + ids - 1 - offset) // step + 1 if step > 0
                        else (offset - first) // -step + 1)
            piece_shape = (count, *shape[1:])
            folded = self._folded(Strided(offset, layout.strides), piece_shape, (first, ids, row))
            if folded is None:
                return None
            tiles = strided_view(self.array, 0, folded, piece_shape)
            tiles.flags.writeable = False
            pieces.append((start, count, tiles))
            start += count
        return pieces

    def _region_bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """First ids (sorted), ends and row lengths of the repeating regions."""
        if self._bounds is None:
            firsts = np.array(sorted(self._repeats), dtype=np.int64)
            self._bounds = (firsts, firsts + [self._repeats[f][0] for f in firsts.tolist()],
                            np.array([self._repeats[f][1] for f in firsts.tolist()], np.int64))
        return self._bounds

    def _folded(self, layout: Strided, shape: Shape, region: tuple[int, int, int]
                ) -> Strided | None:
        """``layout`` (its ids inside the repeating ``region``: first id, ids, row) moved into
        the region's first row, if no dim of it wraps around a row: a dim moving whole rows stays
        put."""
        first, ids, row = region
        low, high = id_extent(layout, shape)
        if low < first or high >= first + ids:
            return None
        start = (layout.offset - first) % row
        low = high = start
        strides = []
        for size, stride in zip(shape, layout.strides):
            within = stride % row
            if 2 * within > row:
                within -= row  # a backward step within a row
            strides.append(within)
            reach = (size - 1) * within
            low, high = (low + reach, high) if reach < 0 else (low, high + reach)
        if math.prod(shape) and (low < 0 or high >= row):
            return None
        return Strided(first + start, tuple(strides))

    def gather(self, ids: np.ndarray) -> np.ndarray:
        """The tile of each id of ``ids`` (any shape), an id of a repeating region read from
        the same place in its first row."""
        shape, ids = ids.shape, ids.reshape(-1)
        tiles = self.array[ids]
        if self._repeats and ids.size:
            firsts, ends, rows = self._region_bounds()
            low, high = int(ids.min()), int(ids.max())
            if not np.any((firsts + rows <= high) & (ends > low)):
                # no id past a region's first row (a weight's or a step's ids): the search of
                # every id against the regions, most of a big gather's time, finds nothing
                return tiles.reshape(shape)
            region = np.maximum(np.searchsorted(firsts, ids, side="right") - 1, 0)
            inside = (ids >= firsts[region]) & (ids < ends[region])
            if inside.any():
                at, ids_inside = region[inside], ids[inside]
                tiles[inside] = self.array[firsts[at] + (ids_inside - firsts[at]) % rows[at]]
        return tiles.reshape(shape)
