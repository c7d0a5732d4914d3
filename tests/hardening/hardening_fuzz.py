"""Shared settings of the fuzz tests in ``tests/hardening`` (issue #12, item 2).

Why one place: every fuzz test has a small CI budget (all of them together stay under a minute on
a shared 2-core machine) and the same switch to run many more examples.  Set
``GRUC_FUZZ_EXAMPLES=N`` to run ``N`` examples in each fuzz test instead of its CI default, and
add ``--hypothesis-show-statistics`` to see how many ran::

    GRUC_FUZZ_EXAMPLES=2000 python -m pytest -p no:cacheprovider tests/hardening/test_fuzz_*.py \\
        --hypothesis-show-statistics

The settings are per test (``@fuzz_settings(ci=...)``), not a loaded profile, so they never change
the example counts of the rest of the suite.  The CI default is derandomized (see
:func:`fuzz_settings`); a big run explores fresh examples each time.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from gruc.errors import GrucValueError

ENV = "GRUC_FUZZ_EXAMPLES"


def fuzz_examples(ci: int) -> int:
    """``ci`` examples, or the count ``GRUC_FUZZ_EXAMPLES`` asks for."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return ci
    if not raw.isdigit() or int(raw) < 1:
        raise GrucValueError(f"{ENV}={raw!r} must be a whole number of examples >= 1")
    return int(raw)


def fuzz_settings(ci: int) -> settings:
    """Hypothesis settings of one fuzz test: ``ci`` examples by default, no deadline (the kernels
    may compile on first use), and no health check that objects to slow or large inputs.

    The CI default is derandomized: the same examples every run, so a red CI run is reproducible
    and the numba kernels random programs need are compiled once into ``GRUC_CACHE_DIR`` rather
    than on every run.  ``GRUC_FUZZ_EXAMPLES`` runs are random, to explore."""
    return settings(max_examples=fuzz_examples(ci), deadline=None,
                    derandomize=not os.environ.get(ENV, "").strip(),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])
