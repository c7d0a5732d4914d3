"""The text IR and its JSON twin: print, parse, round-trip, golden text, errors (SPEC F1).

Every module built here must satisfy ``print(parse(print(m))) == print(m)`` and the same through
JSON; the parsed graph must also *be* the same graph (element ids, tile of every element, constant
bits), not merely print alike.  Regenerate the golden file with ``GRUC_UPDATE_GOLDEN=1 pytest``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gruc.ir.builder as builder_module
from gruc import (BOOL, FLOAT, HALF, INT, UNSIGNED_INT, Call, Copy, Execute, Graph, If, Module,
                  PrintTensor, Repeat, RepeatWhileTrue, Sequence, Sync, Target, TileMapping,
                  TimeLoop, WriteUndef, concat)
from gruc.errors import GrucParseError, GrucTypeError
from gruc.ir import expr as ex
from gruc.ir.builder import groups_to_runs
from gruc.ir.parser import parse_module
from gruc.ir.printer import mapping_groups, print_module, print_module_with_lines
from gruc.ir.serialize import module_from_json, module_to_json
from gruc.ir.verify import verify

GOLDEN = Path(__file__).parent / "golden"


# ------------------------------------------------------------------------------ modules
def small_program() -> Module:
    """Variables, views, a compute set, Repeat and Copy: the golden-file module."""
    g = Graph(Target.custom(tiles_per_ipu=4))
    x = g.add_variable(FLOAT, [2, 4, 8], "x")
    g.map_tensor_linearly(x, min_elements_per_tile=0, grain_size=4)
    acc = g.add_variable(FLOAT, [4, 8], "acc")
    g.set_tile_mapping(acc, 1)
    one = g.add_constant(FLOAT, [4, 8], 1.0, "one")
    g.set_tile_mapping(one, 1)
    step = g.add_compute_set("step")
    g.add_vertex(step, "MapInPlace", {"inout": acc, "ins": [x[0], one]},
                 expr=ex.add(ex._1, ex.mul(ex._2, ex._3)))
    g.add_vertex(step, "Map", {"out": x[1, 0], "ins": [one[0]]}, tile=1,
                 expr=ex.parse_expr("tanh(_1)"))
    g.create_host_write("x", x)
    g.create_host_read("acc", acc)
    body = Sequence(Execute(step), Copy(acc.transpose(), x[1].transpose()))
    return Module(g, [Sequence(Repeat(3, body), Copy(x[0], acc))])


def all_features() -> Module:
    """Every construct: constants of each type, every view op, both vertex kinds, every program."""
    g = Graph(Target.custom(tiles_per_ipu=16, num_ipus=2, clock_hz=1.5e9))
    a = g.add_variable(FLOAT, [4, 6], "a")
    g.map_tensor_linearly(a)
    b = g.add_variable(FLOAT, [2, 6], "a")                      # same name: printed %a_1
    g.set_tile_mapping(b, [[], [(0, 5)], [(5, 12)]])
    h = g.add_variable(HALF, [3, 5], "weights/h é")            # sanitised, exact name kept
    g.set_tile_mapping(h, 31)
    part = g.add_variable(INT, [10], "")                       # default name v3
    g.set_tile_mapping(part[2:5], 7)                            # partly mapped
    g.set_tile_mapping(g.add_variable(FLOAT, [], "s"), 0)       # rank 0
    g.add_variable(FLOAT, [0, 3], "empty")                      # no elements
    f16 = g.add_constant(HALF, [8], [0.1, -0.0, np.inf, -np.inf, np.nan, 65504, 6e-8, 1.0], "c16")
    f32 = g.add_constant(FLOAT, [2, 3], [[1e-45, 3.4028235e38, 0.1], [0.1, 0.1, -2.5]], "c32")
    i32 = g.add_constant(INT, [3], [-2 ** 31, 2 ** 31 - 1, 0], "ci")
    u32 = g.add_constant(UNSIGNED_INT, [2], [2 ** 32 - 1, 7], "cu")
    flag = g.add_constant(BOOL, [1], [True], "flag")
    flags = g.add_constant(BOOL, [2, 2], [[True, False], [False, False]], "flags")
    for c in (f16, f32, i32, u32, flag, flags):
        g.set_tile_mapping(c, 2)

    both = concat([a, b], 0)                                   # concat of different variables
    views = [a[1:3, ::2], a[::-1], a.reshape([2, 12]), a.transpose(), h[0].broadcast(3, 0),
             both.dim_roll(0, 1), a.subsample(3, 1), a.reverse(1), h.expand([0]).squeeze([0])]
    cs1 = g.add_compute_set("ew")
    g.add_vertex(cs1, "Map", {"out": a, "ins": [both[0:4], a]}, expr=ex.maximum(ex._1, ex._2))
    g.add_vertex(cs1, "Map", {"out": b[0], "ins": [b[1], a[0]]}, tile=2,
                 expr=ex.select(ex._1, ex._2, ex.gt(ex._1, ex.Const(0.5))))
    g.add_vertex(cs1, "MapInPlace", {"inout": h[1], "ins": []},
                 expr=ex.cast(ex.mul(ex.cast(ex._1, FLOAT), ex.Const(2.0, FLOAT)), HALF))
    g.add_vertex(cs1, "MapInPlace", {"inout": a[2], "ins": [a[3]]}, tile=0,
                 expr=ex.sub(ex._1, ex._2))
    cs2 = g.add_compute_set("ew")                               # duplicate name
    g.add_vertex(cs2, "Map", {"out": flags.reshape([4]), "ins": [flags.reshape([4])]},
                 expr=ex.logical_not(ex._1))
    g.add_compute_set("empty set")
    later = g.add_function(Sequence(Sync()), "later")
    early = g.add_function(Sequence(Execute(cs2)), "early")
    early.program.add(Call(later))                             # calls a function defined earlier
    later.program.add(PrintTensor("views", views[4]))
    step = Execute(cs1)
    prog0 = Sequence(
        Repeat(2, Sequence(step, step, Sequence(), Sequence(Copy(views[0], views[0])))),
        Repeat(0, Execute(cs2)),
        RepeatWhileTrue(Sequence(Execute(cs2)), flag[0], Sequence(Call(early), Sync())),
        If(flag.reshape([]), Copy(a, views[1]), Sequence(WriteUndef(b))),
        If(flag[0], If(flag[0], Sync())),                       # nested if: no dangling else
        PrintTensor('label "quoted"\n', views[2]),
        *(WriteUndef(v) for v in views[3:]),
        Call(later))
    counter = g.add_variable(UNSIGNED_INT, [1], "counter")
    g.set_tile_mapping(counter, 3)
    prog0.add(TimeLoop(Copy(u32[1:2], counter), Repeat(3, Sequence(step)), False, 6, 3, 2, 4))
    prog0.add(TimeLoop(Copy(u32[0:1], counter), RepeatWhileTrue(Sequence(), flag[0], Sync()),
                       True, 0, 5))
    prog1 = Repeat(5, Repeat(7, Sequence(Execute(cs1))))
    g.create_host_write("a", a)
    g.create_host_write("b", views[5])
    g.create_host_read("h", h)
    return Module(g, [prog0, prog1, Sequence()])


def linear_ipu2(num_views: int = 300) -> Module:
    """The scale case: [1000,64,256] linearly mapped over an ipu2, a few hundred views."""
    g = Graph(Target.ipu2())
    x = g.add_variable(FLOAT, [1000, 64, 256], "x")
    g.map_tensor_linearly(x)
    prog = Sequence()
    for i in range(num_views):
        view = x[i, :, 3:200].transpose() if i % 3 else x[i].reshape([64 * 256])[::7]
        prog.add(WriteUndef(view))
    prog.add(Copy(x[1:3], x[5:7]))
    return Module(g, [prog])


def ops_built() -> Module:
    """A module made by the op library, as users build them."""
    from gruc.ops import elementwise as ew

    g = Graph(Target.custom(tiles_per_ipu=8))
    x = g.add_variable(FLOAT, [16, 10], "x")
    g.map_tensor_linearly(x)
    y = g.add_variable(FLOAT, [10], "y")
    g.map_tensor_linearly(y)
    prog = Sequence()
    z = ew.map(g, ex.tanh(ex._1 + ex._2) * 2.0, [x, y], prog)
    ew.add_in_place(g, z, x, prog)
    ew.scaled_add_to(g, x, z, 0.5, prog)
    return Module(g, [prog])


MODULES = {"small_program": small_program, "all_features": all_features, "ops_built": ops_built}


# ------------------------------------------------------------------------------ helpers
def same_graph(m1: Module, m2: Module) -> None:
    """The graphs are the same: targets, element ids, tiles of every element, constant bits."""
    g1, g2 = m1.graph, m2.graph
    assert g1.target == g2.target
    assert len(g1.variables) == len(g2.variables)
    for v1, v2 in zip(g1.variables, g2.variables):
        assert (v1.name, v1.shape, v1.dtype, v1.first_id) == \
            (v2.name, v2.shape, v2.dtype, v2.first_id)
        assert np.array_equal(g1.element_tiles(v1), g2.element_tiles(v2))
        assert (v1.constant is None) == (v2.constant is None)
        if v1.constant is not None:
            assert v1.constant.dtype == v2.constant.dtype and v1.constant.shape == v2.constant.shape
            assert v1.constant.tobytes() == v2.constant.tobytes() or np.array_equal(
                v1.constant, v2.constant, equal_nan=True)
    assert [cs.name for cs in g1.compute_sets] == [cs.name for cs in g2.compute_sets]
    assert [f.name for f in g1.functions] == [f.name for f in g2.functions]
    assert list(g1.host_writes) == list(g2.host_writes)
    assert len(m1.programs) == len(m2.programs)


def round_trip(module: Module) -> str:
    text = print_module(module)
    parsed = parse_module(text)
    assert print_module(parsed) == text
    same_graph(module, parsed)
    data = module_to_json(module)
    dumped = json.dumps(data, sort_keys=True, allow_nan=False)
    assert json.dumps(module_to_json(module), sort_keys=True) == dumped
    loaded = module_from_json(json.loads(dumped))
    assert print_module(loaded) == text
    same_graph(module, loaded)
    assert json.dumps(module_to_json(loaded), sort_keys=True) == dumped
    return text


# ------------------------------------------------------------------------------ round trips
@pytest.mark.parametrize("name", sorted(MODULES))
def test_round_trip_text_and_json(name):
    round_trip(MODULES[name]())


def test_golden_small_program():
    text = print_module(small_program())
    path = GOLDEN / "small_program.gruc"
    if os.environ.get("GRUC_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()
    assert print_module(parse_module(path.read_text())) == text
    verify(small_program())  # a well-formed module: mapped, written before read, race-free


def test_every_golden_file_round_trips():
    files = sorted(GOLDEN.glob("*.gruc"))
    assert files
    for path in files:
        text = path.read_text()
        assert print_module(parse_module(text)) == text, path.name


def test_printed_text_reads_as_documented():
    text = print_module(all_features())
    lines = text.splitlines()
    assert lines[0].startswith('module target(name="custom", device_type="ipu2", num_ipus=2, '
                               'tiles_per_ipu=16, ')
    assert "clock_hz=1500000000.0" in lines[0]
    assert '%a = var f32[4,6] "a" map=[0 x 24]' in lines     # 128 bytes at least per tile
    assert '%a_1 = var f32[2,6] "a" map=[1 x 5, 2 x 7]' in lines
    assert '%weights_h = var f16[3,5] "weights/h \\u00e9" map=[31 x 15]' in lines
    assert '%v3 = var i32[10] "v3" map=[_ x 2, 7 x 3, _ x 5]' in lines
    assert '%s = var f32[] "s" map=[0 x 1]' in lines
    assert '%empty = var f32[0,3] "empty" map=[]' in lines
    assert ('%c16 = const f16[8] "c16" map=[2 x 8] values=[0.1, -0.0, inf, -inf, nan, 6.55e+04, '
            '6e-08, 1.0]') in lines
    assert '%c32 = const f32[2,3] "c32" map=[2 x 6] values=[1e-45, 3.4028235e+38, 0.1 x 3, -2.5]' \
        in lines
    assert '%ci = const i32[3] "ci" map=[2 x 3] values=[-2147483648, 2147483647, 0]' in lines
    assert '%flags = const bool[2,2] "flags" map=[2 x 4] values=[true, false x 3]' in lines
    assert "%a_2 = concat %a, %a_1 dim=0 : f32[6,6]" in lines
    assert "cs @ew {" in lines and 'cs @ew_1 "ew" {' in lines
    assert 'cs @empty_set "empty set" {}' in lines
    assert "  Map(out=%a, ins=[%a_4, %a]) expr=max(_1, _2)" in lines
    assert any(line.startswith("  MapInPlace(inout=%") and line.endswith(" tile=0")
               for line in lines)
    assert "func @later {" in lines and "func @early {" in lines
    assert "program 2 {}" in lines and "program 1 repeat 5 repeat 7 {" in lines
    assert "  repeat 0 execute @ew_1" in lines
    assert "  if %flag_5 if %flag_7 sync else {} else {}" in lines       # no dangling else
    assert any(line.startswith('  print "label \\"quoted\\"\\n" %') for line in lines)
    assert "  timeloop forward first 6 steps 3 shard 2 of 4 {" in lines
    assert "  timeloop reverse first 0 steps 5 shard 0 of 1 {" in lines


def test_mapping_of_a_linear_ipu2_tensor_is_one_short_line_and_scales():
    module = linear_ipu2()
    start = time.perf_counter()
    text = print_module(module)
    printed = time.perf_counter()
    parsed = parse_module(text)
    parsed_at = time.perf_counter()
    assert '%x = var f32[1000,64,256] "x" map=[0:1472 ~ 16384000/2]' in text.splitlines()
    assert print_module(parsed) == text
    assert np.array_equal(module.graph.element_tiles(module.graph.variables[0]),
                          parsed.graph.element_tiles(parsed.graph.variables[0]))
    # generous bounds (a loaded CI machine); per-element Python work would take minutes
    assert printed - start < 3.0 and parsed_at - printed < 3.0


def test_parser_maps_large_variables_in_chunks(monkeypatch):
    monkeypatch.setattr(builder_module, "MAP_CHUNK", 7)
    g = Graph(Target.custom(tiles_per_ipu=16))
    x = g.add_variable(INT, [10, 10], "x")
    tiles = (np.arange(100) * 7 // 13) % 16
    tiles[40:47] = -1
    flat = x.flatten()
    g.set_tile_mapping(flat[:40], TileMapping.from_element_tiles(tiles[:40]))
    g.set_tile_mapping(flat[47:], TileMapping.from_element_tiles(tiles[47:]))
    text = print_module(Module(g))
    parsed = parse_module(text)
    assert np.array_equal(parsed.graph.element_tiles(parsed.graph.variables[0]), tiles)
    assert print_module(parsed) == text


def test_printing_is_deterministic_across_processes():
    script = ("import sys; sys.path.insert(0, {tests!r}); sys.path.insert(0, {root!r});"
              "from ir.test_printer_parser import all_features;"
              "from gruc.ir.printer import print_module;"
              "sys.stdout.write(print_module(all_features()))")
    here = Path(__file__).resolve()
    code = script.format(tests=str(here.parents[1]), root=str(here.parents[2]))
    outputs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                env=env, check=True)
        outputs.add(result.stdout)
    assert outputs == {print_module(all_features())}


def test_names_are_a_printing_concern():
    g = Graph(Target.custom(tiles_per_ipu=2))
    x = g.add_variable(FLOAT, [4], "x_1")      # claims the name a view of x would have taken
    y = g.add_variable(FLOAT, [4], "x")
    z = g.add_variable(FLOAT, [4], "???")
    w = g.add_variable(FLOAT, [4], "0")
    for v in (x, y, z, w):
        g.set_tile_mapping(v, 0)
    prog = Sequence(Copy(y[0:2], y[2:4]), Copy(z[::-1], w))
    text = print_module(Module(g, [prog]))
    assert "%x_2 = slice %x [0:2] : f32[2]" in text
    assert "%x_3 = slice %x [2:4] : f32[2]" in text
    assert '%0 = var f32[4] "???"' in text and '%0_1 = var f32[4] "0"' in text   # no hint left
    assert "%1 = slice %0 [0:4] : f32[4]\n%2 = reverse %1 dim=0 : f32[4]" in text
    assert "copy %x_2 -> %x_3" in text
    # the same view object used twice is defined once; equal but distinct views are two names
    v = y[1:3]
    text2 = print_module(Module(g, [Sequence(WriteUndef(v), WriteUndef(v), WriteUndef(y[1:3]))]))
    assert text2.count("= slice %x [1:3]") == 2
    assert "write_undef %x_2\n  write_undef %x_2\n  write_undef %x_3" in text2


def test_lines_of_every_printed_object():
    module = all_features()
    text, where = print_module_with_lines(module)
    lines = text.splitlines()
    graph = module.graph

    def line_of(obj) -> str:
        return lines[where[id(obj)] - 1]

    for var in graph.variables:
        assert " var " in line_of(var) or " const " in line_of(var)
    for cs in graph.compute_sets:
        assert line_of(cs).startswith("cs @")
        for vertex in cs.vertices:
            assert line_of(vertex).strip().startswith(vertex.kind.name + "(")
    for function in graph.functions:
        assert line_of(function).startswith("func @" + function.name)
    keywords = {Sequence: "{", Execute: "execute", Copy: "copy", WriteUndef: "write_undef",
                Repeat: "repeat", RepeatWhileTrue: "while", TimeLoop: "timeloop", If: "if",
                Call: "call",
                PrintTensor: "print", Sync: "sync"}
    for node in module.walk():
        assert keywords[type(node)] in line_of(node)
    views = [t for cs in graph.compute_sets for v in cs.vertices for _, t in v.tensors()]
    for view in views:
        assert line_of(view).startswith("%") and " = " in line_of(view)


def test_parser_accepts_free_layout_comments_and_non_canonical_groups():
    text = """
    # a hand-written module
    module target(name="custom", tiles_per_ipu=4)   # other fields take their defaults
    cs @s {}                                         # compute sets may come first
    %x = var f32[2,3] "x" map=[0 x 3, 1 x 3]
    %c = const i32[4] "c" map=[3:1:-1 ~ 4/2] values=[1, 1, 2 x 2]
    program 0 { repeat 2 execute @s  copy %x -> %x
      if %c_s sync else {} }
    """.replace("%c_s", "%y")
    with pytest.raises(GrucParseError, match=r"line 8, column 10: %y is not defined"):
        parse_module(text)
    text = text.replace("program 0", "%y = slice %c [0:1] : i32[1]\n"
                        "%z = subsample %x dim=1 stride=2 : f32[2,2]\nprogram 0 { copy %z -> %z }"
                        "\nprogram 1")
    module = parse_module(text)
    printed = print_module(module)
    assert '%x = var f32[2,3] "x" map=[0:2 x 3]' in printed
    assert '%c = const i32[4] "c" map=[3:1:-1 x 2] values=[1 x 2, 2 x 2]' in printed
    assert "%c_1 = slice %c [0:1] : i32[1]" in printed and "  if %c_1 sync else {}" in printed
    assert "%x_1 = subsample %x stride=2 dim=1 : f32[2,2]" in printed  # arguments in any order
    assert print_module(parse_module(printed)) == printed


def test_unprintable_parameter_is_a_type_error():
    g = Graph(Target.custom(tiles_per_ipu=2))
    x = g.add_variable(FLOAT, [2], "x")
    cs = g.add_compute_set()
    vertex = g.add_vertex(cs, "Map", {"out": x, "ins": [x]}, expr=ex._1)
    vertex.params["expr"] = object()
    with pytest.raises(GrucTypeError, match="cannot print a parameter"):
        print_module(Module(g))


def test_vertex_parameter_values_round_trip():
    """Every parameter type the format allows, via a kind that takes them."""
    from gruc.ir.vertices import VERTEX_KINDS, Input, VertexKind, register

    name = "test.Params"
    kind = VERTEX_KINDS.get(name) or register(VertexKind(
        name, {"a": Input()}, params=("i", "f", "s", "b", "n", "t", "l", "d", "e", "x")))
    g = Graph(Target.custom(tiles_per_ipu=2))
    a = g.add_variable(FLOAT, [2], "a")
    g.set_tile_mapping(a, 0)
    cs = g.add_compute_set("p")
    g.add_vertex(cs, kind, {"a": a}, tile=1, i=-3, f=float("-inf"), s='q"\\', b=False, n=None,
                 t=(1, (2.5,), ()), l=[HALF, [True]], d=UNSIGNED_INT, e=ex.Const(float("nan")),
                 x=1e300)
    text = round_trip(Module(g))
    assert ('test.Params(a=%a) i=-3 f=-inf s="q\\"\\\\" b=false n=none t=(1, (2.5,), ()) '
            'l=[f16, [true]] d=u32 e=const(nan) x=1e+300 tile=1') in text


# ------------------------------------------------------------------------------ values & maps
def test_float_constants_keep_their_bits():
    rng = np.random.default_rng(7)
    bits32 = rng.integers(0, 2 ** 32, 3000, dtype=np.uint64).astype(np.uint32)
    bits16 = rng.integers(0, 2 ** 16, 3000, dtype=np.uint64).astype(np.uint16)
    g = Graph(Target.custom(tiles_per_ipu=2))
    v32 = bits32.view(np.float32)
    v16 = bits16.view(np.float16)
    c32 = g.add_constant(FLOAT, [3000], v32, "c32")
    c16 = g.add_constant(HALF, [3000], v16, "c16")
    parsed = parse_module(print_module(Module(g)))
    for original, copy in zip((c32, c16), parsed.graph.variables):
        keep = ~np.isnan(original.constant)
        assert np.array_equal(original.constant.view(f"u{original.dtype.size}")[keep],
                              copy.constant.view(f"u{original.dtype.size}")[keep])
        assert np.array_equal(np.isnan(original.constant), np.isnan(copy.constant))


@settings(deadline=None, max_examples=150)
@given(st.lists(st.tuples(st.integers(-1, 40), st.integers(1, 50)), min_size=0, max_size=60),
       st.sampled_from(["runs", "linear"]))
def test_mapping_groups_describe_the_runs_exactly(runs, shape):
    if shape == "linear" and runs:   # poplibs' even split over consecutive tiles
        from gruc.ir.mapping import linear_partition
        total = sum(n for _, n in runs) * 7
        bounds = linear_partition(total, 41, runs[0][1] % 8 + 1, 0)
        tiles, lengths = np.arange(len(bounds) - 1) + 3, np.diff(bounds)
    else:
        tiles = np.array([t for t, _ in runs], dtype=np.int64)
        lengths = np.array([n for _, n in runs], dtype=np.int64)
    groups = mapping_groups(tiles, lengths)
    got_tiles, got_lengths = groups_to_runs(groups, 64, int(lengths.sum()))
    assert np.array_equal(np.repeat(got_tiles, got_lengths), np.repeat(tiles, lengths))
    if shape == "linear" and runs:
        assert len(groups) == 1


# ------------------------------------------------------------------------------ errors
BAD_INPUTS = [
    ("", r"line 1, column 1: expected the header"),
    ('module target(name="custom", tiles_per_ipu=0)', r"line 1, column 1: .*tiles_per_ipu"),
    ('module target(bogus=1)', r"line 1, column 1: .*unknown field"),
    ('module target()\n%x = var f32[2] "x" map=[0 x 3]', r"line 2, column 1: mapping covers 3"),
    ('module target()\n%x = var f32[2] "x" map=[0:2 x 1]\n%x = var f32[2] "x" map=[0 x 2]',
     r"line 3, column 1: %x is defined twice"),
    ('module target()\n%x = var f33[2] "x" map=[]', r"line 2, column 10: expected a type"),
    ('module target()\n%x = var f32[2] "x" map=[5000 x 2]', r"line 2, column 1: .*tile 5000"),
    ('module target()\n%x = var f32[2] "x map=[]', r"line 2, column 17: unterminated string"),
    ('module target()\n%x = var f32[2] "x" map=[0 x 2]\n%y = slice %x [0:3] : f32[3]',
     r"line 3, column 1: slice \[0, 3\) is out of range"),
    ('module target()\n%x = var f32[2] "x" map=[0 x 2]\n%y = slice %x [0:1] : f32[2]',
     r"line 3, column 1: slice gives f32\[1\], but the text says f32\[2\]"),
    ('module target()\n%x = const i32[1] "x" map=[0 x 1] values=[1.5]',
     r"line 2, column 1: a int constant takes integers"),
    ('module target()\n%x = const f16[1] "x" map=[0 x 1] values=[1e6]',
     r"line 2, column 1: constant value 1000000.0 is out of the range of half"),
    ('module target()\ncs @a {\n  Nope(x=%y)\n}', r"line 3, column 10: %y is not defined"),
    ('module target()\n%x = var f32[2] "x" map=[0 x 2]\ncs @a {\n  Nope(x=%x)\n}',
     r"line 4, column 3: unknown vertex kind 'Nope'"),
    ('module target()\nprogram 0 {\n  execute @nothing\n}', r"line 3, column 11: compute set"),
    ('module target()\nprogram 0 {\n  repeat 2\n}', r"line 4, column 1: expected a program"),
    ('module target()\nprogram 0 {\n  sync\n', r"line 4, column 1: expected '}' closing"),
    ('module target()\nprogram 1 {}', r"line 2, column 9: expected program number 0"),
    ('module target()\nprogram 0 timeloop sideways first 0 steps 1 shard 0 of 1 {}',
     r"line 2, column 20: expected 'forward' or 'reverse', found 'sideways'"),
    ('module target()\nprogram 0 timeloop forward first 0 steps 1 shard 0 {}',
     r"line 2, column 52: expected 'of', found '{'"),
    ('module target()\n%t = var u32[1] "t" map=[0 x 1]\nprogram 0 timeloop forward first 0 '
     'steps 1 shard 0 of 1 {\n  copy %t -> %t\n  sync\n}',
     r"line 3, column 11: TimeLoop loop must be a Repeat or RepeatWhileTrue, got Sync"),
    ('module target()\n%t = var u32[1] "t" map=[0 x 1]\nprogram 0 timeloop forward first 0 '
     'steps 2 shard 1 of 1 {\n  copy %t -> %t\n  repeat 2 sync\n}',
     r"line 3, column 11: TimeLoop needs .* 0 <= shard < shards, got .*shard 1 of 1"),
    ('module target()\n%t = var u32[1] "t" map=[0 x 1]\nprogram 0 timeloop forward first 0 '
     'steps 2 shard 0 of 1 {\n  copy %t -> %t\n  repeat 3 sync\n}',
     r"line 3, column 11: TimeLoop of 2 steps repeats 3 times"),
    ('module target()\n%t = var u32[1] "t" map=[0 x 1]\nprogram 0 timeloop forward first 0 '
     'steps 2 shard 0 of 1 {\n  copy %t -> %t\n  repeat 2 sync\n  sync\n}',
     r"line 6, column 3: expected '}' closing the time loop"),
    ('module target()\n%x = var f32[2] "x" map=[0 x 2]\nprogram 0 if %x sync else {}',
     r"line 3, column 11: If predicate must have one element"),
    ('module target()\nfunc @f {}\nfunc @f {}', r"line 3, column 1: @f is defined twice"),
    ('module target()\n%x = var f32[99999999999999999999999] "x" map=[]', r"out of range"),
    ('module target()\n%x = var f32[100000,100000] "x" map=[]', r"more than 2147483648 elements"),
    ('module target()\n%x = var f32[1] "x" map=[0 x 1]\ncs @c {\n  Map(out=%x, ins=[%x]) '
     'expr=add(_1, _77)\n}', r"line 4, column 38: placeholder index 77"),
    ('module target() $', r"line 1, column 17: unexpected character '\$'"),
    ('module target()\n%x = var f32[4] "x" map=[-1 x 4]',
     r"line 2, column 26: expected a tile, a tile range start:stop\[:step\] or _, found '-1'"),
    ('module target()\n%x = var f32[4] "x" map=[1:-3:-1 x 1]',
     r"line 2, column 26: the tile range reaches tile -2; tiles are >= 0"),
    ('module target()\n%x = var f32[4] "x\\ud800" map=[0 x 4]',
     r"line 2, column 17: string .x.ud800. holds a lone surrogate"),
    ('module target()\n%x = var f32[4] "x" map=[0 x 4]\n%y = subsample %x dim=0 dim=0 : f32[2]',
     r"line 3, column 25: dim is given twice"),
    ('module target()\n%x = var f32[4] "x" map=[0 x 4]\n%y = subsample %x dim=0 : f32[2]',
     r"line 3, column 25: expected 'stride=', found ':'"),
    ('module target()\n%x = var f32[4] "x" map=[0 x 4]\n%y = subsample %x step=2 : f32[2]',
     r"line 3, column 19: expected 'stride=' or 'dim=', found 'step'"),
]


@pytest.mark.parametrize("text, message", BAD_INPUTS)
def test_parse_errors_name_the_line(text, message):
    with pytest.raises(GrucParseError, match=message):
        parse_module(text)


def test_parse_error_shows_the_line_with_a_caret():
    with pytest.raises(GrucParseError) as info:
        parse_module('module target()\n%x = var f32[2] "x" map=[0 x 2]\nprogram 0 { copy %x %x }')
    assert str(info.value).splitlines() == [
        "line 3, column 21: expected '->', found '%x'",
        "  program 0 { copy %x %x }",
        "                      ^"]


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("views"), r"\$: missing key 'views'"),
    (lambda d: d["variables"][0].update(dtype="f64"), r"\$.variables\[0\].dtype: expected a type"),
    (lambda d: d["variables"][0]["map"].append([0, 0, 1, 1, 1]),
     r"\$.variables\[0\]: mapping covers"),
    (lambda d: d["programs"][0]["body"][0].update(op="loop"), r"\$.programs\[0\].body\[0\].op"),
    (lambda d: d["compute_sets"][0]["vertices"][0]["fields"].update(out="%nope"),
     r"\$.compute_sets\[0\].vertices\[0\].fields.out: '%nope' is not a defined tensor"),
    (lambda d: d.update(version=99), r"\$: expected format"),
    (lambda d: d.update(version=True), r"\$: expected format"),
    # a misspelt or stray key is refused, not ignored
    (lambda d: d["variables"][0].update(foo=1), r"\$.variables\[0\]: unknown key 'foo'; allowed"),
    (lambda d: d["variables"][0].update(values=[]), r"\$.variables\[0\]: unknown key 'values'"),
    (lambda d: d["programs"][0]["body"][0].update(x=1), r"\$.programs\[0\].body\[0\]: unknown key"),
    (lambda d: d.update(extra=[]), r"\$: unknown key 'extra'"),
    (lambda d: d["variables"][0].update(label="x\ud800"),
     r"\$.variables\[0\].label: the string holds a lone surrogate"),
])
def test_json_errors_name_the_path(mutate, message):
    data = module_to_json(small_program())
    mutate(data)
    with pytest.raises(GrucParseError, match=message):
        module_from_json(data)


# ------------------------------------------------------------------------------ fuzzing
_FUZZ_BASE = [print_module(small_program()), print_module(all_features())]


def _mutate(text: str, data) -> str:
    for _ in range(data.draw(st.integers(1, 3))):
        lines = text.split("\n")
        action = data.draw(st.sampled_from(["del_char", "dup_char", "swap_char", "del_line",
                                            "dup_line", "swap_line"]))
        if action.endswith("line"):
            i = data.draw(st.integers(0, len(lines) - 1))
            j = data.draw(st.integers(0, len(lines) - 1))
            if action == "del_line":
                del lines[i]
            elif action == "dup_line":
                lines.insert(i, lines[i])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif text:
            i = data.draw(st.integers(0, len(text) - 1))
            j = data.draw(st.integers(0, len(text) - 1))
            if action == "del_char":
                text = text[:i] + text[i + 1:]
            elif action == "dup_char":
                text = text[:i] + text[i] + text[i:]
            else:
                chars = list(text)
                chars[i], chars[j] = chars[j], chars[i]
                text = "".join(chars)
    return text


@settings(deadline=None, max_examples=300)
@given(st.sampled_from(_FUZZ_BASE), st.data())
def test_mutated_text_parses_or_raises_a_parse_error(base, data):
    text = _mutate(base, data)
    try:
        module = parse_module(text)
    except GrucParseError as error:
        assert str(error).startswith("line ")
        return
    printed = print_module(module)            # whatever parsed is canonical after one print
    assert print_module(parse_module(printed)) == printed


def test_the_example_in_docs_ir_md_is_canonical():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "ir.md").read_text()
    example = doc.split("```\nmodule target(", 1)[1].split("```\n", 1)[0]
    example = "module target(" + example
    assert print_module(parse_module(example)) == example


def test_a_module_that_breaks_graph_membership_still_prints_for_the_verifier():
    g, other = Graph(Target.custom(tiles_per_ipu=4)), Graph(Target.custom(tiles_per_ipu=4))
    x = g.add_variable(FLOAT, [4], "x")
    y = other.add_variable(FLOAT, [4], "x")
    foreign_cs = other.add_compute_set("elsewhere")
    foreign_fn = other.add_function(Sequence(), "fn")
    text = print_module(Module(g, [Sequence(Execute(foreign_cs), Call(foreign_fn),
                                            Copy(x, y[0:4]))]))
    assert text.endswith("program 0 {\n  execute @elsewhere\n  call @fn\n  copy %x -> %x_2\n}\n")
    with pytest.raises(GrucParseError, match="compute set @elsewhere is not defined"):
        parse_module(text)
