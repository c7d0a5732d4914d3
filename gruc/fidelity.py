"""Poplar's own figures beside gruc's: how far a planner may trust gruc's memory and cycles.

Graphcore's Poplar SDK estimated, on its IPUModel, the cycles, total memory and fullest tile of
poplibs' benchmark layers; poplibs kept the figures as regression baselines
(``tests/benchmark_results.csv`` of graphcore/poplibs at ``f9273583``, 2021-03-10, the last
version before the benchmarks were removed).  ``gruc/data/poplar_figures.csv`` is a copy of the
rows gruc measures itself against (provenance: ``gruc/data/README.md``).

Each row names a poplibs tool and its flags.  :func:`layer_config` turns a row into the layer
gruc builds for it — the tool's own defaults for every flag not given, ``--ignore-data`` as every
benchmark ran (nothing read back) — and :func:`measure` plans it, compile-only, and reads gruc's
three figures exactly as poplibs' ``tools/bench.py`` read Poplar's profile (:func:`figures`).
The tools ran on poplibs' test IPUModel, which does not compile the program to IPU code
(``createTestDevice``'s ``compileIPUCode`` is false), so its profile holds no code: the layers are
built for such a device (``compile_ipu_code=False``).



* ``cycles``: the whole simulated run (``executionProfile.simulation.cycles``);
* ``total_memory``: the sum over tiles of always-live bytes plus the sum over tiles of each
  tile's peak not-always-live bytes (``graphProfile.memory.liveness``): no gaps;
* ``max_tile_memory``: the largest tile's bytes including gaps (``byTile.totalIncludingGaps``).

A row gruc cannot build yet is reported with the reason, never a crash.  The layers are compiled
with no passes (``pipeline=""``): Poplar runs the graph poplibs built as it was built, with no
rewriting of its own (gruc's default pipeline fuses and removes steps Poplar would run).
"""

from __future__ import annotations

import csv
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from gruc.errors import GrucError, GrucValueError
from gruc.tools.gru_layer import GruLayerConfig
from gruc.runtime.report import Report
from gruc.target import Target

YARDSTICK = Path(__file__).resolve().parent / "data" / "poplar_figures.csv"
"""Poplar's published figures (see ``gruc/data/README.md``)."""

FIGURES = ("cycles", "total_memory", "max_tile_memory")
"""The three figures of every row, in the order poplibs' ``bench.py`` wrote them."""

DEVICE_TYPES = {"IpuModel1": "ipu1", "IpuModel2": "ipu2"}
"""poplibs' device names -> gruc's."""

FIDELITY_PIPELINE = ""
"""The pass pipeline rows are compiled with: none (Poplar compiles a graph as it is built)."""


@dataclass(frozen=True)
class PoplarRow:
    """One published measurement: the layer (tool and flags) and Poplar's three figures."""

    target: str
    name: str
    tool: str
    flags: str
    cycles: int
    total_memory: int
    max_tile_memory: int

    @property
    def device_type(self) -> str:
        return DEVICE_TYPES[self.target]

    def figures(self) -> dict[str, int]:
        return {figure: getattr(self, figure) for figure in FIGURES}


def load_rows(path: str | Path = YARDSTICK) -> list[PoplarRow]:
    """The rows of a yardstick file (``gruc/data/poplar_figures.csv``'s columns)."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = []
        for record in csv.DictReader(handle):
            if record["target"] not in DEVICE_TYPES:
                raise GrucValueError(f"{path}: row {record['name']!r} has target "
                                     f"{record['target']!r}; known: {', '.join(DEVICE_TYPES)}")
            rows.append(PoplarRow(record["target"], record["name"], record["tool"],
                                  record["flags"], *(int(record[f]) for f in FIGURES)))
    return rows


# ---- tool flags -> gruc layers ----------------------------------------------------------------
def parse_tool_flags(text: str) -> dict[str, str]:
    """``--name value`` and ``--name=value`` pairs of a poplibs tool's command line."""
    tokens = shlex.split(text)
    flags: dict[str, str] = {}
    k = 0
    while k < len(tokens):
        token = tokens[k]
        if not token.startswith("--"):
            raise GrucValueError(f"tool flags {text!r}: {token!r} is not a --flag")
        name, equals, value = token[2:].partition("=")
        if not equals:
            if k + 1 >= len(tokens) or tokens[k + 1].startswith("--"):
                raise GrucValueError(f"tool flags {text!r}: --{name} has no value")
            value = tokens[k + 1]
            k += 1
        flags[name] = value
        k += 1
    return flags


GRU_LAYER_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "batch-size": ("batch_size", int),
    "sequence-size": ("sequence_size", int),
    "input-size": ("input_size", int),
    "output-size": ("output_size", int),
    "data-type": ("data_type", str),
    "phase": ("phase", str),
    "cell-order": ("cell_order", lambda text: tuple(text.strip("{}").split(","))),
}
"""poplibs ``gru_layer`` flags the yardstick uses, with their gruc fields."""

GRU_LAYER_DEFAULTS = {"data_type": "half", "phase": "fwd"}
"""``gru_layer``'s own defaults where gruc's differ (gruc runs float unless asked)."""

FC_LAYER_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "batch-size": ("batch_size", int),
    "input-size": ("input_size", int),
    "output-size": ("output_size", int),
    "num-groups": ("num_groups", int),
    "data-type": ("data_type", str),
    "bias": ("bias", lambda text: text.lower() in ("1", "true")),
}
"""poplibs ``fully_connected_layer`` flags the yardstick uses."""

GEMM_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "m": ("m", int), "k": ("k", int), "n": ("n", int), "g": ("g", int),
    "data-type": ("data_type", str),
}
"""poplibs ``general_matrix_multiply`` flags the yardstick uses."""

TOOLS = {"gru_layer": (GRU_LAYER_FLAGS, GRU_LAYER_DEFAULTS),
         "fully_connected_layer": (FC_LAYER_FLAGS, {}),
         "general_matrix_multiply": (GEMM_FLAGS, {})}


def layer_config(row: PoplarRow) -> Any:
    """The gruc layer a row measures (a :class:`~gruc.tools.gru_layer.GruLayerConfig`, or an
    ``FcConfig`` / ``GemmConfig`` of :mod:`gruc.tools.products`), on its device (uncompiled, as
    poplibs' test IPUModel), with nothing read back (``--ignore-data``); a GrucValueError says
    why a row cannot be built."""
    from gruc.tools.products import FcConfig, GemmConfig

    tool, *tool_flags = row.tool.split(maxsplit=1)
    if tool not in TOOLS:
        raise GrucValueError(f"gruc has no {tool} tool")
    known, given = TOOLS[tool][0], dict(TOOLS[tool][1])
    flags = parse_tool_flags(" ".join(tool_flags + [row.flags]))
    for name, value in flags.items():
        if name not in known:
            raise GrucValueError(f"{tool} flag --{name} is not supported here")
        field, parse = known[name]
        given[field] = parse(value)
    common = {"device_type": row.device_type, "ignore_data": True, "compile_ipu_code": False}
    model = {"gru_layer": GruLayerConfig, "fully_connected_layer": FcConfig,
             "general_matrix_multiply": GemmConfig}[tool]
    return model(**common, **given)


def plan_figures(config: Any) -> tuple[Report, float]:
    """Plan a layer compile-only (no passes) and report it as one invocation of its tool would
    run: the report and its compile seconds."""
    from gruc.plan.layers import plan_config  # the planner imports the layer builders

    plan = plan_config(config, FIDELITY_PIPELINE)
    return plan.report, plan.compile_seconds


def figures(report: Report) -> dict[str, int]:
    """gruc's three figures of a report, read as poplibs' ``bench.py`` read Poplar's profile."""
    return {"cycles": report.cycles.total,
            "total_memory": int(report.always_live_bytes.sum())
            + int(report.not_always_live_max_bytes.sum()),
            "max_tile_memory": report.max_tile_bytes}


def measure(row: PoplarRow) -> dict[str, Any]:
    """One row's result: Poplar's figures, gruc's and their ratios (gruc / Poplar), with the
    memory by category of gruc's fullest tile; or, for a row gruc cannot build, the reason."""
    result: dict[str, Any] = {"target": row.target, "name": row.name, "tool": row.tool,
                              "flags": row.flags, "poplar": row.figures()}
    try:
        report, seconds = plan_figures(layer_config(row))
    except GrucError as error:
        result["reason"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        return result
    mine = figures(report)
    result["gruc"] = mine
    result["ratio"] = {f: mine[f] / row.figures()[f] for f in FIGURES}
    result["compile_seconds"] = round(seconds, 3)
    result["memory_by_category"] = report.memory_by_category()
    return result


FAMILIES = (("gru_", "_train", "GRU training"), ("gru_", "", "GRU forward"),
            ("bert_", "", "BERT layers (fc)"), ("fc_layer_", "_1000_5_", "fc, 5 outputs"),
            ("fc_layer_", "_1000_1000_", "fc, 1000 x 1000"), ("fc_layer_", "", "fc, other"),
            ("gemm_", "", "matrix products"))
"""``(name prefix, name part, family)``: the first whose prefix and part a row's name has."""


def family(name: str) -> str:
    """The kind of layer a yardstick row measures, from its name (its benchmark's naming)."""
    for prefix, part, label in FAMILIES:
        if name.startswith(prefix) and part in name:
            return label
    return "other"


def summarise(results: Iterable[dict[str, Any]],
              group: Callable[[dict[str, Any]], str] = lambda result: result["target"]
              ) -> dict[str, dict[str, dict[str, Any]]]:
    """Per group (default: the target) and figure, over the rows measured: how many, the mean
    absolute and mean signed percentage errors, the worst row (its name and error) and how many
    are within 10 %."""
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for result in results:
        if "ratio" not in result:
            continue
        for figure in FIGURES:
            error = 100.0 * (result["ratio"][figure] - 1.0)
            entry = summary.setdefault(group(result), {}).setdefault(
                figure, {"rows": 0, "sum_abs": 0.0, "sum": 0.0, "worst": None, "within_10": 0})
            entry["rows"] += 1
            entry["sum_abs"] += abs(error)
            entry["sum"] += error
            entry["within_10"] += round(abs(error), 9) <= 10.0  # 1.1 is 10.000000000000009 %
            if entry["worst"] is None or abs(error) > abs(entry["worst"][1]):
                entry["worst"] = (result["name"], error)
    for by_figure in summary.values():
        for entry in by_figure.values():
            entry["mape"] = entry.pop("sum_abs") / entry["rows"]
            entry["mean_error"] = entry.pop("sum") / entry["rows"]
            name, error = entry.pop("worst")
            entry["worst_row"], entry["worst_error"] = name, error
    return summary


def tiles_of(target: str) -> int:
    """Tiles of a yardstick target's device (one IPU)."""
    return Target.of(DEVICE_TYPES[target]).num_tiles


def percent(ratio: float) -> str:
    """A ratio as a signed error: ``1.034`` -> ``+3.4 %``."""
    if not math.isfinite(ratio):
        return "n/a"
    return f"{100.0 * (ratio - 1.0):+.1f} %"
