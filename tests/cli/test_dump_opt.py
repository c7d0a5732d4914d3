"""``gruc dump`` and ``gruc opt``: formats, pipelines, pipes, the DOT graph, and bad input."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest

from gruc import FLOAT, Graph, Sequence, Target
from gruc.analysis.dataflow import dataflow_graph
from gruc.ir.module import Module
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from gruc.ir.program import Copy, WriteUndef
from gruc.ir.serialize import module_from_json
from gruc.passes import PASSES
from gruc.tools.gru_layer import GruLayerConfig, build_layer
from gruc.runtime.viz import dataflow_dot
from cli_helpers import BUILT, GRUC, gruc




def small_module() -> Module:
    config = GruLayerConfig(sequence_size=3, input_size=8, output_size=8, batch_size=2,
                            tiles_per_ipu=16, backend="numpy")
    layer = build_layer(config)
    return Module(layer.graph, layer.programs)


# ---- a strict reader for the DOT subset a DOT writer may use ---------------------------------
_DOT_TOKEN = re.compile(r'\s+|(?P<str>"(?:[^"\\]|\\.)*")|(?P<id>[A-Za-z_][A-Za-z0-9_]*|-?\d+(?:\.\d+)?)'
                        r'|(?P<punct>->|[{}\[\]=;,])', re.DOTALL)


def _unescape(quoted: str) -> str:
    """A DOT quoted string as Graphviz shows it in a label: ``\\"`` → ``"``, ``\\\\`` → ``\\``,
    ``\\n`` → newline; any other backslash would be a writer bug here."""
    out, k, body = [], 0, quoted[1:-1]
    while k < len(body):
        if body[k] == "\\":
            nxt = body[k + 1]
            assert nxt in '"\\n', f"unexpected escape \\{nxt} in {quoted}"
            out.append("\n" if nxt == "n" else nxt)
            k += 2
        else:
            out.append(body[k])
            k += 1
    return "".join(out)


def read_dot(text: str) -> tuple[str, dict[str, dict[str, str]], list[tuple[str, str, dict]]]:
    """``digraph NAME { ... }`` with node, edge and default-attribute statements: the graph name,
    the nodes with their attributes and the edges; fails on anything else."""
    tokens, at = [], 0
    while at < len(text):
        match = _DOT_TOKEN.match(text, at)
        assert match is not None, f"cannot tokenise DOT at {text[at:at + 30]!r}"
        if match.lastgroup:
            value = match.group(match.lastgroup)
            tokens.append(_unescape(value) if match.lastgroup == "str" else value)
        at = match.end()
    tokens.append(None)
    pos = 0

    def take(expected=None):
        nonlocal pos
        token = tokens[pos]
        assert token is not None, "unexpected end of DOT"
        if expected is not None:
            assert token == expected, f"expected {expected!r}, found {token!r} at token {pos}"
        pos += 1
        return token

    def attributes() -> dict[str, str]:
        result = {}
        take("[")
        while tokens[pos] != "]":
            key = take()
            take("=")
            result[key] = take()
            if tokens[pos] == ",":
                take(",")
        take("]")
        return result

    take("digraph")
    name = take()
    take("{")
    nodes: dict[str, dict[str, str]] = {}
    edges = []
    while tokens[pos] != "}":
        first = take()
        if first in ("graph", "node", "edge"):
            attributes()
        elif tokens[pos] == "->":
            take("->")
            second = take()
            edges.append((first, second, attributes() if tokens[pos] == "[" else {}))
        else:
            assert first not in nodes, f"node {first!r} declared twice"
            nodes[first] = attributes() if tokens[pos] == "[" else {}
        take(";")
    take("}")
    assert tokens[pos] is None, "text after the graph"
    return name, nodes, edges


# ---- dump ---------------------------------------------------------------------------------
def test_dump_text_is_the_printed_module_and_reparses(capsys):
    code, out, _ = gruc(["dump", *BUILT], capsys)
    assert code == 0
    assert out == print_module(small_module())
    assert print_module(parse_module(out)) == out


def test_dump_json_loads_back_to_the_same_module(tmp_path, capsys):
    code, out, _ = gruc(["dump", *BUILT, "--format", "json"], capsys)
    assert code == 0
    assert print_module(module_from_json(json.loads(out))) == print_module(small_module())
    assert gruc(["dump", *BUILT, "--format", "json", "-o", str(tmp_path / "m.json")], capsys)[0] == 0
    assert (tmp_path / "m.json").read_text() == out


def test_dump_dot_is_valid_and_is_the_dataflow_graph(capsys):
    code, out, _ = gruc(["dump", *BUILT, "--format", "dot"], capsys)
    assert code == 0
    name, nodes, edges = read_dot(out)
    flow = dataflow_graph(small_module())
    assert name == "dataflow"
    assert len(nodes) == flow.number_of_nodes() and len(edges) == flow.number_of_edges()
    ident = {node: f"{'v' if node[0] == 'var' else 's'}{node[1]}" for node in flow.nodes}
    assert {(ident[a], ident[b], d["kind"]) for a, b, d in flow.edges(data=True)} == \
        {(a, b, attrs["label"]) for a, b, attrs in edges}
    for node, data in flow.nodes(data=True):
        label = nodes[ident[node]]["label"]
        assert label.startswith(data["name"] + "\n" if node[0] == "var" else f"{node[1]}: ")


def test_dot_quotes_awkward_names():
    graph = Graph(Target.custom(tiles_per_ipu=4))
    awkward = 'a "quoted" \\ back\\slash\nline {x} -> y; [z]'
    a = graph.add_variable(FLOAT, (8,), awkward)
    b = graph.add_variable(FLOAT, (8,), "b")
    graph.map_tensor_linearly(a)
    graph.map_tensor_linearly(b)
    name, nodes, edges = read_dot(dataflow_dot(Module(graph, [Sequence(Copy(a, b))]),
                                               name='my "graph"'))
    assert name == 'my "graph"'
    assert nodes["v0"]["label"] == f"{awkward}\nf32[8]\n32 B"
    assert [(a_, b_, attrs["label"]) for a_, b_, attrs in edges] == [("v0", "s0", "read"),
                                                                      ("s0", "v1", "write")]


def test_dot_dashes_partial_writes():
    graph = Graph(Target.custom(tiles_per_ipu=4))
    a = graph.add_variable(FLOAT, (8,), "a")
    b = graph.add_variable(FLOAT, (8,), "b")
    graph.map_tensor_linearly(a)
    graph.map_tensor_linearly(b)
    program = Sequence(WriteUndef(b), Copy(a[:4], b[:4]))
    _, _, edges = read_dot(dataflow_dot(Module(graph, [program])))
    writes = {(x, y): attrs["style"] for x, y, attrs in edges if attrs["label"] == "write"}
    assert writes == {("s1", "v1"): "dashed"}


def test_dump_runs_a_pipeline_and_prints_between_passes(capsys):
    code, out, err = gruc(["dump", *BUILT, "-p", "plan-memory,plan-memory{strict=true}",
                           "--print-between-passes", "--time-passes"], capsys)
    assert code == 0
    assert out == print_module(small_module())
    dumps = err.split("# ----- IR after ")
    assert [d.split(" -----")[0] for d in dumps[1:]] == ["plan-memory", "plan-memory"]
    between = "# ----- IR after" + dumps[1]
    assert print_module(parse_module(between)) == out   # the header is an IR comment
    assert "pass timings" in dumps[-1] and "total" in dumps[-1]


# ---- opt ----------------------------------------------------------------------------------
def test_opt_reads_text_or_json_and_writes_either(tmp_path, capsys):
    text = print_module(small_module())
    (tmp_path / "in.gruc").write_text(text)
    code, out, err = gruc(["opt", str(tmp_path / "in.gruc"), "-p", "plan-memory",
                           "--verify-each", "--time-passes"], capsys)
    assert (code, out) == (0, text)
    assert re.search(r"\d+\.\d+ s  plan-memory", err)
    code, out, _ = gruc(["opt", str(tmp_path / "in.gruc"), "-p", "plan-memory", "--format", "json",
                         "-o", str(tmp_path / "out.json")], capsys)
    assert (code, out) == (0, "")
    assert gruc(["opt", str(tmp_path / "out.json"), "-o", str(tmp_path / "back.gruc")],
                capsys)[0] == 0
    assert (tmp_path / "back.gruc").read_text() == text


def test_opt_verify_each_alone_checks_a_module_and_writes_nothing_on_failure(tmp_path, capsys):
    text = print_module(small_module())
    (tmp_path / "good.gruc").write_text(text)
    assert gruc(["opt", str(tmp_path / "good.gruc"), "--verify-each"], capsys)[:2] == (0, text)
    twice = "  Map(out=%gru_state, ins=[%gru_state0]) expr=_1\n" * 2
    racing = text.replace("program 0 {", f"cs @extra {{\n{twice}}}\nprogram 0 {{\n  execute @extra", 1)
    (tmp_path / "racing.gruc").write_text(racing)
    code, out, err = gruc(["opt", str(tmp_path / "racing.gruc"), "--verify-each",
                           "-o", str(tmp_path / "out.gruc")], capsys)
    assert code == 2 and out == "" and not (tmp_path / "out.gruc").exists()
    assert err.startswith("gruc opt: error: the input module is not valid: vertices 0 (Map) and 1 "
                          "(Map) of compute set 'extra' race on element [0, 0, 0] of 'gru/state'")


@pytest.mark.parametrize("name", sorted(PASSES))
def test_opt_runs_every_registered_pass_and_its_output_reparses(name, tmp_path, capsys):
    (tmp_path / "in.gruc").write_text(print_module(small_module()))
    code, out, err = gruc(["opt", str(tmp_path / "in.gruc"), "-p", name, "--verify-each",
                           "--print-between-passes"], capsys)
    assert code == 0, err
    assert print_module(parse_module(out)) == out
    assert err.startswith(f"# ----- IR after {name} -----\n") and err.endswith(out)


def test_opt_reads_stdin(monkeypatch, capsys):
    text = print_module(small_module())
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert gruc(["opt", "-", "-p", "plan-memory"], capsys)[1] == text
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert gruc(["opt", "--format", "dot"], capsys)[1] == dataflow_dot(parse_module(text))


def test_dump_pipes_into_opt_through_the_console_script():
    command = GRUC
    dump = subprocess.Popen([*command, "dump", *BUILT], stdout=subprocess.PIPE)
    opt = subprocess.run([*command, "opt", "-", "-p", "plan-memory", "--format", "json"],
                         stdin=dump.stdout, capture_output=True, text=True, timeout=120)
    dump.stdout.close()
    assert dump.wait(timeout=120) == 0
    assert opt.returncode == 0, opt.stderr
    assert print_module(module_from_json(json.loads(opt.stdout))) == print_module(small_module())


def test_a_reader_that_leaves_early_is_not_an_error():
    dump = subprocess.Popen([*GRUC, "dump", *BUILT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    dump.stdout.close()  # like `gruc dump | true`: nobody reads the pipe when dump writes
    assert dump.wait(timeout=120) == 0
    assert dump.stderr.read() == b""


# ---- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["dump", "--frobnicate"], ["unrecognized arguments", "--frobnicate"]),
    (["dump", *BUILT, "--batch-size", "0"], ["--batch-size 0:"]),
    (["dump", *BUILT, "--tiles-per-ipu", "0"], ["--tiles-per-ipu 0:"]),
    (["dump", *BUILT, "-p", "no-such-pass"], ["unknown pass 'no-such-pass'", "plan-memory"]),
    (["dump", *BUILT, "-p", "plan-memory{strict=maybe}"], ["maybe"]),
    (["dump", *BUILT, "--format", "svg"], ["invalid choice", "svg"]),
    (["opt", "/no/such/file.gruc"], ["cannot read /no/such/file.gruc"]),
    (["opt", "/no/such/file.gruc", "-p", "bogus"], ["cannot read"]),
])
def test_bad_input_is_one_line_and_exit_code_2(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a case that wrongly succeeds writes its default file here
    code, _, err = gruc(argv, capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err


@pytest.mark.parametrize("content, words", [
    ("module garbage", ["bad.gruc: line 1, column 8", "expected"]),
    ('{"format": "something-else"}', ["bad.gruc", "gruc-module"]),
])
def test_opt_bad_module_is_one_line_naming_the_file(tmp_path, content, words, capsys):
    (tmp_path / "bad.gruc").write_text(content)
    code, _, err = gruc(["opt", str(tmp_path / "bad.gruc"), "-p", "plan-memory"], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err


def test_opt_unknown_pass_on_a_good_module(tmp_path, capsys):
    (tmp_path / "in.gruc").write_text(print_module(small_module()))
    code, out, err = gruc(["opt", str(tmp_path / "in.gruc"), "-p", "plan-memory,bogus"], capsys)
    assert (code, out) == (2, "")
    assert err.strip() == ("gruc opt: error: unknown pass 'bogus'; passes: "
                           + ", ".join(sorted(PASSES)))


def test_shard_refuses_in_one_line_a_time_loop_whose_slice_compute_set_holds_other_vertices(
        tmp_path, capsys):
    """Issue 42, item 3, as reported: the gates' Map moved into the input slice's compute set
    still verifies, but that compute set no longer only slices rows, so ``shard`` cannot cut it;
    it says so (it used to end in ``KeyError: 'base'``)."""
    layer = ["--sequence-size", "3", "--input-size", "4", "--output-size", "4", "--batch-size",
             "2", "--tiles-per-ipu", "4"]
    code, text, _ = gruc(["dump", *layer], capsys)
    assert code == 0
    lines = text.splitlines()
    moved = lines.pop(next(k for k, line in enumerate(lines)
                           if line.strip().startswith("Map(out=%gru_gates_tmp,")))
    lines.insert(lines.index('cs @gru_0_input0 "gru/0/input0" {') + 1, moved)
    (tmp_path / "moved.ir").write_text("\n".join(lines) + "\n")
    assert gruc(["opt", str(tmp_path / "moved.ir"), "--verify-each"], capsys)[0] == 0
    code, out, err = gruc(["opt", str(tmp_path / "moved.ir"), "-p", "shard{num-shards=2}"],
                          capsys)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("gruc opt: error: pass 'shard' failed: compute set 'gru/0/input0' "), err
    assert "holds Map vertices beside the time loop's row slices" in err
