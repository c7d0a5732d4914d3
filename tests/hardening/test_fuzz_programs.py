"""Fuzzing whole programs (issue #12, item 2): random small programs give the same results through
the default pass pipeline and through none, on both engines, and their memory plans keep the
planner's invariants.

Why: passes (fusion, copy elimination, dead code, exchange) and the planner (liveness-based reuse)
may only change *how* a program runs, never *what* it computes; a plan that lets two live tensors
share bytes corrupts results only for some programs.  Random programs built with the op library —
several float tensors with random tile mappings on a 4-tile target; elementwise maps (fresh and in
place), reductions into rows and columns, copies through reversed, transposed and sliced views,
dynamic slices and updates at a run-time offset; nested in Sequence, Repeat (0..3 times) and If on
a host-written flag — reach combinations no hand-written test does.

Results.  The reference is the numpy engine with no pipeline.  The other three runs must match it
**bitwise** when the program has no reduction and no transcendental (add, sub, mul, max, select,
copies and dynamic slicing are exact in float32 whatever the order or engine); with a reduction
(partials may be summed in another order) or ``tanh`` (the numba kernels use their own float32
polynomial, ``gruc.runtime.fastmath``), within ``rtol=1e-5, atol=1e-5``.  Only values a program
defines are read: every host-read tensor is written in full before the end, so nothing depends on
the garbage of uninitialised tile memory.

Engines run with ``checked=True`` (the runtime bounds-check mode) when ``Engine`` takes it.
"""

from __future__ import annotations

import inspect

import numpy as np
from hypothesis import event, given
from hypothesis import strategies as st

from gruc import (BOOL, FLOAT, UNSIGNED_INT, Copy, Engine, Graph, If, Repeat, Sequence, Target,
                  TileMapping)
from gruc.ir import expr as ex
from gruc.ops import map_in_place, map_with_output
from gruc.ops.dynamic import dynamic_slice, dynamic_update
from gruc.ops.reduce import reduce_with_output
from hardening_fuzz import fuzz_settings

TARGET = Target.custom(tiles_per_ipu=4, bytes_per_tile=16384)
CHECKED = {"checked": True} if "checked" in inspect.signature(Engine).parameters else {}
EXACT = {  # float32-exact in any engine and order
    "add": ex.add(ex._1, ex._2), "sub": ex.sub(ex._1, ex._2), "mul": ex.mul(ex._1, ex._2),
    "max": ex.maximum(ex._1, ex._2),
    "select": ex.select(ex._1, ex._2, ex.gt(ex._1, ex._2)),
    "axpy": ex.add(ex.mul(ex._1, ex.Const(0.5)), ex._2)}
INEXACT = {"tanh": ex.add(ex.tanh(ex._1), ex.mul(ex._2, ex.Const(0.25)))}
EXPRESSIONS = {**EXACT, **INEXACT}
RUNS = [("numpy", ""), ("numpy", None), ("numba", ""), ("numba", None)]


class _Builder:
    """Draws one random program over ``count`` [rows, cols] float tensors.

    ``defined`` holds the tensors whose every element is written on every path so far: only they
    are read, so results never depend on uninitialised memory (a write inside an If branch or a
    ``Repeat(0)`` body defines nothing)."""

    def __init__(self, draw) -> None:
        self.draw = draw
        self.graph = Graph(TARGET)
        self.rows, self.cols = draw(st.integers(1, 3)), draw(st.integers(1, 6))
        self.tensors = [self._variable(f"t{k}") for k in range(draw(st.integers(3, 5)))]
        self.inputs = self.tensors[:draw(st.integers(1, 2))]
        self.defined = set(map(id, self.inputs))
        self.flag = self.graph.add_variable(BOOL, (), "flag")
        self.offset = self.graph.add_variable(UNSIGNED_INT, (1,), "offset")
        for t in (self.flag, self.offset):
            self.graph.set_tile_mapping(t, draw(st.integers(0, 3)))
        self.kinds: set[str] = set()

    def _variable(self, name: str):
        var = self.graph.add_variable(FLOAT, (self.rows, self.cols), name)
        how = self.draw(st.sampled_from(["random", "one", "linear"]))
        if how == "one":
            self.graph.set_tile_mapping(var, self.draw(st.integers(0, 3)))
        elif how == "linear":
            self.graph.map_tensor_linearly(var, min_elements_per_tile=1, grain_size=1)
        else:
            tiles = self.draw(st.lists(st.integers(0, 3), min_size=var.num_elements,
                                       max_size=var.num_elements))
            self.graph.set_tile_mapping(var, TileMapping.from_element_tiles(np.array(tiles)))
        return var

    def _read(self):
        return self.draw(st.sampled_from([t for t in self.tensors if id(t) in self.defined]))

    def _view(self, t):
        """``t`` or a same-shaped view of it that reorders elements."""
        choice = self.draw(st.sampled_from(["same", "reverse0", "reverse1", "transpose"]))
        if choice == "transpose" and self.rows == self.cols:
            return t.transpose()
        if choice.startswith("reverse"):
            return t.reverse(int(choice[-1]))
        return t

    def leaf(self, prog: Sequence, certain: bool) -> None:
        graph, draw = self.graph, self.draw
        kind = draw(st.sampled_from(["map", "map", "in_place", "copy", "copy", "reduce",
                                     "dyn_slice", "dyn_update"]))
        out = draw(st.sampled_from(self.tensors))
        if kind == "map":
            name = draw(st.sampled_from(sorted(EXPRESSIONS)))
            self.kinds.add(name)
            a, b = self._read(), self._read()
            if out in (a, b):
                return
            self.kinds.add(kind)
            map_with_output(graph, EXPRESSIONS[name], [self._view(a), self._view(b)], out, prog)
        elif kind == "in_place":
            out, operand = self._read(), self._read()
            name = draw(st.sampled_from(sorted(EXPRESSIONS)))
            self.kinds.add(name)
            # a reordered view of the target itself would make the result depend on the order
            # elements are updated in, which no engine promises
            operand = operand if operand is out else self._view(operand)
            self.kinds.add(kind)
            map_in_place(graph, EXPRESSIONS[name], [out, operand], prog)
        elif kind == "copy":
            src = self._view(self._read())
            if id(out) not in self.defined and draw(st.booleans()):
                out = self._read()
            self.kinds.add(kind)
            prog.add(Copy(src, self._view(out) if id(out) in self.defined else out))
        elif kind == "reduce":
            out, source = self._read(), self._read()
            if out is source:  # reductions refuse an output that overlaps the input
                return
            dim = draw(st.integers(0, 1))
            index = draw(st.integers(0, (self.cols if dim else self.rows) - 1))
            into = out[:, index] if dim else out[index]
            self.kinds.add(kind)
            reduce_with_output(graph, self._view(source), into, [dim],
                               draw(st.sampled_from(["add", "max"])), prog)
            return
        elif kind == "dyn_slice":
            src, out = self._read(), self._read()
            self.kinds.add(kind)
            window = dynamic_slice(graph, src, self.offset, [0], [1], prog)
            row = draw(st.integers(0, self.rows - 1))
            prog.add(Copy(window, out[row:row + 1]))
            return
        else:
            target, source = self._read(), self._read()
            if target is source:
                return
            self.kinds.add(kind)
            dynamic_update(graph, target, source[0:1], self.offset, [0], [1], prog)
            return
        if certain:
            self.defined.add(id(out))

    def block(self, prog: Sequence, depth: int, certain: bool) -> None:
        for _ in range(self.draw(st.integers(1, 4))):
            shape = self.draw(st.sampled_from(["leaf", "leaf", "repeat", "if", "seq"])
                              if depth < 2 else st.just("leaf"))
            if shape == "leaf":
                self.leaf(prog, certain)
            elif shape == "seq":
                inner = Sequence()
                self.block(inner, depth + 1, certain)
                prog.add(inner)
            elif shape == "repeat":
                count = self.draw(st.integers(0, 3))
                body = Sequence()
                self.block(body, depth + 1, certain and count > 0)
                prog.add(Repeat(count, body))
                self.kinds.add("repeat")
            else:
                then, otherwise = Sequence(), Sequence()
                saved = set(self.defined)
                self.block(then, depth + 1, False)
                self.block(otherwise, depth + 1, False)
                self.defined = saved
                prog.add(If(self.flag, then, otherwise))
                self.kinds.add("if")

    def finish(self, prog: Sequence) -> list[str]:
        """Write every undefined tensor in full, expose the streams; the host-read names."""
        for t in self.tensors:
            if id(t) not in self.defined:
                prog.add(Copy(self._view(self._read()), t))
                self.defined.add(id(t))
        reads = []
        for k, t in enumerate(self.tensors):
            if t in self.inputs:
                self.graph.create_host_write(f"in{k}", t)
            if t in self.inputs or self.draw(st.booleans()):
                self.graph.create_host_read(f"t{k}", t)
                reads.append(f"t{k}")
        self.graph.create_host_write("flag", self.flag)
        self.graph.create_host_write("offset", self.offset)
        return reads


def check_plan(engine: Engine) -> None:
    """The planner's invariants on a compiled engine (its module after the pipeline)."""
    plan, graph = engine.plan, engine.module.graph
    lv = plan.liveness
    assert np.all(plan.block_offset % plan.alignment == 0)
    assert np.all(plan.block_size % plan.alignment == 0)
    assert np.all(plan.block_size >= plan.block_nbytes)
    assert np.all(plan.block_offset + plan.block_size <= plan.capacity)  # fits its tile stride
    assert np.all((0 <= plan.block_tile) & (plan.block_tile < plan.num_tiles))
    for step in lv.steps:
        touched = step.effect.reads | step.effect.writes
        sized = {v for v in touched if graph.variables[v].num_elements}
        assert sized <= plan.allocated, f"step {step} touches unallocated variables"
        live = np.isin(plan.block_variable, sorted(lv.live_at(step.index) & plan.allocated))
        for tile in np.unique(plan.block_tile[live]).tolist():
            on = live & (plan.block_tile == tile)
            order = np.argsort(plan.block_offset[on], kind="stable")
            starts = plan.block_offset[on][order]
            ends = (starts + plan.block_size[on][order])
            overlap = starts[1:] < np.maximum.accumulate(ends)[:-1]
            assert not overlap.any(), f"live blocks overlap on tile {tile} at step {step}"
    for table in (graph.host_writes, graph.host_reads):
        for tensor in table.values():
            for var in tensor.variables():
                assert graph.variables.index(var) in plan.allocated


def run_all(graph: Graph, prog: Sequence, writes: dict, reads: list[str]) -> list[dict]:
    results = []
    for backend, pipeline in RUNS:
        engine = Engine(graph, [prog], backend=backend, pipeline=pipeline, **CHECKED)
        check_plan(engine)
        for name, value in writes.items():
            engine.write_tensor(name, value)
        engine.run(0)
        results.append({name: engine.read_tensor(name) for name in reads})
    return results


@fuzz_settings(ci=40)
@given(st.data())
def test_random_programs_agree_across_pipelines_and_engines(data):
    builder = _Builder(data.draw)
    prog = Sequence()
    builder.block(prog, 0, True)
    reads = builder.finish(prog)
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    writes = {f"in{k}": rng.uniform(-1, 1, (builder.rows, builder.cols)).astype(np.float32)
              for k, t in enumerate(builder.tensors) if t in builder.inputs}
    writes["flag"] = np.array(data.draw(st.booleans()))
    writes["offset"] = np.array([data.draw(st.integers(0, builder.rows - 1))])
    reference, *others = run_all(builder.graph, prog, writes, reads)
    exact = not builder.kinds & ({"reduce"} | set(INEXACT))
    event("bitwise" if exact else "tolerance")
    for kind in sorted(builder.kinds):
        event(kind)
    for (backend, pipeline), result in zip(RUNS[1:], others):
        for name in reads:
            where = f"{name} ({backend}, pipeline {pipeline!r})"
            if exact:
                assert result[name].tobytes() == reference[name].tobytes(), where
            else:
                np.testing.assert_allclose(result[name], reference[name], rtol=1e-5, atol=1e-5,
                                           err_msg=where)


def test_the_plan_check_catches_live_blocks_that_share_bytes():
    """Not vacuous: the same plan with every block moved to offset 0 must fail the check."""
    from dataclasses import replace
    from types import SimpleNamespace

    graph = Graph(TARGET)
    x, a, y = (graph.add_variable(FLOAT, (4,), name) for name in ("x", "a", "y"))
    for v in (x, a, y):
        graph.set_tile_mapping(v, 1)
    graph.create_host_write("x", x)
    graph.create_host_read("y", y)
    engine = Engine(graph, [Sequence(Copy(x, a), Copy(a, y))], backend="numpy", pipeline="")
    check_plan(engine)
    plan = engine.plan
    moved = replace(plan, block_offset=np.zeros_like(plan.block_offset))
    try:
        check_plan(SimpleNamespace(plan=moved, module=engine.module))
    except AssertionError as error:
        assert "overlap" in str(error)
        return
    raise AssertionError("overlapping live blocks passed the check")
