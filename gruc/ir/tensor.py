"""Tensors: variables and the views built over them.

A :class:`Variable` is storage the graph owns (it will get bytes on tiles); every other
:class:`Tensor` is a *view*: a primitive view operation (``gruc.ir.layout``) applied to one or more
source tensors.  Views alias elements and never copy, exactly as in Poplar, so writing through a
view writes the variable.  Each element of a graph has a global id; ``tensor.ids()`` gives the ids
a view stands for, computed from strided layouts without touching the rest of the variable.

Method names follow Poplar's ``Tensor`` API in snake_case (``dim_shuffle``, ``reshape_partial``,
``dim_roll``, ...); Python indexing (``t[i]``, ``t[i:j]``, ``t[i, :, ::2]``) follows numpy.
Tensors compare and hash by identity: two views of the same elements are still two values.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from gruc.errors import GrucIndexError, GrucShapeError, GrucTypeError, GrucValueError, expect
from gruc.ir.layout import (BroadcastOp, ConcatOp, DimShuffleOp, Layout, ReshapeOp, ReverseOp,
                            Shape, SliceOp, Strided, SubsampleOp, ViewOp, contiguous_start,
                            contiguous_strides, id_extent, materialise, strided_distinct)
from gruc.ir.mapping import distinct
from gruc.types import DType

if TYPE_CHECKING:
    from gruc.ir.graph import Graph


def as_int(value: object, what: str) -> int:
    """``value`` as a Python int; a float, a bool or a string is refused rather than truncated
    (``int(2.5)`` would silently make a size 2), naming ``what`` it was meant to be."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)):
        raise GrucTypeError(f"{what} must be an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise GrucTypeError(f"{what} must be an integer, got {value!r}") from None


def as_ints(values: object, what: str) -> tuple[int, ...]:
    """A sequence of integers (dims, permutations, bounds) as a tuple of Python ints."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise GrucTypeError(f"{what} {values!r} must be a sequence of integers")
    items = tuple(values)
    for item in items:
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
            raise GrucTypeError(f"{what} {list(items)!r} must be a sequence of integers; "
                                f"{item!r} is not one")
    return tuple(int(item) for item in items)


def _as_shape(shape: Iterable[int], what: str = "shape") -> Shape:
    result = as_ints(shape, what)
    for n in result:
        if n < 0:
            raise GrucShapeError(f"{what} {list(result)} has a negative size {n}; sizes must be >= 0")
    return result


class _Unknown:
    """The type of :data:`UNKNOWN`."""


UNKNOWN = _Unknown()
"""A cached answer not computed yet (where None is an answer)."""


class Tensor:
    """A view of graph elements with a shape and an element type."""

    __slots__ = ("graph", "shape", "dtype", "op", "sources", "_layout", "_start", "_variables",
                 "__weakref__")

    def __init__(self, graph: "Graph", shape: Shape, dtype: DType, op: ViewOp | None,
                 sources: tuple["Tensor", ...]) -> None:
        self.graph = graph
        self.shape = shape
        self.dtype = dtype
        self.op = op
        self.sources = sources
        self._layout: Layout | None = None
        self._start: int | None | _Unknown = UNKNOWN
        self._variables: tuple[Variable, ...] | None = None

    # ---- construction of views -------------------------------------------------------------
    @staticmethod
    def apply_view(op: ViewOp, sources: Sequence["Tensor"]) -> "Tensor":
        """The view ``op`` of ``sources`` (the one place views are made; the parser uses it too)."""
        for k, source in enumerate(sources):
            if not isinstance(source, Tensor):
                raise GrucTypeError(f"{op.keyword} operand {k} must be a gruc Tensor, got "
                                    f"{type(source).__name__}")
        first = sources[0]
        for other in sources[1:]:
            if other.graph is not first.graph:
                raise GrucValueError("cannot combine tensors of different graphs in one view")
            if other.dtype != first.dtype:
                raise GrucTypeError(f"cannot {op.keyword} tensors of types {first.dtype.name} and "
                                    f"{other.dtype.name}")
        shape = op.result_shape([s.shape for s in sources])
        return Tensor(first.graph, shape, first.dtype, op, tuple(sources))

    def view_over(self, sources: tuple["Tensor", ...]) -> "Tensor":
        """This view made again over ``sources``: copies of its sources, in a graph copied from
        this one (:mod:`gruc.ir.graph_copy`), that name the same element ids.  What the view has
        worked out about its ids (its layout, its first id) holds for the copy too, so it is
        kept rather than worked out again."""
        if self.op is None or len(sources) != len(self.sources):
            raise GrucValueError(f"view_over remakes a view over as many sources as it has; "
                                 f"got {self!r} over {len(sources)}")
        copy = Tensor.__new__(Tensor)  # every slot, as __init__ sets them, in one call less (a
        copy.graph, copy.sources = sources[0].graph, sources  # copy makes views by the ten
        copy.shape, copy.dtype, copy.op = self.shape, self.dtype, self.op  # thousand)
        copy._layout, copy._start, copy._variables = self._layout, self._start, None
        return copy

    def slice(self, begin: int | Sequence[int], end: int | Sequence[int], dim: int = 0) -> "Tensor":
        """Elements ``[begin, end)`` of dimension ``dim``; or, given sequences, of every dimension.
        A slice of a concatenation that lies in one of its parts is that part's slice: a sharded
        layer's shifted sequence is joined from a piece a shard, and each shard's loop slices its
        own rows — a view of one variable, whose ids and tiles are one stride pattern, not a
        walk of every piece's ids."""
        if isinstance(begin, Iterable) and isinstance(end, Iterable):
            op = SliceOp(as_ints(begin, "slice begin"), as_ints(end, "slice end"))
        else:
            begin, end = as_int(begin, "slice begin"), as_int(end, "slice end")
            self._check_dim(dim, "slice")
            op = SliceOp((0,) * dim + (begin,) + (0,) * (self.rank - dim - 1),
                         self.shape[:dim] + (end,) + self.shape[dim + 1:])
        part = self._part_holding(op)
        return part if part is not None else self.apply_view(op, [self])

    def _part_holding(self, op: SliceOp) -> "Tensor | None":
        """The slice ``op`` of this concatenation as a slice of the one part that holds all of
        it; None if this is no concatenation, the slice is empty or out of range (``apply_view``
        says so), or it takes elements of several parts."""
        if not isinstance(self.op, ConcatOp) or len(op.begin) != self.rank \
                or len(op.end) != self.rank \
                or not all(0 <= b < e <= size for b, e, size in zip(op.begin, op.end, self.shape)):
            return None
        dim, at = self.op.dim, 0
        for part in self.sources:
            if at <= op.begin[dim] and op.end[dim] <= at + part.shape[dim]:
                return part.slice(op.begin[:dim] + (op.begin[dim] - at,) + op.begin[dim + 1:],
                                  op.end[:dim] + (op.end[dim] - at,) + op.end[dim + 1:])
            at += part.shape[dim]
        return None

    def __getitem__(self, key) -> "Tensor":
        """numpy-style basic indexing: ints, slices (any step) and ``...`` are accepted."""
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is Ellipsis for k in key):
            count = sum(k is Ellipsis for k in key)
            expect(count == 1, GrucIndexError,
                   f"an index may hold one ... (Ellipsis); this one holds {count}")
            at = key.index(Ellipsis)
            fill = self.rank - (len(key) - 1)
            key = key[:at] + (slice(None),) * fill + key[at + 1:]
        if len(key) > self.rank:
            raise GrucIndexError(f"too many indices ({len(key)}) for a rank-{self.rank} tensor "
                                 f"of shape {list(self.shape)}")
        result: Tensor = self
        dim = 0
        for k in key:
            if isinstance(k, (bool, np.bool_)):  # numpy would add an axis, int() would pick a row
                raise GrucTypeError(f"index {k!r} is a bool; gruc indexes with ints, slices and "
                                    "...")
            if isinstance(k, (int, np.integer)):
                result = result._index(int(k), dim)
            elif isinstance(k, slice):
                result = result._python_slice(k, dim)
                dim += 1
            else:
                raise GrucTypeError(f"index {k!r} is not an int, a slice or ...")
        return result

    def _index(self, i: int, dim: int) -> "Tensor":
        size = self.shape[dim]
        if not -size <= i < size:
            raise GrucIndexError(f"index {i} is out of range for dimension {dim} of size {size} "
                                 f"(allowed {-size}..{size - 1})")
        i %= size
        return self.slice(i, i + 1, dim).squeeze([dim])

    def _python_slice(self, key: slice, dim: int) -> "Tensor":
        """``self[key]`` along ``dim`` for a Python slice, as numpy means it (negative steps,
        clipped bounds), built from the view primitives: a slice of the covered range, reversed for
        a negative step, subsampled for a step other than 1."""
        if key.step == 0:
            raise GrucValueError(f"slice step 0 on dimension {dim}: a step must be non-zero")
        try:
            start, stop, step = key.indices(self.shape[dim])
        except TypeError:
            raise GrucTypeError(f"slice {key!r} on dimension {dim} must have integer (or None) "
                                "start, stop and step") from None
        count = len(range(start, stop, step))
        if step > 0:
            result = self.slice(start, start + max(count - 1, 0) * step + (count > 0), dim)
        else:
            lowest = start + (count - 1) * step if count else 0
            result = self.slice(lowest, lowest + (start - lowest + 1 if count else 0), dim).reverse(dim)
        return result.subsample(abs(step), dim) if abs(step) != 1 else result

    def subsample(self, stride: int, dim: int) -> "Tensor":
        """Every ``stride``-th element of ``dim`` (Poplar ``subSample``)."""
        return self.apply_view(SubsampleOp(as_int(stride, "subsample stride"),
                                           as_int(dim, "subsample dim")), [self])

    def reverse(self, dim: int) -> "Tensor":
        """Dimension ``dim`` in reverse order."""
        return self.apply_view(ReverseOp(as_int(dim, "reverse dim")), [self])

    def reshape(self, shape: Iterable[int]) -> "Tensor":
        """Same elements in row-major order with a new shape."""
        return self.apply_view(ReshapeOp(_as_shape(shape)), [self])

    def reshape_partial(self, begin: int, end: int, new_dims: Iterable[int]) -> "Tensor":
        """Reshape only dimensions ``[begin, end)`` into ``new_dims``."""
        begin, end = as_int(begin, "reshape_partial begin"), as_int(end, "reshape_partial end")
        if not 0 <= begin <= end <= self.rank:
            raise GrucIndexError(f"reshape_partial range [{begin}, {end}) is out of range for rank "
                                 f"{self.rank} (allowed 0 <= begin <= end <= {self.rank})")
        return self.reshape(self.shape[:begin] + _as_shape(new_dims) + self.shape[end:])

    def flatten(self, begin: int | None = None, end: int | None = None) -> "Tensor":
        """All dimensions as one (no arguments), or dimensions ``[begin, end)`` as one."""
        if begin is None and end is None:
            return self.reshape((self.num_elements,))
        begin = 0 if begin is None else as_int(begin, "flatten begin")
        end = self.rank if end is None else as_int(end, "flatten end")
        if not 0 <= begin < end <= self.rank:
            raise GrucIndexError(f"flatten range [{begin}, {end}) is out of range for rank "
                                 f"{self.rank} (allowed 0 <= begin < end <= {self.rank})")
        return self.reshape_partial(begin, end, [math.prod(self.shape[begin:end])])

    def expand(self, dims: Iterable[int]) -> "Tensor":
        """Insert a singleton dimension before each dimension ``dims`` names, as Poplar's
        ``Tensor::expand``: indices are of *this* tensor's dimensions (``rank`` means after the
        last) and may repeat, one singleton per mention.  ``t[4,6].expand([0, 2])`` is
        ``[1,4,6,1]``; ``expand([1, 1])`` is ``[4,1,1,6]``."""
        dims = as_ints(dims, "expand positions")
        bad = [d for d in dims if not 0 <= d <= self.rank]
        if bad:
            raise GrucIndexError(f"expand position {bad[0]} is outside 0..{self.rank} (the "
                                 f"dimensions of {list(self.shape)}, before which singletons go)")
        shape: list[int] = []
        for d in range(self.rank + 1):
            shape += [1] * dims.count(d) + list(self.shape[d:d + 1])
        return self.reshape(shape)

    def squeeze(self, dims: Iterable[int] | None = None) -> "Tensor":
        """Remove singleton dimensions ``dims`` (all singleton dimensions if None)."""
        if dims is None:
            dims = [d for d, n in enumerate(self.shape) if n == 1]
        dims = sorted(set(as_ints(dims, "squeeze dims")))
        for d in dims:
            self._check_dim(d, "squeeze")
            if self.shape[d] != 1:
                raise GrucShapeError(f"cannot squeeze dimension {d} of shape {list(self.shape)}: "
                                     f"its size is {self.shape[d]}, not 1")
        return self.reshape([n for d, n in enumerate(self.shape) if d not in dims])

    def broadcast(self, times: int, dim: int) -> "Tensor":
        """The tensor repeated ``times`` times along ``dim`` (a singleton dim is stretched)."""
        return self.apply_view(BroadcastOp(as_int(times, "broadcast count"),
                                           as_int(dim, "broadcast dim")), [self])

    def broadcast_to(self, shape: Iterable[int]) -> "Tensor":
        """numpy broadcasting to ``shape``: leading dims added, singleton dims stretched."""
        shape = _as_shape(shape)
        if len(shape) < self.rank:
            raise GrucShapeError(f"cannot broadcast shape {list(self.shape)} to {list(shape)}")
        result = self.reshape((1,) * (len(shape) - self.rank) + self.shape) \
            if len(shape) > self.rank else self
        for d, (have, want) in enumerate(zip(result.shape, shape)):
            if have == want:
                continue
            if have != 1:
                raise GrucShapeError(f"cannot broadcast shape {list(self.shape)} to {list(shape)}: "
                                     f"dimension {d} is {have}, not 1 or {want}")
            result = result.broadcast(want, d)
        return result

    def dim_shuffle(self, perm: Iterable[int]) -> "Tensor":
        """Permute dimensions: result dim ``k`` is this tensor's dim ``perm[k]``."""
        return self.apply_view(DimShuffleOp(as_ints(perm, "dim_shuffle permutation")), [self])

    def transpose(self) -> "Tensor":
        """Swap the two dimensions of a matrix (Poplar ``transpose`` is defined for rank 2 only)."""
        if self.rank != 2:
            raise GrucShapeError(f"transpose needs a rank-2 tensor, got shape {list(self.shape)}; "
                                 "use dim_shuffle for other ranks")
        return self.dim_shuffle((1, 0))

    def dim_roll(self, dim: int, new_position: int) -> "Tensor":
        """Move dimension ``dim`` to ``new_position``, keeping the others in order (``moveaxis``)."""
        self._check_dim(dim, "dim_roll")
        self._check_dim(new_position, "dim_roll")
        order = [d for d in range(self.rank) if d != dim]
        order.insert(new_position, dim)
        return self.dim_shuffle(order)

    def append(self, other: "Tensor", dim: int) -> "Tensor":
        """``other`` (one rank lower) appended as a new last element along ``dim`` (Poplar)."""
        if not isinstance(other, Tensor):
            raise GrucTypeError(f"append needs a gruc Tensor, got {type(other).__name__}")
        return concat([self, other.expand([dim])], dim)

    # ---- structure -------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    def dim(self, i: int) -> int:
        self._check_dim(i, "dim")
        return self.shape[i]

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def element_type(self) -> DType:
        return self.dtype

    @property
    def nbytes(self) -> int:
        return self.num_elements * self.dtype.size

    @property
    def is_variable(self) -> bool:
        return self.op is None

    def layout(self) -> Layout:
        """Strided or dense ids of this view (cached; views are immutable)."""
        if self._layout is None:
            layouts = [s.layout() for s in self.sources]
            self._layout = self.op.apply(layouts, [s.shape for s in self.sources], self.shape)
        return self._layout

    def ids_would_join(self) -> bool:
        """Whether working out this view's ids would join tensors' ids: a concatenation, or a
        chain of views of one, none worked out yet.  The view keeps what it works out (a
        training layer's joined weights: 8 bytes an element), so a caller that needs its ids
        or tiles once can make them from the sources instead (:meth:`passing_ids`,
        ``Graph.element_tile_view``)."""
        tensor = self
        while tensor.op is not None and tensor._layout is None:
            if isinstance(tensor.op, ConcatOp):
                return True
            tensor = tensor.sources[0]
        return False

    def passing_ids(self) -> np.ndarray:
        """Global element ids, shaped like the tensor, without keeping them where they would
        join tensors (:meth:`ids_would_join`): made from the sources' each time."""
        if not self.ids_would_join():
            return self.ids()
        return materialise(self.op.apply([source.passing_ids() for source in self.sources],
                                         [source.shape for source in self.sources], self.shape),
                           self.shape)

    def ids(self) -> np.ndarray:
        """Global element ids, shaped like the tensor."""
        return materialise(self.layout(), self.shape)

    def flat_ids(self) -> np.ndarray:
        return self.ids().reshape(-1)

    def contiguous_start(self) -> int | None:
        """First global id if the view is one run of consecutive ids (row-major), else None
        (cached: every analysis of a step asks it of the same operands)."""
        if self._start is UNKNOWN:
            self._start = contiguous_start(self.layout(), self.shape)
        return self._start

    def has_repeats(self) -> bool:
        """Whether some element appears twice (a broadcast or overlapping view).  Decided from the
        layout where it tells (one run of ids; strides, :func:`~gruc.ir.layout.strided_distinct`)
        and, for a concatenation whose parts are non-overlapping slices of tensors without
        repeats (a dynamic slice's per-tile column pick) or parts without repeats, no two
        groups sharing an id range (a product's joined operands: :func:`_parts_apart`),
        without listing the concatenation's ids.  A view
        that names each element of its source at most once (a slice, reshape, ...) of a source
        without repeats has none (a wide layer's column pick is a reshape of strided runs)."""
        if isinstance(self.op, _ONE_TO_ONE) and not self.sources[0].has_repeats():
            return False
        if isinstance(self.op, ConcatOp) and _parts_apart(self.sources):
            return False
        if self.contiguous_start() is not None:
            return False
        layout = self.layout()
        if isinstance(layout, Strided):
            return not strided_distinct(layout, self.shape)
        return len(distinct(layout.reshape(-1))) != layout.size

    def variables(self) -> list["Variable"]:
        """The variables this view reads from, in first-use order, without repeats (cached, and
        made from the sources' answers: views of one variable share most of their sources)."""
        return list(self._variable_tuple())

    def _variable_tuple(self) -> tuple["Variable", ...]:
        """The memoised answer behind :meth:`variables`: a view of one source shares its source's
        tuple, so a chain of views over one variable holds one tuple."""
        if self._variables is None:
            if len(self.sources) == 1:
                self._variables = self.sources[0]._variable_tuple()
            else:
                seen: dict[int, Variable] = {}
                for source in self.sources:
                    for variable in source._variable_tuple():
                        seen.setdefault(id(variable), variable)
                self._variables = tuple(seen.values())
        return self._variables

    def _check_dim(self, dim: int, what: str) -> None:
        dim = as_int(dim, f"{what} dimension")
        if not 0 <= dim < self.rank:
            raise GrucIndexError(f"{what}: dimension {dim} is out of range for shape "
                                 f"{list(self.shape)} (allowed 0..{self.rank - 1})")

    def __array__(self, *args, **kwargs):
        raise GrucTypeError("a gruc Tensor lives on the simulated device; read it with "
                            "engine.read_tensor(name) after graph.create_host_read(name, tensor)")

    def __iter__(self):
        raise GrucTypeError("iterate over a Tensor by index: t[i] for i in range(t.dim(0))")

    def _no_arithmetic(self, *args):
        """A Tensor is a graph value, not an array: operators would have to add compute sets to
        some program, so there are none, and the error says where arithmetic is."""
        raise GrucTypeError("a gruc Tensor has no arithmetic or comparison operators; build them "
                            "into a program: gruc.ops.add(graph, a, b, prog), or gruc.ops.map("
                            "graph, _1 + _2, [a, b], prog) for any expression")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_arithmetic
    __truediv__ = __rtruediv__ = __neg__ = __pow__ = __matmul__ = _no_arithmetic
    __lt__ = __le__ = __gt__ = __ge__ = _no_arithmetic

    def __len__(self) -> int:
        raise GrucTypeError("a Tensor's size is t.dim(0) (or t.shape, t.num_elements)")

    def __bool__(self) -> bool:
        """Every tensor is true, as every Python object is (``name or t``, ``if t:`` tests for a
        tensor, not its values): without this, truth would ask :meth:`__len__`."""
        return True

    def __repr__(self) -> str:
        what = "var" if self.op is None else self.op.keyword
        return f"<Tensor {what} {self.dtype}{list(self.shape)}>"


class Variable(Tensor):
    """Storage of the graph: a run of consecutive global element ids."""

    __slots__ = ("name", "index", "first_id", "constant")

    def __init__(self, graph: "Graph", shape: Shape, dtype: DType, name: str, index: int,
                 first_id: int, constant: np.ndarray | None = None) -> None:
        super().__init__(graph, shape, dtype, None, ())
        self.name = name
        self.index = index
        """Position in ``graph.variables``: how analyses name the variable."""
        self.first_id = first_id
        self.constant = constant
        self._layout = Strided(first_id, contiguous_strides(shape))
        self._start = first_id
        self._variables = (self,)

    @property
    def is_constant(self) -> bool:
        return self.constant is not None

    def __repr__(self) -> str:
        kind = "const" if self.is_constant else "var"
        return f"<{kind} {self.name!r} {self.dtype}{list(self.shape)}>"


MAX_COMPARED_SLICES = 16
"""Concatenations of more slices than this are checked by their ids (pairs grow quadratically)."""


def require_writable(tensor: Tensor, what: str) -> None:
    """Refuse ``what`` writing ``tensor`` when no write could mean one thing: a constant (programs
    may have been built on its value) or a view naming an element twice (a broadcast: which
    write would win?).  Said at the call, not later by the verifier about an internal step."""
    constant = next((v.name for v in tensor.variables() if v.is_constant), None)
    expect(constant is None, GrucValueError,
           f"{what} cannot write into constant {constant!r}; constants are read-only")
    if tensor.has_repeats():  # names joined only then: this runs for every write an op makes
        names = ", ".join(repr(v.name) for v in tensor.variables())
        raise GrucValueError(f"{what} cannot write into a view that holds some elements more "
                             f"than once (a broadcast or overlapping view of {names}); write the "
                             "underlying tensor")


def share_elements(a: Tensor, b: Tensor) -> bool:
    """Do ``a`` and ``b`` share an element?  Decided from their variables or id ranges when they
    tell (most operand pairs are views of different variables, or single runs), from the element
    ids otherwise — which, for the [B, H] tensors of a large batch, is a sort of millions."""
    if not {id(v) for v in a.variables()} & {id(v) for v in b.variables()}:
        return False
    if not a.num_elements or not b.num_elements:
        return False
    start_a, start_b = a.contiguous_start(), b.contiguous_start()
    if start_a is not None and start_b is not None:
        return start_a < start_b + b.num_elements and start_b < start_a + a.num_elements
    return bool(np.intersect1d(a.flat_ids(), b.flat_ids()).size)


_ONE_TO_ONE = (SliceOp, SubsampleOp, ReverseOp, ReshapeOp, DimShuffleOp)
"""View ops that name each element of their source at most once."""


def _parts_apart(parts: Sequence[Tensor]) -> bool:
    """Whether a concatenation's ``parts`` name no element twice, told without listing its ids:
    the parts that are slices of one tensor (a product's joined gate weights: two gates sliced
    from one variable, the third from another) are :func:`_disjoint_slices_of` it, a tensor
    without repeats; every other part has none; and no two such groups share an id range
    (:func:`_id_spans`: the input and recurrent weights are two row ranges of one variable)."""
    groups: dict[int, list[Tensor]] = {}
    for part in parts:
        boxes = _slice_boxes(part)
        groups.setdefault(id(boxes[0]) if boxes is not None else id(part), []).append(part)
    spans = []
    for group in groups.values():
        whole = group[0] if len(group) == 1 else _disjoint_slices_of(group)
        if whole is None or whole.has_repeats():
            return False
        spans.extend(_merged(sorted(span for part in group for span in _id_spans(part))))
    spans.sort()  # a group's spans are apart: any overlap now is between two groups
    return all(low > high for (_, high), (low, _) in zip(spans, spans[1:]))


def _id_spans(tensor: Tensor) -> list[tuple[int, int]]:
    """Id ranges ``(lowest, highest)`` holding every element of ``tensor`` (and maybe others),
    worked out without its layout: a variable's, a slice of a variable's from its corners, a
    concatenation's parts', any other view's its source's (a view names its sources' ids)."""
    if not tensor.num_elements:
        return []
    if tensor.op is None or isinstance(tensor.op, SliceOp) and tensor.sources[0].op is None:
        return [id_extent(tensor.layout(), tensor.shape)]  # strided: no ids listed
    return [span for source in tensor.sources for span in _id_spans(source)]


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted id ranges with the ones that overlap joined."""
    joined: list[tuple[int, int]] = []
    for low, high in spans:
        if joined and low <= joined[-1][1]:
            joined[-1] = (joined[-1][0], max(joined[-1][1], high))
        else:
            joined.append((low, high))
    return joined


def _disjoint_slices_of(parts: Sequence[Tensor]) -> Tensor | None:
    """The tensor ``parts`` are slices of, if they are slices of one tensor (or runs of its
    columns, :func:`strided_columns`: a box a run) and no two overlap; else None.  Slices that
    differ in one dimension only (a dynamic slice's per-tile pick of column runs: dozens of them)
    are compared in order along it; others box by box, when few."""
    found = [_slice_boxes(part) for part in parts]
    source = found[0][0] if found[0] is not None else None
    if source is None or any(part is None or part[0] is not source for part in found):
        return None
    boxes = [box for _, part_boxes in found for box in part_boxes]
    varying = [d for d in range(source.rank) if len({(b[d], e[d]) for b, e in boxes}) > 1]
    if len(varying) <= 1:
        d = varying[0] if varying else 0
        ranges = sorted((b[d], e[d]) for b, e in boxes)
        apart = all(end <= begin for (_, end), (begin, _) in zip(ranges, ranges[1:]))
        return source if apart else None
    if len(parts) > MAX_COMPARED_SLICES:
        return None
    for k, (begin, end) in enumerate(boxes):
        for other_begin, other_end in boxes[:k]:
            if all(b < other_e and other_b < e for b, e, other_b, other_e in
                   zip(begin, end, other_begin, other_end)):
                return None
    return source


def _slice_boxes(part: Tensor) -> tuple[Tensor, list[tuple[tuple[int, ...], tuple[int, ...]]]
                                       ] | None:
    """The tensor ``part`` is a slice of (through slices of slices: a weight's gate of a
    layer's joined gates), or runs of the columns of, and the boxes it takes of it (one a run);
    None for any other view."""
    spaced = strided_columns_of(part)
    if spaced is not None:
        view, begin, length, stride, count = spaced
        rows = tuple(view.shape[:-1])
        return view, [((*(0,) * len(rows), begin + k * stride),
                       (*rows, begin + k * stride + length)) for k in range(count)]
    if not isinstance(part.op, SliceOp):
        return None
    begin, end = part.op.begin, part.op.end
    source = part.sources[0]
    while isinstance(source.op, SliceOp):  # a slice of a slice: the same box of the outer one
        begin = tuple(b + outer for b, outer in zip(begin, source.op.begin))
        end = tuple(e + outer for e, outer in zip(end, source.op.begin))
        source = source.sources[0]
    return source, [(begin, end)]


def strided_columns(view: Tensor, begin: int, length: int, stride: int, count: int) -> Tensor:
    """Columns ``begin + k * stride + j`` (``k < count``, ``j < length``) of ``view``'s last dim,
    in that order, as one view: the span of columns, split into ``[count, stride]`` and cut to
    the first ``length``.  A dynamic slice's pick of a sequence's columns on one tile is a grain
    of every batch row — dozens of runs a row apart — and a concatenation takes a view a run.
    :func:`strided_columns_of` recognises the result, for analyses that cut runs from ``view``'s."""
    rows, last = list(view.shape[:-1]), view.rank - 1
    span = view.slice(begin, begin + count * stride, last)
    split = span.reshape(rows + [count, stride])
    return split.slice(0, length, last + 1).reshape(rows + [count * length])


def strided_columns_of(tensor: Tensor) -> tuple[Tensor, int, int, int, int] | None:
    """``(view, begin, length, stride, count)`` if ``tensor`` is :func:`strided_columns` of
    ``view``, else None."""
    cut = tensor.sources[0] if isinstance(tensor.op, ReshapeOp) else None
    split = cut.sources[0] if cut is not None and isinstance(cut.op, SliceOp) else None
    span = split.sources[0] if split is not None and isinstance(split.op, ReshapeOp) else None
    if span is None or not isinstance(span.op, SliceOp) or cut.rank != tensor.rank + 1:
        return None
    view, rows = span.sources[0], tensor.shape[:-1]
    count, stride = split.shape[-2:]
    length = cut.shape[-1]
    begin = span.op.begin[-1]
    if (view.shape[:-1] != rows or split.shape[:-2] != rows
            or cut.op.begin != (0,) * cut.rank or cut.op.end != (*rows, count, length)
            or span.op.begin != (*(0,) * len(rows), begin)
            or span.op.end != (*rows, begin + count * stride)):
        return None
    return view, begin, length, stride, count


def joined_parts(tensor: Tensor) -> Iterator[Tensor]:
    """The views ``tensor`` concatenates (itself if it is no concatenation), each seen through
    any reshape (which names the same elements): between them they name its elements, in order
    of the concatenation (not of ``tensor``'s elements), each usually strided or a whole
    variable — a dynamic slice's per-tile column pick joins column slices, a weight update its
    gradients — so an analysis can read each in place instead of listing ``tensor``'s ids."""
    if isinstance(tensor.op, ConcatOp):
        for source in tensor.sources:
            yield from joined_parts(source)
    elif isinstance(tensor.op, ReshapeOp):
        yield from joined_parts(tensor.sources[0])
    else:
        yield tensor


def concat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along ``dim`` (a view; nothing is copied)."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, Iterable):
        raise GrucTypeError(f"concat needs a list of tensors, got {type(tensors).__name__}")
    tensors = list(tensors)
    if not tensors:
        raise GrucValueError("concat needs at least one tensor")
    if len(tensors) == 1:
        if not isinstance(tensors[0], Tensor):
            raise GrucTypeError(f"concat operand 0 must be a gruc Tensor, got "
                                f"{type(tensors[0]).__name__}")
        return tensors[0]
    return Tensor.apply_view(ConcatOp(as_int(dim, "concat dim")), tensors)
