"""Index algebra behind tensor views.

A view never copies: it is a recipe that says, for each of its elements, which element of which
variable it stands for.  Every element of a graph has a *global id* (each variable owns a run of
consecutive ids), so the answer for a whole view is an int64 array of ids shaped like the view.

Most views (slices, transposes, reversals, broadcasts of singleton dims and most reshapes) are
*strided*: ``id = offset + sum(i_k * stride_k)``.  Keeping that form lets a slice of a huge
variable be described in O(rank) work and materialised in O(slice size), never O(variable size) —
what keeps tile-mapping queries fast on an ipu2 with tensors of millions of elements.  Views that
break the strided form (concatenations, repeats of non-singleton dims, incompatible reshapes) fall
back to a dense id array, computed with numpy from their sources.

The view operations are the primitives of the text IR; each is a frozen dataclass with the shape
rule, the index rule and its printed parameters.
"""

from __future__ import annotations

import functools

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import ClassVar, Union

import numpy as np

from gruc.errors import GrucIndexError, GrucShapeError, GrucTypeError, GrucValueError
from gruc.ir.mapping import distinct

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Strided:
    """Ids of a view as ``offset + sum(index_k * strides_k)``."""

    offset: int
    strides: tuple[int, ...]


Layout = Union[Strided, np.ndarray]


def contiguous_strides(shape: Shape) -> tuple[int, ...]:
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def contiguous_start(layout: Layout, shape: Shape) -> int | None:
    """The first id if the layout is one run of consecutive ids in row-major order, else None."""
    if not isinstance(layout, Strided):
        return None
    expected = contiguous_strides(shape)
    if all(n == 1 or s == e for n, s, e in zip(shape, layout.strides, expected)):
        return layout.offset
    return None


def same_ids(first: Layout, first_shape: Shape, second: Layout, second_shape: Shape) -> bool:
    """Whether two views name the same ids in the same row-major order; two strided views of one
    shape are compared by offset and strides, without listing their ids."""
    if math.prod(first_shape) != math.prod(second_shape):
        return False
    if isinstance(first, Strided) and isinstance(second, Strided) and first_shape == second_shape:
        return math.prod(first_shape) == 0 or (first.offset == second.offset and all(
            n == 1 or a == b for n, a, b in zip(first_shape, first.strides, second.strides)))
    return bool(np.array_equal(materialise(first, first_shape).reshape(-1),
                               materialise(second, second_shape).reshape(-1)))


def materialise(layout: Layout, shape: Shape) -> np.ndarray:
    """The int64 id array of a layout, shaped ``shape``."""
    if isinstance(layout, np.ndarray):
        return layout
    start = contiguous_start(layout, shape)
    if start is not None:
        return np.arange(start, start + math.prod(shape), dtype=np.int64).reshape(shape)
    ids = np.array(layout.offset, dtype=np.int64)
    for size, stride in zip(shape, layout.strides):
        ids = ids[..., None] + np.arange(size, dtype=np.int64) * stride
    return ids.reshape(shape)


def strided_view(array: np.ndarray, first_id: int, layout: Strided, shape: Shape) -> np.ndarray:
    """A numpy view of ``array`` (indexed by ``id - first_id``) at the ids of a strided layout:
    reading it gathers and assigning to it scatters without materialising an id array (8 bytes
    an element — for the views over long sequence tensors, hundreds of megabytes).  Every id of
    the layout indexes ``array`` (the caller's contract), so the view, negative strides
    included, stays inside its buffer; ``shape`` with a zero yields an empty view.  Over a
    contiguous ``array`` the view is made by the ``ndarray`` constructor, which checks it stays
    in the buffer and costs a tenth of ``as_strided`` (analyses make one per operand)."""
    if math.prod(shape) == 0:
        return array[:0].reshape(shape)
    strides = tuple(stride * array.itemsize for stride in layout.strides)
    if array.flags.c_contiguous:
        return np.ndarray(shape, array.dtype, array, (layout.offset - first_id) * array.itemsize,
                          strides)
    return np.lib.stride_tricks.as_strided(array[layout.offset - first_id:], shape=shape,
                                           strides=strides)


def id_extent(layout: Strided, shape: Shape) -> tuple[int, int]:
    """The lowest and highest id of a strided layout of at least one element (negative strides
    reach down): the range of ids a view can touch, found without listing them."""
    low = high = layout.offset
    for size, stride in zip(shape, layout.strides):
        reach = (size - 1) * stride
        low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    return low, high


def strided_distinct(layout: Strided, shape: Shape) -> bool:
    """Whether a strided layout names distinct ids, decided without listing them when it can:
    true if, with its dims ordered by ``|stride|``, each stride exceeds the farthest reach of
    the smaller dims (a mixed-radix numbering: what slices, transposes and reversals of a
    variable always are); otherwise by counting the distinct ids (a broadcast repeats)."""
    reach = 0
    for size, stride in sorted(((n, abs(s)) for n, s in zip(shape, layout.strides) if n > 1),
                               key=lambda dim: dim[1]):
        if stride <= reach:
            break
        reach += stride * (size - 1)
    else:
        return True
    ids = materialise(layout, shape).reshape(-1)
    return len(distinct(ids)) == len(ids)


def _reshape_strided(layout: Strided, old: Shape, new: Shape) -> Strided | None:
    """Strides for ``new`` if the reshape needs no copy (numpy's rule), else None."""
    old_dims = [(n, s) for n, s in zip(old, layout.strides) if n != 1]
    if math.prod(new) == 0:
        return Strided(layout.offset, contiguous_strides(new))
    new_strides = [0] * len(new)
    oi = ni = 0
    new_idx = [k for k, n in enumerate(new) if n != 1]
    new_sizes = [new[k] for k in new_idx]
    while oi < len(old_dims) and ni < len(new_sizes):
        oj, nj = oi + 1, ni + 1
        old_prod, new_prod = old_dims[oi][0], new_sizes[ni]
        while old_prod != new_prod:
            if old_prod < new_prod:
                old_prod *= old_dims[oj][0]
                oj += 1
            else:
                new_prod *= new_sizes[nj]
                nj += 1
        for k in range(oi, oj - 1):
            if old_dims[k][1] != old_dims[k + 1][0] * old_dims[k + 1][1]:
                return None
        stride = old_dims[oj - 1][1]
        for k in range(nj - 1, ni - 1, -1):
            new_strides[new_idx[k]] = stride
            stride *= new_sizes[k]
        oi, ni = oj, nj
    return Strided(layout.offset, tuple(new_strides))


@functools.cache
def _parameters(kind: type) -> tuple[tuple[str, bool], ...]:
    """``(name, is a tuple)`` of each parameter of a view kind (views are made by the
    thousands: the dataclass introspection is done once per kind)."""
    return tuple((item.name, str(item.type).startswith("tuple")) for item in fields(kind))


@dataclass(frozen=True, slots=True)
class ViewOp(ABC):
    """A primitive view: a shape rule and an index rule over its sources' layouts."""

    keyword: ClassVar[str] = ""
    num_sources: ClassVar[int] = 1

    def __post_init__(self) -> None:
        """Every parameter of a view is an integer or a tuple of integers.  Checked here because
        views are also built from text and JSON IR, where a parameter can be anything: a wrong
        one must be a GrucTypeError naming it, not a TypeError deep in the shape rule."""
        for name, wants_tuple in _parameters(type(self)):
            value = getattr(self, name)
            if type(value) is (tuple if wants_tuple else int) and (
                    not wants_tuple or all(type(v) is int for v in value)):
                continue  # the common case, decided without the generic checks below
            parts = value if wants_tuple and isinstance(value, tuple) else (value,)
            if (wants_tuple and not isinstance(value, tuple)) or not all(
                    isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                    for v in parts):
                kind = "a tuple of integers" if wants_tuple else "an integer"
                raise GrucTypeError(f"{self.keyword} {name} must be {kind}, got {value!r}")

    @abstractmethod
    def result_shape(self, shapes: list[Shape]) -> Shape:
        """The view's shape, or a GrucError if the sources cannot take this view."""

    @abstractmethod
    def apply(self, layouts: list[Layout], shapes: list[Shape], out: Shape) -> Layout:
        """The view's layout from its sources' layouts."""


def _check_dim(dim: int, rank: int, what: str) -> None:
    if not 0 <= dim < rank:
        raise GrucIndexError(f"{what}: dimension {dim} is out of range for a rank-{rank} tensor "
                             f"(allowed 0..{rank - 1})")


@dataclass(frozen=True, slots=True)
class SliceOp(ViewOp):
    """``[begin_k, end_k)`` along every dimension (Poplar ``slice``)."""

    keyword: ClassVar[str] = "slice"
    begin: tuple[int, ...]
    end: tuple[int, ...]

    def result_shape(self, shapes: list[Shape]) -> Shape:
        (shape,) = shapes
        if len(self.begin) != len(shape) or len(self.end) != len(shape):
            raise GrucShapeError(f"slice bounds {list(self.begin)}:{list(self.end)} do not match "
                                 f"rank {len(shape)} of shape {list(shape)}")
        for dim, (b, e, n) in enumerate(zip(self.begin, self.end, shape)):
            if not 0 <= b <= e <= n:
                raise GrucIndexError(f"slice [{b}, {e}) is out of range on dimension {dim} of shape "
                                     f"{list(shape)} (allowed 0 <= begin <= end <= {n})")
        return tuple(e - b for b, e in zip(self.begin, self.end))

    def apply(self, layouts: list[Layout], shapes: list[Shape], out: Shape) -> Layout:
        (src,) = layouts
        if isinstance(src, Strided):
            return Strided(src.offset + sum(b * s for b, s in zip(self.begin, src.strides)),
                           src.strides)
        return src[tuple(slice(b, e) for b, e in zip(self.begin, self.end))]


@dataclass(frozen=True, slots=True)
class SubsampleOp(ViewOp):
    """Every ``stride``-th element along ``dim``, starting at 0 (Poplar ``subSample``)."""

    keyword: ClassVar[str] = "subsample"
    stride: int
    dim: int

    def result_shape(self, shapes: list[Shape]) -> Shape:
        (shape,) = shapes
        _check_dim(self.dim, len(shape), "subsample")
        if self.stride < 1:
            raise GrucValueError(f"subsample stride {self.stride} must be >= 1")
        return shape[:self.dim] + (-(-shape[self.dim] // self.stride),) + shape[self.dim + 1:]

    def apply(self, layouts: list[Layout], shapes: list[Shape], out: Shape) -> Layout:
        """Strided stays strided (the stride along ``dim`` multiplied); dense ids are sliced."""
        (src,) = layouts
        if isinstance(src, Strided):
            strides = list(src.strides)
            strides[self.dim] *= self.stride
            return Strided(src.offset, tuple(strides))
        index = [slice(None)] * src.ndim
        index[self.dim] = slice(None, None, self.stride)
        return src[tuple(index)]


@dataclass(frozen=True, slots=True)
class ReverseOp(ViewOp):
    """The elements of ``dim`` in reverse order."""

    keyword: ClassVar[str] = "reverse"
    dim: int

    def result_shape(self, shapes: list[Shape]) -> Shape:
        _check_dim(self.dim, len(shapes[0]), "reverse")
        return shapes[0]

    def apply(self, layouts: list[Layout], shapes: list[Shape], out: Shape) -> Layout:
        """Strided stays strided: the offset moves to the last element along ``dim`` and that stride
        is negated (an empty dim keeps the offset); dense ids are flipped."""
        (src,) = layouts
        if isinstance(src, Strided):
            strides = list(src.strides)
            offset = src.offset + (out[self.dim] - 1) * strides[self.dim] if out[self.dim] else src.offset
            strides[self.dim] = -strides[self.dim]
            return Strided(offset, tuple(strides))
        return np.flip(src, self.dim)


@dataclass(frozen=True, slots=True)
class ReshapeOp(ViewOp):
    """Same elements in row-major order, new shape (covers flatten, expand, squeeze)."""

    keyword: ClassVar[str] = "reshape"
    shape: tuple[int, ...]

    def result_shape(self, shapes: list[Shape]) -> Shape:
        if any(n < 0 for n in self.shape):
            raise GrucShapeError(f"reshape to {list(self.shape)}: sizes must be >= 0")
        if math.prod(self.shape) != math.prod(shapes[0]):
            raise GrucShapeError(f"cannot reshape {list(shapes[0])} ({math.prod(shapes[0])} elements) "
                                 f"to {list(self.shape)} ({math.prod(self.shape)} elements)")
        return self.shape

    def apply(self, layouts: list[Layout], shapes: list[Shape], out: Shape) -> Layout:
        """Strided stays strided where numpy would reshape without a copy; otherwise the ids are
        materialised and reshaped densely."""
        (src,) = layouts
        if isinstance(src, Strided):
            strided = _reshape_strided(src, shapes[0], out)
            if strided is not None:
                return strided
            src = materialise(src, shapes[0])
        return src.reshape(out)


@dataclass(frozen=True, slots=True)
class DimShuffleOp(ViewOp):
    """Dimensions permuted: result dim ``k`` is source dim ``perm[k]`` (Poplar ``dimShuffle``)."""

    keyword: ClassVar[str] = "shuffle"
    perm: tuple[int, ...]

    def result_shape(self, shapes: list[Shape]) -> Shape:
        (shape,) = shapes
        if sorted(self.perm) != list(range(len(shape))):
            raise GrucValueError(f"dim_shuffle permutation {list(self.perm)} is not a permutation "
                                 f"of 0..{len(shape) - 1}")
        return tuple(shape[p] for p in self.perm)

    def apply(self, layouts: list[Layout], shapes: list[Shape], out: Shape) -> Layout:
        (src,) = layouts
        if isinstance(src, Strided):
            return Strided(src.offset, tuple(src.strides[p] for p in self.perm))
        return np.transpose(src, self.perm)


@dataclass(frozen=True, slots=True)
class BroadcastOp(ViewOp):
    """The tensor repeated ``times`` times along ``dim`` (Poplar ``broadcast``)."""

    keyword: ClassVar[str] = "broadcast"
    times: int
    dim: int

    def result_shape(self, shapes: list[Shape]) -> Shape:
        (shape,) = shapes
        _check_dim(self.dim, len(shape), "broadcast")
        if self.times < 0:
            raise GrucValueError(f"broadcast count {self.times} must be >= 0")
        return shape[:self.dim] + (shape[self.dim] * self.times,) + shape[self.dim + 1:]

    def apply(self, layouts: list[Layout], shapes: list[Shape], out: Shape) -> Layout:
        """A broadcast of a singleton dim is a zero stride and stays strided; along any other dim
        the materialised ids are tiled ``times`` times."""
        (src,) = layouts
        if isinstance(src, Strided) and shapes[0][self.dim] == 1:
            strides = list(src.strides)
            strides[self.dim] = 0
            return Strided(src.offset, tuple(strides))
        reps = [1] * len(out)
        reps[self.dim] = self.times
        return np.tile(materialise(src, shapes[0]), reps)


@dataclass(frozen=True, slots=True)
class ConcatOp(ViewOp):
    """Sources joined along ``dim`` (``gruc.concat``)."""

    keyword: ClassVar[str] = "concat"
    num_sources: ClassVar[int] = -1
    dim: int

    def result_shape(self, shapes: list[Shape]) -> Shape:
        if not shapes:
            raise GrucValueError("concat needs at least one tensor")
        first = shapes[0]
        _check_dim(self.dim, len(first), "concat")
        for shape in shapes[1:]:
            if len(shape) != len(first) or any(a != b for k, (a, b) in enumerate(zip(shape, first))
                                                if k != self.dim):
                raise GrucShapeError(f"cannot concat shapes {list(first)} and {list(shape)} on "
                                     f"dimension {self.dim}: other dimensions must match")
        return first[:self.dim] + (sum(s[self.dim] for s in shapes),) + first[self.dim + 1:]

    def apply(self, layouts: list[Layout], shapes: list[Shape], out: Shape) -> Layout:
        parts = [materialise(layout, shape) for layout, shape in zip(layouts, shapes)]
        return np.concatenate(parts, axis=self.dim)


VIEW_OPS: dict[str, type[ViewOp]] = {
    op.keyword: op for op in (SliceOp, SubsampleOp, ReverseOp, ReshapeOp, DimShuffleOp,
                              BroadcastOp, ConcatOp)
}
