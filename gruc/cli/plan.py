"""``gruc plan [LAYER]``: tile-memory planning studies, plan-only (nothing is run).

LAYER picks what is planned: gru, the GRU layer of ``gruc gru`` (the default: ``gruc plan
--batch-size 4`` is ``gruc plan gru --batch-size 4``); fc, the fully connected layer of ``gruc
fc``; or gemm, the general matrix multiply of ``gruc gemm``.  ``gruc plan LAYER --help`` lists the
layer's flags.

Every flag of the layer's command that shapes the plan takes one value, a list (``--batch-size
1,4,16``) or an inclusive range (``--output-size 128:1024:128`` is 128, 256, ..., 1024); the GRU
layer's ``--cell-order`` and ``--variable-time-steps`` separate alternatives with ``/``.  fc and
gemm take their matmul options as flags too, so they sweep like any other
(``--available-memory-proportion 0.1,0.3,0.6 --partials-type half,float``); ``--matmul-options``,
JSON as ``gruc fc`` takes it, gives them one value each.  Flags that only change a run or its
check (backend, seed, tolerances; ignore-data for fc and gemm) are not plan flags.  The cross
product is planned, one row per configuration in ``OUT/rows.csv`` and ``OUT/rows.json``, written
as rows finish; running the same command again skips the rows already there; rows of several
layers may share one OUT.  ``--find-max FLAG`` searches the largest value of FLAG that still fits
instead, once per point of the grid of the flags swept (``--available-memory-proportion 0.6,0.1``
makes two searches), and ends with a table of the answers: one line per point with its cycles,
max tile memory and any value that did not fit between two that did.

Relations between flags (``gruc.plan.derived``): ``--tie A=B`` makes flag B take flag A's value
in every configuration (``--tie input-size=output-size``: I = H; the flag ``--find-max``
searches drives the others, either side of the tie); ``--fixed-product A*B=N`` derives the
factor not given from the one given, swept or searched (``--fixed-product
batch-size*sequence-size=1600 --find-max batch-size`` searches the divisors of 1600; values that
do not divide are skipped, and a sweep says which).

``--pareto`` prints the rows no other beats on every axis (default: the size planned — the
searched flag, else ``flops`` — up, ``cycles_total`` down; ``--pareto-axes`` chooses others)
among those that fit, and writes them to ``OUT/pareto.csv``.  Rows carry each plan's host CPU
seconds and peak resident memory, and its use of the IPU: FLOPs per cycle against the target's
AMP peak (``utilisation``) and the exchange and sync shares of the cycles, by phase (fwd, bwd,
wu) for GRU layers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gruc.cli import fc as fc_command
from gruc.cli import gemm as gemm_command
from gruc.cli.gru import FLAGS as GRU_FLAGS
from gruc.cli.gru import flag_help
from gruc.cli.opt import output_directory
from gruc.cli.products import (COMMON_FLAGS, MATMUL_FLAGS, MATMUL_OPTION_NAMES,
                               parse_matmul_options)
from gruc.errors import GrucValueError
from gruc.plan import (PLANNED_LAYERS, SweepSpec, find_max, make_executor, parse_values,
                       planned_layer, plot_metrics, plot_tile_heatmap, run_sweep)
from gruc.plan.derived import parse_product, parse_tie
from gruc.plan.pareto import default_axes, parse_axes, pareto_front, write_front
from gruc.plan.planned import PlannedLayer
from gruc.plan.plots import plot_pareto, plot_roles, plot_roofline
from gruc.plan.rows import cell_text, short_of_host_memory
from gruc.plan.search import DEFAULT_LIMIT
from gruc.runtime.viz import require_matplotlib

COMMAND_FLAGS = {
    "gru": [(flag, field, kind, flag_help(field, text)) for flag, field, kind, text in GRU_FLAGS],
    "fc": fc_command.FLAGS + COMMON_FLAGS + MATMUL_FLAGS,
    "gemm": gemm_command.FLAGS + COMMON_FLAGS + MATMUL_FLAGS,
}
"""The flags of each layer's command (``gruc gru``, ``gruc fc``, ``gruc gemm``), by the name of
its kind of planned layer; the product tools' matmul options are flags here too."""

PLAN_FLAGS = {name: [entry for entry in flags if entry[1] not in planned_layer(name).ignored]
              for name, flags in COMMAND_FLAGS.items()}
"""Each layer's flags less those that only affect running or checking."""

MATMUL_OPTIONS_JSON = ("fc", "gemm")
"""Layers whose command takes ``--matmul-options`` (a JSON object), as ``gruc plan`` does."""

TABLE_ROWS = 40
"""Sweeps up to this many rows are also printed as a table."""


def register(parser: argparse.ArgumentParser) -> None:
    """``gruc plan``'s layers and their flags, on the parser :func:`gruc.cli.build_parser` made
    for it."""
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.default_command = "gru"
    layers = parser.add_subparsers(dest="layer", metavar="LAYER", required=True,
                                   title="layers (default: gru)")
    for name, kind in PLANNED_LAYERS.items():
        command = layers.add_parser(
            name, help=f"the {kind.title} of gruc {name}, with its flags",
            formatter_class=argparse.RawDescriptionHelpFormatter,
            description=f"``gruc plan {name}``: plan-only studies of the {kind.title} of "
                        f"``gruc {name}``.\n\n"
                        + __doc__.split("\n\n", 2)[2])  # the doc after the LAYER paragraph
        for flag, field, _, text in PLAN_FLAGS[name]:
            command.add_argument(flag, dest=field, default=None, metavar="VALUES", help=text)
        if name in MATMUL_OPTIONS_JSON:
            command.add_argument("--matmul-options", type=parse_matmul_options, default=None,
                                 metavar="JSON",
                                 help="matmul options as JSON, one value each: "
                                      f"{', '.join(MATMUL_OPTION_NAMES)} (to sweep them, use "
                                      "their flags)")
        _add_study_flags(command, kind)
        command.set_defaults(run=run)


def _add_study_flags(parser: argparse.ArgumentParser, kind: PlannedLayer) -> None:
    """What a study of any layer takes besides the layer's flags: where and how it runs."""
    parser.add_argument("--pipeline", metavar="PIPELINE",
                        help="pass pipeline to compile with, as `gruc opt -p` (default: the "
                             "engine's; '' for none)")
    parser.add_argument("--out", default="plan-results", metavar="DIR", type=output_directory,
                        help="directory of rows.csv, rows.json and plots (default: plan-results)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="local worker processes for the configurations, or for find-max's "
                             "points (default: CPU count; 1: in this process)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="run on this Dask distributed scheduler (needs gruc[dist])")
    flags = {field: flag for flag, field, _, _ in PLAN_FLAGS[kind.name]}
    parser.add_argument("--find-max", metavar="FLAG",
                        help="largest value of FLAG that fits ("
                             f"{', '.join(flags[f].lstrip('-') for f in kind.searchable)})")
    parser.add_argument("--find-max-limit", type=int, default=None, metavar="N",
                        help=f"largest value the search tries (default: {DEFAULT_LIMIT})")
    parser.add_argument("--tie", action="append", default=[], metavar="A=B",
                        help="flag B takes flag A's value (e.g. input-size=output-size); "
                             "repeatable; the flag --find-max searches drives its tied flags")
    parser.add_argument("--fixed-product", action="append", default=[], metavar="A*B=N",
                        help="A * B = N (e.g. batch-size*sequence-size=1600): give, sweep or "
                             "search one factor and the other is derived; values that do not "
                             "divide N are skipped")
    parser.add_argument("--pareto", action="store_true",
                        help="print the front of the rows that fit and no other beats on every "
                             "axis, and write it to DIR/pareto.csv")
    parser.add_argument("--pareto-axes", metavar="COL:DIR,...",
                        help="the front's axes, each a number column or flag and max or min "
                             "(default: the searched flag, else flops, :max and "
                             "cycles_total:min)")
    parser.add_argument("--plots", action="store_true",
                        help="write PNG plots to DIR/plots (metrics per swept flag, tile "
                             "heatmap)")
    parser.add_argument("--heatmap", type=int, metavar="INDEX",
                        help="configuration (0-based, in grid order: the swept flags as this "
                             "help lists them, the last fastest) of the tile heatmap (default: "
                             "the largest max tile memory; with --find-max, the first overflow)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar (default: only on a terminal)")


def spec_from(args: argparse.Namespace) -> SweepSpec:
    """The sweep the layer flags describe: one value fixes a flag, more sweep it."""
    kind = planned_layer(args.layer)
    fixed: dict[str, Any] = {}
    swept: dict[str, tuple] = {}
    for flag, field, convert, _ in PLAN_FLAGS[kind.name]:
        text = getattr(args, field)
        if text is None:
            continue
        values = parse_values(text, convert, flag=flag, tuple_valued=field in kind.tuple_fields)
        if len(values) == 1:
            fixed[field] = values[0]
        else:
            swept[field] = values
    fixed.update(_matmul_options(args, {**fixed, **swept}))
    return SweepSpec(layer=kind.name, fixed=fixed, swept=swept, pipeline=args.pipeline,
                     ties=tuple(map(parse_tie, args.tie)),
                     products=tuple(map(parse_product, args.fixed_product)),
                     searched=_field_of(args.find_max, kind) if args.find_max else None)


def _matmul_options(args: argparse.Namespace, given: dict[str, Any]) -> dict[str, Any]:
    """The fields ``--matmul-options`` sets, one value each; an option its flag sets too, or
    given a list of values, is refused naming the flag that sweeps it."""
    flags = {field: flag for flag, field, _, _ in MATMUL_FLAGS}
    fields = {}
    for name, value in (getattr(args, "matmul_options", None) or {}).items():
        field = MATMUL_OPTION_NAMES[name]
        if field in given:
            raise GrucValueError(f"--matmul-options {name} and {flags[field]} both set "
                                 f"{field}; give one")
        if isinstance(value, (list, dict)):
            raise GrucValueError(f"--matmul-options {name} {json.dumps(value)} is not one value; "
                                 f"sweep it with {flags[field]} a,b,c")
        fields[field] = value
    return fields


def _field_of(text: str, kind: PlannedLayer) -> str:
    """The field ``--find-max`` names (``batch-size``, ``--batch-size`` or ``batch_size``)."""
    flags = {field: flag for flag, field, _, _ in PLAN_FLAGS[kind.name]}
    field = {flag: field for field, flag in flags.items()}.get(
        "--" + text.lstrip("-").replace("_", "-"))
    if field not in kind.searchable:
        raise GrucValueError(f"--find-max {text!r}: searchable flags of {kind.name} plans are "
                             f"{', '.join(flags[f] for f in kind.searchable)}")
    return field


def _print_columns(columns: list[str], cells: list[list[str]]) -> None:
    """A plain text table: a header of ``columns``, then ``cells`` line by line."""
    widths = [max([len(c)] + [len(line[k]) for line in cells]) for k, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for line in cells:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip())


def _print_table(rows: list[dict[str, Any]], parameters: tuple[str, ...]) -> None:
    """The rows' parameters and main figures, shards only where a layer has them."""
    sharded = any(row.get("shards_chosen") is not None for row in rows)
    columns = [*parameters, *(["shards_chosen"] if sharded else []), "fits", "max_tile_bytes",
               "cycles_total", "utilisation", "error"]
    _print_columns(columns, [[cell_text(row.get(c)) for c in columns] for row in rows])


def _print_summary(results: list, spec: SweepSpec, flag: str) -> None:
    """``--find-max``'s answers, one line per point of the other flags' grid: the answer (and
    the flags derived from it), that plan's cycles, max tile memory and utilisation, and the
    values met that did not fit between two that did."""
    figures = ("cycles_total", "max_tile_bytes", "utilisation")
    columns = [*spec.parameters, flag, *spec.derived, *figures]
    cells = []
    for result in results:
        row = result.fitting or {}
        values = {**result.point, **{name: row.get(name) for name in (*spec.derived, *figures)}}
        values[flag] = "none fits" if result.value is None else result.value
        if result.value is not None and result.failing is None:
            values[flag] = f"{result.value} (limit)"
        cells.append([cell_text(values.get(c)) for c in columns]
                     + ["; ".join(result.non_monotone) or "-"])
    columns.append("not monotone")
    print("find-max summary")
    _print_columns(columns, cells)


def _pareto(args: argparse.Namespace, rows: list[dict[str, Any]], spec: SweepSpec,
            out: Path) -> None:
    """``--pareto``: the front of ``rows`` printed and in ``OUT/pareto.csv``, and its plot with
    ``--plots``."""
    axes = (parse_axes(args.pareto_axes, spec.kind.flags) if args.pareto_axes
            else default_axes(spec.searched))
    front = pareto_front(rows, axes)
    print(f"pareto front      {len(front)} of {len(rows)} rows ("
          + ", ".join(f"{name} {direction}" for name, direction in axes) + "; rows that fit)")
    columns = [name for name, _ in axes]
    columns += [c for c in (*spec.parameters, *((spec.searched,) if spec.searched else ()),
                            *spec.derived) if c not in columns]
    _print_columns(columns, [[cell_text(row.get(c)) for c in columns] for row in front])
    print(f"pareto            {write_front(front, axes, out)}")
    if args.plots and front:
        print(f"plot              {plot_pareto(rows, front, axes, out / 'plots' / 'pareto.png')}")


def _heatmap(row: dict[str, Any], out: Path) -> None:
    """The tile heatmap of ``row``'s configuration, planned again (a row holds no tiles)."""
    flags = json.loads(row["config"])
    pipeline, kind = flags.pop("pipeline"), planned_layer(flags.pop("layer"))
    plan = kind.plan(kind.model(**flags), pipeline)
    print(f"heatmap           {plot_tile_heatmap(plan, out / 'plots' / 'tile-heatmap.png')}")


def _choose(rows: list[dict[str, Any]], index: int | None) -> dict[str, Any] | None:
    """The row of the tile heatmap: row ``index`` (grid order) if given, else the planned row with
    the most memory on a tile; None when gruc refused every row."""
    if index is not None:
        if not 0 <= index < len(rows):
            raise GrucValueError(f"--heatmap {index} is not a configuration; there are "
                                 f"{len(rows)} (0..{len(rows) - 1})")
        return rows[index]
    planned = [r for r in rows if not r.get("error")]
    return max(planned, key=lambda r: r["max_tile_bytes"], default=None)


def run(args: argparse.Namespace) -> int:
    try:
        return _study(args)
    except KeyboardInterrupt:
        print(f"gruc plan: interrupted; the finished rows are in {args.out}; run the same "
              "command again to go on", file=sys.stderr)
        return 130


def _find_max(args: argparse.Namespace, spec: SweepSpec, flag: str, out: Path,
              executor) -> int:
    """``--find-max``: the largest fitting value of one flag for every configuration of the others.
    Its plots draw every probed row, and its heatmap defaults to the first probe that overflows
    (the smallest probed value that does not fit, at the first grid point with one), not to the
    largest row."""
    limit = DEFAULT_LIMIT if args.find_max_limit is None else args.find_max_limit
    results = find_max(spec, flag, out, limit=limit, executor=executor,
                       progress=args.progress)
    for result in results:
        print(result.describe())
        if result.domain is not None:
            print(f"  searched over the {len(result.domain)} divisors of its fixed product from "
                  f"{result.domain[0]} to {result.domain[-1]}; other values do not divide it")
    _print_summary(results, spec, flag)
    print(f"rows              {out / 'rows.csv'}, {out / 'rows.json'}")
    probed = [row for result in results for row in result.probes]
    if args.pareto:
        _pareto(args, probed, spec, out)
    if args.plots:
        first_overflow = next((r for r in probed if not r["fits"] and not r.get("error")), None)
        _plots(probed, (*spec.parameters, flag), out, spec.kind, args.heatmap, first_overflow)
    return 0


def _plots(rows: list[dict[str, Any]], parameters: tuple[str, ...], out: Path,
           kind: PlannedLayer, index: int | None, preferred: dict[str, Any] | None = None
           ) -> None:
    """The metric plots of ``rows`` and, for a kind of layer that has one, the tile heatmap of
    row ``index`` (default: ``preferred``, else the row with the most memory on a tile)."""
    if all(row.get("error") for row in rows):
        print("plots             none: gruc refused every configuration")
        return
    paths = plot_metrics(rows, parameters, out / "plots", kind.title)
    if not paths:
        print("plots             none: nothing is swept (a metric plot needs a swept flag)")
    for path in paths:
        print(f"plot              {path}")
    for path in (plot_roles(rows, parameters, out / "plots" / "memory-by-role.png"),
                 plot_roofline(rows, parameters, out / "plots" / "roofline.png")):
        if path is not None:
            print(f"plot              {path}")
    chosen = preferred if index is None and preferred is not None else _choose(rows, index)
    if chosen is not None and chosen.get("error"):
        print(f"heatmap           none: configuration {index} was refused ({chosen['error']})")
    elif chosen is not None:
        _heatmap(chosen, out)


def _check_search_flags(args: argparse.Namespace) -> None:
    """A search's or a front's own flag without it would be silently ignored: refuse it."""
    if args.find_max_limit is not None and not args.find_max:
        raise GrucValueError(f"--find-max-limit {args.find_max_limit} bounds the search that "
                             "--find-max FLAG makes; add --find-max")
    if args.pareto_axes is not None and not args.pareto:
        raise GrucValueError(f"--pareto-axes {args.pareto_axes} chooses the axes of the front "
                             "--pareto prints; add --pareto")


def _check_heatmap(args: argparse.Namespace, spec: SweepSpec) -> None:
    """Refuse a ``--heatmap`` index that cannot be chosen before planning anything: a sweep's
    configurations are known from its grid (a search's probes only as it goes, so there only a
    negative index is refused here)."""
    index = args.heatmap
    if index is None:
        return
    if not args.plots:
        raise GrucValueError(f"--heatmap {index} chooses the configuration of the tile heatmap "
                             "that --plots draws; add --plots")
    count = None if args.find_max else spec.size
    if index < 0 or (count is not None and index >= count):
        allowed = f"there are {count} (0..{count - 1})" if count else "it is 0-based"
        raise GrucValueError(f"--heatmap {index} is not a configuration; {allowed}")


def _study(args: argparse.Namespace) -> int:
    """A sweep or a search, after refusing flags that would be ignored; the executor is closed
    however the work ends (an interrupt included), and the table is printed only for small
    sweeps."""
    spec = spec_from(args)
    _check_search_flags(args)
    flag = spec.searched
    if args.pareto_axes:
        parse_axes(args.pareto_axes, spec.kind.flags)  # refused before anything is planned
    _check_heatmap(args, spec)
    if args.plots:
        require_matplotlib("--plots")
    out = Path(args.out)
    executor = make_executor(args.jobs, args.scheduler)
    try:
        if flag is not None:
            return _find_max(args, spec, flag, out, executor)
        result = run_sweep(spec, out, executor=executor, progress=args.progress)
    finally:
        executor.close()
    parameters = (*spec.parameters, *spec.derived)
    if len(result.rows) <= TABLE_ROWS:
        _print_table(result.rows, parameters)
    else:
        print(f"table             not printed for {len(result.rows)} rows (more than "
              f"{TABLE_ROWS}): see {result.store.csv_path}")
    short = sum(map(short_of_host_memory, result.errors))
    print(f"configurations    {len(result.rows)}: {result.computed} planned now, "
          f"{result.skipped} already in {out}, {len(result.errors) - short} refused"
          + (f", {short} too big for this host's memory (planned again next run)" if short
             else ""))
    if result.computed:
        print(f"time              {result.seconds:.2f} s, {result.configs_per_minute:.1f} "
              "configurations per minute")
    for why in result.skipped_configs:
        print(f"skipped           {why}")
    print(f"rows              {result.store.csv_path}, {result.store.json_path}")
    if args.pareto:
        _pareto(args, result.rows, spec, out)
    if args.plots:
        _plots(result.rows, spec.parameters, out, spec.kind, args.heatmap)
    return 0
