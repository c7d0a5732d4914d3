"""dce (SPEC G4): steps whose results nothing reads go; everything observable stays."""

from __future__ import annotations

from collections import Counter

from gruc import (FLOAT, Copy, Execute, Graph, Module, PrintTensor, Repeat, Sequence, Target,
                  WriteUndef)
from gruc.ir.expr import _1, _2, Const
from gruc.ir.graph_copy import without_unused
from gruc.ir.verify import verify
from gruc.ops import map, map_in_place
from gruc.passes.pipeline import run_pipeline
from gruc.tools.gru_layer import GruLayerConfig, build_layer

T4 = Target.custom(tiles_per_ipu=4)


def graph_with_input():
    g = Graph(T4)
    x = g.add_variable(FLOAT, (4, 8), "x")
    g.map_tensor_linearly(x)
    g.create_host_write("x", x)
    return g, x


def leaves(module):
    return [n for n in module.programs[0].walk() if not isinstance(n, (Sequence, Repeat))]


def described(node):
    """A leaf by what it does, the same for a leaf and its copy in a graph dce made."""
    if isinstance(node, Execute):
        return ("execute", node.compute_set.name)
    if isinstance(node, Copy):
        return ("copy", tuple(v.name for v in node.src.variables()),
                tuple(v.name for v in node.dst.variables()))
    return (type(node).__name__,)


def test_values_read_in_the_next_iteration_are_kept():
    g, x = graph_with_input()
    acc = g.add_variable(FLOAT, (4, 8), "acc")
    g.map_tensor_linearly(acc)
    body = Sequence()
    carried = map(g, _1 + _2, [acc, x], body, "carried")   # read back at the top of the body
    body.add(Copy(carried, acc))
    g.create_host_read("acc", acc)
    prog = Sequence(Copy(x, acc), Repeat(3, body))
    after = run_pipeline(Module(g, [prog]), "dce", verify_each=True).module
    assert after.programs[0] is prog


def test_dead_steps_go_and_observable_ones_stay():
    g, x = graph_with_input()
    prog = Sequence()
    unused = map(g, _1 * Const(2.0), [x], prog, "unused")
    map_in_place(g, _1 + Const(1.0), [unused], prog, "still_unused")
    kept = map(g, _1 - Const(1.0), [x], prog, "kept")
    printed = map(g, _1 * _1, [x], prog, "printed")
    prog.add(PrintTensor("printed", printed))
    prog.add(WriteUndef(unused))
    g.create_host_read("kept", kept)
    after = run_pipeline(Module(g, [prog]), "dce", verify_each=True).module
    names = [n.compute_set.name if isinstance(n, Execute) else type(n).__name__
             for n in leaves(after)]
    assert names == ["kept", "printed", "PrintTensor", "WriteUndef"]


def test_gru_training_forward_keeps_everything_it_exposes():
    layer = build_layer(GruLayerConfig(sequence_size=2, input_size=8, output_size=4,
                                       batch_size=2, tiles_per_ipu=4, save_intermediates=True))
    module = run_pipeline(Module(layer.graph, layer.programs), "canonicalize", verify_each=True).module
    after = run_pipeline(module, "dce", verify_each=True).module
    removed = Counter(descriptions(module)) - Counter(descriptions(after))
    assert removed and all(kind == "copy" and dst == ("gru/begin",)
                           for kind, *_, dst in removed)  # only the unread shard start


def descriptions(module):
    return [described(n) for n in leaves(module)]


def test_what_nothing_uses_goes_from_the_graph_and_the_callers_graph_keeps_it():
    layer = build_layer(GruLayerConfig(sequence_size=2, input_size=8, output_size=4,
                                       batch_size=2, tiles_per_ipu=4))
    before = Module(layer.graph, layer.programs)
    built = [list(table) for table in (layer.graph.variables, layer.graph.compute_sets)]
    fused = run_pipeline(before, "canonicalize,inplace-fusion,copy-elim", verify_each=True).module
    replaced = len(fused.graph.compute_sets) - len(_executed(fused))
    after = run_pipeline(fused, "dce", verify_each=True).module
    assert replaced > 0 and after.graph is not layer.graph
    assert len(after.graph.compute_sets) == len(_executed(after)) == len(_executed(fused))
    assert without_unused(after) is after  # no compute set, function or variable left unused
    assert len(after.graph.variables) < len(layer.graph.variables)
    for table, kept in zip((layer.graph.variables, layer.graph.compute_sets), built):
        assert table[:len(kept)] == kept  # the caller's graph: only extended (fusion's sets)
    verify(before)  # and its programs still valid as built


def _executed(module):
    return {id(node.compute_set) for node in module.walk() if isinstance(node, Execute)}
