"""Shared fixtures and hypothesis settings for the whole suite."""

from __future__ import annotations

import signal
from typing import Callable

import numpy as np
import pytest
from hypothesis import settings

# CI draws the same examples on every run (a red run is reproducible, and the numba kernels the
# examples need are compiled once into GRUC_CACHE_DIR, not on every run);
# ``--hypothesis-profile=explore`` draws fresh ones, to hunt for bugs.
settings.register_profile("gruc", deadline=None, print_blob=True, derandomize=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile("gruc")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1002)


def _default_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def hears_ctrl_c() -> Callable[[], None]:
    """A ``preexec_fn`` giving a child about to be sent Ctrl-C SIGINT's default action, as a
    terminal does.  A shell that starts the suite in the background without job control
    (``pytest &`` in a script) leaves SIGINT ignored; every child inherits that, Python then
    installs no KeyboardInterrupt handler, and the child never hears the test's Ctrl-C."""
    return _default_ctrl_c
