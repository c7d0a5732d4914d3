"""Bad input everywhere gives a clear GrucError: the error table of docs/errors.md, walked.

Three parts:

* the table: every class of ``gruc/errors.py`` has a row with its real bases, and a real trigger
  through the public API raises exactly that class with the documented example message;
* bad inputs, by category (wrong types, sizes, shapes, options, element types, views, tiles,
  use before write, host reads, IR text, pipelines, engine, GRU layer, planning): each raises the
  expected GrucError subclass whose message names the bad value;
* the command line: each bad invocation exits with code 2 and one line on stderr, no traceback.

Everything is built on a 4-tile target and run (if at all) with the numpy backend, so the whole
file stays within a few seconds.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import gruc.errors
from gruc import (FLOAT, HALF, INT, UNSIGNED_INT, Call, Copy, Engine, Execute, Graph, GrucError,
                  GrucIndexError, GrucMappingError, GrucOptionError, GrucOutOfMemory,
                  GrucParseError, GrucProgramError, GrucShapeError, GrucTypeError, GrucValueError,
                  GrucVerifyError, If, Module, PrintTensor, Repeat, RepeatWhileTrue, Sequence,
                  Target, WriteUndef, concat)
from gruc.cli import main
from gruc.ir.expr import _1, _2, Const
from gruc.ir.parser import parse_module
from gruc.ir.serialize import module_from_json
from gruc.ir.verify import verify
from gruc.ops import (add, cast, dynamic_slice, dynamic_update, fill, map, map_in_place,
                      map_with_output, mat_mul, mat_mul_acc, non_linearity, non_linearity_in_place,
                      reduce, scaled_add_to, zero)
from gruc.rnn_geometry import get_max_shards
from gruc.passes.pipeline import parse_pipeline
from gruc.plan import SweepSpec, find_max, make_executor, parse_values, run_sweep
from gruc.popnn import gru
from gruc.tools.gru_layer import GruLayerConfig, build_layer
from gruc.popnn.gru_params import GruOptions, GruParams
from gruc.runtime.lower import CopyStep
from gruc.files import write_text_atomically

TABLE = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
TARGET = Target.custom(tiles_per_ipu=4)


# ---- builders -----------------------------------------------------------------------------------
def graph() -> Graph:
    return Graph(TARGET)


def var(g: Graph, shape=(4, 6), dtype=FLOAT, name="x", tile=0):
    """A variable mapped to one tile (``tile=None``: left unmapped)."""
    v = g.add_variable(dtype, shape, name)
    if tile is not None:
        g.set_tile_mapping(v, tile)
    return v


def tensor(shape=(4, 6), dtype=FLOAT):
    return var(graph(), shape, dtype)


def mapped(mapping):
    g = graph()
    g.set_tile_mapping(g.add_variable(FLOAT, (4, 6), "m"), mapping)


def engine(g: Graph, programs, **kw) -> Engine:
    return Engine(g, programs, backend="numpy", **kw)


def copy_engine(**kw) -> Engine:
    """x (host write) -> y (host read): the smallest program with both streams."""
    g = graph()
    x, y = var(g, (2, 3), name="x"), var(g, (2, 3), name="y")
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    return engine(g, [Sequence(Copy(x, y))], **kw)


def host_roundtrip(dtype, values):
    """Write ``values`` to a ``dtype`` tensor through a host stream."""
    g = graph()
    x = var(g, (2,), dtype)
    g.create_host_write("x", x)
    g.create_host_read("x", x)
    engine(g, [Sequence()]).write_tensor("x", values)


def read_before_write():
    g = graph()
    x, y = var(g, (2,), name="x"), var(g, (2,), name="y")
    engine(g, [Sequence(Copy(x, y))])


def read_in_loop_before_write():
    """``acc`` is read in the loop body before the body's own write: garbage in iteration 1."""
    g = graph()
    acc, z = var(g, (2,), name="acc"), var(g, (2,), name="z")
    g.create_host_write("z", z)
    engine(g, [Sequence(Repeat(3, Sequence(Copy(acc, z), Copy(z, acc))))])


def read_after_untaken_branch():
    """Only the If's then-branch writes t; the else-branch reads it."""
    g = graph()
    p, s, t = var(g, (), INT, "p"), var(g, (2,), name="s"), var(g, (2,), name="t")
    g.create_host_write("p", p)
    g.create_host_write("s", s)
    engine(g, [Sequence(If(p, Sequence(Copy(s, t)), Sequence(Copy(t, s))))])


def host_read_never_written():
    g = graph()
    x = var(g, (2,), name="lonely")
    g.create_host_read("out", x)
    engine(g, [Sequence()]).read_tensor("out")


def copy_into_constant():
    g = graph()
    x, c = var(g, (2,)), g.add_constant(FLOAT, (2,), 1.0, "c")
    g.set_tile_mapping(c, 0)
    g.create_host_write("x", x)
    engine(g, [Sequence(Copy(x, c))])


def constant(g: Graph, shape=(4, 6)):
    c = g.add_constant(FLOAT, shape, 1.0, "c")
    g.set_tile_mapping(c, 0)
    return c


def host_write_into_constant():
    g = graph()
    c = g.add_constant(FLOAT, (2,), 1.0, "c")
    g.set_tile_mapping(c, 0)
    g.create_host_write("c", c[1:])


def augru_without_attention():
    g, p = graph(), params()
    gru.au_gru_fwd(g, p, gru.create_initial_state(g, p), gru.create_input(g, p),
                   gru.create_weights(g, p), Sequence(), None)


def lowering_bug_caught_by_a_checked_run():
    """The only way to reach GrucMemoryError: corrupt a lowered copy's addresses, as a lowering
    bug would, and let a checked run catch the copy before it writes anywhere."""
    g = graph()
    x, y = var(g, (2,), name="x"), var(g, (2,), name="y")
    g.create_host_write("x", x)
    g.create_host_read("y", y)
    e = Engine(g, [Sequence(Copy(x, y))], backend="numpy", checked=True, pipeline="")
    step = next(item for item in e.executable.programs[0].items if isinstance(item, CopyStep))
    step.dst.index.flags.writeable = True
    step.dst.index[:] += 100_000
    e.run(0)


def foreign_compute_set():
    g, other = graph(), graph()
    verify(Module(g, [Sequence(Execute(other.add_compute_set("elsewhere")))]))


def out_of_memory():
    g = Graph(Target.custom(tiles_per_ipu=1, bytes_per_tile=64))
    x = var(g, (1000,), name="big")
    g.create_host_write("x", x)
    g.create_host_read("x", x)
    engine(g, [Sequence()], strict_memory=True)


def params(**overrides) -> GruParams:
    fields = dict(dtype=FLOAT, batch_size=2, max_time_steps=3, layer_sizes=(4, 5))
    return GruParams(**{**fields, **overrides})


def gru_fwd(**change):
    """``gru_fwd`` of a small layer with one argument replaced: ``change`` maps an argument name
    to ``lambda g: value``."""
    g, p = graph(), params()
    args = dict(graph=g, params=p, init_state=gru.create_initial_state(g, p),
                input=gru.create_input(g, p), weights=gru.create_weights(g, p), prog=Sequence())
    options = change.pop("options", None)
    args.update({name: make(g) for name, make in change.items()})
    gru.gru_fwd(args["graph"], args["params"], args["init_state"], args["input"],
                args["weights"], args["prog"], options=options)


def small_layer(**flags) -> GruLayerConfig:
    return GruLayerConfig(**{**dict(sequence_size=2, batch_size=2, input_size=4, output_size=4,
                                    tiles_per_ipu=16), **flags})


# ---- the table ----------------------------------------------------------------------------------
def table_rows() -> dict[str, dict[str, str]]:
    """``{class name: {"bases", "raised", "example"}}`` from the Markdown table."""
    rows = {}
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| `(Gruc\w+)` \| (.*?) \| (.*) \| `(.*)` \|$", line)
        if match:
            name, bases, raised, example = match.groups()
            rows[name] = {"bases": re.findall(r"`(\w+)`", bases), "raised": raised,
                          "example": example}
    return rows


ERROR_CLASSES = {name: cls for name, cls in inspect.getmembers(gruc.errors, inspect.isclass)
                 if issubclass(cls, GrucError)}

TRIGGERS = {
    "GrucTypeError": lambda: Graph("ipu2"),
    "GrucValueError": lambda: Repeat(-1, Sequence()),
    "GrucShapeError": lambda: tensor().reshape((5, 5)),
    "GrucIndexError": lambda: tensor()[10],
    "GrucOptionError": lambda: GruOptions.parse({"bogus": 1}),
    "GrucMappingError": lambda: mapped([[(0, 10)]]),
    "GrucFileError": lambda: write_text_atomically("/no/such/directory/report.json", "{}"),
    "GrucParseError": lambda: parse_module("garbage"),
    "GrucVerifyError": foreign_compute_set,
    "GrucProgramError": read_before_write,
    "GrucOutOfMemory": out_of_memory,
    "GrucMemoryError": lowering_bug_caught_by_a_checked_run,
}
"""One real trigger per class; its message's first line contains the table's example."""


def test_the_table_has_one_row_per_error_class():
    assert set(table_rows()) == set(ERROR_CLASSES)


@pytest.mark.parametrize("name", sorted(ERROR_CLASSES))
def test_each_row_gives_the_real_bases(name):
    assert table_rows()[name]["bases"] == [base.__name__ for base in ERROR_CLASSES[name].__bases__]


@pytest.mark.parametrize("name", sorted(ERROR_CLASSES))
def test_each_class_has_a_trigger_raising_exactly_it(name):
    row = table_rows()[name]
    if name == "GrucError":  # the base: every trigger's error is one, none is exactly it
        assert row["example"] == "(base class only)" and set(TRIGGERS) == set(ERROR_CLASSES) - {name}
        return
    with pytest.raises(GrucError) as info:
        TRIGGERS[name]()
    assert type(info.value) is ERROR_CLASSES[name]
    assert row["example"] in str(info.value).splitlines()[0]


# ---- bad inputs through the API -----------------------------------------------------------------
# (id, call, exact class expected, text the message must contain: the bad value and/or the rule)
BAD_INPUTS = [
    # wrong types
    ("graph-target-str", lambda: Graph("ipu2"), GrucTypeError, "got str"),
    ("dtype-unknown", lambda: graph().add_variable("float64", (2,)), GrucTypeError, "'float64'"),
    ("shape-not-sequence", lambda: graph().add_variable(FLOAT, 5), GrucTypeError, "shape 5"),
    ("shape-float-size", lambda: graph().add_variable(FLOAT, (2.5,)), GrucTypeError, "2.5"),
    ("shape-bool-size", lambda: graph().add_variable(FLOAT, (True,)), GrucTypeError, "True"),
    ("name-not-str", lambda: graph().add_variable(FLOAT, (2,), name=5), GrucTypeError, "5"),
    ("constant-none", lambda: graph().add_constant(FLOAT, (2,), None), GrucTypeError, "None"),
    ("constant-str", lambda: graph().add_constant(FLOAT, (2,), "abc"), GrucTypeError, "'abc'"),
    ("mapping-str", lambda: mapped("a"), GrucTypeError, "'a'"),
    ("mapping-float", lambda: mapped(1.5), GrucTypeError, "1.5"),
    ("mapping-bad-interval", lambda: mapped([[(0,)]]), GrucTypeError, "(0,)"),
    ("grain-str", lambda: (lambda g: g.map_tensor_linearly(var(g), grain_size="a"))(graph()),
     GrucTypeError, "'a'"),
    ("vertex-kind-int", lambda: (lambda g: g.add_vertex(g.add_compute_set(), 5, {}))(graph()),
     GrucTypeError, "5"),
    ("compute-set-name", lambda: graph().add_compute_set(5), GrucTypeError, "5"),
    ("slice-str", lambda: tensor().slice("a", 2), GrucTypeError, "'a'"),
    ("slice-float", lambda: tensor().slice(0.5, 2), GrucTypeError, "0.5"),
    ("index-str", lambda: tensor()["a"], GrucTypeError, "'a'"),
    ("index-bool", lambda: tensor()[True], GrucTypeError, "is a bool"),
    ("slice-step-str", lambda: tensor()["a":], GrucTypeError, "'a'"),
    ("reverse-float", lambda: tensor().reverse(1.5), GrucTypeError, "1.5"),
    ("dim-str", lambda: tensor().dim("a"), GrucTypeError, "'a'"),
    ("shuffle-int", lambda: tensor().dim_shuffle(1), GrucTypeError, "1"),
    ("expand-int", lambda: tensor().expand(0), GrucTypeError, "0"),
    ("concat-non-tensor", lambda: concat([tensor(), 5]), GrucTypeError, "int"),
    ("concat-not-list", lambda: concat(5), GrucTypeError, "int"),
    ("append-int", lambda: tensor().append(5, 0), GrucTypeError, "int"),
    ("tensor-to-numpy", lambda: np.asarray(tensor()), GrucTypeError, "read_tensor"),
    ("sequence-int", lambda: Sequence(5), GrucTypeError, "int"),
    ("repeat-body-int", lambda: Repeat(3, 5), GrucTypeError, "int"),
    ("copy-src-int", lambda: Copy(5, tensor()), GrucTypeError, "Copy source"),
    ("execute-int", lambda: Execute(5), GrucTypeError, "int"),
    ("write-undef-int", lambda: WriteUndef(5), GrucTypeError, "int"),
    ("if-predicate-int", lambda: If(5, Sequence()), GrucTypeError, "If predicate"),
    ("while-predicate-int", lambda: RepeatWhileTrue(Sequence(), 5, Sequence()), GrucTypeError,
     "RepeatWhileTrue predicate"),
    ("call-int", lambda: Call(5), GrucTypeError, "int"),
    ("print-label-int", lambda: PrintTensor(5, tensor()), GrucTypeError, "5"),
    ("op-prog-none", lambda: (lambda g: add(g, var(g), var(g, name="b"), None))(graph()),
     GrucTypeError, "NoneType"),
    ("op-graph-str", lambda: map("g", _1, [tensor()], Sequence()), GrucTypeError, "str"),
    ("fill-str", lambda: (lambda g: fill(g, var(g), "x", Sequence()))(graph()), GrucTypeError,
     "'x'"),
    ("zero-int", lambda: zero(graph(), 5, Sequence()), GrucTypeError, "int"),
    ("scaled-add-str", lambda: (lambda g: scaled_add_to(g, var(g), var(g, name="b"), "x",
                                                        Sequence()))(graph()),
     GrucTypeError, "'x'"),
    ("reduce-dims-str", lambda: (lambda g: reduce(g, var(g), "a", "add", Sequence()))(graph()),
     GrucTypeError, "'a'"),
    ("matmul-options-int", lambda: (lambda g: mat_mul(g, var(g), var(g, (6, 5), name="w"),
                                                      Sequence(), options=5))(graph()),
     GrucTypeError, "int"),
    ("gru-params-str", lambda: gru.create_input(graph(), "params"), GrucTypeError, "str"),
    ("gru-graph-str", lambda: gru.create_input("g", params()), GrucTypeError, "str"),
    ("gru-layer-sizes-int", lambda: params(layer_sizes=5), GrucValueError, "5"),
    ("gru-weights-int", lambda: gru_fwd(weights=lambda g: 5), GrucTypeError, "int"),
    ("gru-weights-plain-tuple", lambda: gru_fwd(
        weights=lambda g: tuple(gru.create_weights(g, params()))), GrucTypeError, "got tuple"),
    ("augru-attention-none", augru_without_attention, GrucTypeError,
     "au_gru_fwd needs the attention scores"),
    ("clone-int", lambda: graph().clone(3, "c"), GrucTypeError, "int"),
    ("max-shards-none", lambda: get_max_shards(None, params().rnn),
     GrucTypeError, "NoneType"),
    ("target-frozen", lambda: setattr(TARGET, "tiles_per_ipu", 3), GrucTypeError,
     "'tiles_per_ipu'"),
    ("index-two-ellipses", lambda: var(graph())[..., ...], GrucIndexError, "holds 2"),
    ("gru-input-int", lambda: gru_fwd(input=lambda g: 5), GrucTypeError, "int"),
    ("gru-prog-int", lambda: gru_fwd(prog=lambda g: 5), GrucTypeError, "int"),
    ("gru-flops-str", lambda: gru.get_basic_gru_cell_fwd_flops("x"), GrucTypeError, "str"),
    ("engine-programs-int", lambda: Engine(graph(), 5), GrucTypeError, "int"),
    ("engine-program-list-int", lambda: Engine(graph(), [5]), GrucTypeError, "int"),
    ("engine-pipeline-int", lambda: engine(graph(), [Sequence()], pipeline=5), GrucTypeError,
     "5"),
    ("engine-strict-str", lambda: engine(graph(), [Sequence()], strict_memory="yes"),
     GrucTypeError, "'yes'"),
    ("write-strings", lambda: copy_engine().write_tensor("x", np.full((2, 3), "a")),
     GrucTypeError, "<U1"),
    ("parse-int", lambda: parse_module(5), GrucTypeError, "int"),
    ("pipeline-int", lambda: parse_pipeline(5), GrucParseError, "int"),
    ("build-layer-dict", lambda: build_layer({"batch_size": 2}), GrucTypeError, "dict"),
    ("sweep-spec-int", lambda: run_sweep(5, "unused"), GrucTypeError, "int"),
    # negative or zero sizes, values out of range
    ("shape-negative", lambda: graph().add_variable(FLOAT, (-1,)), GrucShapeError, "-1"),
    ("reshape-negative", lambda: tensor().reshape((-1, 24)), GrucShapeError, "-1"),
    ("target-zero-tiles", lambda: Target(tiles_per_ipu=0), GrucValueError, "tiles_per_ipu = 0"),
    ("target-negative-ipus", lambda: Target(num_ipus=-1), GrucValueError, "num_ipus = -1"),
    ("target-fraction", lambda: Target.custom(tiles_per_ipu=1.5), GrucValueError, "1.5"),
    ("repeat-negative", lambda: Repeat(-1, Sequence()), GrucValueError, "-1"),
    ("repeat-over-32-bits", lambda: Repeat(2 ** 32, Sequence()), GrucValueError, "4294967296"),
    ("variable-too-many-elements", lambda: graph().add_variable(FLOAT, (10 ** 6, 10 ** 6)),
     GrucValueError, "1000000000000 elements"),
    ("repeat-bool", lambda: Repeat(True, Sequence()), GrucValueError, "True"),
    ("grain-zero", lambda: (lambda g: g.map_tensor_linearly(var(g), grain_size=0))(graph()),
     GrucValueError, "grain_size 0"),
    ("subsample-zero", lambda: tensor().subsample(0, 0), GrucValueError, "stride 0"),
    ("broadcast-negative", lambda: tensor().broadcast(-2, 0), GrucValueError, "count -2"),
    ("slice-step-zero", lambda: tensor()[::0], GrucValueError, "step 0"),
    ("constant-nan-int", lambda: graph().add_constant(INT, (2,), float("nan")), GrucValueError,
     "nan"),
    ("constant-negative-uint", lambda: graph().add_constant(UNSIGNED_INT, (2,), -1),
     GrucValueError, "-1"),
    ("constant-overflow-int", lambda: graph().add_constant(INT, (2,), 1e20), GrucValueError,
     "1e+20"),
    ("fill-uint-negative", lambda: (lambda g: fill(g, var(g, dtype=UNSIGNED_INT), -1,
                                                   Sequence()))(graph()),
     GrucValueError, "-1"),
    ("gru-batch-zero", lambda: params(batch_size=0), GrucValueError, "batch_size = 0"),
    ("gru-layer-size-zero", lambda: params(layer_sizes=(0, 5)), GrucValueError, "[0, 5]"),
    ("layer-sequence-zero", lambda: GruLayerConfig(sequence_size=0), GrucValueError,
     "sequence_size = 0"),
    ("layer-ipus-99", lambda: GruLayerConfig(ipus=99), GrucValueError, "ipus = 99"),
    ("layer-lengths-range", lambda: GruLayerConfig(variable_time_steps=(99,)), GrucValueError,
     "[99]"),
    ("write-fraction-int", lambda: host_roundtrip(INT, [1.5, 0]), GrucValueError, "1.5"),
    ("write-negative-uint", lambda: host_roundtrip(UNSIGNED_INT, [-1, 0]), GrucValueError, "-1"),
    ("write-nan-int", lambda: host_roundtrip(INT, [np.nan, 0]), GrucValueError, "nan"),
    ("write-overflow-int", lambda: host_roundtrip(INT, [1e10, 0]), GrucValueError,
     "10000000000.0"),
    ("write-ragged", lambda: copy_engine().write_tensor("x", [[1, 2, 3], [1, 2]]),
     GrucValueError, "ragged"),
    ("run-past-end", lambda: copy_engine().run(5), GrucValueError, "program 5"),
    ("run-negative", lambda: copy_engine().run(-1), GrucValueError, "program -1"),
    ("run-str", lambda: copy_engine().run("0"), GrucValueError, "'0'"),
    ("run-bool", lambda: copy_engine().run(True), GrucValueError, "program True does not exist"),
    ("write-unknown-stream", lambda: copy_engine().write_tensor("nope", np.zeros((2, 3))),
     GrucValueError, "'nope'"),
    ("read-unknown-stream", lambda: copy_engine().read_tensor("nope"), GrucValueError, "'nope'"),
    ("host-write-duplicate", lambda: (lambda g, t: [g.create_host_write("x", t)
                                                    for _ in range(2)])(*(lambda g: (g, var(g)))(
                                                        graph())),
     GrucValueError, "'x' already exists"),
    ("host-write-empty-name", lambda: (lambda g: g.create_host_write("", var(g)))(graph()),
     GrucValueError, "''"),
    ("backend-unknown", lambda: Engine(graph(), [Sequence()], backend="cuda"), GrucValueError,
     "'cuda'"),
    ("sweep-range-step-zero", lambda: parse_values("1:10:0", int, flag="--batch-size"),
     GrucValueError, "'1:10:0'"),
    ("sweep-range-words", lambda: parse_values("a:b", int, flag="--batch-size"), GrucValueError,
     "'a:b'"),
    ("jobs-zero", lambda: make_executor(0), GrucValueError, "0"),
    ("jobs-beside-scheduler", lambda: make_executor(4, "tcp://127.0.0.1:8786"), GrucValueError,
     "jobs=4"),
    ("find-max-flag", lambda: find_max(SweepSpec(), "bogus", "unused"), GrucValueError,
     "'bogus'"),
    ("sweep-both", lambda: SweepSpec(fixed={"batch_size": 1}, swept={"batch_size": (1, 2)}),
     GrucValueError, "batch_size"),
    # shape mismatches
    ("reshape-count", lambda: tensor().reshape((5, 5)), GrucShapeError, "[5, 5]"),
    ("broadcast-to", lambda: tensor().broadcast_to((3, 3)), GrucShapeError, "[3, 3]"),
    ("squeeze-non-singleton", lambda: tensor().squeeze([0]), GrucShapeError, "size is 4"),
    ("transpose-rank3", lambda: tensor((2, 3, 4)).transpose(), GrucShapeError, "[2, 3, 4]"),
    ("concat-shapes", lambda: (lambda g: concat([var(g), var(g, (3, 5), name="c")]))(graph()),
     GrucShapeError, "[3, 5]"),
    ("constant-broadcast", lambda: graph().add_constant(FLOAT, (2, 3), [1, 2]), GrucShapeError,
     "[2, 3]"),
    ("copy-shapes", lambda: (lambda g: Copy(var(g), var(g, (6, 4), name="d")))(graph()),
     GrucShapeError, "[6, 4]"),
    ("add-broadcast", lambda: (lambda g: add(g, var(g), var(g, (3, 5), name="c"),
                                             Sequence()))(graph()),
     GrucShapeError, "[3, 5]"),
    ("map-in-place-shape", lambda: (lambda g: map_in_place(g, _1 + _2, [var(g)[0:1], var(
        g, name="b")], Sequence()))(graph()), GrucShapeError, "[1, 6]"),
    ("matmul-inner", lambda: (lambda g: mat_mul(g, var(g), var(g, name="b"), Sequence()))(
        graph()), GrucShapeError, "A has 6 columns but B has 4 rows"),
    ("write-shape", lambda: copy_engine().write_tensor("x", np.zeros((3, 2))), GrucValueError,
     "[3, 2]"),
    ("count-run-shape", lambda: copy_engine().count_run(np.ones(5, np.int64)), GrucValueError,
     "got shape [5]"),
    ("count-run-negative", lambda: copy_engine().count_run(-np.ones(1, np.int64)),
     GrucValueError, "non-negative"),
    ("gru-input-shape", lambda: gru_fwd(input=lambda g: var(g, (3, 2, 7), name="xx")),
     GrucShapeError, "[3, 2, 7]"),
    ("gru-state-shape", lambda: gru_fwd(init_state=lambda g: var(g, (2, 9), name="hh")),
     GrucShapeError, "[2, 9]"),
    ("gru-weights-shape", lambda: gru_fwd(weights=lambda g: gru.GruWeights(
        var(g, (3, 5, 5), name="wi"), var(g, (3, 5, 5), name="wo"), var(g, (3, 5), name="b"))),
     GrucShapeError, "input_weights has shape [3, 5, 5]"),
    ("gru-lengths-shape", lambda: params(var_time_steps=var(graph(), (3,), UNSIGNED_INT)),
     GrucValueError, "size 3"),
    # unknown options
    ("target-unknown-field", lambda: Target(foo=1), GrucOptionError, "foo"),
    ("gru-option-unknown", lambda: GruOptions.parse({"bogus": 1}), GrucOptionError, "'bogus'"),
    ("gru-option-shards-zero", lambda: gru_fwd(options={"numShards": 0}), GrucOptionError,
     "got 0"),
    ("gru-option-bool-str", lambda: GruOptions.parse({"inferenceOnly": "maybe"}),
     GrucOptionError, "'maybe'"),
    ("gru-option-partials", lambda: GruOptions.parse({"partialsType": "int"}), GrucOptionError,
     "'int'"),
    ("gru-option-partials-number", lambda: GruOptions.parse({"partialsType": 3}),
     GrucOptionError, "partialsType 3 is not one of: half, float"),
    ("gru-options-int", lambda: GruOptions.parse(5), GrucTypeError,
     "GRU options must be a dict or GruOptions, got int"),
    ("gru-shards-too-many", lambda: gru_fwd(options={"numShards": 99}), GrucOptionError, "99"),
    ("matmul-option-unknown", lambda: (lambda g: mat_mul(g, var(g), var(g, (6, 5), name="w"),
                                                         Sequence(), options={"bogus": 1}))(
        graph()), GrucOptionError, "bogus"),
    ("matmul-option-amp", lambda: (lambda g: mat_mul(
        g, var(g), var(g, (6, 5), name="w"), Sequence(),
        options={"availableMemoryProportion": -1}))(graph()), GrucOptionError, "-1"),
    ("layer-unknown-field", lambda: GruLayerConfig(bogus=1), GrucOptionError, "bogus"),
    ("params-unknown-field", lambda: params(bogus=1), GrucOptionError, "bogus"),
    ("layer-cell-order", lambda: GruLayerConfig(cell_order=("a", "b", "c")), GrucValueError,
     "'a'"),
    ("layer-activation", lambda: GruLayerConfig(activation="nope"), GrucValueError, "'nope'"),
    ("layer-partials", lambda: GruLayerConfig(partials_type="int"), GrucValueError, "'int'"),
    ("layer-phase", lambda: GruLayerConfig(phase="x"), GrucValueError, "'x'"),
    ("layer-data-type", lambda: GruLayerConfig(data_type="float64"), GrucValueError,
     "'float64'"),
    ("gru-activation", lambda: params(activation="nope"), GrucValueError, "'nope'"),
    ("gru-gelu", lambda: params(recurrent_activation="gelu"), GrucValueError,
     "softmax (gelu is the float64 reference's only"),
    ("gru-cell-order", lambda: params(cell_order=("reset", "reset", "update")), GrucValueError,
     "'reset', 'reset'"),
    ("reduce-op", lambda: (lambda g: reduce(g, var(g), [0], "nope", Sequence()))(graph()),
     GrucValueError, "'nope'"),
    ("non-linearity-kind", lambda: (lambda g: non_linearity(g, "nope", var(g), Sequence()))(
        graph()), GrucValueError, "'nope'"),
    ("sweep-unknown-flag", lambda: SweepSpec(fixed={"bogus": 1}), GrucValueError, "'bogus'"),
    # element type mixes
    ("add-float-int", lambda: (lambda g: add(g, var(g), var(g, dtype=INT, name="i"),
                                             Sequence()))(graph()),
     GrucTypeError, "float and int"),
    ("concat-float-half", lambda: (lambda g: concat([var(g), var(g, dtype=HALF, name="h")]))(
        graph()), GrucTypeError, "float and half"),
    ("copy-float-int", lambda: (lambda g: Copy(var(g), var(g, dtype=INT, name="i")))(graph()),
     GrucTypeError, "int"),
    ("matmul-int", lambda: (lambda g: mat_mul(g, var(g, dtype=INT), var(g, (6, 5), INT, "w"),
                                              Sequence()))(graph()),
     GrucTypeError, "int"),
    ("cast-unknown", lambda: (lambda g: cast(g, var(g), "float64", Sequence()))(graph()),
     GrucTypeError, "'float64'"),
    ("non-linearity-int", lambda: (lambda g: non_linearity(g, "tanh", var(g, dtype=INT),
                                                           Sequence()))(graph()),
     GrucTypeError, "int"),
    ("dynamic-offset-float", lambda: (lambda g: dynamic_slice(
        g, var(g), var(g, (), FLOAT, "o"), [0], [1], Sequence()))(graph()), GrucTypeError,
     "float"),
    ("gru-params-int-dtype", lambda: params(dtype=INT), GrucValueError, "int"),
    ("gru-input-half", lambda: gru_fwd(input=lambda g: var(g, (3, 2, 4), HALF, "xh")),
     GrucTypeError, "input is half, the layer is float"),
    ("gru-lengths-float", lambda: params(var_time_steps=var(graph(), (2,), FLOAT)),
     GrucValueError, "float"),
    ("layer-data-type-int", lambda: GruLayerConfig(data_type="int"), GrucValueError, "'int'"),
    # views out of range
    ("index-past-end", lambda: tensor()[10], GrucIndexError, "index 10"),
    ("index-negative", lambda: tensor()[-10], GrucIndexError, "index -10"),
    ("too-many-indices", lambda: tensor()[0, 0, 0], GrucIndexError, "(3)"),
    ("slice-past-end", lambda: tensor().slice(0, 10), GrucIndexError, "[0, 10)"),
    ("slice-reversed", lambda: tensor().slice(3, 1), GrucIndexError, "[3, 1)"),
    ("slice-dim", lambda: tensor().slice(0, 1, dim=5), GrucIndexError, "dimension 5"),
    ("slice-rank", lambda: tensor().slice([0], [1]), GrucShapeError, "[0]:[1]"),
    ("subsample-dim", lambda: tensor().subsample(2, 5), GrucIndexError, "dimension 5"),
    ("reverse-dim", lambda: tensor().reverse(5), GrucIndexError, "dimension 5"),
    ("broadcast-dim", lambda: tensor().broadcast(2, 9), GrucIndexError, "dimension 9"),
    ("shuffle-duplicate", lambda: tensor().dim_shuffle([0, 0]), GrucValueError, "[0, 0]"),
    ("expand-position", lambda: tensor().expand([5]), GrucIndexError, "expand position 5 is outside 0..2"),
    ("flatten-range", lambda: tensor().flatten(2, 1), GrucIndexError, "[2, 1)"),
    ("reshape-partial-range", lambda: tensor().reshape_partial(0, 3, [24]), GrucIndexError,
     "[0, 3)"),
    ("dim-roll", lambda: tensor().dim_roll(0, 5), GrucIndexError, "dimension 5"),
    ("concat-dim", lambda: (lambda t: concat([t, t], dim=5))(tensor()), GrucIndexError,
     "dimension 5"),
    ("reduce-dim", lambda: (lambda g: reduce(g, var(g), [5], "add", Sequence()))(graph()),
     GrucIndexError, "dimension 5"),
    ("dynamic-slice-size", lambda: (lambda g: dynamic_slice(
        g, var(g), var(g, (), UNSIGNED_INT, "o"), [0], [9], Sequence()))(graph()),
     GrucValueError, "size 9"),
    # tile indices past the target
    ("map-tile-past-end", lambda: mapped(4), GrucIndexError, "tile 4"),
    ("map-tile-negative", lambda: mapped(-1), GrucIndexError, "tile -1"),
    ("map-interval-tile", lambda: mapped([[]] * 9 + [[(0, 24)]]), GrucIndexError, "tile 9"),
    ("map-interval-past-end", lambda: mapped([[(0, 100)]]), GrucIndexError, "[0, 100)"),
    ("map-interval-reversed", lambda: mapped([[(0, 24)], [(5, 2)]]), GrucIndexError, "[5, 2)"),
    ("map-overlap", lambda: mapped([[(0, 24)], [(0, 24)]]), GrucMappingError, "element 0"),
    ("map-partial", lambda: mapped([[(0, 10)]]), GrucMappingError, "14 of 24"),
    ("vertex-tile", lambda: (lambda g: g.add_vertex(g.add_compute_set(), "Map", {
        "out": var(g), "ins": []}, tile=99, expr=Const(1.0)))(graph()), GrucIndexError, "tile 99"),
    ("layer-tiles", lambda: build_layer(GruLayerConfig(tiles_per_ipu=99999)), GrucValueError,
     "99999"),
    ("engine-unmapped", lambda: (lambda g: engine(g, [Sequence(WriteUndef(var(g, tile=None)))]))(
        graph()), GrucMappingError, "'x'"),
    # programs using a tensor before it is written, host reads of tensors never written
    ("read-before-write", read_before_write, GrucProgramError, "'x'"),
    ("read-in-loop-before-write", read_in_loop_before_write, GrucProgramError, "'acc'"),
    ("read-in-untaken-branch", read_after_untaken_branch, GrucProgramError, "'t'"),
    ("host-read-never-written", host_read_never_written, GrucProgramError, "'lonely'"),
    ("copy-into-constant", copy_into_constant, GrucVerifyError, "Copy writes into a constant"),
    ("host-write-into-constant", host_write_into_constant, GrucValueError, "constant 'c'"),
    # validated models take numbers as numbers: no bool as a count, no string as a number
    ("target-bool-tiles", lambda: Target.custom(tiles_per_ipu=True), GrucTypeError,
     "Target.tiles_per_ipu = True: must be int, not bool"),
    ("target-string-tiles", lambda: Target.custom(tiles_per_ipu="16"), GrucTypeError,
     "Target.tiles_per_ipu = '16': must be int, not str"),
    ("target-infinite-clock", lambda: Target(clock_hz=float("inf")), GrucValueError,
     "Target.clock_hz = inf: Input should be a finite number"),
    ("params-bool-batch", lambda: params(batch_size=True), GrucTypeError,
     "GruParams.batch_size = True: must be int"),
    ("params-string-switch", lambda: params(output_full_sequence="no"), GrucTypeError,
     "GruParams.output_full_sequence = 'no': must be bool, not str"),
    ("options-bool-shards", lambda: GruOptions.parse({"numShards": True}), GrucTypeError,
     "GruOptions.numShards = True: must be int, not bool"),
    ("dynamic-slice-float-dim", lambda: (lambda g: dynamic_slice(
        g, var(g), var(g, (1,), UNSIGNED_INT, name="o"), [0.7], [2], Sequence()))(graph()),
     GrucTypeError, "dynamic_slice dims [0.7] must be a sequence of integers"),
    # every writer refuses a constant and a view naming an element twice, at the call
    ("map-with-output-constant", lambda: (lambda g: map_with_output(
        g, _1 * 2.0, [var(g)], constant(g), Sequence()))(graph()), GrucValueError,
     "map_with_output cannot write into constant 'c'"),
    ("mat-mul-acc-constant", lambda: (lambda g: mat_mul_acc(
        g, constant(g, (4, 4)), 1.0, var(g, (4, 4)), var(g, (4, 4), name="y"), Sequence()))(
        graph()), GrucValueError, "mat_mul_acc cannot write into constant 'c'"),
    ("host-write-broadcast", lambda: (lambda g: g.create_host_write(
        "s3", var(g, (1,), name="s").broadcast(3, 0)))(graph()), GrucValueError,
     "host write 's3' cannot write into a view that holds some elements more than once"),
    ("map-broadcast-to-two-tiles", lambda: (lambda g: g.set_tile_mapping(
        var(g, (3,), tile=None).broadcast(2, 0), [[(0, 3)], [(3, 6)]]))(graph()),
     GrucMappingError, "maps element 0 of 'x' to tiles 0 and 1"),
    ("zero-broadcast", lambda: (lambda g: zero(g, var(g)[0:1].broadcast(3, 0), Sequence()))(
        graph()), GrucValueError, "fill cannot write into a view"),
    ("non-linearity-in-place-broadcast", lambda: (lambda g: non_linearity_in_place(
        g, "tanh", var(g)[0:1].broadcast(3, 0), Sequence()))(graph()), GrucValueError,
     "non_linearity_in_place cannot write into a view that holds some elements more than once"),
    ("softmax-in-place-broadcast", lambda: (lambda g: non_linearity_in_place(
        g, "softmax_stable", var(g)[0:1].broadcast(3, 0), Sequence()))(graph()), GrucValueError,
     "non_linearity_in_place cannot write into a view"),
    ("scaled-add-nan", lambda: (lambda g: scaled_add_to(g, var(g), var(g, name="b"),
                                                        float("nan"), Sequence()))(graph()),
     GrucValueError, "scaled_add_to scale must be finite, got nan"),
    ("reduce-scale-inf", lambda: (lambda g: reduce(g, var(g), [0], "add", Sequence(),
                                                   scale=float("inf")))(graph()),
     GrucValueError, "reduce scale must be finite, got inf"),
    ("tensor-plus-number", lambda: tensor() + 1, GrucTypeError, "gruc.ops.add(graph, a, b, prog)"),
    ("tensor-compare", lambda: tensor() < 0, GrucTypeError, "no arithmetic or comparison"),
    ("tensor-len", lambda: len(tensor()), GrucTypeError, "t.dim(0)"),
    ("map-tensor-not-list", lambda: (lambda g: map(g, _1, var(g), Sequence()))(graph()),
     GrucTypeError, "map takes a list of tensors, got one Tensor"),
    ("dynamic-update-broadcast", lambda: (lambda g: dynamic_update(
        g, var(g)[0:1].broadcast(3, 0), var(g, (1, 6), name="row"),
        var(g, (1,), UNSIGNED_INT, name="o"), [0], [1], Sequence()))(graph()), GrucValueError,
     "dynamic_update cannot write into a view"),
    ("constant-past-element-limit", lambda: graph().add_constant(FLOAT, (2**20, 2**20), 0.0),
     GrucValueError, "2^34"),
    ("map-in-place-constant", lambda: (lambda g: map_in_place(
        g, _1 + 1, [g.add_constant(FLOAT, (2,), 1.0, "c")], Sequence()))(graph()),
     GrucValueError, "'c'"),
    ("out-of-memory", out_of_memory, GrucOutOfMemory, "tile 0"),
    # unparsable IR text and pipeline strings
    ("ir-garbage", lambda: parse_module("garbage"), GrucParseError, "'garbage'"),
    ("ir-empty", lambda: parse_module(""), GrucParseError, "end of text"),
    ("ir-bad-target", lambda: parse_module("module target(tiles_per_ipu=0)"), GrucParseError,
     "tiles_per_ipu = 0"),
    ("json-not-object", lambda: module_from_json("x"), GrucParseError, "str"),
    ("json-no-format", lambda: module_from_json({}), GrucParseError, "gruc-module"),
    ("pipeline-unknown-pass", lambda: parse_pipeline("nope"), GrucOptionError, "'nope'"),
    ("pipeline-unclosed", lambda: parse_pipeline("dce{"), GrucParseError, "'dce{'"),
    ("pipeline-no-value", lambda: parse_pipeline("plan-memory{strict}"), GrucParseError,
     "'strict'"),
    ("pipeline-unknown-option", lambda: parse_pipeline("dce{x=1}"), GrucOptionError, "'x'"),
    ("pipeline-bad-value", lambda: parse_pipeline("plan-memory{strict=maybe}"), GrucOptionError,
     "'maybe'"),
    ("engine-pipeline-unknown", lambda: engine(graph(), [Sequence()], pipeline="nope"),
     GrucOptionError, "'nope'"),
    ("sweep-pipeline", lambda: SweepSpec(pipeline="nope"), GrucValueError, "'nope'"),
    ("verify-foreign-compute-set", foreign_compute_set, GrucVerifyError, "'elsewhere'"),
]


@pytest.mark.parametrize("call, error, text", [case[1:] for case in BAD_INPUTS],
                         ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_raises_a_clear_gruc_error(call, error, text):
    with pytest.raises(GrucError) as info:
        call()
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    assert text in str(info.value), str(info.value)


def test_the_bad_input_cases_have_distinct_names():
    names = [case[0] for case in BAD_INPUTS]
    assert len(names) == len(set(names))


# ---- what still works next to the refusals ------------------------------------------------------
def test_a_host_read_nothing_writes_compiles_but_cannot_be_read():
    """Declaring the stream is allowed (its tensor still takes memory); reading it is not."""
    g = graph()
    g.create_host_read("out", var(g, (2,), name="lonely"))
    e = engine(g, [Sequence()])
    assert e.report.max_tile_bytes > 0
    with pytest.raises(GrucProgramError, match="'lonely'"):
        e.read_tensor("out")


def test_reading_before_the_writing_program_has_run_gives_the_initial_value():
    """The documented rule: a host read some program writes may be read at any time."""
    assert np.array_equal(copy_engine().read_tensor("y"), np.zeros((2, 3), np.float32))


def test_a_loop_carried_value_written_before_the_loop_is_accepted():
    g = graph()
    acc, z = var(g, (2,), name="acc"), var(g, (2,), name="z")
    g.create_host_write("acc", acc)
    g.create_host_read("z", z)
    e = engine(g, [Sequence(Repeat(2, Sequence(Copy(acc, z), Copy(z, acc))))])
    e.write_tensor("acc", [1.0, 2.0])
    e.run(0)
    assert e.read_tensor("z").tolist() == [1.0, 2.0]


def test_a_value_another_program_writes_counts_as_written():
    g = graph()
    x, y = var(g, (2,), name="x"), var(g, (2,), name="y")
    g.create_host_read("y", y)
    three = g.add_constant(FLOAT, (2,), 3.0)
    g.set_tile_mapping(three, 0)
    e = engine(g, [Sequence(Copy(x, y)), Sequence(Copy(three, x))])
    e.run(1)
    e.run(0)
    assert e.read_tensor("y").tolist() == [3.0, 3.0]


def test_exact_integer_writes_are_still_accepted():
    g = graph()
    x = var(g, (3,), UNSIGNED_INT)
    g.create_host_write("x", x)
    g.create_host_read("x", x)
    e = engine(g, [Sequence()])
    e.write_tensor("x", np.array([0.0, 7.0, 2.0**32 - 1]))
    assert e.read_tensor("x").tolist() == [0, 7, 2**32 - 1]


# ---- the command line ---------------------------------------------------------------------------
LAYER = ["--sequence-size", "2", "--input-size", "4", "--output-size", "4", "--batch-size", "2",
         "--tiles-per-ipu", "16", "--backend", "numpy"]

BUILT = LAYER[:-2]
"""The layer as ``gruc dump`` takes it: no ``--backend``, since it runs nothing."""

CLI_CASES = [
    (["gru", "--sequence-size", "0"], "--sequence-size 0:"),
    (["gru", "--sequence-size", "-3"], "--sequence-size -3:"),
    (["gru", "--sequence-size", "abc"], "'abc'"),
    (["gru", "--data-type", "int"], "'int'"),
    (["gru", "--data-type", "float64"], "'float64'"),
    (["gru", "--phase", "x"], "--phase x: Input should be 'fwd'"),
    (["gru", "--cell-order", "a,b"], "'a'"),
    (["gru", "--activation", "nope"], "'nope'"),
    (["gru", "--activation", "gelu"], "gelu's gradient needs its input"),
    (["gru", "--partials-type", "int"], "'int'"),
    (["gru", "--tiles-per-ipu", "0"], "--tiles-per-ipu 0:"),
    (["gru", "--tiles-per-ipu", "99999"], "99999"),
    (["gru", "--ipus", "99"], "99"),
    (["gru", *LAYER, "--shards", "1000"], "1000"),
    (["gru", "--backend", "cuda"], "--backend cuda:"),
    (["gru", "--variable-time-steps", "99"], "[99]"),
    (["gru", "--variable-time-steps", "a"], "'a'"),
    (["gru", "--reset-after", "maybe"], "'maybe'"),
    (["gru", "--available-memory-proportion", "-1"], "-1"),
    (["gru", "--available-memory-proportion", "nan"], "nan"),
    (["gru", "--abs-tolerance", "inf"], "--abs-tolerance inf:"),
    (["gru", "--seed", "-1"], "--seed -1:"),
    # issue 42 item 2: data the type cannot hold made a NaN reference, and NaN matched NaN
    (["gru", "--sequence-size", "3", "--input-size", "4", "--output-size", "4", "--batch-size",
      "2", "--tiles-per-ipu", "4", "--data-type", "half", "--weights-range", "70000"],
     "weights range 70000 is more than half can hold (at most 65504)"),
    (["gru", *LAYER, "--weights-range", "1e39"],
     "weights range 1e+39 is more than float can hold (at most 3.40282e+38)"),
    (["trace", "--seed", "-1"], "--seed -1:"),
    (["plan", "--available-memory-proportion", "0:inf"], "'0:inf'"),
    (["plan", "--find-max", "batch-size", "--batch-size", "0"], "batch_size = 0"),
    (["gru", "--bogus"], "--bogus"),
    (["bogus"], "'bogus'"),
    ([], "command"),
    (["dump", *BUILT, "-p", "nope"], "'nope'"),
    (["dump", *BUILT, "-p", "dce{"], "'dce{'"),
    (["dump", "--format", "x"], "'x'"),
    (["opt", "/nonexistent/in.ir"], "/nonexistent/in.ir"),
    (["viz", "--input", "/nonexistent/in.ir"], "/nonexistent/in.ir"),
    (["viz", "--format", "x"], "'x'"),
    (["plan", "--batch-size", "a:b"], "'a:b'"),
    (["plan", "--batch-size", "1:3:0"], "'1:3:0'"),
    (["plan", "--batch-size", "0"], "batch_size = 0"),
    (["plan", "--cell-order", "a,b,c"], "'a'"),
    (["plan", "--find-max", "bogus"], "'bogus'"),
    (["plan", "--jobs", "0"], "0"),
    (["plan", "--pipeline", "nope"], "'nope'"),
]


@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "bad.ir").write_text("module garbage\n")
    (tmp_path / "bad.json").write_text('{"format": "x"}')
    (tmp_path / "binary.ir").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "a-file").write_text("")
    (tmp_path / "cut.json").write_text('{"format": "gruc-module", "tar')
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "digits.json").write_text('{"format": "gruc-module", "version": ' + "9" * 5000 + "}")
    return tmp_path


def run_cli(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def check_one_line_error(code: int, err: str, text: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("gruc") and "error:" in lines[0], err
    assert text in lines[0], err


@pytest.mark.parametrize("argv, text", CLI_CASES, ids=[" ".join(a) or "none" for a, _ in CLI_CASES])
def test_cli_bad_input_is_one_line_and_exit_2(argv, text, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a plan that got as far as writing rows would write here
    check_one_line_error(*run_cli(argv, capsys), text)


FILE_CASES = [
    (["opt", "{d}/bad.ir"], "'garbage'"),
    (["opt", "{d}/bad.json"], "gruc-module"),
    (["opt", "{d}/cut.json"], "broken JSON module: Unterminated string"),
    (["opt", "{d}/binary.ir"], "binary.ir"),
    (["opt", "{d}/deep.json"], "JSON module nested too deeply to read"),
    (["viz", "--input", "{d}/deep.json"], "nested too deeply"),
    (["opt", "{d}/digits.json"], "JSON module not read: Exceeds the limit (4300 digits)"),
    (["opt", "{d}"], "{d}"),
    (["opt", "{d}/bad.ir", "-p", "nope"], "bad.ir"),
    (["viz", "--input", "{d}/bad.ir", "--batch-size", "2"], "--batch-size"),
    (["dump", *BUILT, "-o", "{d}/a-file/out.ir"], "a-file"),
    (["gru", *LAYER, "--compile-only", "--profile", "{d}/a-file/profile"], "a-file"),
    (["gru", *LAYER, "--profile", "{d}/a-file"], "is a file, not a directory"),
    (["gru", *LAYER, "--profile", ""], "--profile: needs a directory"),
    (["plan", *LAYER, "--out", ""], "--out: needs a directory"),
    (["plan", *LAYER, "--out", "{d}/a-file/rows"], "a-file' is a file"),
    (["viz", *LAYER, "-o", ""], "needs a file name"),
    (["viz", *LAYER, "-o", "{d}/a-file/x.html"], "a-file' is not a directory"),
    (["dump", *BUILT, "-o", ""], "needs a file name"),
    (["trace", *LAYER, "-o", ""], "needs a file name"),
    (["gru", *LAYER, "--shards", "100", "--profile", "{d}/not-made"], "numShards"),
    (["trace", *LAYER, "-o", "{d}"], "names a directory"),
    (["trace", *LAYER, "-o", "{d}/"], "names a directory"),
    # a place nothing can be made in (procfs refuses even root) is refused before the run
    (["gru", *LAYER, "--profile", "/proc/gruc-profile"], "cannot write '/proc/gruc-profile'"),
    (["dump", *BUILT, "-o", "/proc/gruc.ir"], "cannot write '/proc/gruc.ir'"),
]


@pytest.mark.parametrize("argv, text", FILE_CASES, ids=[" ".join(a) for a, _ in FILE_CASES])
def test_cli_bad_files_are_one_line_and_exit_2(argv, text, bad_files, capsys):
    argv = [part.format(d=bad_files) for part in argv]
    before = sorted(p.name for p in bad_files.iterdir())
    check_one_line_error(*run_cli(argv, capsys), text.format(d=bad_files))
    assert sorted(p.name for p in bad_files.iterdir()) == before   # nothing left behind


def test_numpy_integers_are_integers_for_repeat_counts_and_layer_sizes():
    assert Repeat(np.int64(3), Sequence()).count == 3
    assert type(Repeat(np.uint32(2), Sequence()).count) is int
    sizes = GruParams(dtype=FLOAT, batch_size=2, max_time_steps=3,
                       layer_sizes=(np.int64(4), np.int32(5)))
    assert sizes.layer_sizes == (4, 5) and all(type(n) is int for n in sizes.layer_sizes)
