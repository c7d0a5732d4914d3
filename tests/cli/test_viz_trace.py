"""``gruc viz`` and ``gruc trace``: the HTML report (its views, its embedded data and its
numbers; the browser tests are in ``test_report_browser.py``), comparing two saved reports, the
DOT output, the Chrome trace at ipu2 scale, the status line, and bad input."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import subprocess

import numpy as np
import pytest

from gruc.cli import main
from gruc.cli.layers import SHOWN_LAYERS
from gruc.errors import GrucValueError
from gruc.ir.module import Module
from gruc.ir.printer import print_module
from gruc.tools.gru_layer import GruLayerConfig, build_layer, run_layer
from gruc.runtime.engine import Engine
from gruc.runtime.page_data import CATEGORIES, device_addresses, live_bytes, tile_categories
from gruc.runtime.viz import dataflow_dot, tile_grid
from gruc.status import StatusLine
from cli_helpers import GRUC, SIZES, SMALL, batch_reports, gruc

CONFIG = GruLayerConfig(sequence_size=3, input_size=8, output_size=8, batch_size=2,
                        tiles_per_ipu=16, backend="numpy")
SECTIONS = ("summary", "memory", "tile-map", "tile-page", "liveness", "program", "steps",
            "tile-cycles", "trace")


def page_data_of(page: str) -> dict:
    """The JSON island a report page embeds (what its script draws from)."""
    match = re.search(r'<script type="application/json" id="gruc-data">(.*?)</script>', page,
                      re.S)
    assert match, "no data island"
    return json.loads(match.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="module")
def report_html(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("viz") / "report.html"
    assert main(["viz", *SMALL, "-o", str(path)]) == 0
    return str(path)


# ---- the HTML report ------------------------------------------------------------------------
def test_viz_report_has_every_view_and_is_self_contained(report_html):
    page = open(report_html).read()
    for anchor in SECTIONS:
        assert re.search(rf'<section id="{anchor}"( hidden)?>', page), anchor
    for chart in ("memory-chart", "tile-heatmap", "liveness-chart", "tile-liveness-chart",
                  "steps-chart", "tile-cycles-chart", "trace-chart", "tile-memory-map"):
        assert f'id="{chart}"' in page, chart
    assert page.count("plotly.js v") >= 1 and "Plotly.newPlot" in page  # the library, inlined
    markup = re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.S)  # the HTML itself
    assert not re.search(r'(src|href)="(?!data:|#)', markup), "a resource outside the page"
    assert not re.search(r"<script[^>]+src=", page) and "<link" not in markup
    data = page_data_of(page)
    assert data["title"] == "gruc: GRU layer S=3 B=2 I=8 H=8 float phase=fwd"
    assert f"<title>{data['title']}</title>" in page
    assert [c["name"] for c in data["categories"]] == list(CATEGORIES)
    assert data["trace"] is not None and data["ran"] is True


def _steps_in(tree: list) -> list[int]:
    found = []
    for node in tree:
        found += [node] if isinstance(node, int) else _steps_in(node["c"])
    return found


def test_program_tree_and_step_table_name_every_step_once(report_html):
    page = open(report_html).read()
    data = page_data_of(page)
    engine = run_layer(CONFIG).engine
    steps = engine.plan.liveness.steps
    assert sorted(_steps_in(data["tree"])) == list(range(len(steps)))
    assert any(node["t"] == "repeat 3" for node in data["tree"][0]["c"] if isinstance(node, dict))
    table = page[page.index('id="compute-sets"'):]
    rows = re.findall(r'<tr><td class="text"><a href="#step=(\d+)" data-step="\d+">\d+</a></td>'
                      r'<td class="text">[^<]*</td><td class="text">[^<]*</td><td>([\d,]+)</td>',
                      table)
    counts = engine.report.step_counts.tolist()
    assert [(int(k), int(n.replace(",", ""))) for k, n in rows] == list(enumerate(counts))
    assert [s["executions"] for s in data["steps"]] == counts
    assert max(counts) == 3  # the loop body ran once per time step


def test_page_data_adds_up_and_matches_the_liveness():
    engine = run_layer(CONFIG).engine
    plan, liveness, footprint = engine.plan, engine.plan.liveness, engine.footprint
    categories = tile_categories(footprint)
    assert list(categories) == list(CATEGORIES)
    assert np.array_equal(sum(categories.values()), footprint.total_including_gaps)
    assert all((values >= 0).all() for values in categories.values())
    assert categories["message"].any() and categories["vertexCode"].any()
    size = {}
    for v, nbytes in zip(plan.block_variable.tolist(), plan.block_size.tolist()):
        size[v] = size.get(v, 0) + nbytes
    live = live_bytes(plan)
    always = sum(size[v] for v in liveness.always_live if v in size)
    assert live.always == always
    for step in range(liveness.num_steps):
        held = sum(size.get(v, 0) for v in liveness.not_always_live_at(step))
        assert live.total[step] == always + held
    # the busiest tile at the busiest step is the busiest tile's always-live + peak
    assert live.max_tile.max() == (plan.always_live_bytes + plan.not_always_live_bytes).max()


@pytest.mark.parametrize("config", [CONFIG, GruLayerConfig(
    sequence_size=2, input_size=8, output_size=8, batch_size=2, tiles_per_ipu=16, phase="all",
    backend="numpy")])
def test_device_addresses_are_a_memory_map_of_each_tile(config):
    """Every block lies above its tile's code and vertex state, below its total including gaps
    (the highest end is the total, for a tile whose top is tensor data); blocks live at a
    common step never share a byte; interleaved blocks start at the interleaved region."""
    engine = run_layer(config).engine
    plan, footprint, target = engine.plan, engine.footprint, engine.module.graph.target
    addresses = device_addresses(plan, footprint)
    ends = addresses + plan.block_size
    fixed = sum(footprint.always_live[name] for name in
                ("vertexCode", "vertexInstanceState", "vertexFieldData", "controlCode",
                 "internalExchangeCode"))
    tiles = plan.block_tile
    assert (addresses >= fixed[tiles]).all()
    assert (ends <= footprint.total_including_gaps[tiles]).all()
    interleaved = plan.block_interleaved
    assert (addresses[interleaved] >= target.interleaved_memory_start).all()
    top = np.zeros(target.num_tiles, dtype=np.int64)
    np.maximum.at(top, tiles[interleaved], ends[interleaved])
    has = np.zeros(target.num_tiles, dtype=bool)
    has[tiles[interleaved]] = True
    assert np.array_equal(top[has], footprint.total_including_gaps[has])
    live = plan.liveness
    for tile in np.unique(tiles).tolist():
        on = np.flatnonzero(tiles == tile)
        for a in on.tolist():
            for b in on.tolist():
                if a < b and live.interferes(int(plan.block_variable[a]),
                                             int(plan.block_variable[b])):
                    assert ends[a] <= addresses[b] or ends[b] <= addresses[a]


def test_report_json_lists_every_variable_with_its_placement(tmp_path):
    engine = run_layer(CONFIG).engine
    saved = json.loads(engine.report.to_json(tmp_path / "r.json"))
    rows = {row["name"]: row for row in saved["variables"]}
    plan, graph = engine.plan, engine.module.graph
    assert len(rows) == len(plan.allocated)
    for index in plan.allocated:
        row = rows[graph.variables[index].name]
        blocks = plan.blocks(index)
        assert row["bytes"] == sum(n for _, _, n in blocks)
        placed = [(first + k, nbytes, offset) for first, count, nbytes, offset
                  in row["placement"] for k in range(count)]
        assert placed == [(tile, nbytes, offset) for tile, offset, nbytes in blocks]
        assert row["always_live"] == (index in plan.liveness.always_live)
        if not row["always_live"]:
            steps = [s for a, b in zip(row["live_steps"][::2], row["live_steps"][1::2])
                     for s in range(a, b + 1)]
            assert steps == plan.liveness.live_step_list(index)


def test_to_html_from_python_and_a_report_without_its_program(tmp_path):
    engine = run_layer(CONFIG).engine
    text = engine.report.to_html(tmp_path / "page.html", title="mine")
    assert (tmp_path / "page.html").read_text() == text and "<title>mine</title>" in text
    from gruc.runtime.report import Report

    bare = Report(engine.report.target, engine.footprint, engine.report.steps,
                  engine.report.costs, engine.report.step_counts, 0.0)
    with pytest.raises(GrucValueError, match="without its compiled program"):
        bare.to_html()
    assert "variables" not in bare.to_dict()


@pytest.mark.parametrize("tiles, grid", [(1472, (32, 46)), (16, (4, 4)), (13, (3, 6)), (1, (1, 1))])
def test_tile_grid(tiles, grid):
    rows, columns = tile_grid(tiles)
    assert (rows, columns) == grid and rows * columns >= tiles


def test_viz_from_a_saved_module_and_compile_only(tmp_path, capsys):
    layer = build_layer(CONFIG)
    (tmp_path / "in.gruc").write_text(print_module(Module(layer.graph, layer.programs)))
    code, out, _ = gruc(["viz", "--input", str(tmp_path / "in.gruc"), "--backend", "numpy",
                         "-o", str(tmp_path / "ran.html")], capsys)
    assert code == 0 and "ran.html" in out
    ran = page_data_of((tmp_path / "ran.html").read_text())
    assert max(s["executions"] for s in ran["steps"]) == 3  # the loop body executed 3 times
    assert ran["trace"] is not None and ran["title"] == f"gruc: module {tmp_path / 'in.gruc'}"
    code, _, _ = gruc(["viz", "--input", str(tmp_path / "in.gruc"), "--compile-only",
                       "-o", str(tmp_path / "unrun.html")], capsys)
    page = (tmp_path / "unrun.html").read_text()   # a saved module's loops are not counted
    unrun = page_data_of(page)
    assert code == 0 and not any(s["executions"] for s in unrun["steps"])
    assert "none counted" in page and unrun["trace"] is None and "No run to trace" in page
    code, _, _ = gruc(["viz", *SMALL, "--compile-only", "-o", str(tmp_path / "plan.html")], capsys)
    page = (tmp_path / "plan.html").read_text()   # the layer's are, as gruc plan counts them
    assert code == 0 and "none counted" not in page
    assert max(s["executions"] for s in page_data_of(page)["steps"]) == 3
    module = print_module(Module(layer.graph, layer.programs))
    done = subprocess.run([*GRUC, "viz", "--input", "-", "--compile-only", "-o",
                           str(tmp_path / "stdin.html")], input=module, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert page_data_of((tmp_path / "stdin.html").read_text())["title"] == \
        "gruc: module from standard input"


def test_viz_dot_is_the_dataflow_graph(tmp_path, capsys):
    layer = build_layer(CONFIG)
    code, out, _ = gruc(["viz", *SMALL, "--format", "dot"], capsys)
    assert (code, out) == (0, dataflow_dot(Engine(layer.graph, layer.programs).module))
    code, as_built, _ = gruc(["viz", *SMALL, "--format", "dot", "--pipeline", ""], capsys)
    assert (code, as_built) == (0, dataflow_dot(Module(layer.graph, layer.programs)))
    assert as_built != out  # the default pipeline fuses the cell's elementwise steps
    assert gruc(["viz", *SMALL, "--format", "dot", "-o", str(tmp_path / "g.dot")], capsys)[0] == 0
    assert (tmp_path / "g.dot").read_text() == out


def test_viz_and_trace_exit_1_when_the_check_fails(tmp_path, capsys):
    strict = ["--rel-tolerance", "0", "--abs-tolerance", "0"]
    code, out, _ = gruc(["viz", *SMALL, *strict, "-o", str(tmp_path / "r.html")], capsys)
    assert code == 1 and "FAILED" in out and (tmp_path / "r.html").exists()
    code, out, _ = gruc(["trace", *SMALL, *strict, "-o", str(tmp_path / "t.json")], capsys)
    assert code == 1 and "FAILED" in out and (tmp_path / "t.json").exists()


# ---- compare --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_reports(tmp_path_factory) -> tuple[str, str]:
    return batch_reports(tmp_path_factory.mktemp("compare"))


def test_compare_shows_per_category_per_tile_and_variable_differences(two_reports, tmp_path,
                                                                       capsys):
    first, second = two_reports
    code, out, _ = gruc(["viz", "--compare", first, second, "-o", str(tmp_path / "c.html")],
                        capsys)
    assert code == 0 and "c.html" in out
    page = (tmp_path / "c.html").read_text()
    a, b = (json.load(open(path)) for path in two_reports)
    grown = (sum(b["memory"]["not_always_live_peak_by_category"]["variable"])
             - sum(a["memory"]["not_always_live_peak_by_category"]["variable"]))
    assert grown > 0  # a batch twice as large holds more per step
    assert re.search(r"<td class=\"text\">variable \(not always live\)</td><td>[\d,]+</td>"
                     rf"<td>[\d,]+</td><td class=\"text\">\+{grown:,}</td>", page)
    rows = {name: (status, int(before.replace(",", "")), int(after.replace(",", "")))
            for name, status, before, after in re.findall(
                r'<tr><td class="text">([^<]+)</td><td class="text">([a-z ]+)</td>'
                r"<td>([\d,]+)</td><td>([\d,]+)</td>", page)}
    output_a = next(v for v in a["variables"] if v["name"] == "gru/output")
    output_b = next(v for v in b["variables"] if v["name"] == "gru/output")
    assert output_b["bytes"] == 2 * output_a["bytes"]  # [S, B, H]: twice the batch
    assert rows["gru/output"][0].startswith("resized") and \
        rows["gru/output"][1:] == (output_a["bytes"], output_b["bytes"])
    assert "plotly.js v" in page and 'id="compare-tile-map"' in page
    same = gruc(["viz", "--compare", first, first, "-o", str(tmp_path / "same.html")], capsys)
    assert same[0] == 0
    assert re.search(r"<p>0 of [\d,]+ variables changed", (tmp_path / "same.html").read_text())


def test_compare_refuses_what_is_not_a_report_in_one_line(two_reports, tmp_path, capsys):
    (tmp_path / "text.json").write_text("not json")
    (tmp_path / "other.json").write_text('{"traceEvents": []}')
    old = json.load(open(two_reports[0]))
    del old["variables"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    for name, words in (("text.json", "not a JSON report"), ("other.json", "not a gruc report"),
                        ("old.json", "lists no variables")):
        code, _, err = gruc(["viz", "--compare", two_reports[0], str(tmp_path / name), "-o",
                             str(tmp_path / "c.html")], capsys)
        assert code == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "c.html").exists()


# ---- trace ----------------------------------------------------------------------------------
def _check_trace(trace: dict) -> None:
    """Every event is well formed and events on one track nest (Perfetto's rule)."""
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert events and all(e["dur"] > 0 and e["ts"] >= 0 for e in events)
    tracks: dict[tuple[int, int], list] = {}
    for e in events:
        tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for track in tracks.values():
        open_ends: list[float] = []
        for e in sorted(track, key=lambda e: (e["ts"], -e["dur"])):
            while open_ends and open_ends[-1] <= e["ts"] + 1e-9:
                open_ends.pop()
            end = e["ts"] + e["dur"]
            assert not open_ends or end <= open_ends[-1] + 1e-9, e
            open_ends.append(end)


def test_trace_writes_a_nested_chrome_trace(tmp_path, capsys):
    code, out, _ = gruc(["trace", *SMALL, "-o", str(tmp_path / "t.json")], capsys)
    assert code == 0 and "PASSED" in out
    trace = json.loads((tmp_path / "t.json").read_text())
    _check_trace(trace)
    assert {e["tid"] for e in trace["traceEvents"]} == set(range(17))  # control + 16 tiles
    count = int(re.search(r"(\d+) events", out).group(1))
    assert count == len(trace["traceEvents"])


def test_trace_to_stdout_keeps_the_summary_on_stderr(capsys):
    code, out, err = gruc(["trace", *SMALL, "-o", "-"], capsys)
    assert code == 0 and "PASSED" in err
    _check_trace(json.loads(out))


def test_viz_to_stdout_keeps_the_summary_and_a_failed_check_on_stderr(capsys):
    code, out, err = gruc(["viz", *SMALL, "-o", "-", "--rel-tolerance", "0", "--abs-tolerance",
                           "0"], capsys)
    assert code == 1 and out.lstrip().lower().startswith("<!doctype html")
    assert "report            -" in err and "check             FAILED" in err


def test_trace_of_an_ipu2_stays_small(tmp_path, capsys):
    code, out, _ = gruc(["trace", *SIZES, "--backend", "numpy", "-o", str(tmp_path / "t.json")],
                        capsys)
    assert code == 0
    trace = json.loads((tmp_path / "t.json").read_text())
    _check_trace(trace)
    assert trace["otherData"]["tiles_per_track"] == 23  # 1472 tiles in 64 tracks
    assert max(e["tid"] for e in trace["traceEvents"]) == 64
    assert (tmp_path / "t.json").stat().st_size < 2_000_000


# ---- reports and traces of the product tools' layers ------------------------------------------
FC_SMALL = ["--batch-size", "4", "--input-size", "24", "--output-size", "16", "--data-type",
            "float", "--tiles-per-ipu", "16", "--backend", "numpy"]
GEMM_SMALL = ["--m", "8", "--k", "16", "--n", "24", "--tiles-per-ipu", "16", "--backend", "numpy"]


def test_trace_of_a_fully_connected_layer_is_its_run(tmp_path, capsys):
    """Issue 40 item 3: ``gruc trace fc`` runs the layer as ``gruc fc`` does (its three products,
    checked) and the trace spans the run's cycles."""
    from gruc.tools.products import FcConfig, build_fc, run_product_layer

    code, out, _ = gruc(["trace", "fc", *FC_SMALL, "-o", str(tmp_path / "t.json")], capsys)
    assert code == 0 and "PASSED" in out
    trace = json.loads((tmp_path / "t.json").read_text())
    _check_trace(trace)
    config = FcConfig(batch_size=4, input_size=24, output_size=16, data_type="float",
                      tiles_per_ipu=16, backend="numpy")
    run = run_product_layer(build_fc(config))
    assert trace["otherData"]["cycles"] == run.engine.report.cycles.total > 0


def test_viz_of_a_product_plan_matches_gruc_plan(tmp_path, capsys):
    """``gruc viz gemm --compile-only`` reports the product as ``gruc plan gemm`` plans it (the
    same cycles per step and in all, the same memory), titled as ``gruc gemm`` prints it."""
    from gruc.plan.static import plan_program
    from gruc.tools.products import GemmConfig, build_gemm

    code, out, _ = gruc(["viz", "gemm", *GEMM_SMALL, "--compile-only", "-o",
                         str(tmp_path / "r.html")], capsys)
    assert code == 0, out
    data = page_data_of((tmp_path / "r.html").read_text())
    assert data["title"] == ("gruc: general matrix multiply: G=1 M=8 K=16 N=24 half alpha=1 "
                             "beta=1")
    layer = build_gemm(GemmConfig(m=8, k=16, n=24, tiles_per_ipu=16, backend="numpy"))
    report = plan_program(layer.graph, layer.programs, runs=layer.runs)
    assert [s["executions"] for s in data["steps"]] == report.step_counts.tolist()
    assert sum(s["executions"] * (s["compute"] + s["exchange"] + s["sync"])
               for s in data["steps"]) == report.cycles.total > 0
    assert data["total"] == report.total_bytes.tolist()
    assert data["trace"] is None  # nothing ran


def test_viz_of_a_fully_connected_layer_fails_with_its_check(capsys):
    code, out, err = gruc(["viz", "fc", *FC_SMALL, "-o", "-", "--rel-tolerance", "0",
                           "--abs-tolerance", "0"], capsys)
    assert code == 1 and out.lstrip().lower().startswith("<!doctype html")
    assert "check             FAILED" in err


@pytest.mark.parametrize("argv, words", [
    (["viz", "fc", "--output-size", "3"], "required: --input-size"),
    (["trace", "gemm", "--m", "0", "--k", "2", "--n", "2"], "--m"),
    (["viz", "fc", "--input-size", "2", "--output-size", "2", "--compare", "a.json", "b.json"],
     "unrecognized arguments: --compare"),
    (["viz", "gemm", "--m", "2", "--k", "2", "--n", "2", "--matmul-options", "{"], "not JSON"),
])
def test_bad_product_layer_flags_are_one_line(argv, words, capsys):
    code, _, err = gruc(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and words in err, err


# ---- status line and bad input -------------------------------------------------------------
def test_status_line_draws_only_when_enabled():
    stream = io.StringIO()
    with StatusLine(stream, enabled=True) as status:
        status.show("compiling ...")
        assert stream.getvalue() == "\r\033[Kcompiling ..."
    assert stream.getvalue().endswith("\r\033[K")
    quiet = io.StringIO()
    with StatusLine(quiet) as status:  # a StringIO is not a terminal
        status.show("compiling ...")
        status.progress(3, 10)
    assert quiet.getvalue() == ""


def test_a_progress_bar_is_the_same_line_and_stays_at_the_end():
    """Issue 43: the planner's progress bar is the commands' status line (one class): drawn in
    place, a known total as a bar, an unknown one as a count, kept (a newline) when closed."""
    stream = io.StringIO()
    with StatusLine(stream, enabled=True, unit="plan") as bar:
        bar.progress(0, 4, "(resumed)")
        bar.progress(2, 4)
        bar.progress(5)
    drawn = stream.getvalue().split("\r\033[K")[1:]
    assert drawn[0] == "[" + "." * 30 + "] 0/4 (resumed)"
    assert drawn[1].startswith("[" + "#" * 15 + "." * 15 + "] 2/4 ") and drawn[1].endswith("s/plan")
    assert drawn[2].startswith("5 plans ") and stream.getvalue().endswith("\n")


def test_gru_shows_what_it_is_doing_on_a_terminal(monkeypatch, capsys):
    import gruc.cli.gru as gru_command

    drawn = io.StringIO()
    monkeypatch.setattr(gru_command, "StatusLine", lambda: StatusLine(drawn, enabled=True))
    assert main(["gru", "--sequence-size", "2", "--batch-size", "2", "--input-size", "4",
                 "--output-size", "4", "--tiles-per-ipu", "4"]) == 0
    assert drawn.getvalue().split("\r\033[K")[1:] == [
        "building the layer ...", "compiling and running on the simulated IPU ...", ""]
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["viz", "--frobnicate"], ["unrecognized arguments", "--frobnicate"]),
    (["viz", "--input", "m.gruc", "--batch-size", "3"], ["--input", "--batch-size"]),
    (["viz", "--input", "/no/such.gruc"], ["cannot read /no/such.gruc"]),
    (["viz", *SMALL, "--format", "svg"], ["invalid choice", "svg"]),
    (["viz", *SMALL, "--output-size", "0"], ["--output-size 0:"]),
    (["trace", *SMALL, "--batch-size", "-2"], ["--batch-size -2:"]),
    (["trace", *SMALL, "--phase", "sideways"], ["phase", "sideways"]),
    (["trace", *SMALL, "-o", "/proc/no/such/dir/t.json"], ["cannot write"]),
    (["viz", "--compare", "/no/a.json", "/no/b.json"], ["cannot read /no/a.json"]),
    (["viz", "--compare", "a.json"], ["--compare", "expected 2 arguments"]),
    (["viz", "--compare", "a.json", "b.json", "--batch-size", "3", "--compile-only"],
     ["--compare reads two saved reports", "--batch-size", "--compile-only"]),
    (["viz", "--compare", "a.json", "b.json", "--format", "dot"], ["drop --format"]),
    (["viz", "--compare", "a.json", "b.json", "--input", "m.gruc"], ["drop --input"]),
])
def test_bad_input_is_one_line_and_exit_code_2(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a case that wrongly succeeds writes its default file here
    code, _, err = gruc(argv, capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err


def _endless_module(tmp_path, count: int = 4294967295):
    """A saved module whose program repeats one step ``count`` times (Poplar's largest count)."""
    from gruc import FLOAT, Graph, Repeat, Sequence, Target
    from gruc.ir.expr import _1, Const
    from gruc.ops import map_in_place

    graph = Graph(Target.custom(tiles_per_ipu=4))
    x = graph.add_variable(FLOAT, (8,), "x")
    graph.map_tensor_linearly(x)
    graph.create_host_write("x", x)
    body = Sequence()
    map_in_place(graph, _1 * Const(0.5), [x], body)
    path = tmp_path / "endless.ir"
    path.write_text(print_module(Module(graph, [Sequence(Repeat(count, body))])))
    return path


def test_viz_of_a_module_no_run_could_finish_is_refused_up_front(tmp_path):
    """Issue 42 item 5: ``repeat 4294967295`` (2 us a step: three months) ran without end; it
    is refused at once, and ``--compile-only`` still reports on it."""
    module = _endless_module(tmp_path)
    done = subprocess.run([*GRUC, "viz", "--input", str(module), "-o", str(tmp_path / "r.html")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"gruc viz: error: {module}: program 0 runs at least "
                                  "4,294,967,295 steps")
    assert "--compile-only" in done.stderr and not (tmp_path / "r.html").exists()
    done = subprocess.run([*GRUC, "viz", "--input", str(module), "--compile-only", "-o",
                           str(tmp_path / "r.html")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and (tmp_path / "r.html").exists(), done.stderr


@pytest.mark.parametrize("argv", [["viz", *SMALL, "-o", "{d}/r.html"],
                                  ["gru", *SMALL, "--profile", "{d}/profile"]])
def test_a_report_needing_plotly_is_refused_before_the_layer_is_built(argv, tmp_path,
                                                                       monkeypatch, capsys):
    """Issue 42 item 9: where the page's library is missing (an install without dependencies)
    the HTML report's commands say so at once, not after running the whole layer (88 s on a big
    one)."""
    def never(config):
        raise AssertionError("the layer was built before plotly was looked for")

    monkeypatch.setitem(__import__("sys").modules, "plotly", None)  # as if not installed
    monkeypatch.setitem(SHOWN_LAYERS, "gru", dataclasses.replace(SHOWN_LAYERS["gru"], build=never))
    monkeypatch.setattr("gruc.cli.gru.build_layer", never)
    code, out, err = gruc([part.format(d=tmp_path) for part in argv], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "needs plotly, which is not installed: pip install plotly" in err
    assert list(tmp_path.iterdir()) == []


def test_the_base_install_brings_matplotlib_and_plotly_and_the_page_files():
    """The first README command (``pip install -e .``) must bring what ``gruc viz``, ``gruc gru
    --profile`` and ``gruc plan --plots`` need; the page's script and style ship in the
    package."""
    import tomllib
    from importlib import resources
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    for name in ("matplotlib", "plotly"):
        assert any(requirement.startswith(name)
                   for requirement in project["project"]["dependencies"]), name
    assert any(r.startswith("selenium") for r in project["project"]["optional-dependencies"]["test"])
    for name in ("page.js", "page.css"):
        assert resources.files("gruc.runtime").joinpath(name).read_text().strip()
