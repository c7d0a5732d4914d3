"""Shared fixtures and hypothesis settings for the whole suite."""

from __future__ import annotations

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
