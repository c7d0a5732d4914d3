"""Screenshots of each view of the report page, for docs/report.md and the README.

Builds the default layer of ``gruc viz`` (S=20 B=8 I=H=64 float on an ipu2), runs it, writes its
page, and photographs each view in headless Chromium (``gruc.runtime.browser``: Debian's
``chromium`` and ``chromium-driver``) as a reader would see it: the tile page opened on the
busiest tile, liveness with a step hovered, the program tree with a step clicked, the trace
zoomed into its first supersteps; then the comparison of that layer's report with the same layer
at batch 16.  Run from the repository's root: ``python docs/make_screenshots.py`` (about a
minute); the PNGs land in ``docs/`` (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gruc.cli.gru import layer_title
from gruc.plan.layer import plan_layer
from gruc.tools.gru_layer import GruLayerConfig, run_layer
from gruc.runtime.browser import chromium, console_errors, open_page
from gruc.runtime.compare import compare_html
from gruc.files import write_text_atomically

VIEWS = ("memory", "tile-map", "tile-page", "liveness", "program", "trace")


def _hover(driver, chart: str, x: float) -> None:
    """Put the mouse on step (or tile) ``x`` of a plotly chart, at half its height."""
    from selenium.webdriver.common.action_chains import ActionChains

    element = driver.find_element("id", chart)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    px, py = driver.execute_script(
        "const L = arguments[0]._fullLayout;"
        "return [L.xaxis._offset + L.xaxis.l2p(arguments[1]),"
        "        L.yaxis._offset + L.yaxis._length / 2];", element, x)
    size = element.size
    ActionChains(driver).move_to_element_with_offset(
        element, int(px - size["width"] / 2), int(py - size["height"] / 2)).perform()
    time.sleep(0.5)


def _save(element, path: Path) -> None:
    """A PNG of ``element`` (selenium says failure by returning False, not by raising)."""
    if not element.screenshot(str(path)):
        raise SystemExit(f"could not write {path}")


def shoot(page: Path, compare: Path, out: Path) -> list[Path]:
    """Photograph each view of ``page`` and the ``compare`` page into ``out``."""
    written = []
    with chromium(1400, 2400) as driver:
        open_page(driver, page)
        driver.execute_script("document.querySelector('header').style.position = 'static'")
        busiest = driver.execute_script(
            "const D = JSON.parse(document.getElementById('gruc-data').textContent);"
            "return D.total.indexOf(Math.max(...D.total));")
        driver.execute_script(f"document.querySelector('[data-tile=\"{busiest}\"]').click()")
        _hover(driver, "tile-page-liveness", driver.execute_script(
            "return JSON.parse(document.getElementById('gruc-data').textContent)"
            f".peakStep[{busiest}]"))
        driver.execute_script("document.querySelector('a.step-link[data-step=\"6\"]').click()")
        driver.execute_script(
            "const gd = document.getElementById('trace-chart');"
            "Plotly.relayout(gd, {'xaxis.range': [0, gd.layout.xaxis.range[1] / 12]});")
        _hover(driver, "liveness-chart", 6)
        for view in VIEWS:
            element = driver.find_element("id", view)
            driver.execute_script("arguments[0].scrollIntoView()", element)
            time.sleep(0.3)
            path = out / f"report-{view}.png"
            _save(element, path)
            written.append(path)
        errors = console_errors(driver)
        open_page(driver, compare)
        path = out / "report-compare.png"
        _save(driver.find_element("tag name", "body"), path)
        written.append(path)
        errors += console_errors(driver)
    if errors:
        raise SystemExit(f"the pages logged errors: {errors}")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(Path(__file__).parent), help="directory of PNGs")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = GruLayerConfig()
    engine = run_layer(config).engine
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        page = work / "report.html"
        engine.report.to_html(page, layer_title(config))
        wider = plan_layer(GruLayerConfig(batch_size=16)).report.to_dict()
        write_text_atomically(work / "compare.html", compare_html(
            engine.report.to_dict(), wider, ("B=8", "B=16")))
        for path in shoot(page, work / "compare.html", out):
            print(path)


if __name__ == "__main__":
    main()
