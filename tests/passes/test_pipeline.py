"""Pipeline strings: parsing, printing, options, errors, and running with verify-each."""

import pytest

from gruc import FLOAT, Graph, GrucError, GrucOptionError, GrucParseError, Module, Sequence, Target
from gruc.passes.pipeline import format_pipeline, parse_pipeline, run_pipeline
from gruc.passes.plan_memory import PlanMemory


def test_parse_and_format_round_trip():
    for text in ["plan-memory", "plan-memory{strict=true}", "plan-memory,plan-memory{strict=true}", ""]:
        assert format_pipeline(parse_pipeline(text)) == text
    assert format_pipeline(parse_pipeline("plan-memory{}")) == "plan-memory"
    assert format_pipeline(parse_pipeline(" dce , dce ")) == "dce,dce"
    assert parse_pipeline(" plan-memory { strict = yes } ") == [PlanMemory(strict=True)]


@pytest.mark.parametrize("text, error, words", [
    ("no-such-pass", GrucOptionError, ["no-such-pass", "plan-memory"]),
    ("plan-memory{colour=red}", GrucOptionError, ["colour", "strict"]),
    ("plan-memory{strict=maybe}", GrucOptionError, ["maybe", "bool"]),
    ("plan-memory{strict}", GrucParseError, ["key=value"]),
    ("plan-memory}", GrucParseError, ["column"]),
    ("plan-memory,", GrucParseError, ["column 13", "a pass name after the last ','"]),
    ("plan-memory{strict=true,strict=false}", GrucOptionError, ["'strict' is given twice"]),
    ("plan-memory{strict=true,}", GrucParseError, ["empty option in {strict=true,}"]),
    ("plan-memory{,}", GrucParseError, ["empty option"]),
])
def test_bad_pipelines_name_the_problem(text, error, words):
    with pytest.raises(error) as info:
        parse_pipeline(text)
    for word in words:
        assert word in str(info.value)


def test_run_pipeline_verifies_times_and_prints():
    g = Graph(Target.custom(tiles_per_ipu=4))
    x = g.add_variable(FLOAT, (4,), "x")
    g.map_tensor_linearly(x)
    g.create_host_read("x", x)
    g.create_host_write("x", x)
    printed = []
    run = run_pipeline(Module(g, [Sequence()]), "plan-memory", verify_each=True, time_passes=True,
                       print_between=lambda name, module: printed.append(name))
    assert printed == ["plan-memory"] and run.timings[0][0] == "plan-memory"


def test_a_failing_pass_is_named():
    g = Graph(Target.custom(tiles_per_ipu=4, bytes_per_tile=64))
    x = g.add_variable(FLOAT, (100,), "x")
    g.set_tile_mapping(x, 0)
    g.create_host_read("x", x)
    with pytest.raises(GrucError, match="pass 'plan-memory' failed: out of memory"):
        run_pipeline(Module(g, [Sequence()]), "plan-memory{strict=true}")


def test_a_compile_verifies_its_module_once(monkeypatch):
    """The engine verifies the graph before its pipeline and the pipeline trusts that check (a
    whole-module verification costs as much as a pass on a large graph)."""
    import gruc.ir.verify as verify_module
    from gruc import Engine
    from gruc.ir.expr import _1, Const
    from gruc.ops import map

    runs = []
    real = verify_module._Verifier.run
    monkeypatch.setattr(verify_module._Verifier, "run", lambda self: (runs.append(1), real(self)))
    g = Graph(Target.custom(tiles_per_ipu=4))
    x = g.add_variable(FLOAT, (4, 8), "x")
    g.map_tensor_linearly(x)
    g.create_host_write("x", x)
    prog = Sequence()
    g.create_host_read("y", map(g, _1 * Const(2.0), [x], prog))
    Engine(g, prog, backend="numpy")
    assert len(runs) == 1
