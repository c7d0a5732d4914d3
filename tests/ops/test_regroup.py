"""poplin's regrouping of a weight-update product's operand before its rearrangement
(gruc/ops/regroup.py): poputil's grouping detection on hand-built layouts, popops' group cutting
worked by hand, and a product whose A is regrouped: its steps, where the blocks go and its
numbers."""

from __future__ import annotations

import numpy as np
import pytest

from gruc import FLOAT, HALF, Engine, Graph, Sequence, Target, concat
from gruc.ir.mapping import TileMapping
from gruc.ops import mat_mul
from gruc.ops.regroup import _cut_groups, first_grouping, regroup_grain

T16 = Target.custom(tiles_per_ipu=16)


def mapped(graph, dtype, shape, tiles, name="t"):
    t = graph.add_variable(dtype, shape, name)
    graph.set_tile_mapping(t, TileMapping.from_element_tiles(np.asarray(tiles).reshape(-1)))
    return t


def test_grain_is_the_fast_transpositions_side():
    assert [regroup_grain(size) for size in (2, 4, 1, 8)] == [4, 2, 1, 1]


def test_groupings_follow_contiguity_and_tile_runs():
    graph = Graph(T16)
    # [8, 64], 32 elements a tile: rows contiguous, each row split over two tiles
    t = mapped(graph, FLOAT, (8, 64), np.arange(512) // 32)
    assert graph.detect_innermost_grouping(t) == 32     # gcd(prefix 64, run 32)
    assert graph.detect_innermost_grouping(t.transpose()) == 1     # a column is strided
    assert first_grouping(graph, t) == (1, 32)
    assert first_grouping(graph, t.transpose()) == (0, 32)     # the same elements, seen as [64, 8]
    # a run that does not divide the row counts for nothing
    u = mapped(graph, FLOAT, (2, 12), [0] * 5 + [1] * 7 + [2] * 12)
    assert graph.detect_innermost_grouping(u) == 1     # gcd(12, 7) = 1
    # the prefix stops at the end of a variable even where the next ids continue
    left = mapped(graph, FLOAT, (4,), [3] * 4, "left")
    right = mapped(graph, FLOAT, (4,), [3] * 4, "right")
    assert right.flat_ids()[0] == left.flat_ids()[-1] + 1
    assert graph.detect_innermost_grouping(concat([left, right])) == 4
    one = mapped(graph, FLOAT, (1, 1), [0], "one")
    assert first_grouping(graph, one) is None


def test_groups_are_cut_by_popops_cost():
    """popops' ``updateGrouping`` on 512 float elements of one IPU of 16 tiles, from 32 to 8:
    blocks of 256, F = 256 / 2^2 = 64, two blocks, at most 96; the costs (64 / x) *
    ceil(ceil(2x / 16) / 6) fall to 2 at x = 32, so from 32 / gcd(32, 16) = 2 and to
    8 / gcd(2, 4) = 4."""
    graph = Graph(T16)
    t = mapped(graph, FLOAT, (64, 8), np.arange(512) // 32)
    assert _cut_groups(graph, graph.element_tiles(t), 32, 8, 2) == (2, 4)
    # a half tensor at the grain already (4 x 4 blocks): nothing to cut
    h = mapped(graph, HALF, (16, 4), np.zeros(64, dtype=int), "h")
    assert _cut_groups(graph, graph.element_tiles(h), 4, 4, 4) == (4, 4)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_weight_update_product_regroups_an_operand_grouped_along_its_rows(backend, rng):
    """A = xᵀ with x ``[K, M]`` stored M-innermost: its longest groups run along M, so before
    the rearrangement copy a ``Copy`` gathers ``[to x from]`` blocks spread over the tiles and a
    ``Transpose`` compute set turns them, the channels then innermost; the product is unchanged."""
    graph = Graph(T16)
    options = {"fullyConnectedPass": "TRAINING_WU"}
    x = mapped(graph, FLOAT, (8, 64), np.arange(512) // 32, "x")   # [K, M]
    b = graph.add_variable(FLOAT, (48, 8), "b")                     # [N, K]: K innermost
    graph.map_tensor_linearly(b)
    prog = Sequence()
    c = mat_mul(graph, x.transpose(), b.transpose(), prog, options=options)
    kinds = [type(step).__name__ for step in prog.programs]
    assert kinds[:4] == ["Copy", "Execute", "Copy", "Copy"]
    gather, turn = prog.programs[0], prog.programs[1]
    assert gather.dst.name.endswith("mk.pre_regroup")
    blocks, to_size, from_size = gather.dst.shape
    assert to_size % 2 == 0 and from_size % 2 == 0 and 32 % from_size == 0
    # blocks in order over the tiles, as many a tile as the first tile takes
    tiles = graph.element_tiles(gather.dst).reshape(blocks, -1)
    per_tile = -(-blocks // 16)
    assert np.array_equal(tiles[:, 0], np.arange(blocks) // per_tile)
    assert (tiles == tiles[:, :1]).all()
    (vertex,) = turn.compute_set.vertices
    assert vertex.kind.name == "Transpose" and vertex.fields["out"].shape == (blocks, from_size,
                                                                              to_size)
    regrouped = prog.programs[2].src           # what the rearrangement copy then reads: A
    assert regrouped.shape == (1, 64, 8)       # with its channels innermost in runs of to_size
    assert graph.detect_innermost_grouping(x.transpose().reshape((1, 64, 8))) == 1
    assert graph.detect_innermost_grouping(regrouped) % to_size == 0
    graph.create_host_write("x", x)
    graph.create_host_write("b", b)
    graph.create_host_read("c", c)
    engine = Engine(graph, prog, backend=backend)
    xv = rng.uniform(-1, 1, (8, 64)).astype(np.float32)
    bv = rng.uniform(-1, 1, (48, 8)).astype(np.float32)
    engine.write_tensor("x", xv)
    engine.write_tensor("b", bv)
    engine.run()
    np.testing.assert_allclose(engine.read_tensor("c"), xv.T.astype(np.float64) @ bv.T,
                               rtol=1e-5, atol=1e-5)
