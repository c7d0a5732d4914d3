"""An operand regrouped before a weight-update product copies it into its plan's layout (poplin's
``regroupIfBeneficialForPlan``, popops' ``regroupTensor``).

A product reads each operand in groups of input channels (its plan's ``in_chans_per_group``,
contiguous on a tile).  A weight-update pass's operands seldom lie so: ``prevActᵀ`` and the
deltas are contiguous along another dimension, the one their forward layout grouped.  Before its
rearrangement copy (``gruc.ops.matmul``'s ``_arranged``) poplin then regroups the operand when
that is cheap to do: when the dimension whose elements lie together in the longest groups
(poputil's ``detectDimGroupings``) is not the input channels, and both that grouping and the
plan's are multiples of popops' minimum regroup grain (4 two-byte or 2 four-byte elements, the
sides the fast transpositions take).  Regrouping is two supersteps: a ``Copy`` of the operand's
``[to x from]`` blocks into a new variable whose blocks spread evenly over the tiles of their
IPU, and a compute set of ``Transpose`` vertices that turns each block round, so the channels lie
innermost; the rearrangement copy then reads the result.  How many blocks there are follows
popops' ``updateGrouping``: the groups may be cut by a factor, the one whose simplified cost
``(F / x) * ceil(ceil(blocks * x / tiles) / workers)`` is least, keeping every side a multiple of
the grain.

gruc regroups an operand ``[G, R, K]`` (``K`` the input channels) from its ``R`` dimension only,
and only when ``K`` is a whole number of the plan's groups: poplin first pads ``K`` to whole groups
with constants (on tile 0), a case gruc's operands do not reach without padding, which gruc does
not do.
"""

from __future__ import annotations

import math

import numpy as np

from gruc.ir.codelets.transpose import TRANSPOSE
from gruc.ir.graph import Graph
from gruc.ir.mapping import TileMapping
from gruc.ir.program import Copy, Execute, Sequence as Seq
from gruc.ir.tensor import Tensor

__all__ = ["REGROUP_SUFFIX", "first_grouping", "regroup_grain", "regroup_for_plan"]

REGROUP_SUFFIX = ".regroup"
"""The end of the name of a regrouping's compute set (what ``gruc fc`` reports it by)."""


def regroup_grain(element_bytes: int) -> int:
    """popops' ``getMinimumRegroupGrainSize``: 4 two-byte elements, 2 four-byte ones, else 1."""
    return {2: 4, 4: 2}.get(element_bytes, 1)


def first_grouping(graph: Graph, tensor: Tensor) -> tuple[int, int] | None:
    """poputil's ``detectDimGroupings``, its first answer: the dimension whose elements, rolled
    innermost, lie together in the longest groups, and that group size (a divisor of the
    dimension; the first such dimension on a tie); None if no dimension groups more than one."""
    best, size = None, 1
    for dim, extent in enumerate(tensor.shape):
        if extent == 1:
            continue
        rolled = tensor.dim_roll(dim, tensor.rank - 1)
        found = math.gcd(graph.detect_innermost_grouping(rolled), extent)
        if found > size:
            best, size = dim, found
    return None if best is None else (best, size)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _cut_groups(graph: Graph, tiles: np.ndarray, from_size: int, to_size: int,
                grain: int) -> tuple[int, int]:
    """popops' ``updateGrouping``: the ``from`` and ``to`` group sizes cut by the factor of least
    simplified cost, so that the IPU with most elements (``tiles``: the operand's) has blocks
    enough for its tiles' workers."""
    target = graph.target
    per_ipu = np.bincount(tiles[tiles >= 0] // target.tiles_per_ipu, minlength=target.num_ipus)
    block = to_size * from_size
    extra = block // (grain * grain)
    estimate = _ceil(int(per_ipu.max()), block)
    allowed = target.tiles_per_ipu * target.num_worker_contexts
    factor, best = 1, None
    for x in sorted({d for k in range(1, math.isqrt(extra) + 1) if extra % k == 0
                     for d in (k, extra // k)}):
        if estimate * x > allowed:
            break
        cost = (extra // x) * _ceil(_ceil(estimate * x, target.tiles_per_ipu),
                                    target.num_worker_contexts)
        if best is None or cost < best:
            best, factor = cost, x
    if factor == 1:
        return from_size, to_size
    cut_from = math.gcd(factor, from_size // grain)
    cut_to = math.gcd(factor // cut_from, to_size // grain)
    return from_size // cut_from, to_size // cut_to


def _spread(count: int, graph: Graph, first_tiles: np.ndarray) -> np.ndarray:
    """The tile of each of ``count`` blocks: those whose first element is on one IPU spread
    evenly, in order, over that IPU's tiles (``regroupTensorInternal``)."""
    per_ipu = graph.target.tiles_per_ipu
    ipus = first_tiles // per_ipu
    tiles = np.empty(count, dtype=np.int64)
    for ipu in np.unique(ipus).tolist():
        on = np.flatnonzero(ipus == ipu)
        per_tile = _ceil(len(on), per_ipu)
        tiles[on] = ipu * per_ipu + np.arange(len(on)) // per_tile
    return tiles


def regroup_for_plan(graph: Graph, operand: Tensor, in_chans_per_group: int, prog: Seq,
                     name: str) -> Tensor:
    """``operand`` ``[G, R, K]`` regrouped so its input channels ``K`` lie innermost in groups, as
    poplin does before a weight-update product's rearrangement (see the module docstring), or
    ``operand`` itself where poplin would not regroup it."""
    grain = regroup_grain(operand.dtype.size)
    grouping = first_grouping(graph, operand)
    G, R, K = operand.shape
    if grouping is None or grouping[0] != 1 or grouping[1] % grain \
            or in_chans_per_group % grain or K % in_chans_per_group:
        return operand
    tiles = graph.element_tiles(operand)
    from_size, to_size = _cut_groups(graph, tiles, grouping[1], in_chans_per_group, grain)
    blocks = G * (R // from_size) * (K // to_size)
    split = (G, R // from_size, from_size, K // to_size, to_size)
    grouped = operand.reshape(split).dim_shuffle((0, 1, 3, 4, 2)) \
        .reshape((blocks, to_size, from_size))
    first = tiles.reshape(split)[:, :, 0, :, 0].reshape(-1).astype(np.int64)  # blocks' 1st
    block_tiles = np.repeat(_spread(blocks, graph, first), to_size * from_size)
    gathered = graph.add_variable(operand.dtype, (blocks, to_size, from_size),
                                  f"{name}.pre_regroup")
    graph.set_tile_mapping(gathered, TileMapping.from_element_tiles(block_tiles))
    prog.add(Copy(grouped, gathered))
    turned = graph.add_variable(operand.dtype, (blocks, from_size, to_size), f"{name}.regrouped")
    graph.set_tile_mapping(turned, TileMapping.from_element_tiles(block_tiles))
    cs = graph.add_compute_set(name + REGROUP_SUFFIX)
    graph.add_vertex(cs, TRANSPOSE, {"out": turned, "in": gathered.dim_shuffle((0, 2, 1))})
    prog.add(Execute(cs))
    return turned.reshape((G, R // from_size, K // to_size, from_size, to_size)) \
        .dim_shuffle((0, 1, 3, 2, 4)).reshape((G, R, K))
