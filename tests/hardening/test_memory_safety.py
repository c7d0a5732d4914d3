"""Memory safety of the simulator: the compile-time memory check and checked runs.

Checked runs must change nothing for a valid program (same bits as unchecked, both backends, the
GRU layer included); tampered plans, lowerings and operands must be caught — at compile time by
``verify_memory`` (``GrucVerifyError``), at run time by ``Engine(..., checked=True)``
(``GrucMemoryError``, raised before the step moves any data).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

import gruc.tools.gru_layer as gru_layer
import gruc.runtime.engine as engine_module
from gruc import (FLOAT, INT, Copy, Engine, Graph, GrucTypeError, GrucVerifyError, Repeat,
                  Sequence, Target)
from gruc.errors import GrucMemoryError
from gruc.ir.codelets.dynamic import DYNAMIC_SLICE, DYNAMIC_UPDATE
from gruc.ir.codelets.elementwise import MAP
from gruc.ir.codelets.matmul import MATMUL_PARTIALS
from gruc.ir.expr import _1, _2, Const, tanh
from gruc.ir.mapping import TileMapping
from gruc.ops import add_in_place, dynamic_slice, dynamic_update, map, mat_mul, reduce
from gruc.runtime.checked import CheckedInterpreter, SkippedWindow
from gruc.runtime.engine import compile_program
from gruc.runtime.lower import CopyStep, ExecuteStep, Operand, lower
from gruc.runtime.verify_memory import verify_memory

T8 = Target.custom(tiles_per_ipu=8)
BACKENDS = ["numpy", "numba"]


def small_program():
    """Elementwise, matmul, reduce, a copy, and a dynamic slice / update in a loop whose offset
    counts up (wrapping windows, and out of range when started late)."""
    g = Graph(T8)
    x = g.add_variable(FLOAT, (12, 10), "x")
    g.map_tensor_linearly(x, min_elements_per_tile=1, grain_size=1)
    w = g.add_variable(FLOAT, (10, 6), "w")
    g.map_tensor_linearly(w)
    seq = g.add_variable(FLOAT, (5, 6), "seq")
    g.set_tile_mapping(seq, TileMapping.from_element_tiles(np.tile([1, 1, 2, 2, 3, 3], 5)))
    offset = g.add_variable(INT, (1,), "offset")
    g.set_tile_mapping(offset, 0)
    one = g.add_constant(INT, (1,), 1, "one")
    g.set_tile_mapping(one, 0)
    total = g.add_variable(FLOAT, (6,), "total")
    g.set_tile_mapping(total, 7)
    prog = Sequence()
    y = map(g, tanh(_1) * Const(2.0) + _2, [x, x], prog, "y")
    z = mat_mul(g, y, w, prog, name="z")
    r = reduce(g, z, [0], "add", prog, name="r")
    prog.add(Copy(r, total))
    body = Sequence()
    window = dynamic_slice(g, seq, offset, [0], [2], body, "window")
    doubled = map(g, _1 * Const(2.0), [window], body, "doubled")
    dynamic_update(g, seq, doubled, offset, [0], [2], body, "update")
    add_in_place(g, offset, one, body)
    prog.add(Repeat(3, body))
    for name, tensor in {"x": x, "w": w, "seq": seq, "offset": offset}.items():
        g.create_host_write(name, tensor)
    for name, tensor in {"z": z, "total": total, "seq": seq, "offset": offset,
                         "w": w}.items():
        g.create_host_read(name, tensor)
    return g, prog


def run_small(start: int, backend: str, **engine_args):
    g, prog = small_program()
    engine = Engine(g, prog, backend=backend, **engine_args)
    rng = np.random.default_rng(7)
    values = {"x": rng.uniform(-1, 1, (12, 10)), "w": rng.uniform(-1, 1, (10, 6)),
              "seq": rng.uniform(-1, 1, (5, 6)), "offset": [start]}
    for name, value in values.items():
        engine.write_tensor(name, value)
    engine.run(0)
    return engine, {name: engine.read_tensor(name) for name in ("z", "total", "seq", "offset")}


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_program_checked_gives_the_same_bits(backend):
    _, plain = run_small(0, backend)
    engine, checked = run_small(0, backend, checked=True)
    assert isinstance(engine.interpreter, CheckedInterpreter) and engine.checked
    for name in plain:
        np.testing.assert_array_equal(checked[name], plain[name], err_msg=name)
    assert engine.interpreter.skipped_windows == []
    assert checked["offset"].tolist() == [3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_range_offsets_are_recorded_not_raised(backend):
    """Offsets 3, 4, 5: the last is past the 5 rows, so that slice and update do nothing — as
    unchecked — and the checked run records both skips."""
    _, plain = run_small(3, backend)
    engine, checked = run_small(3, backend, checked=True)
    for name in plain:
        np.testing.assert_array_equal(checked[name], plain[name], err_msg=name)
    skipped = engine.interpreter.skipped_windows
    assert len(skipped) == 6  # a slice and an update vertex on each of the 3 tiles of seq
    assert {s.offsets for s in skipped} == {(5,)}
    kinds = {s.vertex.split(" (")[1].split(" ")[0] for s in skipped}
    assert kinds == {"DynamicSlice", "DynamicUpdate"}
    assert all(isinstance(s, SkippedWindow) and s.step >= 0 for s in skipped)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gru_layer_checked_matches_unchecked(backend, monkeypatch):
    config = gru_layer.GruLayerConfig(batch_size=4, input_size=3, output_size=5,
                                      sequence_size=6, tiles_per_ipu=8, phase="all",
                                      with_real_time_steps=True, backend=backend)
    plain = gru_layer.run_layer(config)
    monkeypatch.setattr(gru_layer, "Engine", functools.partial(Engine, checked=True))
    checked = gru_layer.run_layer(config)
    assert isinstance(checked.engine.interpreter, CheckedInterpreter)
    assert plain.passed and checked.passed
    assert set(checked.outputs) == set(plain.outputs)
    for name, value in plain.outputs.items():
        np.testing.assert_array_equal(checked.outputs[name], value, err_msg=name)
    assert checked.engine.interpreter.skipped_windows == []


def test_checked_must_be_a_bool():
    g, prog = small_program()
    with pytest.raises(GrucTypeError, match="checked must be True or False, got 'yes'"):
        Engine(g, prog, checked="yes")


# ---- compile time -------------------------------------------------------------------------------
def compiled_small():
    g, prog = small_program()
    compiled = compile_program(g, prog)
    executable = lower(compiled.module, compiled.plan)
    verify_memory(compiled.module, compiled.plan, executable)  # the untampered one is fine
    return g, compiled, executable


def first_vertex(executable, kind):
    for leaf in executable.leaves:
        if isinstance(leaf, ExecuteStep):
            for lowered in leaf.vertices:
                if lowered.kind is kind:
                    return leaf, lowered
    raise AssertionError(f"no {kind.name} vertex")


def shifted(operand: Operand, by: int) -> Operand:
    index = operand.index + by
    index.flags.writeable = False
    return Operand(operand.dtype, index, operand.shape, operand.tensor)


def test_a_tampered_plan_is_caught():
    g, compiled, executable = compiled_small()
    plan = compiled.plan
    x = next(v for v in g.variables if v.name == "x")
    offsets = plan.block_offset.copy()
    offsets[plan.block_variable == x.index] += 4096  # the plan now says x lives elsewhere
    tampered = dataclasses.replace(plan, block_offset=offsets)
    with pytest.raises(GrucVerifyError) as caught:
        verify_memory(compiled.module, tampered, executable)
    message = str(caught.value)
    assert message.startswith("memory check: step 0, vertex 0 (Map on the tiles of its 'out' "
                              "field) of compute set 'y': field 'ins[0]' element 0 at byte "
                              "address 0 (tile 0, offset 0) is outside the memory allocated on "
                              "tile 0 to the tensor it names ('x' holds bytes [4096, 4156) "
                              "there); 120 of 120 elements are bad, at byte addresses 0..")
    assert "\n> " in message  # the IR line of the culprit vertex, marked


def lazily_checked_map_vertex():
    """The small program's Map vertex, lowered with the real plan but lazily checked against one
    that says ``x`` lives 4096 bytes further on: its ``ins[0]`` is bad once resolved."""
    g, prog = small_program()
    compiled = compile_program(g, prog)
    executable = lower(compiled.module, compiled.plan)
    x = next(v for v in g.variables if v.name == "x")
    offsets = compiled.plan.block_offset.copy()
    offsets[compiled.plan.block_variable == x.index] += 4096
    tampered = dataclasses.replace(compiled.plan, block_offset=offsets)
    verify_memory(compiled.module, tampered, executable, lazy=True)
    return first_vertex(executable, MAP)[1]


def test_a_lazy_check_runs_when_the_index_is_first_computed():
    """An engine's check of an operand not yet resolved waits for its index: reading it raises,
    and leaves it unresolved, so no one ever holds the unchecked index."""
    lowered = lazily_checked_map_vertex()  # nothing resolved: no error
    operand = lowered.fields["ins"][0]
    assert not operand.resolved
    for _ in range(2):
        with pytest.raises(GrucVerifyError, match=r"field 'ins\[0\]' element 0 .* is outside the "
                           r"memory allocated on tile 0 to the tensor it names \('x' holds"):
            operand.index
        assert not operand.resolved
    assert lowered.fields["out"].index.size == 120  # the other fields are fine


def test_an_index_read_as_runs_is_checked_run_by_run():
    """``index_runs`` (how a slice group reads its bases) checks each run against the blocks and
    keeps nothing when they pass; a run outside them is checked element by element, failing with
    the message the element check gives, every time."""
    lowered = lazily_checked_map_vertex()
    bad, good = lowered.fields["ins"][0], lowered.fields["out"]
    for _ in range(2):
        with pytest.raises(GrucVerifyError, match=r"field 'ins\[0\]' element 0 .* is outside"):
            bad.index_runs()
    positions, firsts = good.index_runs()
    assert not good.resolved
    lengths = np.diff(positions, append=good.index.size)
    assert np.array_equal(np.repeat(firsts - positions, lengths) + np.arange(good.index.size),
                          good.index)


def test_an_engine_does_not_keep_the_indices_of_sliced_sequences():
    """A slice group's tables are all an engine keeps of its bases (a long sequence's indices
    would be gigabytes), and the layer still computes what the reference does."""
    config = gru_layer.GruLayerConfig(sequence_size=5, batch_size=2, input_size=3, output_size=4,
                                      phase="all")
    run = gru_layer.run_layer(config)
    bases = [lowered.fields["base"] for leaf in run.engine.executable.leaves
             if isinstance(leaf, ExecuteStep) for lowered in leaf.vertices
             if lowered.kind in (DYNAMIC_SLICE, DYNAMIC_UPDATE)]
    assert bases and not any(base.resolved for base in bases)
    assert run.passed, run.mismatches


def test_an_engine_computes_host_stream_indices_when_the_host_uses_them():
    g, prog = small_program()
    engine = Engine(g, prog)
    stream = engine.executable.host_writes["x"]
    assert not stream.resolved
    engine.write_tensor("x", np.ones((12, 10), np.float32))
    assert stream.resolved


def test_an_operand_off_the_device_is_caught_by_the_engine(monkeypatch):
    def off_device(module, plan):
        executable = lower(module, plan)
        _, lowered = first_vertex(executable, MATMUL_PARTIALS)
        out = lowered.fields["partials"]
        lowered.fields["partials"] = shifted(out,
                                             executable.num_tiles * executable.tile_stride // 4)
        return executable

    monkeypatch.setattr(engine_module, "lower", off_device)
    g, prog = small_program()
    with pytest.raises(GrucVerifyError, match=r"memory check: step 1, vertex 0 \(MatMulPartials "
                       r"on the tiles of its 'partials' field\) of compute set 'z.partials': "
                       r"field 'partials' element 0 at byte address \d+ \(tile 8, offset \d+\) "
                       r"is outside the device memory \(tiles 0..7\); 144 of 144 elements are bad"):
        Engine(g, prog)


def test_a_field_pointing_into_another_tensor_is_caught():
    g, compiled, executable = compiled_small()
    leaf, lowered = first_vertex(executable, MAP)
    w = executable.host_reads["w"]
    out = lowered.fields["out"]
    lowered.fields["out"] = Operand(out.dtype, np.resize(w.index, out.index.shape), out.shape,
                                    out.tensor)
    with pytest.raises(GrucVerifyError, match=r"field 'out' element 0 at byte address \d+ "
                       r"\(tile 0, offset \d+\) is outside the memory allocated on tile 0 to the "
                       r"tensor it names \('y' holds bytes \[\d+, \d+\) there\); 120 of 120"):
        verify_memory(compiled.module, compiled.plan, executable)


def remote_slice():
    """A dynamic slice whose columns span tiles 0 and 2: its vertex on tile 0 reads and writes
    tile 2 (legal before the exchange pass)."""
    g = Graph(T8)
    t = g.add_variable(FLOAT, (3, 6), "t")
    g.set_tile_mapping(t, TileMapping.from_element_tiles(np.array([0] * 6 + [2] * 12)))
    offset = g.add_variable(INT, (1,), "offset")
    g.set_tile_mapping(offset, 0)
    prog = Sequence()
    out = dynamic_slice(g, t, offset, [0], [2], prog, "slice")
    g.create_host_write("t", t)
    g.create_host_write("offset", offset)
    g.create_host_read("out", out)
    return g, prog


@pytest.mark.parametrize("pipeline", ["", "exchange"])
def test_vertex_off_its_tile_is_caught_when_vertices_must_be_local(pipeline):
    g, prog = remote_slice()
    compiled = compile_program(g, prog, pipeline=pipeline)
    executable = lower(compiled.module, compiled.plan)
    verify_memory(compiled.module, compiled.plan, executable)
    if pipeline == "exchange":  # the pass made every access local
        verify_memory(compiled.module, compiled.plan, executable, require_local=True)
        return
    with pytest.raises(GrucVerifyError, match=r"vertex 0 \(DynamicSlice on tile 0\) of compute "
                       r"set 'slice': field 'base' element 6 at byte address \d+ \(tile 2, "
                       r"offset \d+\) is on tile 2, but the vertex runs on tile 0; 12 of 18"):
        verify_memory(compiled.module, compiled.plan, executable, require_local=True)


def test_elementwise_operand_off_its_pair_is_caught_when_vertices_must_be_local():
    g = Graph(T8)
    x = g.add_variable(FLOAT, (16,), "x")
    g.map_tensor_linearly(x, min_elements_per_tile=1, grain_size=1)
    prog = Sequence()
    map(g, _1 + _2, [x, x.reverse(0)], prog, "mirror")
    g.create_host_write("x", x)
    compiled = compile_program(g, prog, pipeline="")
    executable = lower(compiled.module, compiled.plan)
    verify_memory(compiled.module, compiled.plan, executable)
    with pytest.raises(GrucVerifyError, match=r"field 'ins\[1\]' element 0 at byte address \d+ "
                       r"\(tile 7, offset \d+\) is on tile 7, but the split element it pairs "
                       r"with is on tile 0; 16 of 16 elements are bad"):
        verify_memory(compiled.module, compiled.plan, executable, require_local=True)


# ---- run time -----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_checked_run_stops_an_index_tampered_after_compile(backend):
    g, prog = small_program()
    engine = Engine(g, prog, backend=backend, checked=True)
    leaf, lowered = first_vertex(engine.executable, MATMUL_PARTIALS)
    index = lowered.fields["partials"].index
    index.flags.writeable = True
    index[3] = engine.memory.raw.size  # past the end of the device
    untouched = np.delete(index, 3)
    view = engine.memory.view(lowered.fields["partials"].dtype)
    view[untouched] = 1.5  # the step would overwrite these with the products
    with pytest.raises(GrucMemoryError, match=rf"checked run: step {leaf.step}, vertex 0 "
                       r"\(MatMulPartials on the tiles of its 'partials' field\) of compute set "
                       r"'z.partials': field 'partials' element 3 at byte address \d+ \(tile 32, "
                       r"offset 0\) is outside the device memory \(tiles 0..7\); 1 of 144 "
                       r"elements are bad"):
        engine.run(0)
    assert (view[untouched] == 1.5).all()  # stopped before the step moved any data


def test_checked_run_catches_what_the_compile_check_was_not_given(monkeypatch):
    """With the compile check switched off, a copy retargeted into ``w`` corrupts ``w`` silently
    unchecked; checked, the run stops at that copy."""
    def retarget(module, plan):
        executable = lower(module, plan)
        copy = next(s for s in executable.leaves if isinstance(s, CopyStep)
                    and plan.liveness.steps[s.step].node.dst.variables()[0].name == "total")
        w = executable.host_reads["w"]
        object.__setattr__(copy, "dst", Operand(copy.dst.dtype, w.index[:copy.dst.index.size],
                                                copy.dst.shape, copy.dst.tensor))
        return executable

    monkeypatch.setattr(engine_module, "lower", retarget)
    monkeypatch.setattr(engine_module, "verify_memory", lambda *args, **kwargs: None)
    engine, _ = run_small(0, "numpy")
    rng = np.random.default_rng(7)
    rng.uniform(-1, 1, (12, 10))
    w = rng.uniform(-1, 1, (10, 6)).astype(np.float32)  # what run_small wrote into w
    damaged = engine.read_tensor("w") != w
    assert damaged.reshape(-1)[:6].all() and not damaged.reshape(-1)[6:].any()
    with pytest.raises(GrucMemoryError, match=r"checked run: step \d+ \(Copy\): Copy destination "
                       r"element 0 at byte address \d+ \(tile \d+, offset \d+\) is outside the "
                       r"memory allocated on tile \d+ to the tensor it names \('total' "):
        run_small(0, "numpy", checked=True)
