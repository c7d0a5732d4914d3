"""The report page in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by selenium; ``.ci/run`` installs them): it loads with no console error and no network
request, a click on the busiest tile of the tile map opens that tile's page listing its largest
variable, hovering a step shows its live bytes, and the comparison of two reports shows a known
difference.  Expected values come from the engine, not from the page's own data."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from gruc.cli import main
from gruc.tools.gru_layer import GruLayerConfig, run_layer
from gruc.runtime.browser import (browser_paths, chromium, console_errors, network_requests,
                                  open_page)
from cli_helpers import SIZES, SMALL, batch_reports

pytestmark = pytest.mark.skipif(browser_paths() is None, reason="selenium, chromium and "
                                "chromium-driver are not all installed (.ci/run installs them)")

CONFIG = GruLayerConfig(sequence_size=3, input_size=8, output_size=8, batch_size=2,
                        tiles_per_ipu=16, backend="numpy")
IPU2 = GruLayerConfig(sequence_size=3, input_size=8, output_size=8, batch_size=2,
                      backend="numpy")
"""``SIZES`` on a whole ipu2 (1,472 tiles: a 32 x 46 tile map)."""


@pytest.fixture(scope="module")
def browser():
    with chromium(1400, 1000) as driver:
        yield driver


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("pages")
    paths = {"small": str(directory / "small.html"), "ipu2": str(directory / "ipu2.html")}
    assert main(["viz", *SMALL, "-o", paths["small"]]) == 0
    assert main(["viz", *SIZES, "--backend", "numpy", "-o", paths["ipu2"]]) == 0
    return paths


def _point(driver, chart: str, x: float, y: float | None) -> None:
    """Move the mouse to data point (x, y) of plotly chart ``chart`` (y None: the plot's middle
    height), the chart scrolled to the middle of the window (the sticky header covers its top)."""
    from selenium.webdriver.common.action_chains import ActionChains

    element = driver.find_element("id", chart)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    px, py = driver.execute_script(
        "const L = arguments[0]._fullLayout, xa = L.xaxis, ya = L.yaxis;"
        "return [xa._offset + xa.l2p(arguments[1]),"
        "        arguments[2] === null ? ya._offset + ya._length / 2"
        "                              : ya._offset + ya.l2p(arguments[2])];", element, x, y)
    size = element.size
    ActionChains(driver).move_to_element_with_offset(
        element, int(px - size["width"] / 2), int(py - size["height"] / 2)).perform()


def _wait_for(condition, timeout: float = 20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("the page did not answer in time")


@pytest.mark.parametrize("name", ["small", "ipu2"])
def test_page_loads_without_console_errors_or_network_requests(browser, pages, name):
    console_errors(browser), network_requests(browser)  # what came before is not the page's
    start = time.monotonic()
    open_page(browser, pages[name])
    seconds = time.monotonic() - start
    assert console_errors(browser) == []
    assert network_requests(browser) == []
    assert seconds < 30, f"{name}: {seconds:.1f} s to open"
    drawn = browser.execute_script(
        "return ['memory-chart', 'tile-heatmap', 'liveness-chart', 'tile-liveness-chart',"
        " 'steps-chart', 'tile-cycles-chart', 'trace-chart']"
        ".filter((id) => document.getElementById(id).querySelector('.main-svg'))")
    assert len(drawn) == 7, drawn
    tree_steps = browser.execute_script(
        "return document.querySelectorAll('#program-tree a.step-link').length")
    assert tree_steps == len(json.loads(browser.execute_script(
        "return document.getElementById('gruc-data').textContent"))["steps"])


def test_a_click_on_the_busiest_tile_opens_its_page_with_its_largest_variable(browser, pages):
    engine = run_layer(IPU2).engine
    total = engine.footprint.total_including_gaps
    tile = int(np.argmax(total))
    blocks = engine.plan.tile_blocks(tile)
    nbytes = max(b[2] for b in blocks)
    largest = {b[0] for b in blocks if b[2] == nbytes}  # a tie may list either first
    open_page(browser, pages["ipu2"])
    row, column = divmod(tile, 46)  # an ipu2's 1,472 tiles: 32 rows of 46
    _point(browser, "tile-heatmap", column, row)
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).click().perform()  # where the mouse is
    title = _wait_for(lambda: browser.find_element("id", "tile-title").text)
    assert title == f"Tile {tile}"
    first = browser.find_element("css selector", "#tile-variable-table tbody tr")
    cells = [cell.text for cell in first.find_elements("tag name", "td")]
    assert cells[0] in largest and cells[2] == f"{nbytes:,}"
    assert browser.execute_script("return location.hash") == f"#tile={tile}"
    assert browser.find_element("css selector", "#tile-memory-map .main-svg")
    assert console_errors(browser) == []


def test_hovering_a_step_shows_its_live_bytes(browser, pages):
    engine = run_layer(CONFIG).engine
    plan, liveness = engine.plan, engine.plan.liveness
    size: dict[int, int] = {}
    for v, nbytes in zip(plan.block_variable.tolist(), plan.block_size.tolist()):
        size[v] = size.get(v, 0) + nbytes
    step = int(np.argmax([len(liveness.not_always_live_at(s)) for s in range(liveness.num_steps)]))
    live = sum(size.get(v, 0) for v in liveness.live_at(step))
    open_page(browser, pages["small"])
    _point(browser, "liveness-chart", step, None)
    text = _wait_for(lambda: (lambda t: t if f"step {step} " in t else "")(
        browser.find_element("id", "liveness-info").text))
    assert f"{live:,} B" in text
    largest = max((v for v in liveness.not_always_live_at(step) if v in size), key=size.get)
    assert engine.module.graph.variables[largest].name in text


def test_the_comparison_of_two_reports_shows_a_known_difference(browser, tmp_path):
    paths = batch_reports(tmp_path)
    assert main(["viz", "--compare", *paths, "-o", str(tmp_path / "compare.html")]) == 0
    a, b = (json.load(open(path)) for path in paths)
    before = next(v["bytes"] for v in a["variables"] if v["name"] == "gru/output")
    after = next(v["bytes"] for v in b["variables"] if v["name"] == "gru/output")
    console_errors(browser), network_requests(browser)
    open_page(browser, tmp_path / "compare.html")
    assert console_errors(browser) == [] and network_requests(browser) == []
    rows = browser.find_elements("css selector", "#compare-variables tbody tr")
    cells = next([c.text for c in row.find_elements("tag name", "td")] for row in rows
                 if row.find_element("tag name", "td").text == "gru/output")
    assert cells[1].startswith("resized") and cells[2:5] == [
        f"{before:,}", f"{after:,}", f"{after - before:+,}"]
    for chart in ("compare-categories-chart", "compare-tiles-chart", "compare-tile-map"):
        assert browser.find_element("css selector", f"#{chart} .main-svg")
