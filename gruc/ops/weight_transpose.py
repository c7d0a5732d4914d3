"""The weights of a fully connected layer's backward product, transposed on their own tiles
(poplin ``fullyConnectedWeightTranspose``).

A training layer's backward product reads the forward weights ``W [I, O]`` as ``Wᵀ [O, I]``.
When the forward and the backward plans both make the weights their field operand, the
convolution's activations (in gruc's terms both are :data:`~gruc.ir.codelets.matmul.FIELD_N`),
poplin does not leave that to the product's exchange: before the product it runs one compute set in
which every tile transposes the blocks of the weights it holds into a new tensor, block by block
on the same tile, and the product then gathers the transposed blocks as it gathers any operand.
``matMul`` does this for a ``TRAINING_BWD`` product (``matMulImpl``) and
``preArrangeMatMulInputRHS`` for a backward product's pre-arranged B, so both gruc's
``mat_mul`` and ``pre_arrange_mat_mul_input_rhs`` come here.

The blocks are ``R x C`` source elements: ``C`` along the forward product's input channels (a
divisor of the forward plan's input channels per group, so a block row is contiguous in the
forward weights' layout) and ``R`` along the backward product's input channels (a divisor of the
backward plan's).  poplin's ``getGroupSizes`` takes the largest sizes for a jointly planned
layer; otherwise it scores every pair (``blockScore``): a tile scores 5 if popops can use its
fast transposition there and 1 if not, a third of that when the tile's first destination block
is not contiguous (a copy must gather it), and a pair scores its worst tile times the tiles it
spreads over (ties to the larger sizes).  The destination is laid out as the backward plan's
``createWeights`` lays out a field operand, its input channels in groups innermost (``[K /
group][N][group]``), so a block is contiguous when ``R`` is a whole group.  A size of 1
on either side, or a plan that keeps the weights as its weights operand, leaves the
transposition to the product (``useCopyImpl``).

Which plans those are poplin states in its own formulation of the day: SDK 1.x set a fully
connected pass up with the weights as the convolution's activations, so they stay the field in
plans that do *not* swap operands (``planSwapsOperands(fwdPlan) || planSwapsOperands(bwdPlan)``
means copy); from SDK 2.0 a matMul's convolution takes A as its activations, so the weights are
the field in plans that *do* swap (``!planSwapsOperands(...)`` means copy).  The condition on the
weights is the same in both, and gruc's orientations name it directly.
"""

from __future__ import annotations

import math

import numpy as np

from gruc.ir.codelets.matmul import FIELD_N
from gruc.ir.codelets.transpose import TRANSPOSE, can_use_fast_transpose
from gruc.ir.graph import Graph
from gruc.ir.mapping import TileMapping
from gruc.ir.program import Execute, Sequence as Seq
from gruc.ir.tensor import Tensor
from gruc.ops.matmul_plan import MatMulPlan

FAST_TILE_SCORE = 5.0
"""``blockScore``: a tile whose blocks popops transposes with its fast codelet."""

SLOW_TILE_SCORE = 1.0
"""``blockScore``: a tile that needs the general ``Transpose2d``."""

GATHER_PENALTY = 3.0
"""``blockScore`` divides a tile's score by this when its first destination block is not
contiguous (``/ 3``: the copy that would gather it)."""


def common_divisors(group: int, channels: int) -> list[int]:
    """poplin's ``commonDivisors``: ``gcd(group, channels)``, then every divisor of it from about
    half of it down to 1, largest first."""
    g = math.gcd(group, channels)
    return [g] + [d for d in range(-(-g // 2), 0, -1) if g % d == 0 and d != g]


def _first_tiles(source_tiles: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The tile of each block's first element (``[G, K / rows, N / cols]``)."""
    return source_tiles[:, ::rows, ::cols]


def _block_score(source_tiles: np.ndarray, rows: int, cols: int, two_byte: bool,
                 group: int) -> float:
    """poplin's ``blockScore`` of ``rows x cols`` blocks, the destination's input channels in
    groups of ``group`` (every destination block is alike, contiguous when ``rows`` is a whole
    group)."""
    tiles, counts = np.unique(_first_tiles(source_tiles, rows, cols), return_counts=True)
    worst = min(FAST_TILE_SCORE if can_use_fast_transpose(two_byte, rows, cols, int(n))
                else SLOW_TILE_SCORE for n in np.unique(counts).tolist())
    return worst * len(tiles) / (1.0 if rows == group else GATHER_PENALTY)


def transposes_weights(forward: MatMulPlan, backward: MatMulPlan) -> bool:
    """Whether a layer with these forward and backward plans may transpose its weights: both
    make them their field operand."""
    return forward.orientation == FIELD_N and backward.orientation == FIELD_N


def transpose_block_sizes(forward: MatMulPlan, backward: MatMulPlan, source_tiles: np.ndarray,
                          two_byte: bool) -> tuple[int, int] | None:
    """``(R, C)``: the source block the transposition moves (``R`` along the backward product's
    input channels K, ``C`` along its field N), or None when a size of 1 leaves the
    transposition to the product.  ``source_tiles`` is ``[G, K, N]``: the tile of every element
    of B; the plans are ones that :func:`transposes_weights`."""
    _, _, K, N = backward.shape
    group = backward.method.in_chans_per_group
    row_sizes = common_divisors(group, K)
    col_sizes = common_divisors(forward.method.in_chans_per_group, N)
    if forward.joint and backward.joint:
        rows, cols = row_sizes[0], col_sizes[0]
    else:
        best, rows, cols = -1.0, 1, 1
        for c in col_sizes:
            for r in row_sizes:
                score = _block_score(source_tiles, r, c, two_byte, group)
                if score > best:
                    best, rows, cols = score, r, c
    return None if rows == 1 or cols == 1 else (rows, cols)


def _blocks(tensor: Tensor, rows: int, cols: int) -> Tensor:
    """``[G, K, N]`` as ``[G, K / rows, N / cols, cols, rows]``: each source block seen
    transposed."""
    G, K, N = tensor.shape
    return tensor.reshape((G, K // rows, rows, N // cols, cols)).dim_shuffle((0, 1, 3, 4, 2))


def transposed_block_tiles(source_tiles: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The tile of every element of the transposed tensor: its block's source tile."""
    first = _first_tiles(source_tiles, rows, cols)
    return np.repeat(np.repeat(first, rows, axis=1), cols, axis=2)


def transpose_weights(graph: Graph, b: Tensor, sizes: tuple[int, int], prog: Seq,
                      name: str) -> Tensor:
    """A new ``[G, K, N]`` tensor equal to ``b``, written block by block by a ``Transpose``
    compute set on the tiles of the source blocks (``b`` grouped, ``sizes`` from
    :func:`transpose_block_sizes`)."""
    rows, cols = sizes
    source_tiles = graph.element_tiles(b).reshape(b.shape)
    transposed = graph.add_variable(b.dtype, b.shape, name)
    graph.set_tile_mapping(transposed, TileMapping.from_element_tiles(
        transposed_block_tiles(source_tiles, rows, cols).reshape(-1)))
    cs = graph.add_compute_set(f"{name}.transpose")
    graph.add_vertex(cs, TRANSPOSE, {"out": _blocks(transposed, rows, cols),
                                     "in": _blocks(b, rows, cols)})
    prog.add(Execute(cs))
    return transposed


def transpositions(graph: Graph, programs: list[Seq]) -> list[tuple[str, int, int, int]]:
    """What a built program transposes: per ``Transpose`` vertex, its compute set's name, the
    source blocks' rows and columns, and the tiles that transpose them."""
    found = []
    for prog in programs:
        for node in prog.walk():
            if isinstance(node, Execute):
                for vertex in node.compute_set.vertices:
                    if vertex.kind is TRANSPOSE:
                        out = vertex.fields["out"]
                        cols, rows = out.shape[-2:]
                        tiles = len(np.unique(graph.element_tiles(out)))
                        found.append((node.compute_set.name, rows, cols, tiles))
    return found

