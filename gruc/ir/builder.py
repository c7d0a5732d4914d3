"""The graph side of reading a module: :class:`ModuleBuilder` turns already-decoded statements
(variables, constants, mappings, views, compute sets, vertices, functions, host streams) into a real
:class:`~gruc.ir.module.Module` through the graph's public API.

Why a module of its own: both readers share it — the text parser (:mod:`gruc.ir.parser`) and the
JSON loader (:mod:`gruc.ir.serialize`) — so a module read from either format obeys every rule a
built one does, and the two formats cannot drift apart in what they accept.  Every semantic error
is a :class:`~gruc.errors.GrucError` naming the offending value; the readers add the location.
"""

from __future__ import annotations

import math
from dataclasses import fields as dataclass_fields
from typing import Any

import numpy as np

from gruc.errors import GrucIndexError, GrucTypeError, GrucValueError
from gruc.ir.graph import ComputeSet, Function, Graph
from gruc.ir.layout import VIEW_OPS
from gruc.ir.mapping import UNMAPPED, TileMapping
from gruc.ir.module import Module
from gruc.ir.printer import MappingGroup, split_bounds
from gruc.ir.program import Program, Sequence
from gruc.ir.tensor import Tensor, Variable
from gruc.ir.vertices import VERTEX_KINDS
from gruc.target import Target
from gruc.types import ALL_TYPES, BOOL, DType

__all__ = ["ModuleBuilder", "MAX_ELEMENTS", "DTYPES", "groups_to_runs", "decode_scalars"]

MAX_ELEMENTS = 2 ** 31
"""Most elements a parsed module may hold in total, and one view may show (a guard against typos
in shapes: a mistyped broadcast count must fail here, not as a MemoryError in a later pass)."""
MAP_CHUNK = 1 << 20
"""Elements per ``set_tile_mapping`` call when the parser maps a large variable."""
DTYPES: dict[str, DType] = {t.short: t for t in ALL_TYPES}
INT_LIMIT = 2 ** 63


# ------------------------------------------------------------------------------ building
def is_tuple_field(f: Any) -> bool:
    return "tuple" in str(f.type)


def groups_to_runs(groups: list[MappingGroup], num_tiles: int,
                   num_elements: int) -> tuple[np.ndarray, np.ndarray]:
    """Run tiles and lengths from mapping groups, after checking them against the variable."""
    total = 0
    for group in groups:  # the JSON loader passes any int; numpy needs 64 bits
        if not all(-INT_LIMIT <= value < INT_LIMIT for value in group):
            raise GrucValueError(f"mapping group {list(group)} has a value out of range (at most "
                                 "63 bits)")
    for tile, step, count, elements, grain in groups:
        if count < 1 or grain < 1 or elements < 1:
            raise GrucValueError(f"mapping group (tile {tile}, {count} runs, {elements} elements, "
                                 f"grain {grain}) must have count, elements and grain >= 1")
        if tile == UNMAPPED:
            if count != 1:
                raise GrucValueError("an unmapped mapping group has exactly one run")
        else:
            last = tile + (count - 1) * step
            for t in (tile, last):
                if not 0 <= t < num_tiles:
                    raise GrucIndexError(f"mapping names tile {t}, which does not exist (allowed "
                                         f"0..{num_tiles - 1})")
        if elements != count * grain and count > -(-elements // grain):
            raise GrucValueError(f"cannot split {elements} elements in grains of {grain} over "
                                 f"{count} tiles: some tile would get none")
        total += elements
    if total != num_elements:
        raise GrucValueError(f"mapping covers {total} elements but the variable has {num_elements}")
    tiles, lengths = [], []
    for tile, step, count, elements, grain in groups:
        tiles.append(tile + np.arange(count, dtype=np.int64) * step)
        if elements == count * grain:
            lengths.append(np.full(count, grain, dtype=np.int64))
        else:
            lengths.append(np.diff(split_bounds(count, elements, grain)))
    if not tiles:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(tiles), np.concatenate(lengths)


def decode_scalars(items: list[tuple[Any, int]], dtype: DType, num_elements: int) -> np.ndarray:
    """A constant's flat values from ``(value, count)`` runs; values are Python bool/int/float."""
    counts = [c for _, c in items]
    if any(c < 1 for c in counts):
        raise GrucValueError("a repeat count of a constant value must be >= 1")
    if sum(counts) != num_elements:
        raise GrucValueError(f"constant has {sum(counts)} values but its shape holds "
                             f"{num_elements}")
    values = [v for v, _ in items]
    if dtype == BOOL:
        if not all(isinstance(v, bool) for v in values):
            raise GrucTypeError("a bool constant takes the values true and false")
        array = np.array(values, dtype=np.bool_)
    elif dtype.is_float:
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise GrucTypeError(f"a {dtype.name} constant takes numbers")
        wide = np.array([float(v) for v in values], dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            array = wide.astype(dtype.storage)
        bad = np.isfinite(wide) & ~np.isfinite(array)
        if bad.any():
            raise GrucValueError(f"constant value {float(wide[bad][0])!r} is out of the range of "
                                 f"{dtype.name}")
    else:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise GrucTypeError(f"a {dtype.name} constant takes integers")
        info = np.iinfo(dtype.storage)
        for v in values:
            if not info.min <= v <= info.max:
                raise GrucValueError(f"constant value {v} is out of the range of {dtype.name} "
                                     f"({info.min}..{info.max})")
        array = np.array(values, dtype=dtype.storage)
    return np.repeat(array, counts)


def _vertex_kind_known(kind: str) -> bool:
    """Whether ``kind`` is registered (every codelet family registers on ``gruc.ir`` import)."""
    return kind in VERTEX_KINDS


class ModuleBuilder:
    """Builds a module from decoded statements, by name; raises GrucError on a semantic error."""

    def __init__(self, target: Target) -> None:
        for key, value in target.model_dump().items():  # what the text header can spell
            if isinstance(value, int) and not -INT_LIMIT <= value < INT_LIMIT:
                raise GrucValueError(f"target {key}={value} is out of range (at most 63 bits)")
        self.graph = Graph(target)
        self.tensors: dict[str, Tensor] = {}
        self.compute_sets: dict[str, ComputeSet] = {}
        self.functions: dict[str, Function] = {}
        self.defined_functions: set[str] = set()
        self.elements = 0

    # tensors
    def _new_name(self, name: str) -> None:
        if name in self.tensors:
            raise GrucValueError(f"{name} is defined twice")

    def tensor(self, name: str) -> Tensor:
        if name not in self.tensors:
            raise GrucValueError(f"{name} is not defined (tensors must be defined before use)")
        return self.tensors[name]

    def variable(self, name: str, label: str, dtype: DType, shape: tuple[int, ...],
                 groups: list[MappingGroup], values: list[tuple[Any, int]] | None) -> Variable:
        """Define variable ``name`` (a constant when ``values`` are given), labelled ``label`` and
        mapped as ``groups`` say.  Its elements count toward :data:`MAX_ELEMENTS` before anything is
        allocated, so a mistyped shape fails here rather than as a MemoryError."""
        self._new_name(name)
        if any(n < 0 for n in shape):
            raise GrucValueError(f"shape {list(shape)} has a negative size")
        count = math.prod(shape)
        if self.elements + count > MAX_ELEMENTS:
            raise GrucValueError(f"the module would hold more than {MAX_ELEMENTS} elements")
        tiles, lengths = groups_to_runs(groups, self.graph.target.num_tiles, count)
        if values is None:
            var = self.graph.add_variable(dtype, shape, label)
        else:
            data = decode_scalars(values, dtype, count).reshape(shape)
            var = self.graph.add_constant(dtype, shape, data, label)
        var.name = label
        self.elements += count
        self._map(var, tiles, lengths)
        self.tensors[name] = var
        return var

    def _map(self, var: Variable, tiles: np.ndarray, lengths: np.ndarray) -> None:
        """Map ``var`` as the runs say, in slices of about MAP_CHUNK elements (unmapped runs are
        left alone): the graph expands a mapping per element, and small pieces keep that cheap."""
        mapped = tiles != UNMAPPED
        if not mapped.any():
            return
        ends = np.cumsum(lengths)
        begins = ends - lengths
        tiles = tiles.astype(np.int32)  # what the graph stores: half the bytes of int64 to expand
        flat = var if var.rank == 1 else var.reshape((var.num_elements,))
        edges = np.flatnonzero(np.diff(np.concatenate(([0], mapped.astype(np.int8), [0]))))
        for first, last in zip(edges[0::2].tolist(), edges[1::2].tolist()):
            cuts = np.searchsorted(ends[first:last], np.arange(
                int(begins[first]) + MAP_CHUNK, int(ends[last - 1]), MAP_CHUNK), side="left")
            bounds = sorted({first, last, *(first + cuts + 1).tolist()})
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                start, stop = int(begins[lo]), int(ends[hi - 1])
                mapping = TileMapping(begins[lo:hi] - start, ends[lo:hi] - start, tiles[lo:hi],
                                      stop - start)
                target = flat if (start, stop) == (0, var.num_elements) else flat.slice(start, stop)
                self.graph.set_tile_mapping(target, mapping)

    def view(self, name: str, keyword: str, sources: list[str], args: dict[str, Any],
             dtype: DType | None = None, shape: tuple[int, ...] | None = None) -> Tensor:
        """Define ``name`` as view ``keyword`` of ``sources``.  Arguments are type-checked here as
        the JSON loader passes whatever its document holds; ``dtype`` and ``shape`` (the type the
        text format writes beside a view) must be what the view gives."""
        self._new_name(name)
        if keyword not in VIEW_OPS:
            raise GrucValueError(f"unknown view op {keyword!r}; allowed: {', '.join(VIEW_OPS)}")
        cls = VIEW_OPS[keyword]
        tensors = [self.tensor(s) for s in sources]
        if not tensors or (cls.num_sources > 0 and len(tensors) != cls.num_sources):
            want = "at least 1" if cls.num_sources < 0 else str(cls.num_sources)
            raise GrucValueError(f"{keyword} takes {want} source tensor(s), got {len(tensors)}")
        names = [f.name for f in dataclass_fields(cls)]
        if sorted(args) != sorted(names):
            raise GrucValueError(f"{keyword} takes arguments {names}, got {sorted(args)}")
        for f in dataclass_fields(cls):  # the JSON loader passes whatever the document holds
            value = args[f.name]
            items = value if is_tuple_field(f) and isinstance(value, (list, tuple)) else [value]
            if (is_tuple_field(f) and items is not value) or not all(
                    isinstance(v, int) and not isinstance(v, bool) for v in items):
                want = "a list of integers" if is_tuple_field(f) else "an integer"
                raise GrucTypeError(f"{keyword} argument {f.name} must be {want}, got {value!r:.40}")
        op = cls(**{key: tuple(value) if isinstance(value, list) else value
                    for key, value in args.items()})
        view = Tensor.apply_view(op, tensors)
        if view.num_elements > MAX_ELEMENTS:  # a broadcast can grow past what any variable may
            raise GrucValueError(f"{keyword} gives {view.num_elements} elements; a view may hold "
                                 f"at most {MAX_ELEMENTS}")
        if dtype is not None and (view.dtype != dtype or view.shape != shape):
            raise GrucValueError(f"{keyword} gives {view.dtype.short}{list(view.shape)}, but the "
                                 f"text says {dtype.short}{list(shape or ())}")
        self.tensors[name] = view
        return view

    def host_stream(self, write: bool, stream: str, tensor: str) -> None:
        create = self.graph.create_host_write if write else self.graph.create_host_read
        create(stream, self.tensor(tensor))

    # compute sets and functions
    def compute_set(self, symbol: str, name: str) -> ComputeSet:
        if symbol in self.compute_sets or symbol in self.functions:
            raise GrucValueError(f"{symbol} is defined twice")
        cs = self.graph.add_compute_set(name)
        cs.name = name
        self.compute_sets[symbol] = cs
        return cs

    def vertex(self, cs: ComputeSet, kind: str, connected: dict[str, str | list[str]],
               params: dict[str, Any], tile: int | None) -> None:
        """Add a vertex of ``kind`` to ``cs``, its fields connected to tensors by name.  Parameters
        named ``compute_set``, ``kind``, ``fields`` or ``tile`` are refused: they would collide with
        ``Graph.add_vertex``'s own arguments."""
        if not _vertex_kind_known(kind):
            raise GrucValueError(f"unknown vertex kind {kind!r}; known kinds: "
                                 + ", ".join(sorted(VERTEX_KINDS)))
        fields = {key: [self.tensor(t) for t in value] if isinstance(value, list)
                  else self.tensor(value) for key, value in connected.items()}
        reserved = {"compute_set", "kind", "fields", "tile"} & set(params)
        if reserved:
            raise GrucValueError(f"vertex parameter name(s) {sorted(reserved)} are reserved")
        self.graph.add_vertex(cs, kind, fields, tile, **params)

    def declare_function(self, symbol: str, name: str) -> Function:
        if symbol in self.functions or symbol in self.compute_sets:
            raise GrucValueError(f"{symbol} is defined twice")
        function = self.graph.add_function(Sequence(), name)
        function.name = name
        self.functions[symbol] = function
        return function

    def function_of(self, symbol: str) -> Function:
        if symbol not in self.functions:
            raise GrucValueError(f"function {symbol} is not defined")
        return self.functions[symbol]

    def define_function(self, symbol: str, program: Program) -> None:
        function = self.function_of(symbol)
        if symbol in self.defined_functions:
            raise GrucValueError(f"function {symbol} is defined twice")
        self.defined_functions.add(symbol)
        function.program = program

    def finish(self, programs: list[Program]) -> Module:
        return Module(self.graph, programs)
