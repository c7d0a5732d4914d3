"""Headless Chromium, driven by selenium: how the report page is tested and photographed.

Why a real browser: the page is mostly the browser's work (plotly draws it, ``page.js`` answers
clicks and hovers), so only a browser can say that it loads without errors, makes no network
request, and opens a tile's page on a click.  Debian's ``chromium`` and ``chromium-driver`` are
used as installed (``.ci/run`` installs them): selenium is given both paths, so its own manager
never looks for, or downloads, a browser.  Every launch gets a fresh profile and the flags that
keep Chromium from calling home (no background networking, component updates or sync), so a
network request seen by a test is the page's own.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from gruc.errors import GrucValueError

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-dev-shm-usage", "--disable-default-apps", "--disable-extensions")


def browser_paths() -> tuple[str, str] | None:
    """``(chromium, chromedriver)`` when both are installed and selenium imports, else None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return None
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator:
    """A selenium WebDriver of headless Chromium with a fresh profile, logging the browser's
    console and its network events (read them with :func:`console_errors` and
    :func:`network_requests`); quit and its profile removed on exit."""
    paths = browser_paths()
    if paths is None:
        raise GrucValueError("headless Chromium needs selenium, chromium and chromium-driver: "
                             "pip install selenium; apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="gruc-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=paths[1]))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def open_page(driver, path: str | Path, timeout: float = 60) -> None:
    """Load the page at ``path`` and wait until its script has drawn everything
    (``body[data-ready]``) — or, for a page without one, until the document is complete."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(Path(path).resolve().as_uri())
    WebDriverWait(driver, timeout).until(
        lambda d: d.execute_script("return document.readyState") == "complete")
    if driver.execute_script("return !!document.getElementById('gruc-data')"):
        WebDriverWait(driver, timeout).until(
            lambda d: d.execute_script("return document.body.dataset.ready === '1'"))


def console_errors(driver) -> list[str]:
    """The browser console's warnings and errors since the last call."""
    return [entry["message"] for entry in driver.get_log("browser")
            if entry["level"] in ("SEVERE", "WARNING")]


LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:", "chrome:", "chrome-extension:")
"""URL schemes that never leave the machine: the page itself, its inline data, and Chromium's
own pages (its start page loads ``chrome://`` resources before the page is opened)."""


def network_requests(driver) -> list[str]:
    """URLs requested since the last call that would leave the machine (any scheme but
    :data:`LOCAL_SCHEMES`)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            url = message["params"]["request"]["url"]
            if not url.startswith(LOCAL_SCHEMES):
                urls.append(url)
    return urls
