"""The Graph: variables, constants, tile mappings, compute sets, vertices, functions, host streams.

A :class:`Graph` is built for one :class:`~gruc.target.Target` and changes only through its
methods, which check their arguments and say what was wrong.  Tile mappings are kept in a
:class:`~gruc.ir.tile_table.TileTable` indexed by global element id, so mapping any view — a
slice of a million-element tensor, a transpose, a concatenation of several variables — is one
numpy gather or strided view and a run-length compression (``get_tile_mapping``); a sequence laid
out alike at every step is stored as one step (a sharded one as one step a shard), which tells
checks, copy elimination and the memory plan that its rows are alike (``rows_alike``,
``row_stretches``), so they never read a long sequence's tiles row after row.  The graph also
remembers which variables were mapped whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from gruc.errors import (GrucIndexError, GrucMappingError, GrucShapeError, GrucTypeError,
                         GrucValueError, expect)
from gruc.ir.layout import Strided
from gruc.ir.mapping import UNMAPPED, TileMapping, consecutive_runs, linear_partition
from gruc.ir.program import Program, check_sequence
from gruc.ir.tensor import Tensor, Variable, _as_shape, as_int, require_writable
from gruc.ir.tile_table import MAX_ELEMENTS, TileTable, repeats_its_rows
from gruc.ir.vertices import Direction, VertexKind, vertex_kind
from gruc.target import Target
from gruc.types import DType, dtype_of

FieldValue = Tensor | tuple[Tensor, ...]


@dataclass(eq=False)
class Vertex:
    """One codelet instance: a kind, its connected fields, parameters and (maybe) a tile."""

    kind: VertexKind
    fields: dict[str, FieldValue]
    params: dict[str, Any]
    tile: int | None

    def tensors(self, direction: Direction | None = None) -> list[tuple[str, Tensor]]:
        """``(field name, tensor)`` pairs, vector fields expanded as ``name[k]``."""
        result = []
        for name, value in self.fields.items():
            if direction is not None and self.kind.fields[name].direction is not direction:
                continue
            if isinstance(value, tuple):
                result.extend((f"{name}[{k}]", t) for k, t in enumerate(value))
            else:
                result.append((name, value))
        return result


@dataclass(eq=False)
class ComputeSet:
    """Vertices that run together in one BSP superstep."""

    name: str
    vertices: list[Vertex] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"<ComputeSet {self.name!r} with {len(self.vertices)} vertices>"


@dataclass(eq=False)
class Function:
    """A program stored once in the graph and run by ``Call`` (Poplar ``addFunction``)."""

    name: str
    program: Program


_COMPARED_AT_ONCE = 1 << 16


def _equal_by_chunks(first: np.ndarray, second: np.ndarray) -> bool:
    """``array_equal`` that stops at the first block of rows that differs: a layer's user-mapped
    sequence (tens of millions of elements) is compared with the layer's own layout, which
    usually differs in its first row already.  Views are compared as they are (one whose rows
    repeat is never expanded)."""
    if first.shape != second.shape:
        return bool(np.array_equal(first.reshape(-1), second.reshape(-1)))
    if first.ndim == 0:
        return bool(first == second)
    step = max(1, _COMPARED_AT_ONCE // max(1, first[:1].size))
    return all(np.array_equal(first[begin:begin + step], second[begin:begin + step])
               for begin in range(0, len(first), step))


def _spans(tensor: Tensor) -> list[tuple[int, int]]:
    """``(first id, ids)`` of each variable a view reads."""
    return [(variable.first_id, variable.num_elements) for variable in tensor.variables()]


def _same_pieces(first: list[tuple[int, int, np.ndarray]],
                 second: list[tuple[int, int, np.ndarray]]) -> bool:
    """Whether two views cut in pieces of rows alike (``TileTable.row_pieces``) have the same
    tiles: one row compared for every stretch of rows where both pieces run."""
    cuts = sorted({start for start, _, _ in first + second}
                  | {start + count for start, count, _ in first + second})
    at = [0, 0]
    for begin, end in zip(cuts, cuts[1:]):
        rows = []
        for k, pieces in enumerate((first, second)):
            while pieces[at[k]][0] + pieces[at[k]][1] <= begin:
                at[k] += 1
            start, _, tiles = pieces[at[k]]
            rows.append(tiles[begin - start])
        if end > begin and not np.array_equal(*rows):
            return False
    return True


def check_op_args(graph: object, prog: object, what: str) -> None:
    """The graph and program every op builder takes, checked before the op adds anything, so a
    swapped or missing argument is named instead of failing deep inside the builder."""
    if not isinstance(graph, Graph):
        raise GrucTypeError(f"{what} needs a gruc Graph, got {type(graph).__name__}")
    check_sequence(prog, what)


def to_storage(values: np.ndarray, dtype: DType, what: str) -> np.ndarray:
    """``values`` (a numeric array) as stored for ``dtype``.  Floats are rounded as the device
    would; for an integer or bool ``dtype`` a value the cast would change (a fraction, NaN, a
    number out of range) is refused, naming ``what`` it was for, rather than stored wrapped."""
    if dtype.is_float:
        with np.errstate(over="ignore"):  # beyond half's range is inf, as on the device
            return values.astype(dtype.storage)
    with np.errstate(invalid="ignore", over="ignore"):
        stored = values.astype(dtype.storage)
        exact = stored.astype(np.float64) == values.astype(np.float64)
    if not np.all(exact):
        bad = values.reshape(-1)[int(np.argmin(exact.reshape(-1)))]
        raise GrucValueError(f"{what}: value {bad.item()!r} is not representable as {dtype.name}")
    return stored


def _require_one_tile_per_element(view: Tensor, ids: np.ndarray, tiles: np.ndarray) -> None:
    """A view naming an element twice (a broadcast) may map it only to one tile."""
    order = np.argsort(ids, kind="stable")
    same = ids[order][1:] == ids[order][:-1]
    clash = same & (tiles[order][1:] != tiles[order][:-1])
    if clash.any():
        at = int(np.flatnonzero(clash)[0])
        element = int(ids[order][at])
        variable = next(v for v in view.variables()
                        if v.first_id <= element < v.first_id + v.num_elements)
        raise GrucMappingError(f"set_tile_mapping maps element {element - variable.first_id} of "
                               f"{variable.name!r} to tiles {int(tiles[order][at])} and "
                               f"{int(tiles[order][at + 1])}: the view holds it more than once, "
                               "and an element lives on one tile")


class Graph:
    """A dataflow graph for one target (Poplar ``Graph``)."""

    def __init__(self, target: Target | None = None) -> None:
        if target is None:
            target = Target.ipu2()
        if not isinstance(target, Target):
            raise GrucTypeError(f"Graph target must be a gruc.Target, got {type(target).__name__}")
        self.target = target
        self.variables: list[Variable] = []
        self.compute_sets: list[ComputeSet] = []
        self.functions: list[Function] = []
        self.host_writes: dict[str, Tensor] = {}
        self.host_reads: dict[str, Tensor] = {}
        self._table = TileTable()
        self._variable_starts = np.zeros(0, dtype=np.int64)
        self._mapped_whole: set[int] = set()
        """Variables every element of which has a tile (mapping only adds tiles: never undone)."""
        self.effects_memo: dict[int, tuple] = {}
        """The effects of program steps over this graph, shared by every
        :class:`~gruc.ir.effects.EffectTable` of it (analyses ask about the same steps often)."""

    # ---- variables --------------------------------------------------------------------------
    def add_variable(self, dtype: DType | str, shape: Iterable[int], name: str = "") -> Variable:
        """A new, unmapped variable (map it before compiling)."""
        return self._new_variable(dtype_of(dtype), _as_shape(shape), name, None)

    def add_constant(self, dtype: DType | str, shape: Iterable[int], value: Any,
                     name: str = "") -> Variable:
        """A constant; ``value`` is a scalar or array broadcastable to ``shape``."""
        dtype = dtype_of(dtype)
        shape = _as_shape(shape)
        self._check_room(shape, name)  # before its values are made
        array = np.asarray(value) if value is not None else np.asarray([], dtype=object)
        if array.dtype.kind not in "biuf":
            raise GrucTypeError(f"constant value {value!r} must be numbers (a scalar or an array "
                                f"of bool, int or float), got numpy dtype {array.dtype}")
        stored = to_storage(array, dtype, "constant")
        try:
            data = np.broadcast_to(stored, shape).copy()
        except ValueError:
            raise GrucShapeError(f"constant value of shape {list(np.shape(value))} cannot be "
                                 f"broadcast to shape {list(shape)}") from None
        data.flags.writeable = False
        return self._new_variable(dtype, shape, name, data)

    def clone(self, tensor: Tensor, name: str = "") -> Variable:
        """A new variable shaped, typed and mapped like ``tensor`` (Poplar ``clone``)."""
        tensor = self._own(tensor)
        copy = self.add_variable(tensor.dtype, tensor.shape, name)
        if self.rows_alike(tensor) and self._table.repeating_row(copy.first_id):  # one row
            self._write_rows(copy, self.element_tile_view(tensor[0]))
        else:
            self._table.forget_rows(copy.first_id, copy.num_elements)
            copy_tiles = self._table.writable()[copy.first_id:copy.first_id + copy.num_elements]
            copy_tiles.reshape(tensor.shape)[...] = self.element_tile_view(tensor)  # no ids
        if self.is_fully_mapped(tensor):
            self._mapped_whole.add(copy.index)
        return copy

    def _check_room(self, shape: tuple[int, ...], name: Any) -> int:
        """The element count of a new variable of ``shape``, refused past the graph's limit."""
        count = math.prod(shape)
        if self._table.size + count > MAX_ELEMENTS:
            raise GrucValueError(f"variable {name!r} of shape {list(shape)} ({count} elements) "
                                 f"would give the graph {self._table.size + count} elements; a "
                                 f"graph holds at most {MAX_ELEMENTS} "
                                 f"(2^{MAX_ELEMENTS.bit_length() - 1})")
        return count

    def _new_variable(self, dtype: DType, shape: tuple[int, ...], name: str,
                      constant: np.ndarray | None) -> Variable:
        """A new variable owning the next run of element ids.  A variable of several rows takes them
        as a repeating region of the tile table (one row stored until part of it is mapped), so a
        sequence laid out alike at every step costs one row."""
        if not isinstance(name, str):
            raise GrucTypeError(f"tensor name must be a string, got {name!r}")
        count = self._check_room(shape, name)
        row = count // shape[0] if len(shape) > 1 and shape[0] > 1 else count  # (rows: stored once
        first = self._table.add(count, row)  # until written in part)
        var = Variable(self, shape, dtype, name or f"v{len(self.variables)}", len(self.variables),
                       first, constant)
        self.variables.append(var)
        return var

    def variable_of_id(self, ids: np.ndarray) -> np.ndarray:
        """Index into ``self.variables`` of each global id."""
        if len(self._variable_starts) != len(self.variables):
            self._variable_starts = np.array([v.first_id for v in self.variables], dtype=np.int64)
        return np.searchsorted(self._variable_starts, ids, side="right") - 1

    # ---- tile mapping -----------------------------------------------------------------------
    def _own(self, tensor: Tensor) -> Tensor:
        if not isinstance(tensor, Tensor):
            raise GrucTypeError(f"expected a gruc Tensor, got {type(tensor).__name__}")
        if tensor.graph is not self:
            raise GrucValueError(f"{tensor!r} belongs to another graph")
        return tensor

    def _check_tiles(self, tiles: np.ndarray, what: str) -> None:
        if len(tiles) and (tiles.min() < 0 or tiles.max() >= self.target.num_tiles):
            self._check_tile(int(tiles.min() if tiles.min() < 0 else tiles.max()), what)

    def _check_tile(self, tile: int, what: str) -> None:
        if not 0 <= tile < self.target.num_tiles:
            raise GrucIndexError(f"{what}: tile {tile} does not exist on {self.target.describe()} "
                                 f"(allowed 0..{self.target.num_tiles - 1})")

    def set_tile_mapping(self, tensor: Tensor,
                         mapping: int | np.ndarray | TileMapping | list[list[tuple[int, int]]]
                         ) -> None:
        """Map every element of ``tensor`` (any view) to one tile, or as ``mapping`` says.

        ``mapping`` is a tile number; an integer array broadcastable to the tensor's shape, the
        tile of each element (a row's tiles for a tensor whose rows are all laid out alike, as
        sequences are: nothing per element is made but the mapping itself); a
        :class:`TileMapping` over the tensor's flattened elements; or Poplar's form: one list of
        ``(begin, end)`` intervals per tile.
        """
        count = self._own(tensor).num_elements
        if isinstance(mapping, np.ndarray):
            self._set_element_tiles(tensor, mapping)
            return
        if isinstance(mapping, (int, np.integer)) and not isinstance(mapping, (bool, np.bool_)):
            tiles = int(mapping)
            if count:
                self._check_tile(tiles, "set_tile_mapping")
        else:
            if not isinstance(mapping, TileMapping):
                mapping = TileMapping.from_per_tile(mapping, count)
            expect(mapping.num_elements == count, GrucMappingError,
                   f"mapping covers {mapping.num_elements} elements but the tensor has {count}")
            lengths = mapping.ends - mapping.begins
            run_tiles = mapping.tiles[lengths > 0]  # the tiles the elements get
            if np.any(run_tiles == UNMAPPED):
                unmapped = int(lengths[mapping.tiles == UNMAPPED].sum())
                raise GrucMappingError(f"mapping leaves {unmapped} of {count} elements unmapped")
            self._check_tiles(run_tiles, "set_tile_mapping")
            tiles = np.repeat(mapping.tiles.astype(np.int32), lengths).reshape(tensor.shape)
        self._write(tensor, tiles, isinstance(tiles, int))

    def _set_element_tiles(self, tensor: Tensor, tiles: np.ndarray) -> None:
        """``set_tile_mapping`` with the tile of each element, broadcast over ``tensor``."""
        expect(tiles.dtype.kind in "iu", GrucTypeError,
               f"a tile mapping array must hold integers (tile numbers), got dtype {tiles.dtype}")
        try:
            fits = np.broadcast_shapes(tiles.shape, tensor.shape) == tensor.shape
        except ValueError:
            fits = False
        expect(fits, GrucShapeError, f"tile mapping array of shape {list(tiles.shape)} cannot "
                                     f"be broadcast to the tensor's shape {list(tensor.shape)}")
        if tensor.num_elements:
            self._check_tiles(tiles.reshape(-1), "set_tile_mapping")
        self._write(tensor, tiles, tiles.ndim < tensor.rank or bool(tiles.ndim)
                    and tiles.shape[0] == 1)

    def _write(self, tensor: Tensor, tiles: int | np.ndarray, rows_alike: bool) -> None:
        """Map every element of ``tensor`` to ``tiles`` (a tile, or tiles broadcast to its shape;
        ``rows_alike`` if that gives every row of ``tensor`` the same tiles): into the table
        without listing ids where they are consecutive, and as one row where the table stores
        the variable so."""
        start = tensor.contiguous_start()
        whole = self._whole_variable(tensor, start)
        if rows_alike and whole is not None and tensor.shape == self.variables[whole].shape \
                and self._table.repeating_row(start, tensor.num_elements) is not None:
            self._write_rows(tensor, np.broadcast_to(tiles, tensor.shape)[0])  # one row, once
        elif rows_alike and self._rows_of_one_variable(tensor, start) and self._table.repeat_rows(
                start, tensor.num_elements, np.broadcast_to(tiles, tensor.shape)[0].reshape(-1),
                _spans(tensor)[0]):
            pass  # whole rows of a repeating variable (a shard of a sequence): they repeat a row
        else:
            self._before_write(tensor, whole)
            if start is None:
                ids, flat = tensor.flat_ids(), np.broadcast_to(tiles, tensor.shape).reshape(-1)
                if not isinstance(tiles, int) and tensor.has_repeats():
                    _require_one_tile_per_element(tensor, ids, flat)
                self._table.writable()[ids] = flat
            else:  # broadcast straight into the table
                table = self._table.writable()
                table[start:start + tensor.num_elements].reshape(tensor.shape)[...] = tiles
        if whole is not None:
            self._mapped_whole.add(whole)

    def _write_rows(self, variable: Tensor, row_tiles: np.ndarray) -> None:
        """Store ``row_tiles`` (one row's tiles) as every row of ``variable``, a variable whose
        table stores one row for all."""
        first = variable.contiguous_start()
        row = self._table.repeating_row(first)
        self._table.writable()[first:first + row] = row_tiles.reshape(-1)

    def _before_write(self, tensor: Tensor, whole: int | None) -> None:
        """Make the table store every tile a write of all of ``tensor``'s elements touches: the
        variable it is whole (index ``whole``) stops repeating rows; one covered in part stores
        every row first (what the write leaves alone must keep its tiles)."""
        for variable in tensor.variables():
            if variable.index == whole:
                self._table.forget_rows(variable.first_id, variable.num_elements)
            else:
                self._table.expand(variable.first_id, variable.num_elements)

    def _rows_of_one_variable(self, tensor: Tensor, start: int | None) -> bool:
        """Whether ``tensor`` is whole consecutive rows of one variable (``variable[a:b]``)."""
        variables = tensor.variables()
        if start is None or len(variables) != 1 or variables[0].rank < 2 or tensor.rank < 2 \
                or not tensor.num_elements:
            return False
        variable = variables[0]
        return tensor.shape[1:] == variable.shape[1:] \
            and (start - variable.first_id) % (variable.num_elements // variable.shape[0]) == 0

    @staticmethod
    def _whole_variable(tensor: Tensor, start: int | None) -> int | None:
        """The index of the variable ``tensor`` is, element for element in order (its ids
        consecutive from ``start``), or None."""
        variables = tensor.variables()
        if len(variables) != 1 or start != variables[0].first_id \
                or tensor.num_elements != variables[0].num_elements:
            return None
        return variables[0].index

    def rows_alike(self, tensor: Tensor) -> bool:
        """Whether every row of ``tensor`` (index of its first dim) is known to have its first
        row's tiles: its ids lie in one region of rows the table stores as one row — a variable
        unmapped, mapped whole from one row's tiles (a sequence laid out alike at every step, as
        ``set_tile_mapping`` with a row's tile array maps it) or onto one tile, or cloned from
        such a view, or a range of its rows mapped so (a sequence's shard), and no part of it
        mapped anew since — and ``tensor`` is a strided view whose rows are whole rows apart.  A
        one-element variable's views have rows alike too.  False says only "not known"."""
        variables = self._own(tensor).variables()
        if len(variables) != 1:
            return False
        variable = variables[0]
        if not self._table.regions(variable.first_id, variable.num_elements):
            return variable.num_elements <= 1  # (every row: its one element)
        layout = tensor.layout()
        if not isinstance(layout, Strided) or tensor.rank == 0:
            return False
        region = self._table.region_of_view(layout, tensor.shape, _spans(tensor)) \
            if tensor.num_elements else None
        return region is not None and layout.strides[0] % region[2] == 0

    def row_stretches(self, variable: Variable) -> list[tuple[int, np.ndarray, int]]:
        """``(first id, tiles of its first row, rows)`` per stretch of ``variable``'s rows that
        the table stores as one row (all of it, or each range of rows mapped from one row's
        tiles: a sequence's shards), in order; empty if it stores every row."""
        table = self._table
        return [(first, table.gather(np.arange(first, first + row)), count // row)
                for first, count, row in table.regions(variable.first_id,
                                                       variable.num_elements)]

    def get_tile_mapping(self, tensor: Tensor) -> TileMapping:
        """Which tile holds each element of ``tensor``, as runs over its flattened elements (and,
        as Poplar gives it, one list of intervals per tile: ``mapping[tile]``)."""
        runs = TileMapping.from_element_tiles(self.element_tiles(tensor))
        return replace(runs, num_tiles=self.target.num_tiles)

    def element_tiles(self, tensor: Tensor) -> np.ndarray:
        """The tile of every element of ``tensor`` (flattened; ``-1`` where unmapped)."""
        return self.element_tile_view(tensor).reshape(-1)

    def element_tile_view(self, tensor: Tensor, *, gather: bool = True) -> np.ndarray | None:
        """The tile of every element of ``tensor``, shaped like it: where the view is strided, a
        read-only view of the tile table where it can be (nothing copied: a check over a long
        sequence's views reads each tile once), else gathered by the view's ids — or, without
        ``gather``, None (a caller that only wants it if it costs nothing).  A view whose ids
        would join tensors (``Tensor.ids_would_join``) is its view op applied to its sources'
        tiles instead: the ids would stay with the view."""
        self._own(tensor)
        if gather and tensor.ids_would_join():
            tiles = [self.element_tile_view(source) for source in tensor.sources]
            return np.asarray(tensor.op.apply(tiles, [s.shape for s in tensor.sources],
                                              tensor.shape))
        layout = tensor.layout()
        if isinstance(layout, Strided):
            return self._table.view(layout, tensor.shape, _spans(tensor), gather=gather)
        return self._table.gather(layout) if gather else None

    def element_tiles_of_ids(self, ids: np.ndarray) -> np.ndarray:
        """The tile of each global element id."""
        return self._table.gather(np.asarray(ids))

    def row_pieces(self, tensor: Tensor) -> list[tuple[int, int, np.ndarray]] | None:
        """``(first row, rows, tiles)`` per stretch of a view's rows that have one row's tiles
        (a sharded sequence: a stretch a shard; one laid out alike at every step: one), each
        piece's tiles a read-only view whose rows repeat; None where not known so."""
        layout = tensor.layout()
        if not isinstance(layout, Strided) or tensor.rank < 2 or not tensor.num_elements:
            return None
        pieces = self._table.row_pieces(layout, tensor.shape, _spans(tensor))
        if pieces is not None:
            return pieces
        tiles = self._table.view(layout, tensor.shape, _spans(tensor), gather=False)
        return [(0, len(tiles), tiles)] if tiles is not None and repeats_its_rows(tiles) \
            else None

    def pieces_of_one(self, first: Tensor, second: Tensor, pieces: list | None = None
                      ) -> list[tuple[int, int, np.ndarray]] | None:
        """The :meth:`row_pieces` of whichever of two views of one shape is a sharded sequence
        (two pieces or more) when the other is not (a linearly mapped gradient copied into one),
        so the pair can be read a piece of rows at a time, neither expanded; else None.
        ``pieces``: the two views' row pieces, if already asked."""
        if first.shape != second.shape:
            return None
        pieces = pieces or [self.row_pieces(t) for t in (first, second)]
        if (pieces[0] is None) == (pieces[1] is None):
            return None
        known = pieces[0] if pieces[0] is not None else pieces[1]
        return known if len(known) > 1 else None

    def same_tiles(self, first: Tensor, second: Tensor) -> bool:
        """Whether two views of as many elements have them on the same tiles, element by element
        (flattened): two sequences the table stores as one step each compare first rows, two
        sharded ones first rows shard by shard."""
        pieces = [self.row_pieces(t) if t.shape == first.shape else None
                  for t in (first, second)]
        if pieces[0] is not None and pieces[1] is not None and len(pieces[0] + pieces[1]) > 2:
            return _same_pieces(*pieces)
        known = self.pieces_of_one(first, second, pieces)
        if known is not None:  # the other's rows compared with each piece's row
            tiles = self.element_tile_view(second if known is pieces[0] else first)
            return all(_equal_by_chunks(tiles[start:start + count], piece)
                       for start, count, piece in known)
        tiles, other = self.element_tile_view(first), self.element_tile_view(second)
        if tiles.shape == other.shape and repeats_its_rows(tiles) and repeats_its_rows(other):
            tiles, other = tiles[0], other[0]
        return _equal_by_chunks(tiles, other)

    def is_fully_mapped(self, tensor: Tensor) -> bool:
        """Whether every element of ``tensor`` has a tile: known without reading its tiles when
        its variables were each mapped (or found mapped) whole, or are stored a row a stretch
        (a sharded sequence: its stretches' rows are read)."""
        variables = self._own(tensor).variables()
        for variable in variables:
            if variable.index not in self._mapped_whole:
                stretches = self.row_stretches(variable)
                if stretches and all(np.all(tiles != UNMAPPED) for _, tiles, _ in stretches):
                    self._mapped_whole.add(variable.index)
        if all(variable.index in self._mapped_whole for variable in variables):
            return True
        mapped = bool(np.all(self.element_tiles(tensor) != UNMAPPED))
        whole = self._whole_variable(tensor, tensor.contiguous_start())
        if mapped and whole is not None:
            self._mapped_whole.add(whole)
        return mapped

    def map_tensor_linearly(self, tensor: Tensor, min_elements_per_tile: int | None = None,
                            grain_size: int | None = None) -> None:
        """Spread ``tensor``'s flattened elements evenly over tiles 0, 1, ... (poplibs' rule).

        Defaults: grain = the target's vector width for the type; at least
        ``target.min_bytes_per_tile`` (128) bytes on each tile used.
        """
        dtype = self._own(tensor).dtype
        if grain_size is None:
            grain_size = self.target.vector_width(dtype)
        if min_elements_per_tile is None:
            min_elements_per_tile = -(-self.target.min_bytes_per_tile // dtype.size)
        grain_size = as_int(grain_size, "map_tensor_linearly grain_size")
        min_elements_per_tile = as_int(min_elements_per_tile,
                                       "map_tensor_linearly min_elements_per_tile")
        expect(grain_size >= 1, GrucValueError, f"grain_size {grain_size} must be >= 1")
        expect(min_elements_per_tile >= 0, GrucValueError,
               f"min_elements_per_tile {min_elements_per_tile} must be >= 0")
        bounds = linear_partition(tensor.num_elements, self.target.num_tiles, grain_size,
                                  min_elements_per_tile)
        start = tensor.contiguous_start()
        whole = self._whole_variable(tensor, start)
        self._before_write(tensor, whole)
        if start is None:
            tiles = np.repeat(np.arange(len(bounds) - 1, dtype=np.int32), np.diff(bounds))
            self._table.writable()[tensor.flat_ids()] = tiles
        else:
            table = self._table.writable()
            for tile, (begin, end) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
                table[start + begin:start + end] = tile
        if whole is not None:
            self._mapped_whole.add(whole)

    def detect_innermost_grouping(self, tensor: Tensor) -> int:
        """poplibs' ``detectInnermostGrouping``: how many innermost elements stay together.

        Looks at the first innermost row: the length of its leading contiguous run (consecutive
        ids of one variable: Poplar's ``isContiguous``), and the longest run of it on one tile;
        the grouping is their gcd, or 1 if that does not divide the row.
        """
        tensor = self._own(tensor)
        expect(tensor.rank > 0, GrucValueError, "cannot detect the grouping of a rank-0 tensor")
        if tensor.num_elements == 0:
            return 1
        row = tensor
        while row.rank > 1:
            row = row[0]
        ids = row.flat_ids()
        begins, ends = consecutive_runs(ids)
        owner = self.variables[int(self.variable_of_id(ids[:1])[0])]
        contiguous_prefix = min(int(ends[0] - begins[0]),
                                owner.first_id + owner.num_elements - int(ids[0]))
        mapping = TileMapping.from_element_tiles(self._table.gather(ids))
        longest_on_tile = int(np.max(mapping.ends - mapping.begins))
        grouping = math.gcd(longest_on_tile, contiguous_prefix)
        return grouping if len(ids) % grouping == 0 else 1

    def contiguous_regions(self, tensor: Tensor) -> list[tuple[int, int]]:
        """Runs of ``tensor``'s flattened elements that are consecutive in one variable."""
        ids = self._own(tensor).flat_ids()
        begins, ends = consecutive_runs(ids)
        variables = self.variable_of_id(ids[begins]) if len(ids) else begins
        last = self.variable_of_id(ids[ends - 1]) if len(ids) else ends
        result = []
        for b, e, v0, v1 in zip(begins.tolist(), ends.tolist(), variables.tolist(), last.tolist()):
            if v0 == v1:
                result.append((b, e))
            else:  # a run of ids that crosses from one variable into the next is two regions
                boundary = self.variables[v1].first_id - int(ids[b])
                result.extend([(b, b + boundary), (b + boundary, e)])
        return result

    # ---- compute ----------------------------------------------------------------------------
    def add_compute_set(self, name: str = "") -> ComputeSet:
        if not isinstance(name, str):
            raise GrucTypeError(f"compute set name must be a string, got {name!r}")
        cs = ComputeSet(name or f"cs{len(self.compute_sets)}")
        self.compute_sets.append(cs)
        return cs

    def add_vertex(self, compute_set: ComputeSet, kind: str | VertexKind,
                   fields: Mapping[str, FieldValue], tile: int | None = None,
                   **params: Any) -> Vertex:
        """Add a vertex of ``kind`` to ``compute_set`` with its fields connected.

        Without a ``tile`` the kind must be elementwise: the vertex then runs on every tile that
        holds elements of its split field.
        """
        if not isinstance(compute_set, ComputeSet) or compute_set not in self.compute_sets:
            raise GrucValueError("add_vertex needs a compute set of this graph")
        kind = vertex_kind(kind) if isinstance(kind, str) else kind
        if not isinstance(kind, VertexKind):
            raise GrucTypeError(f"vertex kind must be a kind name or a VertexKind, got {kind!r}")
        if not isinstance(fields, Mapping):
            raise GrucTypeError(f"vertex {kind.name} fields must be a dict of field name to "
                                f"tensor, got {type(fields).__name__}")
        connected: dict[str, FieldValue] = {}
        for name, spec in kind.fields.items():
            if name not in fields:
                expect(spec.optional, GrucValueError,
                       f"vertex {kind.name} needs field {name!r}; fields: {', '.join(kind.fields)}")
                continue
            value = fields[name]
            if spec.vector:
                expect(isinstance(value, (tuple, list)), GrucTypeError,
                       f"vertex {kind.name} field {name!r} is a vector field: give a list of "
                       "tensors")
                connected[name] = tuple(self._own(t) for t in value)
            else:
                connected[name] = self._own(value)
        # (conditions first, messages only on failure: vertices are added by the thousand)
        unknown = set(fields) - set(kind.fields)
        if unknown:
            raise GrucValueError(f"vertex {kind.name} has no field(s) {sorted(unknown)}; "
                                 f"fields: {', '.join(kind.fields)}")
        if any(p not in params for p in kind.params) or any(p not in kind.params for p in params):
            raise GrucValueError(f"vertex {kind.name} takes parameters {list(kind.params)}; "
                                 f"got {sorted(params)}")
        if tile is None:
            expect(kind.split is not None, GrucValueError,
                   f"vertex {kind.name} is not elementwise: give it a tile")
        else:
            tile = as_int(tile, f"vertex {kind.name} tile")
            self._check_tile(tile, f"vertex {kind.name}")
        vertex = Vertex(kind, connected, dict(params), None if tile is None else int(tile))
        if kind.check is not None:
            kind.check(vertex)
        compute_set.vertices.append(vertex)
        return vertex

    def add_function(self, program: Program, name: str = "") -> Function:
        """Store ``program`` once for ``Call`` from many places (code reuse)."""
        if not isinstance(program, Program):
            raise GrucTypeError(f"add_function needs a Program, got {type(program).__name__}")
        function = Function(name or f"f{len(self.functions)}", program)
        self.functions.append(function)
        return function

    # ---- copies -----------------------------------------------------------------------------
    def copy_frame(self) -> "Graph":
        """An empty graph for the same target over this graph's element ids and tiles (the tile
        table shared until either graph writes to it), for :mod:`gruc.ir.graph_copy` to fill
        with what a module keeps."""
        frame = Graph(self.target)
        frame._table = self._table.shared()
        return frame

    def adopt_variable(self, variable: Variable) -> Variable:
        """This graph's copy of ``variable`` of the graph it was framed from (:meth:`copy_frame`):
        the same name, type, shape, value and element ids — so the same tiles, and a tensor of
        either graph names the same elements of both — at the next index.  Variables are
        adopted in their order in the source graph (ids increasing), as ids are looked up."""
        last = self.variables[-1] if self.variables else None
        expect(isinstance(variable, Variable) and variable.graph is not self
               and variable.first_id + variable.num_elements <= self._table.size
               and (last is None or variable.first_id >= last.first_id + last.num_elements),
               GrucValueError, f"adopt_variable takes the variables of the graph this one was "
                               f"framed from, in their order; got {variable!r}")
        adopted = Variable(self, variable.shape, variable.dtype, variable.name,
                           len(self.variables), variable.first_id, variable.constant)
        self.variables.append(adopted)
        if variable.index in variable.graph._mapped_whole:
            self._mapped_whole.add(adopted.index)
        return adopted

    # ---- host streams -----------------------------------------------------------------------
    def create_host_write(self, name: str, tensor: Tensor) -> None:
        """Let the host write ``tensor`` by ``name`` (``engine.write_tensor``); not a constant,
        whose value programs may have been built on (no program may write one either)."""
        self._stream(self.host_writes, name, tensor, "host write")

    def create_host_read(self, name: str, tensor: Tensor) -> None:
        """Let the host read ``tensor`` by ``name`` (``engine.read_tensor``)."""
        self._stream(self.host_reads, name, tensor, "host read")

    def _stream(self, table: dict[str, Tensor], name: str, tensor: Tensor, what: str) -> None:
        """File ``tensor`` under a new ``name`` in a host stream ``table``.  A host write is refused
        where no write could mean one thing (a constant, a broadcast view), at the call rather than
        later."""
        expect(isinstance(name, str) and bool(name), GrucTypeError if not isinstance(name, str)
               else GrucValueError,
               f"{what} name must be a non-empty string, got {name!r}")
        expect(name not in table, GrucValueError, f"{what} {name!r} already exists")
        owned = self._own(tensor)
        if table is self.host_writes:
            require_writable(owned, f"host write {name!r}")
        table[name] = owned

    def __repr__(self) -> str:
        return (f"<Graph {self.target.describe()}: {len(self.variables)} variables, "
                f"{len(self.compute_sets)} compute sets>")
