"""``--find-max FLAG``: the largest value of one integer layer flag that still fits in tile memory.

Any kind of layer a study plans can be searched (:data:`~gruc.plan.layers.PLANNED_LAYERS`: each
names its searchable flags, e.g. the batch size of a GRU or fully connected layer, gemm's ``m``).

Why a search and not a scan: the answer can be in the thousands (a batch size on an ipu2) and a
plan costs up to seconds, so the value is bracketed by doubling from the start value (the flag's
fixed value, else 1) until a plan does not fit — or, from a start that does not fit, by halving
until one does — then pinned down between the two, probing where the busiest tile's bytes,
interpolated, reach its capacity, and bisecting where that does not narrow the bracket fast
enough: at most about ``4 log2(answer)`` plans, often ``log2(answer) + 6``.  Fitting is nearly
monotone in a layer's sizes at a fixed shard count, not exactly: as a size grows the tile split
of a product or a sequence changes, so the busiest tile's bytes can dip and a value a little past
a boundary may fit again (batch 752 fits where 751 does not, 16 tiles, 64×64).  So the search
also plans the :data:`LOOK_PAST` values past the boundary it finds and goes on from any that
fits: the answer fits and the next ``LOOK_PAST`` values do not.  A value fitting further past
would take a scan to find.  With poplibs' shard heuristic
(no ``--shards``) a longer sequence may get more shards and fit again, so fix ``--shards`` when
searching the sequence length.  A flag where more is better (tiles per IPU)
just runs to the ``limit``.  A value gruc refuses (a configuration error, or more shards than
the target has room for) counts as not fitting, and the result says why — except below every
value it accepts: a search of the sequence length with ``--shards 5`` starts at 1, which is too
short for 5 shards, so it steps up to the first length gruc accepts.

Every plan the search makes is a row in the output directory like a sweep's (resumable the same
way); each point of the grid of the *other* swept flags gets its own search, and the points are
searched side by side on a sweep's executors (``--jobs``, ``--scheduler``): a list of a float or
categorical knob (``--available-memory-proportion 0.6,0.1``, ``--partials-type half,float``,
``--code-reuse 0,1``, ``--recomputation-mode none,full``, ``--shards``, ``--ipus``) is such a
grid, one search per value.  Flags tied
to the searched one follow it, and a flag in a fixed product with it is derived from it; the
search then moves over the divisors of the product only (:mod:`gruc.plan.derived`).  Where a
search met a value that does not fit between two that do, :attr:`FindMaxResult.non_monotone`
says so (``fits at 4555 and 4557, not 4556``).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from typing import Any, Callable

from gruc.errors import GrucValueError
from gruc.plan.executors import SerialExecutor, make_executor
from gruc.plan.derived import Derivation, flag_of
from gruc.plan.grid import SweepSpec, check_spec
from gruc.plan.layers import config_key, plan_row, planned_layer
from gruc.plan.rows import RowStore
from gruc.plan.sweep import open_study
from gruc.status import StatusLine
from gruc.text import plural

DEFAULT_LIMIT = 1 << 20
"""Largest value the search tries unless told otherwise."""

LOOK_PAST = 3
"""Values past a boundary the search plans too: fitting dips a little past some boundaries (see
the module), and a value among these that fits sends the search on from there."""


@dataclass
class FindMaxResult:
    """The outcome of one search: ``value`` fits and ``value + 1`` does not."""

    flag: str
    point: dict[str, Any]
    """The values of the other swept flags at this grid point."""
    value: int | None
    """Largest fitting value (None: not even the start value fits)."""
    fitting: dict[str, Any] | None
    """Row of ``value``."""
    failing: dict[str, Any] | None
    """Row of ``value + 1``; None if ``value`` is the limit.  If nothing fits, the row of the
    smallest value gruc accepts (over capacity), or of the last value it refused."""
    probes: list[dict[str, Any]]
    """Every row the search looked at (planned now or found in the output directory), by value;
    values gruc refused as configurations are left out."""
    domain: tuple[int, ...] | None = None
    """The values the search could take (the divisors of a fixed product), None: every
    integer."""

    @property
    def non_monotone(self) -> list[str]:
        """The probed values that did not fit between two that did, each as ``fits at a and c,
        not b`` (several in a row: ``not b1, b2``): where fitting is not monotone in the flag,
        so a value past the answer might fit again (values gruc refused are not counted)."""
        planned = [(row[self.flag], _fits(row)) for row in self.probes if not _refused(row)]
        notes, gap, below = [], [], None
        for value, fits in planned:
            if fits:
                if gap and below is not None:
                    notes.append(f"fits at {below} and {value}, not "
                                 + ", ".join(map(str, gap)))
                gap, below = [], value
            elif below is not None:
                gap.append(value)
        return notes

    def describe(self) -> str:
        """The result in one line: the largest value that fits and its busiest tile, then why the
        next value does not (gruc's refusal, or the first tile over capacity and its largest
        tensors), or that nothing fits, or that the limit still fits."""
        where = "".join(f" {k}={v}" for k, v in self.point.items())
        if self.value is None and self.failing.get("error"):
            return (f"{self.flag}{where}: nothing fits: gruc refuses every value tried, up to "
                    f"{self.failing[self.flag]}: {self.failing['error']}")
        if self.value is None:
            head = f"{self.flag}{where}: nothing fits"
        else:
            head = (f"{self.flag}{where}: largest that fits = {self.value} "
                    f"(max tile {self.fitting['max_tile_bytes']} B of "
                    f"{self.fitting['bytes_per_tile']} B)")
        if self.failing is None:
            return f"{head}; still fits at the search limit"
        failing = self.failing
        at = f"at {failing[self.flag]}" if self.flag in failing else "past it"
        if failing.get("error"):
            return f"{head}; {at}: {failing['error']}"
        return (f"{head}; {at}: tile {failing['first_overflow_tile']} needs "
                f"{failing['first_overflow_bytes']} B of {failing['bytes_per_tile']} B (largest "
                f"tensors there: {failing['first_overflow_tensors']}); "
                f"{plural(failing['tiles_over_capacity'], 'tile')} over capacity")


def _fits(row: dict[str, Any]) -> bool:
    return row.get("fits") is True


def _refused(row: dict[str, Any]) -> bool:
    """gruc refused the configuration: it has no plan, fitting or not."""
    return bool(row.get("error"))


def _crossing(good: int, bad: int, good_row: dict[str, Any], bad_row: dict[str, Any]
              ) -> int | None:
    """Where the busiest tile's bytes, taken as linear between two planned values, reach the
    tile's capacity: the largest value that should still fit, strictly between ``good`` and
    ``bad``; None when the rows do not tell (a refused value, bytes that did not grow)."""
    low, high = good_row.get("max_tile_bytes"), bad_row.get("max_tile_bytes")
    capacity = bad_row.get("bytes_per_tile")
    if low is None or high is None or capacity is None or high <= low:
        return None
    value = good + (capacity - low) * (bad - good) // (high - low)
    return min(max(value, good + 1), bad - 1)


def _bracket(evaluate: Callable[[int], dict[str, Any]], start: int, limit: int
             ) -> tuple[int | None, int | None]:
    """``(largest fitting, smallest failing)`` with failing = fitting + 1 (None for absent).

    A start gruc refuses (a sequence shorter than the fixed shard count needs) is stepped over
    by doubling, up to the first value it accepts: refused values there are a floor, not values
    that do not fit.  From a start that fits, doubles up to the first value that does not; from
    one that does not, halves down toward the floor to the first value that does (a start above
    the answer is a guess, not a floor).  Then it narrows the bracket, probing where the busiest
    tile's bytes, interpolated between its ends, reach capacity (they grow nearly in proportion
    to a layer's sizes, so the answer is often a probe or two away), and bisecting when two
    probes in a row did not halve the bracket: never more than three times the probes of plain
    bisection.  Nothing fitting gives ``(None, the smallest accepted value)``, or ``(None, the
    limit)`` when every value tried was refused.
    """
    floor = 0  # the largest value known to be refused below every accepted one
    while _refused(evaluate(start)):
        if start >= limit:
            return None, start
        floor, start = start, min(2 * start, limit)
    if _fits(evaluate(start)):
        good, bad = _double_up(evaluate, start, limit)
        if bad is None:
            return good, None
    else:
        good, bad = None, start
        while good is None:  # exponential: halve toward the floor until a plan fits
            if bad - floor == 1:
                return None, bad
            probe = (floor + bad) // 2
            row = evaluate(probe)
            if _fits(row):
                good = probe
            elif _refused(row):
                floor = probe
            else:
                bad = probe
    while True:
        good, bad = _narrow(evaluate, good, bad)
        refit = next((value for value in range(bad + 1, min(bad + LOOK_PAST, limit) + 1)
                      if _fits(evaluate(value))), None)
        if refit is None:
            return good, bad
        good, bad = _double_up(evaluate, refit, limit)
        if bad is None:
            return good, None


def _double_up(evaluate: Callable[[int], dict[str, Any]], good: int, limit: int
               ) -> tuple[int, int | None]:
    """From a fitting ``good``, double until a plan does not fit: ``(largest fitting value seen,
    the first that did not)``, with None where the limit still fits."""
    while True:
        if good >= limit:
            return good, None
        probe = min(2 * good, limit)
        if not _fits(evaluate(probe)):
            return good, probe
        good = probe


def _narrow(evaluate: Callable[[int], dict[str, Any]], good: int, bad: int) -> tuple[int, int]:
    """Narrow a bracket (``good`` fits, ``bad`` does not) to neighbours, probing where the
    interpolated bytes reach capacity and bisecting when two probes in a row did not halve it."""
    halved_at, since = bad - good, 0  # the width last halved to, and probes since then
    while bad - good > 1:  # keep good fitting and bad failing
        guess = _crossing(good, bad, evaluate(good), evaluate(bad)) if since < 2 else None
        probe = guess if guess is not None else (good + bad) // 2
        if _fits(evaluate(probe)):
            good = probe
        else:
            bad = probe
        since += 1
        if 2 * (bad - good) <= halved_at:
            halved_at, since = bad - good, 0
    return good, bad


def find_max(spec: SweepSpec, flag: str, out: str | os.PathLike, *, limit: int = DEFAULT_LIMIT,
             executor: Any = None, progress: bool | None = None) -> list[FindMaxResult]:
    """For each point of ``spec``'s grid, the largest value of ``flag`` that fits (see module).

    One point is searched in this process, each plan stored as it is made.  Several points are
    searched side by side on ``executor`` (:mod:`gruc.plan.executors`; default: a local process
    pool, closed on return), each search's rows stored when it ends: a search is a chain of
    plans, each waiting for the last, so the points are what runs in parallel.
    """
    check_spec(spec, "find_max")
    kind = spec.kind
    if flag not in kind.searchable:
        raise GrucValueError(f"cannot search flag {flag!r}; searchable flags of {kind.name} "
                             f"layers: {', '.join(kind.searchable)}")
    if flag in spec.swept:
        raise GrucValueError(f"{flag!r} is both searched and swept; give it one start value or "
                             "none")
    if spec.searched not in (None, flag):
        raise GrucValueError(f"the spec searches {spec.searched!r}, not {flag!r}")
    spec = spec.but(searched=flag)
    start = spec.fixed.get(flag)
    start = 1 if start is None else start
    try:  # a start value no layer may have is a bad input, not a search that finds nothing
        kind.model(**{**kind.required, flag: start})
    except GrucValueError as error:
        raise GrucValueError(f"find-max {flag} cannot start at {start!r}: {error}") from None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < start:
        raise GrucValueError(f"find-max limit {limit!r} must be an integer >= the start value "
                             f"{start}")
    derivation = spec.derivation
    domain = derivation.domain(flag, start, limit)
    if domain is not None:
        if not domain:
            raise GrucValueError(f"find-max {flag_of(flag)}: no divisor of its fixed product "
                                 f"lies between the start {start} and the limit {limit}")
        start = domain[0]
    points = _points(spec, flag, start)
    search = functools.partial(search_task, flag=flag, start=start, limit=limit,
                               swept=(*spec.parameters, flag, *spec.derived),
                               pipeline=spec.pipeline, layer=spec.layer, derivation=derivation)
    varying = (flag, *spec.derived)
    with open_study(out, spec) as store:  # closing writes the files: in step even when interrupted
        known = _known_rows(store, varying)
        items = [{"config": config.model_dump(),
                  "known": known.get(_without(config_key(config, spec.pipeline), varying), {})}
                 for config in points]
        if len(points) == 1 or isinstance(executor, SerialExecutor):
            # in this process: every probe's row is stored as it is planned, so a study killed
            # in a search (a plan too big for the host) resumes from its probes, not from nothing
            searched = [_search_here(search, item, flag, store, progress) for item in items]
        else:
            searched = _search_on(executor, search, items, store, progress)
        results = []
        for config, (good, bad, seen) in zip(points, searched):
            point = {name: getattr(config, name) for name in spec.parameters}
            probes = [seen[v] for v in sorted(seen) if "config" in seen[v]]
            results.append(FindMaxResult(flag, point, good, None if good is None else seen[good],
                                         None if bad is None else seen[bad], probes, domain))
        # the files list each point's plans by value, the points in grid order
        store.arrange([row["config"] for result in results for row in result.probes])
    return results


def _points(spec: SweepSpec, flag: str, start: int) -> list[Any]:
    """The configurations of the other flags' grid, checked with ``flag`` at the start value
    (per-row lengths must match the batch size given, not the default) — or, where the start is
    refused (lengths longer than a first sequence of 1 step), at ``flag``'s default: the search
    steps over values refused at the start.  Neither valid: the error at the start is the one to
    read."""
    others = {k: v for k, v in spec.fixed.items() if k != flag}
    try:
        return spec.but(fixed={**others, flag: start}).configs()
    except GrucValueError as at_start:
        try:
            return spec.but(fixed=others).configs()
        except GrucValueError:
            raise at_start from None


Searched = tuple[int | None, int | None, dict[int, dict[str, Any]]]
"""A search's ``(largest fitting, smallest failing, row of every value it looked at)``."""


def search_task(item: dict[str, Any], *, flag: str, start: int, limit: int,
                swept: tuple[str, ...], pipeline: str | None, layer: str = "gru",
                derivation: Derivation = Derivation(),
                planned: Callable[[dict[str, Any]], None] | None = None) -> Searched:
    """One grid point's search (top level, so worker processes can unpickle it): ``item`` holds
    the point's configuration (of the kind ``layer``) and the rows already stored for it
    (``known``, by key); ``derivation`` sets the flags that follow ``flag``, and where ``flag``
    drives a fixed product the search moves over its divisors only.  Each row planned now is
    passed to ``planned``, if given."""
    config, known = planned_layer(layer).model(**item["config"]), item["known"]
    seen: dict[int, dict[str, Any]] = {}

    def evaluate(value: int) -> dict[str, Any]:
        if value not in seen:
            seen[value] = _row_of(config, flag, value, swept, pipeline, known, derivation)
            if planned is not None and seen[value].get("config") not in known:
                planned(seen[value])
        return seen[value]

    domain = derivation.domain(flag, start, limit)
    if domain is None:
        return (*_bracket(evaluate, start, limit), seen)
    good, bad = _bracket(lambda position: evaluate(domain[position - 1]), 1, len(domain))
    return (None if good is None else domain[good - 1], None if bad is None else domain[bad - 1],
            seen)


def _search_here(search: Callable[..., Searched], item: dict[str, Any], flag: str,
                 store: RowStore, progress: bool | None) -> Searched:
    """``search`` of ``item`` in this process, each new row stored the moment it is planned."""
    bar = StatusLine(enabled=progress, unit="plan")  # how many plans is not known in advance
    plans = 0

    def planned(row: dict[str, Any]) -> None:
        nonlocal plans
        if "config" in row:
            store.add(row)
        plans += 1
        bar.progress(plans, None, f"{flag}={row[flag]}")

    try:
        return search(item, planned=planned)
    finally:
        bar.close()


def _search_on(executor: Any, search: Callable[..., Searched], items: list[dict[str, Any]],
               store: RowStore, progress: bool | None) -> list[Searched]:
    """``search`` of every item on ``executor``, each search's new rows stored as it ends."""
    own = executor is None
    executor = make_executor() if own else executor
    bar = StatusLine(enabled=progress, unit="search")
    found: list[Searched | None] = [None] * len(items)
    try:
        for done, (index, searched) in enumerate(executor.map_unordered(search, items), start=1):
            for row in searched[2].values():
                if "config" in row and row["config"] not in store:
                    store.add(row)
            found[index] = searched
            bar.progress(done, len(items))
    finally:
        bar.close()
        if own:
            executor.close()
    return found


def _without(key: str, names: tuple[str, ...]) -> str:
    """A row key with the flags ``names`` left out: what the rows of one search point share
    (the searched flag and those derived from it vary along the search)."""
    flags = json.loads(key)
    for name in names:
        flags.pop(name, None)
    return json.dumps(flags, sort_keys=True)


def _known_rows(store: RowStore, names: tuple[str, ...]) -> dict[str, dict[str, dict[str, Any]]]:
    """The stored rows by search point (their key without ``names``), then by key: what a
    search of that point need not plan again."""
    known: dict[str, dict[str, dict[str, Any]]] = {}
    for row in store.rows:
        known.setdefault(_without(row["config"], names), {})[row["config"]] = row
    return known


def _row_of(base: Any, flag: str, value: int, swept: tuple[str, ...],
            pipeline: str | None, known: dict[str, dict[str, Any]],
            derivation: Derivation = Derivation()) -> dict[str, Any]:
    """The row of ``base`` with ``flag = value`` (and the flags derived from it): a known one,
    else planned now."""
    try:
        flags = derivation.apply({**base.model_dump(), flag: value})
        config = type(base)(**flags)
    except GrucValueError as error:
        return {flag: value, "fits": None, "error": f"{type(error).__name__}: {error}"}
    key = config_key(config, pipeline)
    return known[key] if key in known else plan_row(config, swept, pipeline)
