"""copy-elim (SPEC G4): self-copies, dead copies and duplicates go; results are identical."""

from __future__ import annotations

import numpy as np

from gruc import FLOAT, Copy, Engine, Graph, Module, Repeat, Sequence, Target, WriteUndef
from gruc.ir.expr import _1, _2, Const
from gruc.memory.planner import plan_memory
from gruc.ops import map
from gruc.passes.copy_elim import CopyElimination
from gruc.passes.pipeline import parse_pipeline, run_pipeline
from gruc.tools.gru_layer import GruLayerConfig, build_layer

T4 = Target.custom(tiles_per_ipu=4)


def copies(module):
    return [n for n in module.walk() if isinstance(n, Copy)]


def test_the_gru_input_sequence_is_read_where_the_host_wrote_it():
    layer = build_layer(GruLayerConfig(sequence_size=200, input_size=16, output_size=8,
                                       batch_size=2, tiles_per_ipu=20, shards=3))
    before = Module(layer.graph, layer.programs)
    after = run_pipeline(before, "copy-elim", verify_each=True).module
    destinations = [[c.dst.variables()[0].name for c in copies(m)] for m in (before, after)]
    for name in ["gru/input", "gru/state", "gru/begin", "gru/begin", "gru/begin"]:
        destinations[0].remove(name)  # a duplicate of the host's input and state; unread starts
    assert destinations[0] == destinations[1]
    assert plan_memory(after).not_always_live_bytes.max() < \
        plan_memory(before).not_always_live_bytes.max() / 4


def test_a_destination_declared_dead_or_rewritten_in_a_loop_is_not_forwarded():
    g = Graph(T4)
    x = g.add_variable(FLOAT, (8,), "x")
    g.set_tile_mapping(x, 0)
    seq = g.add_variable(FLOAT, (8,), "seq")
    g.set_tile_mapping(seq, 0)
    body = Sequence()
    out = map(g, _1 + _2, [seq, x], body, "out")
    body.add(Copy(out, seq))                          # seq is rewritten every iteration
    g.create_host_write("x", x)
    g.create_host_read("out", out)
    prog = Sequence(WriteUndef(seq), Copy(x, seq), Repeat(3, body))
    after = run_pipeline(Module(g, [prog]), "copy-elim", verify_each=True).module
    assert after.programs[0] is prog
    engine = Engine(g, after.programs, pipeline="", backend="numpy")
    engine.write_tensor("x", np.ones(8))
    engine.run()
    np.testing.assert_array_equal(engine.read_tensor("out"), np.full(8, 4.0))


def test_forwarding_can_be_switched_off():
    assert parse_pipeline("copy-elim{forward=false}") == [CopyElimination(forward=False)]
    g = Graph(T4)
    x = g.add_variable(FLOAT, (8,), "x")
    g.set_tile_mapping(x, 0)
    dup = g.add_variable(FLOAT, (8,), "dup")
    g.set_tile_mapping(dup, 0)
    prog = Sequence(Copy(x, dup))
    y = map(g, _1 * Const(2.0), [dup], prog, "y")
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    module = Module(g, [prog])
    assert len(copies(run_pipeline(module, "copy-elim{forward=false}").module)) == 1
    assert len(copies(run_pipeline(module, "copy-elim").module)) == 0
