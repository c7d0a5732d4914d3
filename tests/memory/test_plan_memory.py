"""plan-memory: worked examples, invariants on random modules, a byte-level simulation, scale."""

from __future__ import annotations

import importlib.util
import random
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gruc import (Call, Copy, FLOAT, HALF, Graph, GrucMappingError, GrucOutOfMemory,
                  GrucValueError, Module, Repeat, Sequence, Target, WriteUndef)
from gruc.analysis.liveness import analyse_liveness
from gruc.ir.expr import _1
from gruc.ir.mapping import TileMapping
from gruc.ir.tensor import concat, strided_columns, strided_columns_of
from gruc.memory.plan import MemoryPlan
from gruc.memory.planner import plan_memory
from gruc.passes.plan_memory import PlanMemory
from gruc.runtime.addresses import PlanAddresses

_spec = importlib.util.spec_from_file_location("_liveness_helpers",
                                               Path(__file__).parent.parent / "analysis" / "test_liveness.py")
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)

TARGET = helpers.TARGET  # 4 tiles of 4096 bytes


def var(graph, name, size, tile=0, dtype=FLOAT):
    v = graph.add_variable(dtype, [size], name)
    graph.set_tile_mapping(v, tile)
    return v


def vindex(graph, v):
    return graph.variables.index(v)


# ---- worked examples ----------------------------------------------------------------------------
def copy_chain(names, size, copies):
    """A module of ``names``' variables (``size`` floats each, on tile 0; the host writes ``x``
    and reads ``y``) running ``copies`` (pairs of names) in order, and its plan."""
    g = Graph(TARGET)
    v = {n: var(g, n, size) for n in names}
    g.create_host_write("x", v["x"])
    g.create_host_read("y", v["y"])
    m = Module(g, [Sequence(*(Copy(v[a], v[b]) for a, b in copies))])
    return g, m, plan_memory(m), [v[n] for n in names]


def test_disjoint_temporaries_share_an_offset():
    g, m, plan, (x, t1, t2, y) = copy_chain(("x", "t1", "t2", "y"), 8, [
        ("x", "t1"), ("t1", "y"), ("y", "t2"), ("t2", "y")])
    assert isinstance(plan, MemoryPlan)
    ix, it1, it2, iy = (vindex(g, v) for v in (x, t1, t2, y))
    assert plan.offset(ix, 0) == 0 and plan.offset(iy, 0) == 32  # always-live, packed
    assert plan.offset(it1, 0) == plan.offset(it2, 0) == 64       # reused
    assert plan.always_live_bytes[0] == 64
    assert plan.not_always_live_bytes[0] == 32
    assert plan.total_bytes[0] == 96 and plan.total_bytes[1:].tolist() == [0, 0, 0]
    assert plan.fits and plan.tiles_over_capacity == ()
    assert PlanAddresses(plan).element_addresses(t2).tolist() == list(range(64, 96, 4))
    assert PlanAddresses(plan).element_addresses(t2[::-2]).tolist() == list(range(92, 60, -8))
    assert plan.tile_blocks(0) == [("x", 0, 32, True), ("y", 32, 32, True),
                                   ("t1", 64, 32, False), ("t2", 64, 32, False)]
    assert plan.blocks(it1) == [(0, 64, 32)]


def test_interfering_temporaries_do_not_share_and_largest_goes_first():
    g = Graph(TARGET)
    x = var(g, "x", 8)
    small, big, y = var(g, "small", 2), var(g, "big", 8), var(g, "y", 2)
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    m = Module(g, [Sequence(Copy(x[0:2], small), Copy(x, big), Copy(big[0:2], y),
                            Copy(small, y))])
    plan = plan_memory(m)
    # always-live x, y packed at 0 and 32; big (32 B) placed first at 40, small after it
    assert plan.offset(vindex(g, big), 0) == 40
    assert plan.offset(vindex(g, small), 0) == 72
    assert plan.total_bytes[0] == 80
    assert plan.not_always_live_bytes[0] == 40


def test_alignment_and_block_per_tile_in_element_order():
    g = Graph(TARGET)
    h = g.add_variable(HALF, [7], "h")  # 14 bytes -> 16 with the 8-byte alignment
    f = g.add_variable(FLOAT, [6], "f")
    g.set_tile_mapping(h, 0)
    g.set_tile_mapping(f, TileMapping.from_element_tiles(np.array([1, 0, 1, 1, 0, 2])))
    g.create_host_write("h", h)
    g.create_host_write("f", f)
    plan = plan_memory(Module(g, [Sequence()]))
    bpt = TARGET.bytes_per_tile
    assert plan.blocks(0) == [(0, 0, 14)]
    assert plan.blocks(1) == [(0, 16, 8), (1, 0, 12), (2, 0, 4)]
    assert plan.block_size.tolist() == [16, 8, 16, 8]
    assert PlanAddresses(plan).element_addresses(f).tolist() == [bpt + 0, 16, bpt + 4, bpt + 8, 20, 2 * bpt]
    assert plan.always_live_bytes.tolist() == [24, 16, 8, 0]
    assert PlanAddresses(plan).id_addresses(np.array([f.first_id])).tolist() == [bpt]


def test_value_carried_across_a_loop_is_not_shared():
    g = Graph(TARGET)
    x, acc, tmp, other, out = (var(g, n, 4) for n in ("x", "acc", "tmp", "other", "out"))
    g.create_host_write("x", x)
    g.create_host_read("out", out)
    body = Sequence(Copy(x, other), Copy(other, x), Copy(acc, tmp), Copy(tmp[0:2], acc[2:4]))
    plan = plan_memory(Module(g, [Sequence(Copy(x, acc), Repeat(3, body), Copy(acc, out))]))
    offsets = {n: plan.offset(vindex(g, v), 0) for n, v in
               (("acc", acc), ("tmp", tmp), ("other", other))}
    assert offsets["acc"] != offsets["other"] and offsets["acc"] != offsets["tmp"]
    assert offsets["tmp"] == offsets["other"]  # other dies before tmp is born


def test_call_site_values_do_not_share_with_callee_temporaries():
    g = Graph(TARGET)
    x, keep, tmp, y, z = (var(g, n, 4) for n in ("x", "keep", "tmp", "y", "z"))
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    g.create_host_read("z", z)
    f = g.add_function(Sequence(Copy(x, tmp), Copy(tmp, y)), "f")
    plan = plan_memory(Module(g, [Sequence(Copy(x, keep), Call(f), Copy(keep, z), Call(f))]))
    assert plan.offset(vindex(g, keep), 0) != plan.offset(vindex(g, tmp), 0)
    # without a value live across the call, the two share
    g2 = Graph(TARGET)
    x2, keep2, tmp2, y2 = (var(g2, n, 4) for n in ("x", "keep", "tmp", "y"))
    g2.create_host_write("x", x2)
    g2.create_host_read("y", y2)
    f2 = g2.add_function(Sequence(Copy(x2, tmp2), Copy(tmp2, y2)), "f")
    plan2 = plan_memory(Module(g2, [Sequence(Copy(x2, keep2), Copy(keep2, y2), Call(f2))]))
    assert plan2.offset(vindex(g2, keep2), 0) == plan2.offset(vindex(g2, tmp2), 0)


def test_unmapped_variables():
    g = Graph(TARGET)
    x = var(g, "x", 4)
    loose = g.add_variable(FLOAT, [4], "loose")  # never mapped, never used: no memory
    half = g.add_variable(FLOAT, [4], "half_mapped")
    g.set_tile_mapping(half[0:2], 1)
    plan = plan_memory(Module(g, [Sequence(WriteUndef(x))]))
    assert plan.allocated == {vindex(g, x)}
    with pytest.raises(GrucValueError, match="loose"):
        PlanAddresses(plan).element_addresses(loose)
    g.create_host_read("h", half)
    with pytest.raises(GrucMappingError, match=r"half_mapped.*2 of its 4 elements have no tile"):
        plan_memory(Module(g, [Sequence()]))
    with pytest.raises(GrucMappingError, match="loose"):
        plan_memory(Module(g, [Sequence(Copy(x, loose))]))


def test_out_of_memory_is_reported_and_strict_raises():
    target = Target.custom(tiles_per_ipu=2, bytes_per_tile=256)
    g = Graph(target)
    a = var(g, "weights", 40, tile=1)   # 160 B
    b = var(g, "acts", 30, tile=1)      # 120 B
    c = var(g, "fine", 8, tile=0)
    for v in (a, b, c):
        g.create_host_write(v.name, v)
    m = Module(g, [Sequence()])
    plan = plan_memory(m)  # planning never fails for lack of memory
    assert not plan.fits
    (over,) = plan.tiles_over_capacity
    assert (over.tile, over.bytes, over.capacity) == (1, 280, 256)
    assert over.largest == (("weights", 160), ("acts", 120))
    assert "tile 1 needs 280 bytes but has 256" in plan.summary()
    with pytest.raises(GrucOutOfMemory, match=r"tile 1 needs 280 bytes but has 256 .*weights "
                                              r"\(160 B\), acts \(120 B\)"):
        plan_memory(m, strict=True)
    with pytest.raises(GrucOutOfMemory):
        PlanMemory(strict=True).apply(m)
    assert PlanMemory().apply(m) is m and PlanMemory.name == "plan-memory"


def test_identical_tiles_are_planned_once():
    target = Target.custom(tiles_per_ipu=64, bytes_per_tile=4096)
    g = Graph(target)
    big = g.add_variable(FLOAT, [64 * 32], "big")
    g.map_tensor_linearly(big)
    t = g.add_variable(FLOAT, [64 * 32], "t")
    g.map_tensor_linearly(t)
    g.create_host_write("big", big)
    plan = plan_memory(Module(g, [Sequence(Copy(big, t), WriteUndef(t))]))
    assert plan.num_signatures == 1
    assert plan.total_bytes.tolist() == [256] * 64


@settings(deadline=None, max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 8)), max_size=8),
       st.integers(0, 20), st.integers(1, 10))
def test_first_fit_finds_the_lowest_free_offset(intervals, base, size):
    from gruc.memory.planner import _first_fit
    starts = np.array([s for s, _ in intervals], dtype=np.int64)
    ends = np.array([s + n for s, n in intervals], dtype=np.int64)
    expected = next(o for o in range(base, 100)
                    if not np.any((starts < o + size) & (ends > o)))
    assert _first_fit(starts, ends, base, size) == expected


# ---- invariants on random modules --------------------------------------------------------------
def check_invariants(module, plan: MemoryPlan):
    graph = module.graph
    lv = plan.liveness
    bpt = graph.target.bytes_per_tile
    for tile in range(plan.num_tiles):
        on = np.flatnonzero(plan.block_tile == tile)
        variables = plan.block_variable[on]
        start = plan.block_offset[on]
        end = start + plan.block_size[on]
        always = np.isin(variables, list(lv.always_live))
        assert np.all(start % plan.alignment == 0)
        assert np.all(start >= 0) and np.all(end <= plan.total_bytes[tile])  # within [0, total)
        assert plan.total_bytes[tile] == (end.max() if len(on) else 0)
        # always-live blocks tile [0, always_live_bytes) exactly; the rest lies above
        assert plan.always_live_bytes[tile] == plan.block_size[on][always].sum()
        assert np.all(end[always] <= plan.always_live_bytes[tile])
        assert np.all(start[~always] >= plan.always_live_bytes[tile])
        nal_sum = plan.block_size[on][~always].sum()
        peak = plan.not_always_live_bytes[tile]
        assert peak <= nal_sum
        assert (plan.always_live_bytes[tile] + peak <= plan.total_bytes[tile]
                <= plan.always_live_bytes[tile] + nal_sum)
        for i in range(len(on)):  # no two interfering variables share a byte
            for j in range(i + 1, len(on)):
                if start[i] < end[j] and start[j] < end[i]:
                    assert not lv.interferes(int(variables[i]), int(variables[j])), \
                        (graph.variables[variables[i]].name, graph.variables[variables[j]].name)
    for v in plan.allocated:
        variable = graph.variables[v]
        addresses = PlanAddresses(plan).element_addresses(variable)
        tiles = graph.element_tiles(variable)
        assert np.array_equal(addresses // bpt, tiles)
        assert len(np.unique(addresses)) == variable.num_elements
        for tile, offset, nbytes in plan.blocks(v):
            on_tile = np.sort(addresses[tiles == tile]) - tile * bpt
            assert on_tile.tolist() == list(range(offset, offset + nbytes, variable.dtype.size))
    assert lv.used - set(plan.allocated) == set()


def check_by_simulation(module, plan: MemoryPlan, rng: random.Random, runs: int):
    """Run the module on tagged bytes: every byte remembers the variable that last wrote it.

    Whenever an element is read, its bytes must still carry its own variable's tag unless its value
    is undefined (declared dead by WriteUndef); a not-always-live element must never be read before
    it is written in the same run (liveness would have missed a live-in); and no step may write
    bytes that it reads as another variable's."""
    graph = module.graph
    target = graph.target
    lv = plan.liveness
    num_ids = graph.variables[-1].first_id + graph.variables[-1].num_elements
    tags = np.full(target.num_tiles * target.bytes_per_tile, -1, dtype=np.int64)
    state = np.zeros(num_ids, dtype=np.int8)  # 0 never written this run, 1 defined, 2 undefined
    owner = graph.variable_of_id(np.arange(num_ids))
    size_of = np.array([v.dtype.size for v in graph.variables])
    always = np.zeros(len(graph.variables), dtype=bool)
    always[list(lv.always_live)] = True
    allocated = np.zeros(len(graph.variables), dtype=bool)
    allocated[list(plan.allocated)] = True

    def byte_view(tensors):
        ids = np.concatenate([t.flat_ids() for t in tensors]) if tensors else np.zeros(0, np.int64)
        ids = ids[allocated[owner[ids]]]
        base = PlanAddresses(plan).id_addresses(ids)
        size = size_of[owner[ids]]
        width = size.max(initial=1)
        nbytes = base[:, None] + np.arange(width)
        valid = np.arange(width)[None, :] < size[:, None]
        return ids, nbytes, valid

    for v in lv.always_live:  # state the host or a constant provides
        ids, nbytes, valid = byte_view([graph.variables[v]])
        tags[nbytes[valid]] = v
        state[ids] = 1

    def on_step(node):
        reads, writes, undefs = helpers.step_tensors(node)
        rid, rbytes, rvalid = byte_view(reads)
        fresh = (state[rid] == 0) & ~always[owner[rid]]
        assert not fresh.any(), f"{graph.variables[owner[rid][fresh][0]].name} read before written"
        defined = state[rid] == 1
        expect = np.broadcast_to(owner[rid][:, None], rbytes.shape)
        check = rvalid & defined[:, None]
        clobbered = tags[rbytes[check]] != expect[check]
        if clobbered.any():
            victim = graph.variables[expect[check][clobbered][0]].name
            culprit = graph.variables[tags[rbytes[check]][clobbered][0]].name
            raise AssertionError(f"{victim} was overwritten by {culprit} before it was read")
        wid, wbytes, wvalid = byte_view(writes)
        wowner = np.broadcast_to(owner[wid][:, None], wbytes.shape)[wvalid]
        common, ri, wi = np.intersect1d(rbytes[rvalid], wbytes[wvalid], return_indices=True)
        assert np.all(expect[rvalid][ri] == wowner[wi]), "a step writes bytes it reads elsewhere"
        tags[wbytes[wvalid]] = wowner
        state[wid] = 1
        uid, _, _ = byte_view(undefs)
        state[uid] = 2

    for _ in range(runs):
        state[~always[owner]] = 0  # not-always-live values do not survive between runs
        helpers.simulate(module, rng, on_step)
        host = list(graph.host_reads.values())
        if host:
            rid, rbytes, rvalid = byte_view(host)
            keep = rvalid & (state[rid] == 1)[:, None]
            expect = np.broadcast_to(owner[rid][:, None], rbytes.shape)
            assert np.all(tags[rbytes[keep]] == expect[keep]), "a host-read value was overwritten"


@settings(deadline=None, max_examples=150)
@given(st.data())
def test_random_modules_plan_safely(data):
    module = helpers.build_random_module(data.draw)
    plan = plan_memory(module)
    check_invariants(module, plan)
    check_by_simulation(module, plan, random.Random(data.draw(st.integers(0, 2**32))), runs=6)


@settings(deadline=None, max_examples=40)
@given(st.data())
def test_random_modules_plan_safely_on_tight_tiles(data):
    # 2 tiles of 1 KiB with bigger variables: many blocks per tile, more reuse, alignment gaps
    target = Target.custom(tiles_per_ipu=2, bytes_per_tile=1024)
    module = helpers.build_random_module(data.draw, target=target)
    plan = plan_memory(module)
    check_invariants(module, plan)
    check_by_simulation(module, plan, random.Random(data.draw(st.integers(0, 2**32))), runs=4)


def test_a_broken_plan_is_caught_by_the_simulation():
    # the checks can fail: give two interfering variables the same bytes
    g, m, plan, (x, a, b, y) = copy_chain(("x", "a", "b", "y"), 4, [
        ("x", "a"), ("x", "b"), ("a", "y"), ("b", "y")])
    check_by_simulation(m, plan, random.Random(0), runs=1)
    offsets = np.array(plan.block_offset)
    ia, ib = vindex(g, a), vindex(g, b)
    offsets[plan.block_variable == ib] = offsets[plan.block_variable == ia][0]
    runs = np.array(plan.runs)  # rows: first id, length, tile, byte offset, element size
    run_var = g.variable_of_id(runs[:, 0])
    runs[run_var == ib, 3] = runs[run_var == ia, 3]
    broken = MemoryPlan(**{**{f: getattr(plan, f) for f in plan.__dataclass_fields__},
                           "block_offset": offsets, "runs": runs})
    with pytest.raises(AssertionError, match="a was overwritten by b"):
        check_by_simulation(m, broken, random.Random(0), runs=1)
    with pytest.raises(AssertionError):
        check_invariants(m, broken)


# ---- scale --------------------------------------------------------------------------------------
def test_planning_an_ipu2_module_is_fast():
    rng = np.random.default_rng(0)
    g = Graph(Target.ipu2())
    big = g.add_variable(FLOAT, [1000, 64, 256], "big")
    g.map_tensor_linearly(big)
    small = []
    for k in range(300):
        v = g.add_variable(FLOAT if k % 3 else HALF, [int(rng.integers(1, 512))], f"s{k}")
        if k % 4 == 0:
            g.map_tensor_linearly(v)
        else:
            g.set_tile_mapping(v, int(rng.integers(0, 1472)))
        small.append(v)
    g.create_host_write("in", small[0])
    g.create_host_read("out", small[1])
    steps = [WriteUndef(big)]
    for k in range(300):
        a, b = (small[int(i)] for i in rng.integers(0, len(small), 2))
        if a.dtype != b.dtype or a is b:
            steps.append(WriteUndef(a))
            continue
        n = min(a.num_elements, b.num_elements, 256)
        if k % 10 == 0 and a.dtype == FLOAT:
            steps.append(Copy(a[0:n], big[k, 0, 0:n]))
        elif k % 10 == 5 and a.dtype == FLOAT:
            cs = g.add_compute_set()
            g.add_vertex(cs, "Map", {"out": a[0:n], "ins": [big[k - 5, 0, 0:n]]}, expr=_1)
            steps.append(helpers.Execute(cs))
        else:
            steps.append(Copy(a[0:n], b[0:n]))
    body = Sequence(*steps[100:200])
    module = Module(g, [Sequence(*steps[:100], Repeat(1000, body), *steps[200:])])
    t0 = time.perf_counter()
    liveness = analyse_liveness(module)
    t1 = time.perf_counter()
    plan = plan_memory(module, liveness)
    t2 = time.perf_counter()
    addresses = PlanAddresses(plan).element_addresses(big[999])
    t3 = time.perf_counter()
    print(f"\nipu2 scale: liveness {t1 - t0:.2f} s, plan {t2 - t1:.2f} s "
          f"({plan.num_signatures} tile layouts), element addresses {t3 - t2:.2f} s")
    print(plan.summary())
    assert t2 - t0 < 20  # a hang guard, not a benchmark
    assert plan.fits
    assert len(addresses) == 64 * 256
    assert plan.always_live_bytes.sum() > 0 and plan.not_always_live_bytes.max() > 0
    assert plan.total_bytes.max() < Target.ipu2().bytes_per_tile


# ---- addresses of views -------------------------------------------------------------------------
def _view(draw, t):
    """A random view of ``t``: slices, reversals, subsamples, transposes, broadcasts, reshapes and
    concatenations (along any dim, nested) — the forms lowering resolves addresses of."""
    for _ in range(draw(st.integers(0, 4))):
        choice = draw(st.sampled_from(["slice", "reverse", "subsample", "shuffle", "broadcast",
                                       "reshape", "concat", "scalar"]))
        dim = draw(st.integers(0, t.rank - 1)) if t.rank else 0
        if choice == "scalar" and t.num_elements:
            return t.reshape([t.num_elements])[draw(st.integers(0, t.num_elements - 1))]
        if t.rank == 0:
            break
        size = t.shape[dim]
        if choice == "slice" and size:
            begin = draw(st.integers(0, size - 1))
            t = t.slice(begin, draw(st.integers(begin, size)), dim)
        elif choice == "reverse":
            t = t.reverse(dim)
        elif choice == "subsample":
            t = t.subsample(draw(st.integers(1, 3)), dim)
        elif choice == "shuffle":
            t = t.dim_shuffle(draw(st.permutations(range(t.rank))))
        elif choice == "broadcast" and t.num_elements < 200:
            t = t.broadcast(draw(st.integers(1, 3)), dim)
        elif choice == "reshape":
            t = t.reshape([t.num_elements])
        elif choice == "concat":  # with itself reversed along some dim or sliced along ``dim``
            begin = draw(st.integers(0, size))
            other = draw(st.sampled_from([t.reverse(d) for d in range(t.rank)]
                                         + [t.slice(begin, size, dim)]))
            t = concat([t, other] if draw(st.booleans()) else [other, t, other], dim)
    return t


@settings(deadline=None, max_examples=120)
@given(st.data())
def test_view_addresses_follow_their_ids(data):
    """Any view's addresses (strided views walked in place, concatenations part by part into
    their places) are those of its element ids, one by one, in bytes and in typed indices, and
    ``index_runs`` gives the indices as maximal runs."""
    graph = Graph(TARGET)
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    x = graph.add_variable(FLOAT, shape, "x")
    y = graph.add_variable(HALF, [7], "y")
    tiles = data.draw(st.lists(st.integers(0, TARGET.num_tiles - 1),
                               min_size=x.num_elements, max_size=x.num_elements))
    graph.set_tile_mapping(x, TileMapping.from_element_tiles(np.array(tiles)))
    graph.set_tile_mapping(y, 1)
    module = Module(graph, [Sequence(Copy(x, x), Copy(y, y))])
    plan = plan_memory(module)
    view = _view(data.draw, x)
    expected = PlanAddresses(plan).id_addresses(view.flat_ids())
    assert PlanAddresses(plan).element_addresses(view).tolist() == expected.tolist()
    out = PlanAddresses(plan).element_indices(view, 8192)
    assert out.tolist() == (PlanAddresses(plan).id_addresses(view.flat_ids(), 8192) // 4).tolist()
    positions, firsts = PlanAddresses(plan).index_runs(view, 8192)  # the same indices as maximal runs
    lengths = np.diff(np.append(positions, view.num_elements))
    assert np.all(lengths > 0) and (positions[:1].tolist() == [0] or not view.num_elements)
    assert np.all(np.diff(firsts) != lengths[:-1])  # no run continues the one before
    expanded = np.repeat(firsts - positions, lengths) + np.arange(view.num_elements)
    assert expanded.tolist() == out.tolist()


def test_index_runs_join_the_parts_of_a_concatenation_that_continue_each_other():
    """Parts of a concatenation are walked one by one; where one part's last element and the
    next part's first are consecutive in memory, the run goes on (runs are maximal)."""
    graph = Graph(TARGET)
    x = graph.add_variable(FLOAT, [2, 3], "x")
    graph.set_tile_mapping(x, 0)
    plan = plan_memory(Module(graph, [Copy(x, x)]))
    start = int(PlanAddresses(plan).element_indices(x, 8192)[0])
    positions, firsts = PlanAddresses(plan).index_runs(concat([x[0], x[1]], 0), 8192)
    assert positions.tolist() == [0] and firsts.tolist() == [start]
    positions, firsts = PlanAddresses(plan).index_runs(concat([x[1], x[0], x[1]], 0), 8192)
    assert positions.tolist() == [0, 3] and firsts.tolist() == [start + 3, start]


def _layout_rule_addresses(graph, plan, variable):
    """Each element's byte address by the module docstring's rule, element by element: its
    tile's block offset plus its rank among the variable's elements on that tile."""
    tiles = graph.element_tiles(variable)
    index = vindex(graph, variable)
    addresses = np.empty(len(tiles), np.int64)
    for tile in np.unique(tiles).tolist():
        on_tile = np.flatnonzero(tiles == tile)
        addresses[on_tile] = (tile * graph.target.bytes_per_tile + plan.offset(index, tile)
                              + np.arange(len(on_tile)) * variable.dtype.size)
    return addresses


@settings(deadline=None, max_examples=80)
@given(st.data())
def test_a_sequence_laid_out_alike_at_every_step_is_planned_from_one_step(data):
    """A variable whose rows share one row's tiles keeps that row's runs only, and every view of
    it still gets the layout rule's addresses; one element mapped elsewhere in the last row makes
    it an ordinary variable, with the same guarantee."""
    graph = Graph(TARGET)
    steps = data.draw(st.integers(2, 6))
    row_shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
    x = graph.add_variable(FLOAT, [steps, *row_shape], "x")
    before = graph.add_variable(HALF, [3], "before")  # neighbours in id space
    row_tiles = np.array(data.draw(st.lists(st.integers(0, TARGET.num_tiles - 1),
                                            min_size=x.num_elements // steps,
                                            max_size=x.num_elements // steps)))
    graph.set_tile_mapping(x, row_tiles.reshape(row_shape))
    alike = data.draw(st.booleans())
    if not alike:
        last = x[steps - 1].reshape([len(row_tiles)])[-1]
        graph.set_tile_mapping(last, (int(row_tiles[-1]) + 1) % TARGET.num_tiles)
    graph.set_tile_mapping(before, 2)
    module = Module(graph, [Sequence(Copy(x, x), Copy(before, before))])
    plan = plan_memory(module)
    check_invariants(module, plan)
    row_runs = 1 + int(np.count_nonzero(np.diff(row_tiles)))
    x_runs = int(np.count_nonzero(plan.runs[:, 0] < before.first_id))
    if alike:
        assert x_runs == row_runs  # one step's runs, whatever the number of steps
    else:
        assert x_runs > row_runs
    expected = _layout_rule_addresses(graph, plan, x)
    assert PlanAddresses(plan).element_addresses(x).tolist() == expected.tolist()
    view = _view(data.draw, x)
    by_rule = expected[view.flat_ids() - x.first_id]
    assert PlanAddresses(plan).element_addresses(view).tolist() == by_rule.tolist()
    positions, firsts = PlanAddresses(plan).index_runs(view, TARGET.bytes_per_tile)
    lengths = np.diff(np.append(positions, view.num_elements))
    expanded = np.repeat(firsts - positions, lengths) + np.arange(view.num_elements)
    assert (expanded * 4).tolist() == by_rule.tolist()


@settings(deadline=None, max_examples=80)
@given(st.data())
def test_a_sharded_sequence_is_planned_from_one_step_a_shard(data):
    """A variable whose ranges of rows were each mapped from one row's tiles (a sharded
    sequence) keeps one row's runs a range, and every view of it — one within a range or one
    across them, walked row by row where its rows move alike — gets the layout rule's
    addresses."""
    graph = Graph(TARGET)
    steps = data.draw(st.integers(2, 7), label="steps")
    width = data.draw(st.integers(1, 6), label="width")
    x = graph.add_variable(FLOAT, [steps, width], "x")
    after = graph.add_variable(HALF, [3], "after")  # neighbours in id space
    cuts = sorted(set(data.draw(st.lists(st.integers(1, steps - 1), max_size=3), label="cuts")))
    bounds = list(zip([0, *cuts], [*cuts, steps]))
    tiles = st.integers(0, TARGET.num_tiles - 1)
    rows = [np.array(data.draw(st.lists(tiles, min_size=width, max_size=width), label="row"))
            for _ in bounds]
    for (begin, end), row in zip(bounds, rows):
        graph.set_tile_mapping(x[begin:end], row)
    graph.set_tile_mapping(after, 1)
    assert graph.rows_alike(x) == (len(bounds) == 1)
    assert all(graph.rows_alike(x[begin:end]) for begin, end in bounds)
    module = Module(graph, [Sequence(Copy(x, x), Copy(after, after))])
    plan = plan_memory(module)
    check_invariants(module, plan)
    x_runs = int(np.count_nonzero(plan.runs[:, 0] < after.first_id))
    assert x_runs == sum(1 + int(np.count_nonzero(np.diff(row))) for row in rows)
    expected = _layout_rule_addresses(graph, plan, x)
    addresses = PlanAddresses(plan)
    assert addresses.element_addresses(x).tolist() == expected.tolist()
    stride = TARGET.bytes_per_tile
    for view in [x, *(x[begin:end] for begin, end in bounds), _view(data.draw, x)]:
        by_rule = expected[view.flat_ids() - x.first_id]
        assert addresses.element_addresses(view).tolist() == by_rule.tolist()
        found = addresses.row_index_runs(view, stride) if view.rank > 1 else None
        if found is not None:  # row by row, as a step's slices of a long sequence are read
            positions, firsts, moves = found
            row = view.num_elements // view.shape[0]
            lengths = np.diff(np.append(positions, row))
            every_row = (np.repeat(firsts - positions, lengths) + np.arange(row)
                         + np.arange(view.shape[0])[:, None] * np.repeat(moves, lengths))
            assert (every_row.reshape(-1) * 4).tolist() == by_rule.tolist()


def test_row_moves_of_two_rows_runs():
    """Runs of two rows of 6 (flat positions, first indices) -> how far each first-row run moves."""
    from gruc.runtime.addresses import row_moves

    def moves(positions, firsts):
        found = row_moves(np.array(positions), np.array(firsts), 6)
        return None if found is None else found.tolist()

    assert moves([0, 4, 6, 10], [100, 200, 150, 250]) == [50, 50]  # each row: two runs
    assert moves([0, 4, 10], [100, 200, 210]) == [102, 10]  # row 0's last run goes on into row 1
    assert moves([0], [100]) == [6]                         # one run over both rows
    assert moves([0, 4, 6, 8], [100, 200, 150, 250]) is None  # row 1 cut at 2, row 0 at 4
    assert moves([0, 6, 9], [100, 150, 300]) is None          # one run, then two


@settings(deadline=None, max_examples=80)
@given(st.data())
def test_column_slices_of_a_sequence_have_the_row_runs_their_indices_say(data):
    """Per-tile column slices of a sequence laid out alike at every step (concatenations of them
    along the columns, as the GRU layer's gate slices are, and runs of its columns a row apart as
    one view, as a wide batch's column picks are) get their row runs cut from the
    sequence's: expanded row by row, they give every element's index; the sequence is walked once
    for all its slices."""
    graph = Graph(TARGET)
    steps = data.draw(st.integers(2, 5), label="steps")
    width = data.draw(st.integers(1, 12), label="width")
    x = graph.add_variable(FLOAT, [steps, 2, width], "x")
    row_tiles = np.array(data.draw(st.lists(st.integers(0, TARGET.num_tiles - 1),
                                            min_size=2 * width, max_size=2 * width), label="tiles"))
    graph.set_tile_mapping(x, row_tiles.reshape(2, width))
    rows = x.reshape([steps, 2 * width])
    addresses = PlanAddresses(plan_memory(Module(graph, [Sequence(Copy(x, x))])))
    bounds = sorted(data.draw(st.lists(st.integers(0, 2 * width), min_size=2, max_size=6),
                              label="bounds"))
    slices = [rows.slice(begin, end, 1) for begin, end in zip(bounds, bounds[1:]) if end > begin]
    views = slices + ([concat(slices[::-1], 1), concat(slices, 1)] if slices else [])
    length = data.draw(st.integers(1, width), label="run length")
    apart = data.draw(st.integers(length, width), label="runs apart")
    count = data.draw(st.integers(2, 4), label="runs")
    begin = data.draw(st.integers(0, 2 * width), label="first run")
    spaced = []
    if begin + count * apart <= 2 * width:  # runs a row apart, as one view
        spaced = [strided_columns(rows, begin, length, apart, count)]
        assert strided_columns_of(spaced[0]) == (rows, begin, length, apart, count)
        assert strided_columns_of(rows.slice(begin, begin + length, 1)) is None
    stride = TARGET.bytes_per_tile
    for view in views + spaced:
        found = addresses.row_index_runs(view, stride)
        assert found is not None, view
        positions, firsts, moves = found
        row = view.num_elements // steps
        lengths = np.diff(np.append(positions, row))
        first_row = np.repeat(firsts - positions, lengths) + np.arange(row)
        every_row = first_row + np.arange(steps)[:, None] * np.repeat(moves, lengths)
        assert every_row.reshape(-1).tolist() == addresses.element_indices(view, stride).tolist()
        assert np.all(positions[1:] > positions[:-1])
        assert np.all(firsts[1:] - firsts[:-1] != positions[1:] - positions[:-1])  # maximal
    if slices:  # the slices joined in order are the columns they span, run for run
        joined = addresses.row_index_runs(views[-1], stride)
        spanned = addresses.row_index_runs(rows.slice(bounds[0], bounds[-1], 1), stride)
        assert [part.tolist() for part in joined] == [part.tolist() for part in spanned]
    walked = addresses._column_row_runs[stride]._parents if slices or spaced else {}
    assert list(walked) == ([id(rows)] if slices or spaced else [])


def test_row_runs_cut_to_columns_and_joined_back():
    """Worked examples of cutting a row's runs to a column range and joining column views."""
    from gruc.runtime.row_runs import cut_columns, join_columns, run_ends

    def listed(runs):
        return None if runs is None else [part.tolist() for part in runs]

    row = (np.array([0, 4, 6]), np.array([100, 200, 300]), np.array([10, 10, 20]))
    ends = run_ends(row, 9)
    assert ends.tolist() == [4, 6, 9]
    assert listed(cut_columns(row, ends, 2, 7)) == [[0, 2, 4], [102, 200, 300], [10, 10, 20]]
    assert listed(cut_columns(row, ends, 4, 6)) == [[0], [200], [10]]
    assert listed(cut_columns(row, ends, 7, 9)) == [[0], [301], [20]]
    assert listed(cut_columns(row, ends, 5, 5)) == [[], [], []]
    left, right = cut_columns(row, ends, 0, 2), cut_columns(row, ends, 2, 4)
    assert listed(join_columns([left, right], [2, 2])) == [[0], [100], [10]]  # one run again
    assert listed(join_columns([right, left], [2, 2])) == [[0, 2], [102, 100], [10, 10]]
    moved_apart = (np.array([0]), np.array([102]), np.array([7]))
    assert join_columns([left, moved_apart], [2, 2]) is None  # continues in row 0, not in row 1
