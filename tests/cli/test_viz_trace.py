"""``gruc viz`` and ``gruc trace``: the HTML report (also opened in headless Chromium), its
numbers, the DOT output, the Chrome trace at ipu2 scale, the status line, and bad input."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from gruc.cli import main
from gruc.ir.module import Module
from gruc.ir.printer import print_module
from gruc.popnn.gru_layer import GruLayerConfig, build_layer, run_layer
from gruc.runtime.engine import Engine
from gruc.runtime.viz import CATEGORIES, StatusLine, dataflow_dot, memory_views, tile_grid
from cli_helpers import GRUC, SIZES, SMALL, gruc

CONFIG = GruLayerConfig(sequence_size=3, input_size=8, output_size=8, batch_size=2,
                        tiles_per_ipu=16, backend="numpy")
IMAGES = ("memory-chart", "tile-heatmap", "liveness-chart", "tile-cycles-chart",
          "cycles-chart")



@pytest.fixture(scope="module")
def report_html(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("viz") / "report.html"
    assert main(["viz", *SMALL, "-o", str(path)]) == 0
    return str(path)


# ---- the HTML report ------------------------------------------------------------------------
def test_viz_report_has_every_view_and_is_self_contained(report_html):
    page = open(report_html).read()
    for anchor in ("summary", "memory", "tile-map", "busiest", "liveness", "program",
                   "tile-cycles", "steps"):
        assert f'<section id="{anchor}">' in page
    for image in IMAGES:
        match = re.search(rf'<img id="{image}" alt="[^"]*" src="data:image/png;base64,([^"]+)"',
                          page)
        assert match, image
        png = base64.b64decode(match.group(1), validate=True)
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    assert not re.search(r'(src|href)="(?!data:|#)', page), "a resource outside the page"
    assert "<script" not in page
    assert 'id="program-tree"' in page and 'id="compute-sets"' in page


def test_program_tree_and_step_table_name_every_step_once(report_html):
    page = open(report_html).read()
    engine = run_layer(CONFIG).engine
    steps = engine.plan.liveness.steps
    tree = page[page.index('id="program-tree"'):page.index('<section id="steps">')]
    assert sorted(int(k) for k in re.findall(r'class="step">step (\d+)<', tree)) == \
        list(range(len(steps)))
    assert "<summary>repeat 3</summary>" in tree
    table = page[page.index('id="compute-sets"'):]
    rows = re.findall(r"<tr><td>(\d+)</td><td class=\"text\">[^<]*</td><td class=\"text\">"
                      r"[^<]*</td><td>(\d+)</td>", table)
    counts = engine.report.step_counts.tolist()
    assert [(int(k), int(n)) for k, n in rows] == list(enumerate(counts))
    assert max(counts) == 3  # the loop body ran once per time step


def test_memory_views_add_up_and_match_the_liveness():
    engine = run_layer(CONFIG).engine
    plan, liveness = engine.plan, engine.plan.liveness
    views = memory_views(engine)
    assert set(views.by_category) == set(CATEGORIES)
    footprint = engine.footprint
    assert np.array_equal(sum(views.by_category.values()), footprint.total_including_gaps)
    assert all((views.by_category[c] >= 0).all() for c in CATEGORIES)
    assert np.array_equal(views.by_category["tensors (always-live)"] + views.by_category["code"]
                          + views.by_category["vertex state"], footprint.always_live_bytes)
    size = {}
    for v, nbytes in zip(plan.block_variable.tolist(), plan.block_size.tolist()):
        size[v] = size.get(v, 0) + nbytes
    always = sum(size[v] for v in liveness.always_live if v in size)
    assert views.live_always == always
    for step in range(liveness.num_steps):
        held = sum(size.get(v, 0) for v in liveness.not_always_live_at(step))
        assert views.live_total[step] == always + held
    # the busiest tile at the busiest step is the busiest tile's always-live + peak
    assert views.live_max_tile.max() == (plan.always_live_bytes + plan.not_always_live_bytes).max()


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
    assert "x3, " in (tmp_path / "ran.html").read_text()  # ran: the loop body executed 3 times
    code, _, _ = gruc(["viz", "--input", str(tmp_path / "in.gruc"), "--compile-only",
                       "-o", str(tmp_path / "unrun.html")], capsys)
    page = (tmp_path / "unrun.html").read_text()   # a saved module's loops are not counted
    assert code == 0 and "x0, " in page and "x3, " not in page and "none counted" in page
    code, _, _ = gruc(["viz", *SMALL, "--compile-only", "-o", str(tmp_path / "plan.html")], capsys)
    page = (tmp_path / "plan.html").read_text()   # the layer's are, as gruc plan counts them
    assert code == 0 and "x3, " in page and "none counted" not in page


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


# ---- headless Chromium ------------------------------------------------------------------------
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium binary not found (apt-get install chromium)")
def test_report_renders_in_headless_chromium_without_console_errors(report_html, tmp_path):
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000"]
    url = f"file://{report_html}"
    shot = tmp_path / "shot.png"
    run = subprocess.run([*flags, "--enable-logging=stderr", "--v=0", f"--screenshot={shot}", url],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines()
               if "CONSOLE" in line or "Uncaught" in line or "Failed to load resource" in line]
    assert console == []
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[:2] == (1000, 1400)
    assert pixels[..., :3].std() > 0.05  # not a blank page
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for element in [*IMAGES, "program-tree", "compute-sets"]:
        assert f'id="{element}"' in dom.stdout


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
    assert quiet.getvalue() == ""


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
def test_a_report_needing_matplotlib_is_refused_before_the_layer_is_built(argv, tmp_path,
                                                                           monkeypatch, capsys):
    """Issue 42 item 9: where matplotlib is missing (an install without dependencies) the HTML
    report's commands say so at once, not after running the whole layer (88 s on a big one)."""
    def never(config):
        raise AssertionError("the layer was built before matplotlib was looked for")

    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # as if not installed
    for module in ("gruc.cli.viz", "gruc.cli.gru"):
        monkeypatch.setattr(module + ".build_layer", never)
    code, out, err = gruc([part.format(d=tmp_path) for part in argv], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "needs matplotlib, which is not installed: pip install matplotlib" in err
    assert list(tmp_path.iterdir()) == []


def test_the_base_install_brings_matplotlib():
    """The first README command (``pip install -e .``) must bring what ``gruc viz`` and
    ``gruc gru --profile`` need."""
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert any(requirement.startswith("matplotlib")
               for requirement in project["project"]["dependencies"])
