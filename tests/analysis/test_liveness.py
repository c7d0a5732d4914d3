"""Liveness: worked examples, and a property test against liveness recomputed on executed traces.

The random-module builder and the program simulator defined here are reused by
``test_plan_memory.py`` (loaded by path, so either file runs alone).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gruc import (Call, Copy, Execute, FLOAT, Graph, GrucProgramError, HALF, If, Module,
                  PrintTensor, Repeat, RepeatWhileTrue, Sequence, Sync, Target, WriteUndef)
from gruc.analysis.liveness import Liveness, analyse_liveness
from gruc.ir.effects import vertex_tensors
from gruc.ir.expr import _1

TARGET = Target.custom(tiles_per_ipu=4, bytes_per_tile=4096)


# ---- helpers ------------------------------------------------------------------------------------
def make_graph(*specs, target=TARGET):
    """A graph with one variable per ``(name, size)`` spec, each mapped to tile 0."""
    graph = Graph(target)
    result = []
    for name, size in specs:
        v = graph.add_variable(FLOAT, [size], name)
        graph.set_tile_mapping(v, 0)
        result.append(v)
    return graph, result


def index(graph, var):
    return graph.variables.index(var)


def live_names(graph, liveness: Liveness, step: int) -> set[str]:
    return {graph.variables[v].name for v in liveness.not_always_live_at(step)}


def steps_of(liveness: Liveness, var_index: int) -> list[int]:
    return liveness.live_step_list(var_index)


def map_step(graph, out, src):
    cs = graph.add_compute_set()
    graph.add_vertex(cs, "Map", {"out": out, "ins": [src]}, expr=_1)
    return Execute(cs)


# ---- worked examples ----------------------------------------------------------------------------
def test_straight_line_temporaries_have_disjoint_lifetimes():
    g, (x, t1, t2, y) = make_graph(("x", 8), ("t1", 8), ("t2", 8), ("y", 8))
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    prog = Sequence(Copy(x, t1), Copy(t1, y), Copy(y, t2), Copy(t2, y))
    lv = analyse_liveness(Module(g, [prog]))
    assert [s.text for s in lv.steps] == ["Copy x -> t1", "Copy t1 -> y", "Copy y -> t2",
                                          "Copy t2 -> y"]
    assert str(lv.steps[0]) == "0: program 0: Copy x -> t1"
    assert lv.always_live == {index(g, x), index(g, y)}
    assert steps_of(lv, index(g, t1)) == [0, 1]
    assert steps_of(lv, index(g, t2)) == [2, 3]
    assert not lv.interferes(index(g, t1), index(g, t2))
    assert lv.interferes(index(g, t1), index(g, x))  # always-live interferes with everything
    assert lv.live_at(0) == {index(g, x), index(g, y), index(g, t1)}


def test_value_carried_across_repeat_is_live_for_the_whole_loop():
    # acc = 0; repeat 5: (other is a temporary), tmp = acc, acc[2:4] = tmp[0:2]; out = acc
    # acc's value from iteration k is read in iteration k+1: it is live for the whole loop
    g, (zero, acc, tmp, other, out) = make_graph(("zero", 4), ("acc", 4), ("tmp", 4),
                                                 ("other", 4), ("out", 4))
    g.create_host_write("zero", zero)
    g.create_host_read("out", out)
    body = Sequence(Copy(zero, other), Copy(other, zero), Copy(acc, tmp), Copy(tmp[0:2], acc[2:4]))
    prog = Sequence(Copy(zero, acc), Repeat(5, body), Copy(acc, out))
    lv = analyse_liveness(Module(g, [prog]))
    assert len(lv.steps) == 6
    assert steps_of(lv, index(g, acc)) == [0, 1, 2, 3, 4, 5]
    assert steps_of(lv, index(g, tmp)) == [3, 4]
    assert steps_of(lv, index(g, other)) == [1, 2]
    assert lv.interferes(index(g, acc), index(g, other))
    assert not lv.interferes(index(g, tmp), index(g, other))
    assert lv.steps[1].where == "program 0/repeat 5"


def test_value_read_only_in_the_next_iteration():
    # body: b = a; a = c -- a's value from the previous iteration is read at the top
    g, (a, b, c) = make_graph(("a", 4), ("b", 4), ("c", 4))
    loop = Repeat(3, Sequence(Copy(a, b), Copy(c, a), WriteUndef(b)))
    prog = Sequence(Copy(c, a), loop)
    g.create_host_write("c", c)
    lv = analyse_liveness(Module(g, [prog]))
    ia = index(g, a)
    # a is live at the copy that overwrites it (written there) and at the back edge
    assert steps_of(lv, ia) == [0, 1, 2, 3]


def test_write_undef_ends_liveness():
    g, (x, big, t, y) = make_graph(("x", 4), ("big", 4), ("t", 4), ("y", 4))
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    # big is partially written then read, killed, then t is used
    prog = Sequence(WriteUndef(big), Copy(x[0:2], big[0:2]), Copy(x[2:4], big[2:4]),
                    Copy(big, y), WriteUndef(big), Copy(x, t), Copy(t, y))
    lv = analyse_liveness(Module(g, [prog]))
    ib, it = index(g, big), index(g, t)
    assert ib not in lv.always_live  # the leading WriteUndef makes it not-always-live
    assert steps_of(lv, ib) == [1, 2, 3]
    assert steps_of(lv, it) == [5, 6]
    assert not lv.interferes(ib, it)
    # without the leading WriteUndef the partial writes do not end liveness: always-live
    g2, (x2, big2, y2) = make_graph(("x", 4), ("big", 4), ("y", 4))
    prog2 = Sequence(Copy(x2[0:2], big2[0:2]), Copy(x2[2:4], big2[2:4]), Copy(big2, y2))
    lv2 = analyse_liveness(Module(g2, [prog2]))
    assert index(g2, big2) in lv2.always_live


def test_partial_write_undef_does_not_end_liveness():
    g, (x, v, y) = make_graph(("x", 4), ("v", 4), ("y", 4))
    prog = Sequence(Copy(x, v), WriteUndef(v[0:2]), Copy(v, y))
    lv = analyse_liveness(Module(g, [prog]))
    assert steps_of(lv, index(g, v)) == [0, 1, 2]


def test_variable_written_in_loop_body_and_read_after_the_loop():
    g, (x, w, other, y) = make_graph(("x", 4), ("w", 4), ("other", 4), ("y", 4))
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    body = Sequence(Copy(x, other), Copy(other, w))
    prog = Sequence(Repeat(4, body), Copy(w, y))
    lv = analyse_liveness(Module(g, [prog]))
    iw, io = index(g, w), index(g, other)
    assert iw not in lv.always_live  # fully written in every iteration before it is read
    # live from its write in the last iteration to the read after the loop; not across the back
    # edge, since the next iteration overwrites it before reading
    assert steps_of(lv, iw) == [1, 2]
    assert lv.interferes(iw, io)
    # zero trips: the body never runs, so w's value comes from before the loop -> always-live
    g0, (x0, w0, o0, y0) = make_graph(("x", 4), ("w", 4), ("other", 4), ("y", 4))
    prog0 = Sequence(Repeat(0, Sequence(Copy(x0, o0), Copy(o0, w0))), Copy(w0, y0))
    lv0 = analyse_liveness(Module(g0, [prog0]))
    assert index(g0, w0) in lv0.always_live
    # a RepeatWhileTrue body may run zero times too
    g1, (x1, w1, y1) = make_graph(("x", 4), ("w", 4), ("y", 4))
    pred = g1.add_variable(FLOAT, [1], "pred")
    g1.set_tile_mapping(pred, 0)
    loop = RepeatWhileTrue(Copy(x1[0:1], pred), pred, Copy(x1, w1))
    lv1 = analyse_liveness(Module(g1, [Sequence(loop, Copy(w1, y1))]))
    assert [s.text for s in lv1.steps] == ["Copy view(x) -> pred", "RepeatWhileTrue predicate pred",
                                           "Copy x -> w", "Copy w -> y"]
    assert index(g1, w1) in lv1.always_live
    assert steps_of(lv1, index(g1, pred)) == [0, 1]


def test_if_joins_both_branches():
    g, (x, a, b, y) = make_graph(("x", 4), ("a", 4), ("b", 4), ("y", 4))
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    pred = g.add_variable(FLOAT, [1], "p")
    g.set_tile_mapping(pred, 0)
    # a is written before the If and read only in the then-branch; b only in the else-branch
    prog = Sequence(Copy(x[0:1], pred), Copy(x, a), Copy(x, b),
                    If(pred, Copy(a, y), Sequence(Copy(b, y))), Sync())
    lv = analyse_liveness(Module(g, [prog]))
    assert [s.text for s in lv.steps] == ["Copy view(x) -> p", "Copy x -> a", "Copy x -> b",
                                          "If predicate p", "Copy a -> y", "Copy b -> y", "Sync"]
    ia, ib, ip = index(g, a), index(g, b), index(g, pred)
    assert steps_of(lv, ia) == [1, 2, 3, 4]
    assert steps_of(lv, ib) == [2, 3, 5]  # live through the If (either branch may run)
    assert steps_of(lv, ip) == [0, 1, 2, 3]
    assert lv.steps[4].where == "program 0/then" and lv.steps[5].where == "program 0/else"
    # a variable written in only one branch and read after the If is live on entry
    g2, (x2, c2, y2) = make_graph(("x", 4), ("c", 4), ("y", 4))
    p2 = g2.add_variable(FLOAT, [1], "p")
    g2.set_tile_mapping(p2, 0)
    lv2 = analyse_liveness(Module(g2, [Sequence(If(p2, Copy(x2, c2)), Copy(c2, y2))]))
    assert index(g2, c2) in lv2.always_live


def test_call_keeps_caller_values_live_through_the_function():
    g, (x, keep, tmp, y, z) = make_graph(("x", 4), ("keep", 4), ("tmp", 4), ("y", 4), ("z", 4))
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    g.create_host_read("z", z)
    f = g.add_function(Sequence(Copy(x, tmp), Copy(tmp, y)), "f")
    # keep is live across the first call site only
    prog = Sequence(Copy(x, keep), Call(f), Copy(keep, z), Call(f))
    lv = analyse_liveness(Module(g, [prog]))
    assert [s.where for s in lv.steps] == ["program 0", "program 0", "function f", "function f"]
    ik, it = index(g, keep), index(g, tmp)
    assert steps_of(lv, ik) == [0, 1, 2, 3]  # entry steps 0-1, and every step of f
    assert steps_of(lv, it) == [2, 3]
    assert lv.interferes(ik, it)
    # a function of the graph no program calls is not part of the module: no steps, no values
    g2, (x2, t2) = make_graph(("x", 4), ("t", 4))
    g2.add_function(Sequence(Copy(x2, t2), Copy(t2, x2)), "unused")
    lv2 = analyse_liveness(Module(g2, [Sequence()]))
    assert not lv2.steps and steps_of(lv2, index(g2, t2)) == []
    assert lv2.always_live == set()


def test_recursive_function_is_an_error():
    g, (x,) = make_graph(("x", 4))
    inner = Sequence(Sync())
    f = g.add_function(inner, "f")
    inner.add(Call(f))
    with pytest.raises(GrucProgramError, match="calls itself"):
        analyse_liveness(Module(g, [Call(f)]))


def test_always_live_categories():
    g, (x, r, state, temp, unused) = make_graph(("x", 4), ("r", 4), ("state", 4), ("temp", 4),
                                                ("unused", 4))
    c = g.add_constant(FLOAT, [4], 1.0, "c")
    g.set_tile_mapping(c, 0)
    g.create_host_write("x", x)
    g.create_host_read("r", r[0:2])  # a view names its variable
    # state is read before it is written in program 1: it carries a value between programs
    p0 = Sequence(Copy(x, state))
    p1 = Sequence(Copy(state, temp), map_step(g, r, temp), Copy(c, state))
    lv = analyse_liveness(Module(g, [p0, p1]))
    names = {g.variables[v].name for v in lv.always_live}
    assert names == {"x", "r", "state", "c"}
    assert lv.entry_live[1] == {index(g, state), index(g, c)}
    assert index(g, unused) not in lv.used
    assert lv.not_always_live == {index(g, temp)}
    assert lv.steps[2].text == "Execute cs0"
    text = lv.describe(g)
    assert "program 1: Execute cs0  | live: temp" in text


def test_nested_loops_converge_and_memo_keeps_them_linear():
    g, (x, a, y) = make_graph(("x", 4), ("a", 4), ("y", 4))
    body = Copy(a, y)
    for _ in range(40):  # 40 nested loops: exponential without memoisation
        body = Repeat(2, Sequence(body, Copy(x, a)))
    lv = analyse_liveness(Module(g, [Sequence(Copy(x, a), body)]))
    assert steps_of(lv, index(g, a)) == list(range(42))


# ---- random modules, shared with test_plan_memory.py --------------------------------------------
def build_random_module(draw, target=TARGET):
    """A random small module: variables on a few tiles, Copy / WriteUndef / Map steps nested in
    Repeat / If / RepeatWhileTrue / Call.  ``draw`` is hypothesis' ``data.draw``."""
    graph = Graph(target)
    ints = lambda lo, hi: draw(st.integers(lo, hi))  # noqa: E731
    variables = []
    for k in range(ints(2, 8)):
        dtype = FLOAT if ints(0, 2) else HALF
        size = ints(1, 12)
        if ints(0, 6) == 0:
            v = graph.add_constant(dtype, [size], 1.0, f"c{k}")
        else:
            v = graph.add_variable(dtype, [size], f"v{k}")
        how = ints(0, 2)
        if how == 0:
            graph.set_tile_mapping(v, ints(0, target.num_tiles - 1))
        elif how == 1:
            graph.map_tensor_linearly(v, min_elements_per_tile=1, grain_size=ints(1, 3))
        else:
            tiles = draw(st.lists(st.integers(0, target.num_tiles - 1), min_size=size,
                                  max_size=size))
            from gruc.ir.mapping import TileMapping
            graph.set_tile_mapping(v, TileMapping.from_element_tiles(np.array(tiles)))
        variables.append(v)
    writable = [v for v in variables if not v.is_constant]
    if not writable:
        v = graph.add_variable(FLOAT, [4], "w")
        graph.set_tile_mapping(v, 0)
        variables.append(v)
        writable.append(v)
    pred = graph.add_variable(FLOAT, [1], "pred")
    graph.set_tile_mapping(pred, ints(0, target.num_tiles - 1))
    writable.append(pred)
    variables.append(pred)
    for k, v in enumerate(variables):
        if ints(0, 7) == 0 and not v.is_constant:
            graph.create_host_write(f"w{k}", v)
        if ints(0, 7) == 0:
            graph.create_host_read(f"r{k}", v)

    def window(v, n):
        start = ints(0, v.num_elements - n)
        return v[start:start + n]

    def leaf():
        kind = ints(0, 9)
        if kind <= 4:  # Copy (often a full write)
            dst = writable[ints(0, len(writable) - 1)]
            sources = [v for v in variables if v.dtype == dst.dtype]
            src = sources[ints(0, len(sources) - 1)]
            n = ints(1, min(src.num_elements, dst.num_elements))
            if ints(0, 1):
                n = min(src.num_elements, dst.num_elements)
            if src is dst:  # copy one half onto the other: no element is both read and written
                if dst.num_elements < 2:
                    return Sync()
                half = dst.num_elements // 2
                return Copy(dst[0:half], dst[half:2 * half])
            d = window(dst, n)
            s = window(src, n)
            return Copy(s, d)
        if kind <= 6:  # WriteUndef, whole or part
            v = writable[ints(0, len(writable) - 1)]
            return WriteUndef(v if ints(0, 2) else window(v, ints(1, v.num_elements)))
        if kind <= 8:  # Map out = _1(in), elementwise on the out mapping
            out = writable[ints(0, len(writable) - 1)]
            sources = [v for v in variables if v.dtype == out.dtype and v is not out]
            if not sources:
                return Sync()
            src = sources[ints(0, len(sources) - 1)]
            n = ints(1, min(src.num_elements, out.num_elements))
            cs = graph.add_compute_set()
            graph.add_vertex(cs, "Map", {"out": window(out, n), "ins": [window(src, n)]}, expr=_1)
            return Execute(cs)
        return PrintTensor("p", variables[ints(0, len(variables) - 1)]) if ints(0, 1) else Sync()

    functions = []

    def program(depth):
        items = []
        for _ in range(ints(1, 4)):
            choice = ints(0, 9) if depth < 3 else 0
            if choice <= 4:
                items.append(leaf())
            elif choice == 5:
                items.append(Repeat(ints(0, 3), program(depth + 1)))
            elif choice == 6:
                items.append(If(pred, program(depth + 1),
                                program(depth + 1) if ints(0, 1) else Sequence()))
            elif choice == 7:
                items.append(RepeatWhileTrue(program(depth + 1), pred, program(depth + 1)))
            elif choice == 8 and functions:
                items.append(Call(functions[ints(0, len(functions) - 1)]))
            else:
                items.append(leaf())
        return Sequence(*items)

    for _ in range(ints(0, 2)):
        functions.append(graph.add_function(program(1)))
    def entry():
        # poplibs-style: declare some variables dead first, so they become not-always-live
        dead = [WriteUndef(v) for v in writable if ints(0, 2)]
        return Sequence(*dead, program(0))

    return Module(graph, [entry() for _ in range(ints(1, 2))])


def step_tensors(node):
    """``(reads, writes, undefs)``: tensors a leaf step reads, writes and declares dead."""
    if isinstance(node, Execute):
        reads, writes = vertex_tensors(node.compute_set.vertices)
        return reads, writes, []
    if isinstance(node, Copy):
        return [node.src], [node.dst], []
    if isinstance(node, WriteUndef):
        return [], [], [node.tensor]
    if isinstance(node, PrintTensor):
        return [node.tensor], [], []
    if isinstance(node, (If, RepeatWhileTrue)):
        return [node.predicate], [], []
    return [], [], []


def simulate(module, rng: random.Random, on_step, max_trips=2):
    """Run one entry program in execution order, with random branch choices and trip counts
    (``Repeat`` runs its real count), calling ``on_step(node)`` at every leaf step."""

    def run(node):
        if isinstance(node, Sequence):
            for child in node.programs:
                run(child)
        elif isinstance(node, Repeat):
            for _ in range(node.count):
                run(node.body)
        elif isinstance(node, RepeatWhileTrue):
            for _ in range(rng.randint(0, max_trips)):
                run(node.condition)
                on_step(node)
                run(node.body)
            run(node.condition)
            on_step(node)
        elif isinstance(node, If):
            on_step(node)
            run(node.then if rng.random() < 0.5 else node.otherwise)
        elif isinstance(node, Call):
            run(node.function.program)
        else:
            on_step(node)

    program = rng.randrange(len(module.programs))
    run(module.programs[program])
    return program


# ---- property: the dataflow covers the liveness of every executed trace --------------------------
def trace_liveness(trace, effects):
    """Backward liveness of one executed trace: ``(occupied per trace position, live at start)``."""
    live = set()
    occupied = [None] * len(trace)
    for pos in range(len(trace) - 1, -1, -1):
        e = effects[trace[pos]]
        live_in = (live - e.full_writes - e.kills) | e.reads
        occupied[pos] = live_in | e.writes | e.reads
        live = live_in
    return occupied, live


def has_control_flow(module):
    return any(isinstance(n, (Repeat, RepeatWhileTrue, If, Call)) for n in module.walk()) or \
        bool(module.functions)


@settings(deadline=None, max_examples=150)
@given(st.data())
def test_dataflow_covers_every_executed_trace(data):
    module = build_random_module(data.draw)
    lv = analyse_liveness(module)
    step_of = {id(s.node): s.index for s in lv.steps}
    assert len(step_of) == len(lv.steps)  # the builder makes a fresh node at every place
    effects = [s.effect for s in lv.steps]
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    for _ in range(6):
        trace = []
        simulate(module, rng, lambda node: trace.append(step_of[id(node)]))
        occupied, at_start = trace_liveness(trace, effects)
        assert at_start <= lv.always_live, "read before written in a run, yet not always-live"
        for pos, step in enumerate(trace):
            missing = occupied[pos] - lv.always_live - lv.occupied_at(step)
            assert not missing, f"step {lv.steps[step]}: variables {missing} live but not found"
    if not has_control_flow(module) and len(module.programs) == 1:
        # straight-line code: the dataflow is exact
        trace = list(range(len(lv.steps)))
        occupied, _ = trace_liveness(trace, effects)
        for step in trace:
            assert occupied[step] - lv.always_live == lv.not_always_live_at(step)
    for v in range(lv.num_variables):  # bitsets and the helpers agree
        assert lv.live_step_list(v) == [s for s in range(lv.num_steps)
                                        if v in lv.occupied_at(s)]


def test_a_step_over_joined_variables_flattened_names_each_variable_without_listing_ids(
        monkeypatch):
    """A weight update adds to its gradients joined and flattened: a view of several variables
    made by a reshape (or a transpose, a reversal) names what the join does, and a slice of a
    join names slices of its parts, so the step's effect is taken from the join's parts, never
    from its ids, and says which variables it covers."""
    from gruc.ir.effects import EffectTable
    from gruc import concat
    from gruc.ir.tensor import Tensor

    graph = Graph(TARGET)
    a, b, c = (graph.add_variable(FLOAT, (rows, 6), name)
               for rows, name in ((4, "a"), (3, "b"), (2, "c")))
    for variable in (a, b, c):
        graph.map_tensor_linearly(variable)
    cases = ((concat([a, b]).reshape([42]), {a, b}, {a.index, b.index}),  # all of a and b
             (concat([a[:2], c]).dim_shuffle([1, 0]).reverse(0), {a, c}, {c.index}),  # half a
             (concat([a, b, c])[3:7], {a, b}, {b.index}),  # across the joins: a's last row, b
             (concat([a[:2], c], 1)[0:2, 4:10], {a, c}, set()))
    sources = [graph.add_variable(FLOAT, view.shape, f"src{k}") for k, (view, _, _) in
               enumerate(cases)]
    for source in sources:
        graph.map_tensor_linearly(source)
    listed = []
    original = Tensor.flat_ids
    monkeypatch.setattr(Tensor, "flat_ids", lambda self: listed.append(self) or original(self))
    for (view, written, covered), source in zip(cases, sources):
        effect = EffectTable(graph).of(Copy(source, view))
        assert effect.writes == {v.index for v in written}
        assert effect.full_writes == covered
    assert listed == []
