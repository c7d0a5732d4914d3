"""exchange (SPEC G4): after it every vertex is local, results are identical, and the exchange
bytes the report counts — in total and per tile — do not change."""

from __future__ import annotations

import numpy as np
import pytest

from gruc import FLOAT, Copy, Engine, Execute, Graph, Module, Sequence, Target
from gruc.errors import GrucVerifyError
from gruc.ir.expr import _1, _2
from gruc.ir.verify import verify
from gruc.passes.pipeline import run_pipeline
from gruc.tools.gru_layer import GruLayerConfig, build_layer, host_data

T4 = Target.custom(tiles_per_ipu=4)


def run(graph, programs, data, reads):
    engine = Engine(graph, programs, pipeline="", backend="numpy")
    for name, value in data.items():
        engine.write_tensor(name, value)
    engine.run()
    return engine, {name: engine.read_tensor(name) for name in reads}


@pytest.mark.parametrize("code_reuse", [False, True])
def test_gru_forward_becomes_local_with_the_same_results_and_exchange_bytes(code_reuse):
    config = GruLayerConfig(sequence_size=4, input_size=16, output_size=8, batch_size=2,
                            tiles_per_ipu=20, shards=2, code_reuse=code_reuse, backend="numpy")
    layer = build_layer(config)
    before = Module(layer.graph, layer.programs)
    with pytest.raises(GrucVerifyError, match="exchange them first"):
        verify(before, require_local=True)
    plain_engine, plain = run(layer.graph, layer.programs, values(config), layer.reads)
    after = run_pipeline(before, "exchange", verify_each=True).module
    verify(after, require_local=True)  # function bodies included
    engine, got = run(layer.graph, after.programs, values(config), layer.reads)
    for name in layer.reads:
        np.testing.assert_array_equal(got[name], plain[name])
    assert engine.report.exchange_bytes == plain_engine.report.exchange_bytes
    np.testing.assert_array_equal(engine.report.exchange_bytes_by_tile,
                                  plain_engine.report.exchange_bytes_by_tile)
    assert engine.report.cycles.sync > plain_engine.report.cycles.sync  # the copies' supersteps


def values(config):
    data, _ = host_data(config)
    return {"input": data.x, "init_state": data.h0, "input_weights": data.input_weights,
            "output_weights": data.output_weights, "biases": data.biases}


def test_a_remote_in_place_operand_is_copied_in_and_back():
    g = Graph(T4)
    acc = g.add_variable(FLOAT, (8,), "acc")
    g.set_tile_mapping(acc, 1)
    step = g.add_variable(FLOAT, (8,), "step")
    g.set_tile_mapping(step, 2)
    cs = g.add_compute_set("update")
    g.add_vertex(cs, "MapInPlace", {"inout": acc, "ins": [step]}, tile=3, expr=_1 + _2 * _2)
    g.create_host_write("acc", acc)
    g.create_host_write("step", step)
    g.create_host_read("acc", acc)
    prog = Sequence(Execute(cs), Execute(cs))
    after = run_pipeline(Module(g, [prog]), "exchange", verify_each=True).module
    verify(after, require_local=True)
    leaves = [type(n).__name__ for n in after.programs[0].walk() if not isinstance(n, Sequence)]
    assert leaves == ["Copy", "Execute", "Copy"] * 2
    data = {"acc": np.arange(8.0), "step": np.full(8, 3.0)}
    _, plain = run(g, [prog], data, ["acc"])
    _, got = run(g, after.programs, data, ["acc"])
    np.testing.assert_array_equal(got["acc"], plain["acc"])
    np.testing.assert_array_equal(got["acc"], np.arange(8.0) + 18.0)


def test_local_compute_sets_and_copies_are_untouched():
    g = Graph(T4)
    x = g.add_variable(FLOAT, (8,), "x")
    g.set_tile_mapping(x, 1)
    y = g.add_variable(FLOAT, (8,), "y")
    g.set_tile_mapping(y, 2)
    cs = g.add_compute_set("local")
    g.add_vertex(cs, "MapInPlace", {"inout": x, "ins": []}, expr=_1 * _1)
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    prog = Sequence(Execute(cs), Copy(x, y))
    after = run_pipeline(Module(g, [prog]), "exchange", verify_each=True).module
    assert after.programs[0] is prog
