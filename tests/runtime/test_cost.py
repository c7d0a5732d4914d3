"""The exchange the cycle model counts: each read's remote elements, one transfer per (element,
receiving tile).  ``step_costs`` finds them in batches, compares large reads by one tile where
their tiles lie and skips the duplicate search for views that name each element once; whichever
way it goes, the answer must be the per-read definition's, written out here."""

from __future__ import annotations

import numpy as np
import pytest

from gruc import FLOAT, INT, Copy, Graph, Sequence, Target
from gruc.analysis.liveness import analyse_liveness
from gruc.ir.mapping import distinct
from gruc.ir.module import Module
from gruc.ir.tile_table import TileTable
from gruc.ops import add, dynamic_slice
from gruc.runtime import cost
from gruc.runtime.engine import compile_program
from gruc.tools.gru_layer import GruLayerConfig, build_layer


def per_read(self, reads, traffic) -> None:
    """The definition, one read at a time over its element ids: which (element, receiver) pairs
    move is found here, independently; only the byte counting of those pairs is shared."""
    for tensor, home in reads:
        away = self.graph.element_tiles(tensor) != home
        if not np.any(away):
            continue
        ids = tensor.flat_ids()[away]
        receivers = home[away] if isinstance(home, np.ndarray) else home
        pairs = distinct(ids * self.num_tiles + receivers)
        receivers = pairs % self.num_tiles
        senders = self.graph.element_tiles_of_ids(pairs // self.num_tiles).astype(np.int64)
        traffic.transfers(receivers, senders, tensor.dtype.size, pairs // self.num_tiles)


def per_copy(self, node, compute, traffic) -> None:
    """The definition for a copy: local bytes are copied on the destination's tile, and each
    (source element, receiving tile) pair held elsewhere is one transfer."""
    dst_tiles = self.graph.element_tiles(node.dst).astype(np.int64)
    src_tiles = self.graph.element_tiles(node.src).astype(np.int64)
    away = dst_tiles != src_tiles
    local = np.bincount(dst_tiles[~away], minlength=self.num_tiles) * node.dst.dtype.size
    compute += np.where(local > 0, -(-local // cost.COPY_BYTES_PER_CYCLE), 0)
    if np.any(away):
        per_read(self, [(node.src, dst_tiles)], traffic)


def as_numbers(costs) -> list[tuple]:
    return [(c.compute_by_tile.tolist(), c.bytes_in_by_tile.tolist(), c.bytes_out_by_tile.tolist(),
             c.peers_in_by_tile.tolist(), c.peers_out_by_tile.tolist(), c.compute_cycles,
             c.exchange_cycles, c.sync_cycles) for c in costs]


def exchange_module() -> Module:
    """Copies and elementwise adds whose operands are broadcast (one tile reading an element
    several times: one transfer), spread over two IPUs, or held on other tiles than the elements
    they pair with; a dynamic slice whose vertices, one per tile, read their columns partly from
    other tiles and the offset from tile 0."""
    graph = Graph(Target.custom(tiles_per_ipu=4, num_ipus=2))
    row = graph.add_variable(FLOAT, (1, 12), "row")
    graph.set_tile_mapping(row, [[(0, 5)], [(5, 12)]])
    grid = graph.add_variable(FLOAT, (6, 12), "grid")
    graph.map_tensor_linearly(grid, grain_size=1, min_elements_per_tile=1)
    spread = graph.add_variable(FLOAT, (6, 12), "spread")
    graph.set_tile_mapping(spread, 7)
    prog = Sequence(Copy(row.broadcast(6, 0), spread), Copy(grid.transpose(), spread.reshape((12, 6))))
    total = add(graph, grid, row.broadcast(6, 0), prog)
    add(graph, total, spread.reverse(1), prog)
    add(graph, spread, row.broadcast(6, 0), prog)  # tile 7 reads each row element six times
    offset = graph.add_variable(INT, (1,), "offset")
    graph.set_tile_mapping(offset, 0)
    dynamic_slice(graph, grid, offset, [0], [2], prog)
    # two sequences laid out alike at every step, differently: counted on their first rows
    laid = graph.add_variable(FLOAT, (5, 2, 3), "laid")
    graph.set_tile_mapping(laid, np.array([[0, 1, 2], [3, 4, 5]]))
    relaid = graph.add_variable(FLOAT, (5, 2, 3), "relaid")
    graph.set_tile_mapping(relaid, np.array([[0, 5, 6], [7, 4, 1]]))
    prog.add(Copy(laid, relaid))
    dynamic_slice(graph, relaid, offset, [0], [1], prog)
    # a sequence mapped element by element copied into one laid out alike, and back
    scattered = graph.add_variable(FLOAT, (5, 2, 3), "scattered")
    graph.map_tensor_linearly(scattered, grain_size=1, min_elements_per_tile=1)
    prog.add(Copy(scattered, relaid))
    prog.add(Copy(laid.reverse(2), scattered))
    # a sequence mapped shard by shard (a row a shard) copied from and into one mapped element
    # by element: counted shard by shard, neither expanded
    sharded = graph.add_variable(FLOAT, (5, 2, 3), "sharded")
    graph.set_tile_mapping(sharded[:2], np.array([[1, 2, 3], [4, 5, 6]]))
    graph.set_tile_mapping(sharded[2:], np.array([[6, 0, 0], [7, 3, 2]]))
    assert len(graph.row_pieces(sharded)) == 2 and graph.row_pieces(scattered) is None
    prog.add(Copy(scattered, sharded))
    prog.add(Copy(sharded[1:], scattered[:4]))
    mixed = graph.add_variable(FLOAT, (5, 6), "mixed")  # first and last step on tile 2 only
    graph.set_tile_mapping(mixed, np.array([2, 6, 6, 6, 2])[:, None].repeat(6, 1))
    dynamic_slice(graph, mixed, offset, [0], [1], prog)
    for name, tensor in {"row": row, "grid": grid, "offset": offset, "laid": laid,
                         "mixed": mixed, "scattered": scattered}.items():
        graph.create_host_write(name, tensor)
    return Module(graph, [prog])


@pytest.mark.parametrize("direct", [0, 10 ** 9], ids=["all-direct", "all-batched"])
@pytest.mark.parametrize("batch", [1, 10 ** 9], ids=["batch-1", "one-batch"])
def test_costs_are_the_per_read_definitions(monkeypatch, direct, batch):
    layer = build_layer(GruLayerConfig(sequence_size=3, input_size=6, output_size=5,
                                       batch_size=4, tiles_per_ipu=8, ipus=2, phase="all"))
    compiled = compile_program(layer.graph, layer.programs)
    modules = [(compiled.module.graph, compiled.plan.liveness.steps)]
    module = exchange_module()
    modules.append((module.graph, analyse_liveness(module).steps))
    monkeypatch.setattr(cost, "DIRECT_READ_ELEMENTS", direct)
    monkeypatch.setattr(cost, "READ_BATCH_ELEMENTS", batch)
    found = [as_numbers(cost.step_costs(graph, steps)) for graph, steps in modules]
    monkeypatch.setattr(cost._StepCoster, "remote", per_read)
    monkeypatch.setattr(cost._StepCoster, "copy", per_copy)
    expected = [as_numbers(cost.step_costs(graph, steps)) for graph, steps in modules]
    assert found == expected
    assert any(sum(c[1]) for c in expected[0]) and any(sum(c[1]) for c in expected[1])


def test_costing_a_longer_sequence_gathers_no_more_tiles(monkeypatch):
    """The tile table keeps a sequence whose rows are alike as one row.  Costing a step's column
    picks of it must read them through that row: the largest set of tiles gathered one by one
    is the same for 20 steps as for 60 (taking the picks' source across all steps at once once
    gathered it whole: 7 GB for a 2,000-step layer)."""
    gathered = []
    original = TileTable.gather

    def gather(self, ids):
        gathered.append(np.size(ids))
        return original(self, ids)

    monkeypatch.setattr(TileTable, "gather", gather)
    largest = {}
    for steps in (20, 60):
        layer = build_layer(GruLayerConfig(sequence_size=steps, phase="all", batch_size=64,
                                           input_size=256, output_size=256))
        compiled = compile_program(layer.graph, layer.programs, costs=False)
        gathered.clear()
        cost.step_costs(compiled.module.graph, compiled.plan.liveness.steps)
        largest[steps] = max(gathered, default=0)
    assert largest[60] == largest[20], largest


def test_each_tile_splits_a_superstep_into_its_compute_its_exchange_and_the_wait():
    """Per tile, by hand: a copy of 40 bytes from tile 0 to tile 1 (an exchange of 40 bytes out
    of one and into the other), then a map on tile 2 alone.  A tile's exchange is its own
    traffic at the target's rate, its compute its own, and its sync the rest of the step: the
    sync itself plus the wait for the busiest tile, so every tile's three add up to the total."""
    from gruc import Engine
    from gruc.ir.expr import _1, exp
    from gruc.ops import map_in_place

    target = Target.custom(tiles_per_ipu=4, exchange_bytes_per_cycle=4, sync_cycles=100)
    graph = Graph(target)
    source, dest, work = (graph.add_variable(FLOAT, (size,), name)
                          for name, size in (("source", 10), ("dest", 10), ("work", 64)))
    for tile, tensor in enumerate((source, dest, work)):
        graph.set_tile_mapping(tensor, tile)
    prog = Sequence(Copy(source, dest))
    map_in_place(graph, exp(_1), [work], prog)
    for name, tensor in {"source": source, "work": work}.items():
        graph.create_host_write(name, tensor)
    graph.create_host_read("dest", dest)
    engine = Engine(graph, prog, pipeline="")
    engine.write_tensor("source", np.ones(10, np.float32))
    engine.write_tensor("work", np.zeros(64, np.float32))
    engine.run()
    report = engine.report
    copy, mapped = [c for c, n in zip(report.costs, report.step_counts) if n]
    assert copy.exchange_by_tile.tolist() == [10, 10, 0, 0]       # 40 bytes at 4 a cycle
    assert copy.compute_by_tile.tolist() == [0, 0, 0, 0]
    assert copy.sync_by_tile.tolist() == [100, 100, 110, 110]     # tiles 2 and 3 wait out the copy
    busy = int(mapped.compute_by_tile[2])
    assert busy > 0 and mapped.compute_by_tile.tolist() == [0, 0, busy, 0]
    assert mapped.exchange_by_tile.tolist() == [0, 0, 0, 0]
    assert mapped.sync_by_tile.tolist() == [100 + busy, 100 + busy, 100, 100 + busy]
    compute = report.compute_cycles_by_tile
    exchange = report.exchange_cycles_by_tile
    sync = report.sync_cycles_by_tile
    assert exchange.tolist() == [10, 10, 0, 0]
    assert (compute + exchange + sync == report.cycles.total).all()
    cycles = report.to_dict()["cycles"]
    assert cycles["exchange_by_tile"] == exchange.tolist()
    assert cycles["sync_by_tile"] == sync.tolist()
    busiest = f"busiest tile      2: {busy} compute + 0 exchange + 210 sync"
    assert busiest in report.summary_lines()[-2]
    events = engine.chrome_trace()["traceEvents"]   # a track per tile: tid = tile + 1
    assert {e["tid"] for e in events if e.get("cat") == "exchange"} == {1, 2}


def test_a_gru_layers_tiles_each_add_up_to_the_steps_cycles():
    """On a sharded training layer (copies, slices and matmuls, exchange on most steps): every
    step's busiest exchanging tile takes the step's exchange cycles, no tile waits a negative
    time, and every tile's compute, exchange and sync add up to the step's total."""
    layer = build_layer(GruLayerConfig(sequence_size=6, batch_size=4, input_size=8, output_size=8,
                                       phase="all", shards=2, tiles_per_ipu=16))
    costs = compile_program(layer.graph, layer.programs).costs
    assert sum(int(c.exchange_cycles > 0) for c in costs) > 5
    for c in costs:
        assert int(c.exchange_by_tile.max(initial=0)) == c.exchange_cycles
        assert (c.sync_by_tile >= c.sync_cycles).all()
        assert (c.compute_by_tile + c.exchange_by_tile + c.sync_by_tile == c.total_cycles).all()
