"""Matrix-product codelets (poplin ``matMul``): per-tile partial products, then their reduction.

A planned product ``[G, M, K] x [G, K, N] -> [G, M, N]`` (``G`` independent groups; 1 for a plain
matmul) cuts every dimension into blocks of ``(gb, mb, kb, nb)`` elements — the last block of a
dimension may be shorter — and gives each block ``(ig, ik, im, in)`` to its own tile.  Blocks are
numbered in *block order* ``b = ((ig * Pk + ik) * Pm + im) * Pn + in`` (``P*`` = blocks along each
dimension).  A tile computes the partial product of its block, reading the ``[gb, mb, kb]`` block
of ``a`` and the ``[gb, kb, nb]`` block of ``b`` wherever they live (what is not on the tile is
exchanged to it); a second compute set adds the ``Pk`` partials of every output element on the
output's tile.  Two supersteps, whatever the number of tiles: the IR holds one vertex for each,
placed by the tile mapping of the tensor it writes (``split``), not one vertex per tile.

``MatMulPartials(a, b, partials) blocks=(gb, mb, kb, nb) method=...``::

    partials[g, ik, i, j] = sum over k in k-block ik of  a[g, i, k] * b[g, k, j]

``a`` is ``[G, M, K]``, ``b`` ``[G, K, N]`` (same type, half or float), ``partials`` ``[G, Pk, M,
N]`` (half or float: poplibs' ``partialsType``); products and sums are computed in float32 and
rounded once when stored.  Each ``partials`` block lies on one tile, a different tile per block;
that tile is where the block's partial product is computed, from operand elements that, where
they live on other tiles, the exchange brings to it (the cost and memory models count them).
``method`` names the vertex a tile runs (poplin's AMP ``ConvPartial1x1Out`` or horizontal MACs,
with its channel grouping, :class:`~gruc.ir.codelets.conv_costs.ConvMethod`) and ``orientation``
which of M and N is the convolution's field: they decide the cycles, not the numbers.  The AMP's
partials are written with 128-bit stores, so its ``partials`` lie in interleaved memory (a
MAC's do not).

``MatMulReduce(out, partials)``: ``out[g, i, j] = sum over ik of partials[g, ik, i, j]``, summed in
float32 and rounded to ``out``'s type; ``MatMulReduceAcc(out, partials, scale?) k=``: ``out +=
k * scale[0] * sum over ik of partials[...]`` (``scale`` is optional: poplibs' ``matMulAcc`` takes
its factor as a float or as a one-element tensor).  Both run on the tiles of ``out``.

The block geometry (:class:`Blocking`) and the cycle formula of a partial product live here,
beside the kinds, because the planner (:mod:`gruc.ops.matmul`), the engines and the cycle model
all speak of the same blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from gruc.errors import GrucMappingError, GrucShapeError, GrucTypeError, GrucValueError
from gruc.ir.codelets.conv_costs import ConvMethod
from gruc.ir.mapping import UNMAPPED
from gruc.ir.vertices import InOut, Input, Output, VertexKind, register
from gruc.types import FLOAT, HALF, DType

if TYPE_CHECKING:
    from gruc.ir.graph import Vertex
    from gruc.ir.tensor import Tensor

MATMUL_TYPES: tuple[DType, ...] = (HALF, FLOAT)
"""Element types of matmul operands, partials and results."""

FIELD_N = "field-n"
"""Orientation: N is the conv field, M the output channels (poplin's natural matmul form)."""
FIELD_M = "field-m"
"""Orientation: M is the conv field, N the output channels (needs rearranging)."""
ORIENTATIONS = (FIELD_N, FIELD_M)

# ---- block geometry ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Part:
    """``count`` equal blocks along one axis, numbered from ``first``, ``size`` elements each,
    starting at element ``start``."""

    first: int
    count: int
    size: int
    start: int

    def in_blocks(self) -> "Part":
        """The same blocks seen along an axis that holds one element per block (the ``Pk`` axis
        of ``partials``)."""
        return Part(self.first, self.count, 1, self.first)


@dataclass(frozen=True)
class Axis:
    """One dimension of ``size`` elements cut into blocks of ``block`` (the last may be shorter)."""

    size: int
    block: int

    @property
    def count(self) -> int:
        return -(-self.size // self.block)

    def parts(self) -> tuple[Part, ...]:
        """The full blocks, then the short last block if there is one: at most two parts."""
        full, tail = divmod(self.size, self.block)
        parts = (Part(0, full, self.block, 0),) if full else ()
        return parts + ((Part(full, 1, tail, full * self.block),) if tail else ())

    def block_sizes(self) -> np.ndarray:
        sizes = np.full(self.count, self.block, dtype=np.int64)
        sizes[-1] = self.size - (self.count - 1) * self.block
        return sizes

    def block_of(self) -> np.ndarray:
        """The block of every element."""
        return np.arange(self.size, dtype=np.int64) // self.block


@dataclass(frozen=True)
class Blocking:
    """The blocks of a ``[G, M, K] x [G, K, N]`` product; axes kept in block order g, k, m, n."""

    g: Axis
    k: Axis
    m: Axis
    n: Axis

    @classmethod
    def of(cls, shape: Sequence[int], block: Sequence[int]) -> "Blocking":
        """From ``(G, M, K, N)`` and block sizes ``(gb, mb, kb, nb)`` (the order poplibs users
        write a product in)."""
        (G, M, K, N), (gb, mb, kb, nb) = shape, block
        return cls(Axis(G, gb), Axis(K, kb), Axis(M, mb), Axis(N, nb))

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.g.size, self.m.size, self.k.size, self.n.size)

    @property
    def block(self) -> tuple[int, int, int, int]:
        return (self.g.block, self.m.block, self.k.block, self.n.block)

    @property
    def counts(self) -> tuple[int, int, int, int]:
        """Blocks along g, k, m, n (block order)."""
        return (self.g.count, self.k.count, self.m.count, self.n.count)

    @property
    def num_blocks(self) -> int:
        return math.prod(self.counts)

    @property
    def partials_shape(self) -> tuple[int, int, int, int]:
        return (self.g.size, self.k.count, self.m.size, self.n.size)

    def parts(self) -> Iterator[tuple[Part, Part, Part, Part]]:
        """Sub-grids of equally shaped blocks (g, k, m, n parts): at most 16, usually 1 to 4."""
        for pg in self.g.parts():
            for pk in self.k.parts():
                for pm in self.m.parts():
                    for pn in self.n.parts():
                        yield pg, pk, pm, pn

    def block_grid(self, pg: Part, pk: Part, pm: Part, pn: Part) -> np.ndarray:
        """Block numbers of a sub-grid, shaped ``[cg, ck, cm, cn]``."""
        _, Pk, Pm, Pn = self.counts
        ig, ik, im, in_ = (np.arange(p.first, p.first + p.count, dtype=np.int64)
                           for p in (pg, pk, pm, pn))
        return (((ig[:, None, None, None] * Pk + ik[None, :, None, None]) * Pm
                 + im[None, None, :, None]) * Pn + in_[None, None, None, :])

    def block_dims(self) -> tuple[np.ndarray, ...]:
        """Sizes ``(gb, kb, mb, nb)`` of every block, each shaped ``[Pg, Pk, Pm, Pn]``."""
        sizes = [axis.block_sizes() for axis in (self.g, self.k, self.m, self.n)]
        grids = np.meshgrid(*sizes, indexing="ij")
        return tuple(grids)

    def partials_tiles(self, tiles: np.ndarray) -> np.ndarray:
        """The tile of every element of ``partials`` ``[G, Pk, M, N]`` when block ``(ig, ik, im,
        in)`` is on ``tiles[ig, ik, im, in]``."""
        return tiles[np.ix_(self.g.block_of(), np.arange(self.k.count), self.m.block_of(),
                            self.n.block_of())]


def block_view(array: np.ndarray, parts: Sequence[Part]) -> np.ndarray:
    """The blocks of ``array`` that ``parts`` (one per axis) select: ``[counts..., sizes...]``."""
    index = tuple(slice(p.start, p.start + p.count * p.size) for p in parts)
    split = [d for p in parts for d in (p.count, p.size)]
    rank = len(parts)
    return array[index].reshape(split).transpose([2 * i for i in range(rank)]
                                                 + [2 * i + 1 for i in range(rank)])


def method_of(vertex: "Vertex") -> ConvMethod:
    """The poplin vertex a ``MatMulPartials`` vertex stands for."""
    return ConvMethod.of_param(vertex.params["method"])


def blocking_of(vertex: "Vertex") -> Blocking:
    """The geometry a ``MatMulPartials`` vertex computes (from its operands and ``blocks``)."""
    a, b = vertex.fields["a"], vertex.fields["b"]
    return Blocking.of((a.shape[0], a.shape[1], a.shape[2], b.shape[2]), vertex.params["blocks"])


def block_tiles(vertex: "Vertex") -> np.ndarray:
    """The tile of every block of a ``MatMulPartials`` vertex, shaped ``[Pg, Pk, Pm, Pn]``: where
    the first element of the block's partials lives."""
    partials = vertex.fields["partials"]
    geometry = blocking_of(vertex)
    tiles = partials.graph.element_tiles(partials).reshape(partials.shape)
    gb, mb, _, nb = geometry.block
    return tiles[::gb, :, ::mb, ::nb].astype(np.int64)


# ---- checks -----------------------------------------------------------------------------------
def _float_type(name: str, role: str, tensor: "Tensor") -> None:
    if tensor.dtype not in MATMUL_TYPES:
        raise GrucTypeError(f"{name} {role} must be half or float, got {tensor.dtype.name}")


def _check_partials(vertex: "Vertex") -> None:
    """``a`` ``[G, M, K]`` and ``b`` ``[G, K, N]`` of one float type, ``blocks`` four positive
    integers, ``partials`` shaped as the blocking says and placed one block per tile, and a
    known method and orientation."""
    name = vertex.kind.name
    a, b, partials = (vertex.fields[f] for f in ("a", "b", "partials"))
    if a.rank != 3 or b.rank != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise GrucShapeError(f"{name} needs a [G, M, K] and b [G, K, N]; got a {list(a.shape)} "
                             f"and b {list(b.shape)}")
    for role, t in (("a", a), ("b", b), ("partials", partials)):
        _float_type(name, role, t)
    if b.dtype != a.dtype:
        raise GrucTypeError(f"{name} a and b must have one type; got {a.dtype.name} and "
                            f"{b.dtype.name}")
    try:
        ConvMethod.of_param(vertex.params.get("method"))
    except ValueError as error:
        raise GrucValueError(f"{name} method: {error}") from None
    orientation = vertex.params.get("orientation")
    if orientation not in ORIENTATIONS:
        raise GrucValueError(f"{name} orientation must be one of {', '.join(ORIENTATIONS)}, got "
                             f"{orientation!r}")
    blocks = vertex.params["blocks"]
    if (not isinstance(blocks, (tuple, list)) or len(blocks) != 4
            or not all(isinstance(n, (int, np.integer)) and n >= 1 for n in blocks)):
        raise GrucValueError(f"{name} blocks must be four positive integers (gb, mb, kb, nb), got "
                             f"{blocks!r}")
    if 0 in a.shape or b.shape[2] == 0:
        raise GrucShapeError(f"{name} needs non-empty operands; got a {list(a.shape)} and b "
                             f"{list(b.shape)}")
    geometry = blocking_of(vertex)
    if partials.shape != geometry.partials_shape:
        raise GrucShapeError(f"{name} partials must be {list(geometry.partials_shape)} for blocks "
                             f"{tuple(blocks)}, got {list(partials.shape)}")
    _check_placement(vertex, geometry)


def _check_placement(vertex: "Vertex", geometry: Blocking) -> None:
    """Each partials block on one tile, one block per tile."""
    partials = vertex.fields["partials"]
    p_tiles = partials.graph.element_tiles(partials)
    if np.any(p_tiles == UNMAPPED):
        return  # not mapped yet: the verifier reports unmapped tensors itself
    tiles = block_tiles(vertex)
    name = vertex.kind.name
    if not np.array_equal(geometry.partials_tiles(tiles).reshape(-1), p_tiles):
        raise GrucMappingError(f"{name}: every partials block must lie on one tile")
    if len(np.unique(tiles)) != tiles.size:
        raise GrucMappingError(f"{name}: two partials blocks share a tile; each tile computes "
                               "one block")


def _check_reduce(vertex: "Vertex") -> None:
    """``out`` ``[G, M, N]`` and ``partials`` ``[G, Pk, M, N]`` of float types; for the accumulating
    kind, a one-element ``scale`` if given and a numeric ``k``."""
    name = vertex.kind.name
    out, partials = vertex.fields["out"], vertex.fields["partials"]
    if (out.rank != 3 or partials.rank != 4 or partials.shape[0] != out.shape[0]
            or partials.shape[2:] != out.shape[1:]):
        raise GrucShapeError(f"{name} needs out [G, M, N] and partials [G, Pk, M, N]; got "
                             f"{list(out.shape)} and {list(partials.shape)}")
    _float_type(name, "out", out)
    _float_type(name, "partials", partials)
    scale = vertex.fields.get("scale")
    if scale is not None:
        _float_type(name, "scale", scale)
        if scale.num_elements != 1:
            raise GrucShapeError(f"{name} scale must have one element, got {list(scale.shape)}")
    if "k" in vertex.params and not isinstance(vertex.params["k"], (int, float, np.number)):
        raise GrucTypeError(f"{name} k must be a number, got {vertex.params['k']!r}")


MATMUL_PARTIALS = register(VertexKind(
    "MatMulPartials",
    {"a": Input(), "b": Input(), "partials": Output(interleaved=True)},
    params=("blocks", "method", "orientation"), split="partials", check=_check_partials,
    doc="partials[g, ik, i, j] = sum over k-block ik of a[g, i, k] * b[g, k, j]; one block per "
        "tile, with poplin's vertex (method) for its field (orientation).",
    interleaved_when=lambda vertex: method_of(vertex).interleaved_partials))

MATMUL_REDUCE = register(VertexKind(
    "MatMulReduce", {"out": Output(), "partials": Input()}, split="out", check=_check_reduce,
    doc="out[g, i, j] = sum over ik of partials[g, ik, i, j] (float32 sums)."))

MATMUL_REDUCE_ACC = register(VertexKind(
    "MatMulReduceAcc", {"out": InOut(), "partials": Input(), "scale": Input(optional=True)},
    params=("k",), split="out", check=_check_reduce,
    doc="out[g, i, j] += k * scale[0] * sum over ik of partials[g, ik, i, j]."))
