"""The networkx views of a module's dataflow."""

import networkx as nx

from gruc import (FLOAT, Call, Copy, Graph, If, Module, Repeat, RepeatWhileTrue, Sequence, Target,
                  WriteUndef)
from gruc.analysis.dataflow import critical_path, dataflow_graph, step_dependencies
from gruc.ir.expr import _1, Const
from gruc.ir.graph import Function
from gruc.ops import map, map_in_place


def small_module():
    g = Graph(Target.custom(tiles_per_ipu=4))
    x = g.add_variable(FLOAT, (8,), "x")
    g.map_tensor_linearly(x)
    prog = Sequence()
    a = map(g, _1 * Const(2.0), [x], prog, "a")        # step 0 reads x, writes a
    b = map(g, _1 + Const(1.0), [x], prog, "b")        # step 1 reads x, writes b (independent of 0)
    body = Sequence()
    map_in_place(g, _1 * _1, [a], body)                # step 2: in place on a, in a loop
    prog.add(Repeat(3, body))
    c = g.clone(a, "c")
    prog.add(Copy(b, c))                                # step 3 overwrites c with b
    prog.add(WriteUndef(a))                             # step 4 kills a
    g.create_host_write("x", x)
    g.create_host_read("c", c)
    return Module(g, [prog]), (x, a, b, c)


def test_bipartite_view_has_read_and_write_edges_and_in_place_cycles():
    module, (x, a, b, c) = small_module()
    flow = dataflow_graph(module)
    assert flow.has_edge(("var", x.index), ("step", 0)) and flow.has_edge(("step", 0), ("var", a.index))
    assert flow.edges[("step", 0), ("var", a.index)]["full"]
    assert flow.has_edge(("var", a.index), ("step", 2)) and flow.has_edge(("step", 2), ("var", a.index))
    assert not nx.is_directed_acyclic_graph(flow)  # the in-place update is a cycle
    assert flow.nodes[("var", b.index)]["nbytes"] == 32


def test_step_dependencies_form_a_dag_with_the_right_hazards():
    module, _ = small_module()
    dag = step_dependencies(module)
    assert nx.is_directed_acyclic_graph(dag)
    assert dag.edges[0, 2]["kinds"] == {"raw", "waw"}  # in place: reads and rewrites a
    assert dag.edges[1, 3]["kinds"] == {"raw"}
    assert dag.edges[2, 4]["kinds"] == {"waw"}  # WriteUndef after the last write of a
    assert not dag.has_edge(0, 1)                      # both only read x: independent
    levels = [sorted(level) for level in nx.topological_generations(dag)]
    assert levels[0] == [0, 1]


def test_critical_path_weights_steps():
    module, _ = small_module()
    dag = step_dependencies(module)
    path, length = critical_path(dag, lambda k: 10.0 if k == 1 else 1.0)
    assert path == [1, 3] and length == 11.0
    path, length = critical_path(dag, lambda k: 1.0)
    assert length == 3.0 and path == [0, 2, 4]


def test_steps_are_numbered_as_liveness_and_the_report_number_them():
    from gruc.analysis.liveness import analyse_liveness

    g = Graph(Target.custom(tiles_per_ipu=2))
    x, y, p = (g.add_variable(FLOAT, (4,), name) for name in "xyp")
    for v in (x, y, p):
        g.set_tile_mapping(v, 0)
    listed = g.add_function(Sequence(Copy(x, y)), "listed")
    unlisted = Function("unlisted", Sequence(Copy(y, x), Call(listed)))  # found through a Call
    prog = Sequence(Call(unlisted),
                    RepeatWhileTrue(Copy(x[0:1], p[0:1]), p[0:1], Copy(x, y)),  # condition first
                    If(p[0:1], Copy(y, x), Sequence(Copy(x, y))), Call(listed))
    module = Module(g, [prog])
    numbered = [step.node for step in analyse_liveness(module).steps]
    assert len(numbered) == 8
    assert [dataflow_graph(module).nodes["step", k]["node"] for k in range(8)] == numbered
