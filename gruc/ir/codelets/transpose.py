"""The block transposition codelet (popops ``Transpose2d`` / ``Transpose`` /
``TransposeSupervisor``): each tile rewrites the blocks of a matrix it holds with their rows and
columns exchanged, the step poplin's ``fullyConnectedWeightTranspose`` runs before a fully
connected layer's backward product so that the product reads the weights in its own order.

A ``Transpose`` vertex is elementwise in its fields: ``out`` ``[..., C, R]`` is the blocks as the
product reads them and ``in`` a view of the source shaped like ``out``, whose every ``[C, R]``
block is an ``R x C`` block of the source read column by column (``src.dim_shuffle``).  So the
vertex's value is ``out = in`` and the transposition is the view's, while the cost is the
codelet's: each tile moves its ``R x C`` blocks row by row into ``C x R`` ones.  The last two
dimensions of ``out`` therefore say the block shape the estimator needs, and the vertex may be
added without a tile (``split``), standing for the vertex poplibs puts on every tile that holds
blocks of ``out``; each block of ``out`` lies on one tile, the tile of its source block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gruc.errors import GrucShapeError, GrucTypeError
from gruc.ir.vertices import Input, Output, VertexKind, register
from gruc.target import RPT_COUNT_MAX, STRIDE_LIMIT

if TYPE_CHECKING:
    from gruc.ir.graph import Vertex


MAX_TRANSPOSITIONS = 65535
"""The fast codelets count their blocks in an ``unsigned short``."""


def can_use_fast_transpose(two_byte: bool, rows: int, cols: int, blocks: int) -> bool:
    """popops' ``canUseFastTranspose``: whether a tile's ``blocks`` blocks of ``rows x cols``
    take the fast codelets (``Transpose`` / ``TransposeSupervisor``): 2-byte data, sides multiples
    of four, and the block count, repeat counts and strides within what those codelets encode."""
    if not two_byte or blocks > MAX_TRANSPOSITIONS or rows % 4 or cols % 4:
        return False
    if rows == 4 and cols == 4:
        return not (blocks >= 2 and blocks - 2 > RPT_COUNT_MAX)
    side = rows if cols == 4 else cols
    return not ((side >= 8 and side // 4 - 2 > RPT_COUNT_MAX)
                or side // 4 * 3 - 1 > STRIDE_LIMIT)


def tile_blocks(vertex: "Vertex", elements: np.ndarray) -> tuple[int, int, np.ndarray]:
    """``(R, C, N)``: the source blocks' rows and columns, and each tile's block count, given
    how many elements of ``out`` each tile holds."""
    cols, rows = vertex.fields["out"].shape[-2:]
    return rows, cols, elements // max(rows * cols, 1)


def _check_transpose(vertex: "Vertex") -> None:
    """``out`` and ``in`` alike in shape (rank >= 2: blocks of the last two dims) and type."""
    out, source = vertex.fields["out"], vertex.fields["in"]
    if out.rank < 2 or source.shape != out.shape:
        raise GrucShapeError(f"Transpose out must be [..., C, R] blocks (rank >= 2) and in shaped "
                             f"like it; got out {list(out.shape)} and in {list(source.shape)}")
    if source.dtype != out.dtype:
        raise GrucTypeError(f"Transpose in is {source.dtype.name} but out is {out.dtype.name}")


TRANSPOSE = register(VertexKind(
    "Transpose", {"out": Output(), "in": Input()}, split="out", check=_check_transpose,
    doc="out = in, where in views R x C source blocks as the [C, R] blocks of out: each tile "
        "transposes the blocks it holds (popops Transpose2d / TransposeSupervisor)."))
