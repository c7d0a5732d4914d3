"""inplace-fusion (SPEC G1): fewer compute sets and syncs, lower memory, identical numerics.

The oracle for every rewriting pass is the unrewritten program: random elementwise programs (chains
with broadcast operands, in-place updates, copies, slices, partial writes, loops, ``WriteUndef``)
run with no passes and with each pass alone or the default pipeline, with verify-each, and the
results must agree bit for bit (numpy engine; fusion keeps HALF rounding with casts).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gruc import (FLOAT, HALF, Call, Copy, Engine, Execute, Graph, Module, Repeat, Sequence, Target,
                  WriteUndef)
from gruc.analysis.liveness import analyse_liveness
from gruc.errors import GrucOptionError, GrucValueError
from gruc.ir.expr import _1, _2, Const, maximum, sigmoid, tanh
from gruc.ir.verify import verify
from gruc.memory.planner import plan_memory
from gruc.ops import map, map_in_place, map_with_output
from gruc.passes import DEFAULT_PIPELINE
from gruc.passes.inplace_fusion import InplaceFusion
from gruc.passes.pipeline import parse_pipeline, run_pipeline
from gruc.tools.gru_layer import GruLayerConfig, build_layer, host_data

T4 = Target.custom(tiles_per_ipu=4)
SHAPE = (4, 8)
UNARY = [tanh(_1), sigmoid(_1), _1 * Const(0.5), -_1]
BINARY = [_1 + _2, _1 * _2, _1 - _2 * Const(0.5), maximum(_1, _2)]


def random_program(seed: int, dtype, called: bool = False
                   ) -> tuple[Graph, Sequence, dict[str, np.ndarray], list[str]]:
    """A random elementwise program over [4, 8] tensors on 4 tiles, its host data and outputs.
    Its later steps may run twice: in a ``Repeat``, or with ``called`` in a function called
    twice (the bodies both halves of the pass reach through new functions)."""
    rnd = random.Random(seed)
    g = Graph(T4)

    def variable(name: str):
        t = g.add_variable(dtype, SHAPE, name)
        choice = rnd.randrange(3)
        if choice == 0:
            g.map_tensor_linearly(t, min_elements_per_tile=8, grain_size=4)
        elif choice == 1:
            g.set_tile_mapping(t, rnd.randrange(4))
        else:
            g.set_tile_mapping(t, [[(0, 16)], [], [(16, 32)], []])
        return t

    inputs = [variable(f"in{k}") for k in range(2)]
    bias = g.add_variable(dtype, (8,), "bias")
    g.set_tile_mapping(bias, rnd.randrange(4))
    for t, name in [(inputs[0], "in0"), (inputs[1], "in1"), (bias, "bias")]:
        g.create_host_write(name, t)
    pool = list(inputs)
    temps = []
    prog = Sequence()
    target = prog
    for step in range(rnd.randrange(3, 9)):
        if target is prog and rnd.random() < 0.15:
            target = Sequence()
            if called:
                function = g.add_function(target, "twice")
                prog.add(Sequence(Call(function), Call(function)))
            else:
                prog.add(Repeat(2, target))
        kind = rnd.randrange(6)
        a, b = rnd.choice(pool), rnd.choice(pool + [bias])
        if kind == 0:
            out = map(g, rnd.choice(UNARY), [a], target, f"u{step}")
        elif kind == 1:
            out = map(g, rnd.choice(BINARY), [a, b], target, f"b{step}")
        elif kind == 2 and temps:
            map_in_place(g, rnd.choice(BINARY), [rnd.choice(temps), b], target, f"ip{step}")
            continue
        elif kind == 3:
            out = variable(f"copy{step}")
            target.add(Copy(a, out))
        elif kind == 4:
            out = variable(f"halves{step}")
            for rows in (slice(0, 2), slice(2, 4)):
                map_with_output(g, rnd.choice(UNARY), [a[rows]], out[rows], target, f"h{step}")
        else:
            if not temps:
                continue
            out = rnd.choice(temps)
            target.add(WriteUndef(out))
            map_with_output(g, rnd.choice(BINARY), [a, b] if a is not out and b is not out
                            else [inputs[0], bias], out, target, f"redo{step}")
        pool.append(out)
        temps.append(out)
    outputs = []
    for k, t in enumerate(rnd.sample(pool[2:], min(2, len(pool) - 2)) or [inputs[0]]):
        g.create_host_read(f"out{k}", t)
        outputs.append(f"out{k}")
    data = {"in0": rnd_array(rnd, SHAPE, dtype), "in1": rnd_array(rnd, SHAPE, dtype),
            "bias": rnd_array(rnd, (8,), dtype)}
    return g, prog, data, outputs


def rnd_array(rnd: random.Random, shape, dtype) -> np.ndarray:
    values = np.random.default_rng(rnd.randrange(2**32)).uniform(-1, 1, shape)
    return values.astype(dtype.storage)


def results(module: Module, data, outputs) -> dict[str, np.ndarray]:
    engine = Engine(module.graph, module.programs, pipeline="", backend="numpy")
    for name, value in data.items():
        engine.write_tensor(name, value)
    engine.run()
    return {name: engine.read_tensor(name) for name in outputs}


PIPELINES = ["inplace-fusion", "inplace-fusion{fuse=false}", "canonicalize", "dce", "copy-elim",
             "exchange", DEFAULT_PIPELINE]


@settings(max_examples=100)
@given(seed=st.integers(0, 2**31), half=st.booleans(), pipeline=st.sampled_from(PIPELINES),
       called=st.booleans())
def test_random_programs_give_identical_results(seed, half, pipeline, called):
    graph, prog, data, outputs = random_program(seed, HALF if half else FLOAT, called)
    expected = results(Module(graph, [prog]), data, outputs)
    rewritten = run_pipeline(Module(graph, [prog]), pipeline, verify_each=True).module
    if pipeline == "exchange":
        verify(rewritten, require_local=True)
    got = results(rewritten, data, outputs)  # over its own graph if the pipeline erased
    again = results(Module(graph, [prog]), data, outputs)  # the caller's still runs as built
    for name in outputs:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=f"{pipeline}: {name}")
        np.testing.assert_array_equal(again[name], expected[name])


def loop_body_steps(module: Module) -> int:
    """Supersteps (Execute and Copy) per time step: the leaves of the first loop body."""
    loop = next(node for node in module.walk() if isinstance(node, Repeat))
    return sum(isinstance(node, (Execute, Copy)) for node in loop.body.walk())


def assert_layer_runs_alike(config, layer, before: Module, after: Module) -> None:
    """The layer's results, bit for bit, from the module before the pass and after it."""
    data, _ = host_data(config)
    values = {"input": data.x, "init_state": data.h0, "input_weights": data.input_weights,
              "output_weights": data.output_weights, "biases": data.biases}
    plain = results(before, values, list(layer.reads))
    fused = results(after, values, list(layer.reads))
    for name in layer.reads:
        np.testing.assert_array_equal(fused[name], plain[name])


def test_gru_forward_fuses_and_updates_in_place_with_identical_results():
    config = GruLayerConfig(sequence_size=2, input_size=40, output_size=38, batch_size=4,
                            tiles_per_ipu=16, save_intermediates=True, backend="numpy")
    layer = build_layer(config)
    before = Module(layer.graph, layer.programs)
    after = run_pipeline(before, "canonicalize,inplace-fusion", verify_each=True).module
    assert loop_body_steps(before) - loop_body_steps(after) == 2  # two maps fused away
    kinds = [node.compute_set.vertices[0].kind.name for node in after.walk()
             if isinstance(node, Execute) and node.compute_set.name in ("gru/gates", "gru/candidate")]
    assert kinds == ["MapInPlace", "MapInPlace"]  # sigmoid(ru + b) and tanh(c + b), in place
    used = analyse_liveness(after).used
    assert not any(v.name.endswith("_tmp") for v in layer.graph.variables if v.index in used)
    assert plan_memory(after).block_size.sum() < plan_memory(before).block_size.sum()
    assert_layer_runs_alike(config, layer, before, after)


def test_an_elementwise_chain_needs_fewer_supersteps_and_less_peak_memory():
    g = Graph(T4)
    x = g.add_variable(FLOAT, (4, 256), "x")
    g.map_tensor_linearly(x)
    b = g.add_variable(FLOAT, (256,), "b")
    g.map_tensor_linearly(b)
    prog = Sequence()
    gate = map(g, sigmoid(_1 + _2), [x, b], prog, "gate")      # broadcast: two compute sets
    scaled = map(g, _1 * Const(0.5), [gate], prog, "scaled")
    out = map(g, tanh(_1) + _2, [scaled, x], prog, "out")
    for name, t in {"x": x, "b": b}.items():
        g.create_host_write(name, t)
    g.create_host_read("out", out)
    before = Module(g, [prog])
    after = run_pipeline(before, "inplace-fusion", verify_each=True).module
    assert len(before.programs[0]) == 4 and len(after.programs[0]) == 1
    peak_before = plan_memory(before).not_always_live_bytes
    peak_after = plan_memory(after).not_always_live_bytes
    assert peak_after.max() < peak_before.max() and np.all(peak_after <= peak_before)


def test_the_callers_compute_sets_are_left_as_built():
    graph, prog, _, _ = random_program(7, FLOAT)
    snapshot = [(cs, [dict(v.fields) for v in cs.vertices]) for cs in graph.compute_sets]
    run_pipeline(Module(graph, [prog]), "inplace-fusion", verify_each=True)
    for cs, fields in snapshot:
        assert [dict(v.fields) for v in cs.vertices] == fields


def calls_of(module: Module) -> list[Call]:
    return [node for node in module.programs[0].walk() if isinstance(node, Call)]


@pytest.mark.parametrize("read_outside", [False, True])
def test_a_function_body_is_fused_into_a_new_function_the_old_one_kept(read_outside):
    """The temporary ``t`` of a body called twice fuses into ``y``: the module calls a new function
    with the fused body, and the function as built still runs for the caller's program.  Read
    outside the body too (by a step after the calls), ``t`` is not the body's to fuse away."""
    g = Graph(T4)
    x = g.add_variable(FLOAT, SHAPE, "x")
    g.map_tensor_linearly(x)
    body = Sequence()
    t = map(g, _1 * Const(2.0), [x], body, "t")
    y = map(g, tanh(_1) + _2, [t, x], body, "y")
    map_in_place(g, _1 * Const(0.5), [x], body)  # the second call sees another x
    function = g.add_function(body, "f")
    prog = Sequence(Call(function), Call(function))
    outputs = ["y"]
    if read_outside:
        outputs.append("u")
        g.create_host_read("u", map(g, _1 + Const(1.0), [t], prog, "u"))
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    module = run_pipeline(Module(g, [prog]), "inplace-fusion", verify_each=True).module
    assert function.program is body and len(body) == 3
    called = {id(call.function): call.function for call in calls_of(module)}
    assert len(calls_of(module)) == 2 and len(called) == 1
    (fused,) = called.values()
    assert (fused is function) == read_outside
    assert len(fused.program) == (3 if read_outside else 2)
    assert module.functions == [fused]  # the body as built is no longer this module's
    data = {"x": np.random.default_rng(3).uniform(-1, 1, SHAPE)}
    expected = results(Module(g, [prog]), data, outputs)
    got = results(module, data, outputs)
    for name in outputs:
        np.testing.assert_array_equal(got[name], expected[name])


def test_a_fused_callee_gives_its_callers_new_functions_too():
    """``outer`` calls ``inner``, whose body fuses: ``outer`` gets a new body calling the new
    ``inner`` (callees are rebuilt first), and the module calls the new ``outer``."""
    g = Graph(T4)
    x = g.add_variable(FLOAT, SHAPE, "x")
    g.map_tensor_linearly(x)
    inner_body = Sequence()
    t = map(g, sigmoid(_1), [x], inner_body, "t")
    y = map(g, _1 * _2, [t, x], inner_body, "y")
    inner = g.add_function(inner_body, "inner")
    outer = g.add_function(Sequence(Call(inner), Repeat(2, Sequence(Call(inner)))), "outer")
    prog = Sequence(Call(outer))
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    module = run_pipeline(Module(g, [prog]), "inplace-fusion", verify_each=True).module
    (new_outer,) = {call.function for call in calls_of(module)}
    inner_calls = [n for n in new_outer.program.walk() if isinstance(n, Call)]
    assert new_outer is not outer and len(inner_calls) == 2
    assert {id(call.function) for call in inner_calls} != {id(inner)}
    assert len(inner_calls[0].function.program) == 1 and len(inner_body) == 2
    data = {"x": np.random.default_rng(4).uniform(-1, 1, SHAPE)}
    np.testing.assert_array_equal(results(module, data, ["y"])["y"],
                                  results(Module(g, [prog]), data, ["y"])["y"])


def test_a_gru_cell_reused_as_a_function_is_fused_with_identical_results():
    """rnnCodeReuse puts the cell in a function (the default past 15 shards): fusion reaches it
    (the gate and candidate activations fuse into their consumers), and so does the in-place
    half (the state update writes its operand, as in the inlined cell)."""
    config = GruLayerConfig(sequence_size=6, input_size=16, output_size=8, batch_size=2,
                            tiles_per_ipu=20, shards=3, code_reuse=True, backend="numpy")
    layer = build_layer(config)
    before = Module(layer.graph, layer.programs)
    after = run_pipeline(before, "canonicalize,inplace-fusion", verify_each=True).module
    cells = [{id(c.function): c.function for c in calls_of(m)} for m in (before, after)]
    assert [len(c) for c in cells] == [1, 1]
    (cell_before,), (cell_after,) = (list(c.values()) for c in cells)
    assert len(cell_after.program) < len(cell_before.program)
    kinds = {node.compute_set.name: node.compute_set.vertices[0].kind.name
             for node in cell_after.program.walk() if isinstance(node, Execute)}
    assert "gru/gates" not in kinds and "gru/candidate" not in kinds
    assert kinds["gru/state"] == "MapInPlace"
    assert_layer_runs_alike(config, layer, before, after)


def test_options_and_unknown_options():
    assert parse_pipeline("inplace-fusion{in-place=false}") == [InplaceFusion(in_place=False)]
    with pytest.raises(GrucOptionError, match=r"pass 'inplace-fusion' has no option 'colour'.*fuse"):
        parse_pipeline("inplace-fusion{colour=red}")


def test_a_long_chain_of_maps_fuses_within_the_expression_depth_and_round_trips():
    """400 single-op maps in a row: fusion stops short of the deepest expression gruc allows
    (it recursed past Python's limit), so the fused module runs and prints and parses back."""
    from gruc.ir.expr import MAX_PARSE_DEPTH, nesting
    from gruc.ir.parser import parse_module
    from gruc.ir.printer import print_module

    graph, prog = Graph(T4), Sequence()
    x = graph.add_variable(FLOAT, [16], "x")
    graph.map_tensor_linearly(x)
    graph.create_host_write("x", x)
    t = x
    for _ in range(400):
        t = map(graph, _1 + Const(1.0), [t], prog)
    graph.create_host_read("out", t)
    fused = run_pipeline(Module(graph, [prog]), DEFAULT_PIPELINE).module
    depths = [nesting(v.params["expr"]) for cs in fused.graph.compute_sets for v in cs.vertices
              if "expr" in v.params]
    assert 100 < max(depths) <= MAX_PARSE_DEPTH
    parse_module(print_module(fused))
    engine = Engine(graph, [prog])
    engine.write_tensor("x", np.arange(16, dtype=np.float32))
    engine.run(0)
    np.testing.assert_array_equal(engine.read_tensor("out"), np.arange(16) + 400.0)


def test_map_refuses_an_expression_deeper_than_the_ir_holds():
    graph, prog = Graph(T4), Sequence()
    x = graph.add_variable(FLOAT, [4], "x")
    graph.map_tensor_linearly(x)
    expr = _1
    for _ in range(1000):                # a sum built term by term
        expr = expr + _1
    for build in (map, map_in_place):
        with pytest.raises(GrucValueError, match="nested 1000 levels deep; at most 200"):
            build(graph, expr, [x], prog)
    assert not graph.compute_sets
