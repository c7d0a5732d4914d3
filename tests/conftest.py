"""Shared fixtures and hypothesis settings for the whole suite."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("gruc", deadline=None, print_blob=True)
settings.load_profile("gruc")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1002)
