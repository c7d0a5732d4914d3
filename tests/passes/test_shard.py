"""The ``shard`` pass (SPEC G2): RNN time loops split into shards on disjoint tile sets.

The layer cases are the issue's: the 16x2x8 S=200 GRU on 20 tiles, built with one shard and
sharded by the pass into 1, 3 and 5 shards — results bit for bit those of the unsharded run, the
peak sequence bytes per tile falling as shards rise, and every sequence tensor's shards on
disjoint tile sets.  Small hand-sized loops are in the goldens (``tests/passes/shard/``).
"""

from __future__ import annotations

import numpy as np
import pytest

from gruc import FLOAT, Graph, Target
from gruc.analysis.time_loops import find_time_loops
from gruc.cli import main
from gruc.errors import GrucError, GrucOptionError
from gruc.ir.expr import PlaceHolder
from gruc.ir.module import Module
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from gruc.ir.program import Repeat, Sequence, TimeLoop
from gruc.ops.elementwise import map_in_place
from gruc.ops.rnn import create_initial_state, create_input_tensor, create_output_tensor, rnn
from gruc.passes.pipeline import run_pipeline
from gruc.passes.shard import sequence_variables, shard_count
from gruc.rnn_geometry import RnnParams, shard_time_bounds
from gruc.runtime.engine import Engine
from gruc.tools.gru_layer import GruLayerConfig, build_layer, host_data

LAYER = dict(sequence_size=200, input_size=16, output_size=8, batch_size=2, tiles_per_ipu=20)


def run_layer(config: GruLayerConfig, pipeline: str):
    """Outputs, per-tile bytes of the sequence tensors, and the module, after ``pipeline``."""
    layer = build_layer(config)
    before = Module(layer.graph, layer.programs)
    sequences = sequence_variables(before)
    module = run_pipeline(before, pipeline, verify_each=True).module if pipeline else before
    engine = Engine(module.graph, module.programs, pipeline="")
    data, _ = host_data(config)
    rng = np.random.default_rng(7)
    values = {"input": data.x, "init_state": data.h0, "input_weights": data.input_weights,
              "output_weights": data.output_weights, "biases": data.biases}
    for name, tensor in layer.writes.items():
        engine.write_tensor(name, values.get(name, rng.uniform(-1, 1, tensor.shape)))
    engine.run()
    per_tile = np.zeros(module.graph.target.num_tiles, dtype=np.int64)
    for variable in sequences:  # same indices in the pass's copy of the graph
        for tile, _, nbytes in engine.plan.blocks(variable.index):
            per_tile[tile] += nbytes
    return {name: engine.read_tensor(name) for name in layer.reads}, per_tile, before, module


def assert_disjoint_shards(before: Module, after: Module, count: int) -> None:
    """Every sequence tensor's time shards sit on pairwise disjoint tile sets."""
    for loop in find_time_loops(before)[0]:
        bounds = shard_time_bounds(loop.steps, count)
        for v, (ids, rows) in loop.rows.items():
            tiles = after.graph.element_tiles_of_ids(ids)
            sets = [set(tiles[(rows >= b) & (rows < e)].tolist()) for b, e in bounds if e > b]
            assert sum(map(len, sets)) == len(set().union(*sets)), before.graph.variables[v].name


@pytest.mark.parametrize("phase", ["fwd", "all"])
def test_shards_1_3_5_identical_and_peak_sequence_bytes_fall(phase):
    config = GruLayerConfig(**LAYER, shards=1, phase=phase)
    baseline, base_bytes, _, _ = run_layer(config, "")
    peaks = [int(base_bytes.max())]
    for count in (1, 3, 5):
        outputs, per_tile, before, after = run_layer(config, f"shard{{num-shards={count}}}")
        for name, value in baseline.items():
            assert np.array_equal(outputs[name], value), (count, name)
        assert_disjoint_shards(before, after, count)
        loops = [n for n in after.walk() if isinstance(n, Repeat)]
        assert len(loops) == count * len(find_time_loops(before)[0])
        peaks.append(int(per_tile.max()))
    assert peaks[0] == peaks[1] > peaks[2] > peaks[3], peaks
    assert peaks[3] * 4 < peaks[0]  # 5 shards: nearly a fifth of the bytes on the busiest tile


def test_pass_matches_the_builders_placement_and_leaves_the_callers_graph_alone():
    built = build_layer(GruLayerConfig(**LAYER, shards=3))
    layer = build_layer(GruLayerConfig(**LAYER, shards=1))
    module = Module(layer.graph, layer.programs)
    text = print_module(module)
    after = run_pipeline(module, "shard{num-shards=3}", verify_each=True).module
    assert print_module(module) == text
    assert after.graph is not layer.graph
    names = {v.name: v for v in built.graph.variables}
    for variable in sequence_variables(module):
        mine = after.graph.variables[variable.index]
        assert np.array_equal(after.graph.element_tiles(mine),
                              built.graph.element_tiles(names[variable.name])), variable.name


@pytest.mark.parametrize("phase", ["fwd", "bwd", "all"])
def test_already_sharded_module_is_kept_for_its_count_and_refused_otherwise(phase):
    """The backward pass keeps per-shard buffers (the previous outputs) that one shard's loop
    reads whole: they must not hide the count of the tensors cut between loops."""
    layer = build_layer(GruLayerConfig(**LAYER, shards=3, phase=phase))
    module = Module(layer.graph, layer.programs)
    for pipeline in ("shard{num-shards=3}", "shard"):
        kept = run_pipeline(module, pipeline, verify_each=True).module
        assert kept.programs == module.programs and kept.graph is layer.graph
    assert shard_count(module) == 3
    with pytest.raises(GrucError, match=r"pass 'shard'.*already split into 3 shards"):
        run_pipeline(module, "shard{num-shards=5}")


@pytest.mark.parametrize("pipeline, message", [
    ("shard{num-shards=11}", r"pass 'shard'.*option 'num-shards' is 11.*allowed 1\.\.10"),
    ("shard{num-shards=-1}", r"pass 'shard'.*option 'num-shards' must be an integer >= 1"),
    ("shard{num-shards=two}", r"pass 'shard' option 'num-shards'.*not a valid int"),
    ("shard{shards=2}", r"pass 'shard' has no option 'shards'; options: num-shards"),
])
def test_bad_options_name_the_pass_and_the_option(pipeline, message):
    layer = build_layer(GruLayerConfig(**LAYER, shards=1))
    with pytest.raises(GrucOptionError, match=message):
        run_pipeline(Module(layer.graph, layer.programs), pipeline)


def test_variable_length_loops_are_refused():
    layer = build_layer(GruLayerConfig(**LAYER, shards=1, variable_time_steps=(150,)))
    with pytest.raises(GrucError, match=r"pass 'shard'.*variable-length"):
        run_pipeline(Module(layer.graph, layer.programs), "shard{num-shards=3}")


def small_loop(bytes_per_tile: int) -> tuple[Module, dict[str, np.ndarray]]:
    """h += x[t]; y[t] = h over 40 steps of [2, 8] rows on 8 tiles."""
    graph = Graph(Target.custom(tiles_per_ipu=8, bytes_per_tile=bytes_per_tile))
    params = RnnParams(dtype=FLOAT, batch_size=2, max_time_steps=40, layer_sizes=(8, 8))
    x = create_input_tensor(graph, params, 1, "x")
    y = create_output_tensor(graph, params, 1, "y")
    h0 = create_initial_state(graph, params, True, 1, 1, "h0")
    prog = Sequence()

    def cell(g, step, state, slices, created, body):
        map_in_place(g, PlaceHolder(1) + PlaceHolder(2), [state[0], slices.inputs[0]], body, "cell")
        created[0] = state[0]

    rnn(graph, params, init_state=[h0.reshape([2, 8])], inputs=[x], created=[y], prog=prog,
        loop_fn=cell, num_shards=1, name="loop")
    graph.create_host_write("x", x)
    graph.create_host_write("h0", h0)
    graph.create_host_read("y", y)
    rng = np.random.default_rng(3)
    return Module(graph, [prog]), {"x": rng.uniform(-1, 1, x.shape), "h0": rng.uniform(-1, 1, h0.shape)}


def test_heuristic_keeps_the_sequences_within_a_tenth_of_a_tile():
    # x and y: 40 steps x 8 floats = 1280 bytes each on tiles 3 and 7; a tenth of 8000 is 800
    module, values = small_loop(8000)
    sharded = run_pipeline(module, "shard", verify_each=True).module
    assert sum(isinstance(n, Repeat) for n in sharded.walk()) == 4  # ceil(2560 / 800)
    results = []
    for m in (module, sharded):
        engine = Engine(m.graph, m.programs, pipeline="")
        for name, value in values.items():
            engine.write_tensor(name, value)
        engine.run()
        results.append(engine.read_tensor("y"))
        per_tile = np.zeros(8, dtype=np.int64)
        for variable in sequence_variables(module):
            for tile, _, nbytes in engine.plan.blocks(variable.index):
                per_tile[tile] += nbytes
    assert np.array_equal(results[0], results[1])
    assert per_tile.max() <= 800
    roomy = run_pipeline(module, "shard", verify_each=True).module
    assert sum(isinstance(n, Repeat) for n in roomy.walk()) == 4  # same module, same choice
    assert sum(isinstance(n, Repeat) for n in run_pipeline(
        small_loop(638976)[0], "shard").module.walk()) == 1


def _loop_text(step: int) -> str:
    """A time loop written by hand: ``h = tanh(h + x[t]); y[t] = h`` over 6 steps of ``[2, 8]``
    rows, each row's two halves on tiles 2 and 5 (time-major), the counter on tile 0 moved by
    ``step`` last in the body (a reverse loop starts it at the last row)."""
    header = print_module(Module(Graph(Target.custom(tiles_per_ipu=8)), [])).splitlines()[0]
    rows = ", ".join(["2:8:3 x 8"] * 6)
    start, advance = (0, "add(_1, const(1:u32))") if step == 1 else (5, "sub(_1, const(1:u32))")
    return f"""{header}
%x = var f32[6,2,8] "x" map=[{rows}]
%y = var f32[6,2,8] "y" map=[{rows}]
%h = var f32[2,8] "h" map=[2:8:3 x 8]
%t = var u32[1] "t" map=[0 x 1]
%start = const u32[1] "start" map=[0 x 1] values=[{start}]
%xt = var f32[1,16] "xt" map=[2:8:3 x 8]
%x16 = reshape %x shape=[6,16] : f32[6,16]
%xa = slice %x16 [0:6, 0:8] : f32[6,8]
%xb = slice %x16 [0:6, 8:16] : f32[6,8]
%xta = slice %xt [0:1, 0:8] : f32[1,8]
%xtb = slice %xt [0:1, 8:16] : f32[1,8]
%y16 = reshape %y shape=[6,16] : f32[6,16]
%ya = slice %y16 [0:6, 0:8] : f32[6,8]
%yb = slice %y16 [0:6, 8:16] : f32[6,8]
%h16 = reshape %h shape=[1,16] : f32[1,16]
%ha = slice %h16 [0:1, 0:8] : f32[1,8]
%hb = slice %h16 [0:1, 8:16] : f32[1,8]
%xt2 = reshape %xt shape=[2,8] : f32[2,8]
host_write "x" %x
host_write "h" %h
host_read "y" %y
cs @slice {{
  DynamicSlice(offset=%t, base=%xa, out=%xta) tile=2
  DynamicSlice(offset=%t, base=%xb, out=%xtb) tile=5
}}
cs @cell {{
  MapInPlace(inout=%h, ins=[%xt2]) expr=tanh(add(_1, _2))
}}
cs @store {{
  DynamicUpdate(offset=%t, base=%ya, update=%ha) tile=2
  DynamicUpdate(offset=%t, base=%yb, update=%hb) tile=5
}}
cs @advance {{
  MapInPlace(inout=%t, ins=[]) expr={advance}
}}
program 0 {{
  timeloop {"forward" if step == 1 else "reverse"} first 0 steps 6 shard 0 of 1 {{
    copy %start -> %t
    repeat 6 {{
      execute @slice
      execute @cell
      execute @store
      execute @advance
    }}
  }}
}}
"""


@pytest.mark.parametrize("step", [1, -1])
def test_a_time_loop_written_by_hand_sharded_by_gruc_opt_runs_bit_identical(step, tmp_path,
                                                                            capsys):
    """Issue 43's check: a time loop written as text IR, split by ``gruc opt -p shard``, gives
    the unsharded loop's results bit for bit, each shard's rows on tiles of its own."""
    (tmp_path / "loop.gruc").write_text(_loop_text(step))
    assert main(["opt", str(tmp_path / "loop.gruc"), "-p", "shard{num-shards=3}",
                 "--verify-each", "-o", str(tmp_path / "sharded.gruc")]) == 0
    assert capsys.readouterr().err == ""
    modules = [parse_module((tmp_path / name).read_text()) for name in ("loop.gruc",
                                                                        "sharded.gruc")]
    assert [sum(isinstance(n, Repeat) for n in m.walk()) for m in modules] == [1, 3]
    loops = [n for n in modules[1].walk() if isinstance(n, TimeLoop)]
    assert [(n.shard, n.shards, n.first_step, n.steps, n.reverse) for n in loops] == [
        (k, 3, 2 * k, 2, step == -1) for k in (range(3) if step == 1 else (2, 1, 0))]
    rng = np.random.default_rng(11)
    values = {"x": rng.uniform(-2, 2, (6, 2, 8)), "h": rng.uniform(-1, 1, (2, 8))}
    results = []
    for module in modules:
        engine = Engine(module.graph, module.programs, pipeline="")
        for name, value in values.items():
            engine.write_tensor(name, value)
        engine.run()
        results.append(engine.read_tensor("y"))
    assert np.array_equal(results[0], results[1])
    expected, h = np.zeros((6, 2, 8)), values["h"].astype(np.float32)
    for t in (range(6) if step == 1 else range(5, -1, -1)):
        h = np.tanh(h + values["x"][t].astype(np.float32))
        expected[t] = h
    np.testing.assert_allclose(results[0], expected, rtol=1e-6, atol=1e-6)
    x = modules[1].graph.variables[0]
    tiles = modules[1].graph.element_tiles(x).reshape(6, 16)
    shard_tiles = [set(tiles[2 * k:2 * k + 2].ravel().tolist()) for k in range(3)]
    assert all(not a & b for a in shard_tiles for b in shard_tiles if a is not b), shard_tiles
