"""What ``gruc fc`` and ``gruc gemm`` share: the target and matmul flags, building, planning or
running the tool's layer, and printing its plans, memory and cycles."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Callable

from gruc.cli.gru import _bool, add_strict_memory_flag
from gruc.cli.opt import output_directory
from gruc.errors import GrucValueError
from gruc.ops.regroup import REGROUP_SUFFIX
from gruc.ops.weight_transpose import transpositions
from gruc.plan.static import plan_program
from gruc.runtime.engine import Engine
from gruc.runtime.report import Report
from gruc.status import StatusLine
from gruc.tools.products import ProductLayer, ProductToolConfig, run_product_layer

COMMON_FLAGS = [
    ("--data-type", "data_type", str, "half or float (default: half, as poplibs' tools)"),
    ("--device-type", "device_type", str, "ipu1 or ipu2 (default: ipu2)"),
    ("--tiles-per-ipu", "tiles_per_ipu", int, "tiles per IPU (default: all of the device's)"),
    ("--ipus", "ipus", int, "number of IPUs (default: 1)"),
    ("--compile-ipu-code", "compile_ipu_code", _bool,
     "compile to IPU code, so tiles hold code (0/1; default 1; poplibs' test IPUModels: 0)"),
    ("--ignore-data", "ignore_data", _bool, "write, read and check nothing (0/1)"),
    ("--memory-model", "memory_model", str,
     "poplar (every category Poplar counts) or tensors (tensor data alone)"),
    ("--seed", "seed", int, "host data seed"),
    ("--rel-tolerance", "rel_tolerance", float, "relative tolerance of the check"),
    ("--abs-tolerance", "abs_tolerance", float, "absolute tolerance of the check"),
    ("--backend", "backend", str, "numba (default) or numpy"),
]

MATMUL_OPTION_NAMES = {"availableMemoryProportion": "available_memory_proportion",
                       "partialsType": "partials_type"}
"""poplin matmul options ``--matmul-options`` takes, and the configuration fields they set."""

MATMUL_FLAGS = [
    ("--available-memory-proportion", "available_memory_proportion", float,
     "matmul option availableMemoryProportion: the share of tile memory a product's temporaries "
     "may take (default: 0.6)"),
    ("--partials-type", "partials_type", str,
     "matmul option partialsType: half or float (default: float)"),
]
"""The matmul options as flags of their own (``gruc plan fc`` sweeps them)."""


def parse_matmul_options(text: str) -> dict[str, Any]:
    """``--matmul-options``: a JSON object of poplin option names."""
    try:
        options = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({error.msg}); e.g. "
                                         '\'{"availableMemoryProportion": 0.3}\'') from None
    if not isinstance(options, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object of matmul options")
    unknown = sorted(set(options) - set(MATMUL_OPTION_NAMES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown matmul option(s) {', '.join(unknown)}; allowed: "
                                         + ", ".join(MATMUL_OPTION_NAMES))
    return options


def add_layer_flags(parser: argparse.ArgumentParser, flags: list,
                    required: tuple[str, ...] = ()) -> None:
    """What describes the tool's layer: its own flags (``required`` ones must be given), then the
    common ones and ``--matmul-options`` (every command that builds the layer takes these)."""
    for flag, field, kind, text in flags + COMMON_FLAGS:
        parser.add_argument(flag, dest=field, type=kind, default=None, help=text,
                            required=flag in required)
    parser.add_argument("--matmul-options", type=parse_matmul_options, default=None,
                        help="poplin matmul options as JSON: availableMemoryProportion (default "
                             "0.6), partialsType (half | float, default float)")


def add_flags(parser: argparse.ArgumentParser, flags: list, required: tuple[str, ...] = ()) -> None:
    """The tool command's flags: the layer's, then how to run it."""
    add_layer_flags(parser, flags, required)
    parser.add_argument("--compile-only", action="store_true", help="plan and report; do not run")
    add_strict_memory_flag(parser)
    parser.add_argument("--profile", metavar="DIR", type=output_directory,
                        help="write report.json and report.html here")


def config_from(args: argparse.Namespace, flags: list, model: type) -> ProductToolConfig:
    """The tool's configuration from its flags; a bad value is named by its flag."""
    given = {field: getattr(args, field) for _, field, _, _ in flags + COMMON_FLAGS
             if getattr(args, field) is not None}
    for name, value in (args.matmul_options or {}).items():
        given[MATMUL_OPTION_NAMES[name]] = value
    try:
        return model(**given)
    except GrucValueError as error:
        message = str(error).removeprefix(f"{model.__name__}: ")
        for flag, field, _, _ in flags + COMMON_FLAGS:
            message = message.replace(f"{model.__name__}.{field} = ", f"{flag} ")
        for name, field in MATMUL_OPTION_NAMES.items():
            message = message.replace(f"{model.__name__}.{field} = ",
                                      f"--matmul-options {name} = ")
        raise type(error)(message) from None


def compiled_only(config: ProductToolConfig, layer: ProductLayer, pipeline: str | None = None,
                  strict_memory: bool = False) -> Report:
    """The report of the layer compiled but not lowered or run, counting the tool's runs (each
    of its programs once, in order: the same cycles and exchange as ``gruc plan``), for
    ``--compile-only``."""
    return plan_program(layer.graph, layer.programs, runs=layer.runs, pipeline=pipeline,
                        memory_model=config.memory_model, strict_memory=strict_memory)


def run_tool(args: argparse.Namespace, title: str, config: ProductToolConfig,
             build: Callable[[Any], ProductLayer]) -> int:
    """Build the layer, plan it (``--compile-only``) or run and check it; print its plans, memory
    by category and cycles; exit 1 when the check fails."""
    print(title, flush=True)
    with StatusLine() as status:
        status.show("building the layer ...")
        start = time.perf_counter()
        layer = build(config)
        built = time.perf_counter() - start
        if args.compile_only:
            status.show("compiling ...")
            report = compiled_only(config, layer, strict_memory=args.strict_memory)
            result = None
        else:
            status.show("compiling and running on the simulated IPU ...")
            result = run_product_layer(layer, strict_memory=args.strict_memory)
            report = result.engine.report
    for name, plan in layer.plans.items():
        print(f"plan {name:<12} {plan.describe()}")
    for name, rows, cols, tiles in transpositions(layer.graph, layer.programs):
        why = ("a weight-update operand regrouped, poplin's regroupIfBeneficialForPlan"
               if name.endswith(REGROUP_SUFFIX) else "poplin's fullyConnectedWeightTranspose")
        print(f"transpose         {name}: {rows} x {cols} blocks on {tiles} tiles ({why})")
    report.print_summary()
    print(f"FLOPs             {layer.flops()}")
    print(f"build             {built:.3f} s"
          + ("" if result is None else f"; run {result.run_seconds:.3f} s"))
    if args.profile:
        _write_profile(args.profile, report, title, None if result is None else result.engine)
    if result is None or not result.checked:
        if result is not None:
            print("check             none: nothing written or read back (--ignore-data)")
        return 0
    for name, lines in result.mismatches.items():
        for line in lines:
            print(f"  {name}: {line}")
    print("check             " + ("PASSED" if result.passed else "FAILED") + " against the float64 "
          f"reference (rel {config.tolerances()[0]}, abs {config.tolerances()[1]})")
    return 0 if result.passed else 1


def _write_profile(directory: str, report: Report, title: str, engine: Engine | None = None
                   ) -> None:
    """``report.json``, the report page and, after a run, the Chrome trace of its supersteps (as
    ``gruc gru --profile``); a plan-only report's page has no program tree and no trace
    (nothing was lowered or run)."""
    os.makedirs(directory, exist_ok=True)
    report.to_json(os.path.join(directory, "report.json"))
    report.to_html(os.path.join(directory, "report.html"), title)
    if engine is not None:
        engine.write_trace(os.path.join(directory, "trace.json"))
    print(f"profile           {directory}/report.json, report.html"
          + ("" if engine is None else ", trace.json"))
