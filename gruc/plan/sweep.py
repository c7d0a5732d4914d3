"""Run a planning sweep: every configuration of a grid planned once, rows stored as they finish.

:func:`run_sweep` skips the configurations whose rows the output directory already holds (a
re-run of an interrupted sweep computes only what is missing), sends the rest to an executor
(:mod:`gruc.plan.executors`) and stores each row the moment it arrives (:mod:`gruc.plan.rows`).
A study's directory may hold rows of several kinds of layer (each row's key names its kind);
once it does, every row gets a ``layer`` parameter column (:func:`open_study`).
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from typing import Any

from gruc.plan.executors import make_executor
from gruc.plan.grid import SweepSpec, check_spec
from gruc.plan.layers import config_key, planned_layer, row_layer, row_problem, upgrade_row
from gruc.plan.rows import RowStore
from gruc.status import StatusLine


def plan_task(config: dict[str, Any], swept: tuple[str, ...], pipeline: str | None,
              layer: str = "gru") -> dict[str, Any]:
    """One sweep task (top level, so worker processes can unpickle it): the row of ``config``,
    a configuration of the kind ``layer``."""
    kind = planned_layer(layer)
    return kind.plan_row(kind.model(**config), swept, pipeline)


def open_study(out: str | os.PathLike, spec: SweepSpec) -> RowStore:
    """The rows of the study in ``out``, for a sweep or search of ``spec`` (rows an older gruc
    wrote brought up to date, every row checked); rows of another kind of layer there make
    ``layer`` a parameter column of every row, so the table says which row is which."""
    store = RowStore(out, check_row=row_problem, upgrade_row=upgrade_row)
    if any(row_layer(row) != spec.layer for row in store.rows):
        store.declare_parameters(("layer",))
    return store


@dataclass
class SweepResult:
    """What a sweep produced: its rows in grid order and what it had to compute."""

    rows: list[dict[str, Any]]
    computed: int
    skipped: int
    seconds: float
    store: RowStore
    skipped_configs: tuple[str, ...] = ()
    """Why each combination a fixed product does not divide has no row."""

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [row for row in self.rows if row.get("error")]

    @property
    def configs_per_minute(self) -> float:
        return 60.0 * self.computed / self.seconds if self.seconds > 0 else 0.0


def run_sweep(spec: SweepSpec, out: str | os.PathLike, *, executor: Any = None,
              progress: bool | None = None) -> SweepResult:
    """Plan every configuration of ``spec`` not yet in ``out``, storing rows as they finish.

    ``executor``: see :mod:`gruc.plan.executors` (default: a local process pool, closed on
    return); ``progress``: force the progress bar on or off (default: on when stderr is a
    terminal).
    """
    check_spec(spec, "run_sweep")
    start = time.perf_counter()
    configs, not_multiples = spec.grid()
    parameters = (*spec.parameters, *spec.derived)
    keys = [config_key(c, spec.pipeline) for c in configs]
    with open_study(out, spec) as store:  # closing writes the files: in step even when interrupted
        store.declare_parameters(parameters)  # rows other grids left get these columns
        first = {key: k for k, key in reversed(list(enumerate(keys)))}  # a repeat runs once
        todo = [k for key, k in sorted(first.items(), key=lambda item: item[1])
                if key not in store]
        skipped = len(first) - len(todo)
        own = executor is None
        executor = make_executor() if own else executor
        bar = StatusLine(enabled=progress)
        bar.progress(skipped, len(first), "(resumed)" if skipped else "")
        task = functools.partial(plan_task, swept=parameters, pipeline=spec.pipeline,
                                 layer=spec.layer)
        try:
            items = [configs[k].model_dump() for k in todo]
            for done, (_, row) in enumerate(executor.map_unordered(task, items), start=1):
                store.add(row)
                bar.progress(skipped + done, len(first))
        finally:
            bar.close()
            if own:
                executor.close()
        store.arrange(keys)
    return SweepResult([store.get(key) for key in keys], len(todo), skipped,
                       time.perf_counter() - start, store, tuple(not_multiples))
