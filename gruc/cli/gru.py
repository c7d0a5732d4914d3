"""``gruc gru``: build, compile, run and check a GRU layer (poplibs' ``gru_layer`` tool).

With no flags it runs a sensible default layer (S=20, B=8, I=H=64, float) on an ipu2.  The layer
is checked against the float64 reference with poplibs' tolerances (``--rel-tolerance``,
``--abs-tolerance``); the exit code is 1 if the check fails.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from gruc.cli.opt import output_directory
from gruc.errors import GrucValueError
from gruc.plan.layer import PLAN_IGNORED, compile_layer
from gruc.tools.gru_layer import GruLayer, GruLayerConfig, LayerRun, build_layer, run_layer
from gruc.runtime.blas import library_name
from gruc.runtime.report import Report
from gruc.runtime.page import require_plotly
from gruc.status import StatusLine
from gruc.text import first_paragraph


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (use 0/1, true/false)")


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.strip("{}").split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of integers, e.g. 97,67,87") \
            from None


def _cell_order(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.strip("{}").split(","))


# (flag, config field, type, help); defaults come from GruLayerConfig, and where that is None
# (poplibs decides) the help says what happens
FLAGS = [
    ("--sequence-size", "sequence_size", int, "time steps S"),
    ("--input-size", "input_size", int, "input features I"),
    ("--output-size", "output_size", int, "hidden units H"),
    ("--batch-size", "batch_size", int, "batch rows B"),
    ("--data-type", "data_type", str, "half or float"),
    ("--phase", "phase", str, "fwd, bwd (+ backward pass), wu or all (+ weight update)"),
    ("--reset-after", "reset_after", _bool, "reset gate after the matmul (0/1)"),
    ("--cell-order", "cell_order", _cell_order, "gate order, e.g. update,candidate,reset"),
    ("--activation", "activation", str, "candidate activation"),
    ("--recurrent-activation", "recurrent_activation", str, "gate activation"),
    ("--shards", "shards", int, "numShards (default: poplibs' heuristic)"),
    ("--code-reuse", "code_reuse", _bool, "rnnCodeReuse (0/1; default: 1 when shards > 15)"),
    ("--with-attention", "with_attention", _bool, "AUGRU (0/1)"),
    ("--variable-time-steps", "variable_time_steps", _ints,
     "lengths: one, or one per row (default: every row runs S steps)"),
    ("--with-real-time-steps", "with_real_time_steps", _bool, "random per-row lengths (0/1)"),
    ("--output-all-sequence", "output_all_sequence", _bool, "output every step (0/1)"),
    ("--ignore-input-gradient", "ignore_input_gradient", _bool, "no input gradient (0/1)"),
    ("--save-intermediates", "save_intermediates", _bool,
     "read back and check the forward's saved gates (0/1; with --phase fwd: run a training "
     "forward to save them; refused with --recomputation-mode full)"),
    ("--recomputation-mode", "recomputation_mode", str,
     "training: none (save every gate for the backward pass) or full (save none, recompute "
     "them there: less memory, more cycles)"),
    ("--available-memory-proportion", "available_memory_proportion", float,
     "matmul temporaries (default: 0.6)"),
    ("--partials-type", "partials_type", str, "matmul partials: half or float (default: float)"),
    ("--device-type", "device_type", str, "ipu1 or ipu2 (poplibs' IpuModel1 / IpuModel2)"),
    ("--tiles-per-ipu", "tiles_per_ipu", int, "tiles per IPU (default: all of the device's)"),
    ("--ipus", "ipus", int, "number of IPUs"),
    ("--memory-model", "memory_model", str,
     "poplar (every category Poplar counts) or tensors (tensor data alone)"),
    ("--compile-ipu-code", "compile_ipu_code", _bool,
     "compile to IPU code, so tiles hold code (0/1; poplibs' test IPUModels: 0)"),
    ("--ignore-data", "ignore_data", _bool,
     "read nothing back, so check nothing and keep no output live for the host (0/1; "
     "poplibs' benchmarks ran so)"),
    ("--rel-tolerance", "rel_tolerance", float,
     "relative tolerance of the check (default: by data type)"),
    ("--abs-tolerance", "abs_tolerance", float,
     "absolute tolerance of the check (default: by data type)"),
    ("--seed", "seed", int, "host data seed"),
    ("--weights-range", "weights_range", float,
     "host weights and biases uniform in +-R (poplibs: 1; 1/sqrt(H) keeps wide layers checkable)"),
    ("--backend", "backend", str, "numba (default) or numpy"),
]


def flag_help(field: str, text: str) -> str:
    """``text`` with the field's default as one would type it on the command line (``0``/``1``,
    comma lists); a field whose default is None says its default in ``text``."""
    default = getattr(GruLayerConfig(), field)
    if default is None or "(default" in text:
        return text
    if isinstance(default, bool):
        default = int(default)
    if isinstance(default, tuple):
        default = ",".join(map(str, default))
    return f"{text} (default: {default})"


IR_IGNORED = (*PLAN_IGNORED, "seed")
"""Layer flags that change how a built layer runs or is checked, never its IR (the seed draws the
data, and the real time steps' lengths, which a plan counts but the IR does not hold)."""


class _RunOnly(argparse.Action):
    """A flag that only changes a run, given to a command that runs nothing: refused by name
    rather than accepted and ignored."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(f"{option_string} only changes how the layer runs or is checked; "
                     f"{parser.prog} builds its IR and runs nothing: drop it")


def add_layer_flags(parser: argparse.ArgumentParser, runs: bool = True) -> None:
    """The layer flags, shared by every command that builds a GRU layer; with ``runs`` False
    (a command that only builds it) the flags of :data:`IR_IGNORED` are refused."""
    for flag, field, kind, text in FLAGS:
        if runs or field not in IR_IGNORED:
            parser.add_argument(flag, dest=field, type=kind, default=None,
                                help=flag_help(field, text))
        else:
            parser.add_argument(flag, dest=field, action=_RunOnly, default=None,
                                help=argparse.SUPPRESS)


def config_from(args: argparse.Namespace) -> GruLayerConfig:
    """The layer the flags describe; a bad value is named by its flag, as it was typed."""
    given = {field: getattr(args, field) for _, field, _, _ in FLAGS
             if getattr(args, field) is not None}
    try:
        return GruLayerConfig(**given)
    except GrucValueError as error:
        message = str(error).removeprefix("GruLayerConfig: ")  # a rule across flags
        for flag, field, _, _ in FLAGS:
            if field in given:
                message = message.replace(f"GruLayerConfig.{field} = {given[field]!r}",
                                          f"{flag} {_as_typed(given[field])}")
            message = message.replace(f"GruLayerConfig.{field} = ", f"{flag} ")
        raise type(error)(message) from None


def _as_typed(value: Any) -> str:
    """A parsed flag value as it is typed: ``a,b`` for a list, ``0``/``1`` for a switch."""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(int(value)) if isinstance(value, bool) else str(value)


def register(parser: argparse.ArgumentParser) -> None:
    """``gruc gru``'s flags, on the parser :func:`gruc.cli.build_parser` made for it."""
    parser.description = first_paragraph(__doc__)
    add_layer_flags(parser)
    parser.add_argument("--compile-only", action="store_true", help="plan and report; do not run")
    add_strict_memory_flag(parser)
    parser.add_argument("--profile", metavar="DIR", type=output_directory,
                        help="write report.json, report.html and trace.json here")
    parser.set_defaults(run=run)


def add_strict_memory_flag(parser: argparse.ArgumentParser) -> None:
    """``--strict-memory``, for every command that compiles a program to run it."""
    parser.add_argument("--strict-memory", action="store_true",
                        help="refuse a program that does not fit, before running it: the "
                             "out-of-memory report and exit code 3 (without it, it runs, as on "
                             "Poplar's IPUModel)")


def compiled_only(config: GruLayerConfig, layer: GruLayer, pipeline: str | None = None,
                  strict_memory: bool = False) -> Report:
    """The report of the layer compiled but not lowered or run (no kernel is prepared), counting
    the run it would make (the same cycles and exchange as ``gruc plan``), for
    ``--compile-only``."""
    return compile_layer(config, layer, pipeline, strict_memory)[1]


def layer_title(config: GruLayerConfig) -> str:
    """The title of a layer's report page, the same from ``gruc gru --profile`` and ``gruc
    viz``."""
    return (f"gruc: GRU layer S={config.sequence_size} B={config.batch_size} "
            f"I={config.input_size} H={config.output_size} {config.data_type} "
            f"phase={config.phase}")


def _print_failures(result: LayerRun) -> None:
    """A line per failing tensor — how many elements fail, and its worst difference against its
    own magnitude (what an element-wise check cannot say of large values) — and, where the
    numbers are known to fail whatever the compiler does, one line saying why."""
    for name, count in result.failures.items():
        if count:
            worst, largest = result.worst_error(name)
            share = f" = {100 * worst / largest:.2g}% of" if largest else ", with"
            print(f"  {name}: {count} of {result.outputs[name].size} elements fail; largest "
                  f"|diff| {worst:.3g}{share} its largest |expected| {largest:.3g}")
    reason = result.known_reason()
    if reason:
        print(f"  ({reason})")


def run(args: argparse.Namespace) -> int:
    """``gruc gru``: build, compile, run and check the layer, print the summary; exit 1 when the
    check against the float64 reference fails, so scripts can tell."""
    config = config_from(args)
    if args.profile:
        require_plotly("--profile's HTML report")
    print(f"GRU layer: S={config.sequence_size} B={config.batch_size} I={config.input_size} "
          f"H={config.output_size} {config.data_type} phase={config.phase}"
          + (" reset_after" if config.reset_after else "")
          + (" AUGRU" if config.with_attention else ""), flush=True)
    with StatusLine() as status:  # on a terminal only: what the first, compiling run is doing
        status.show("building the layer ...")
        start = time.perf_counter()
        layer = build_layer(config)
        built = time.perf_counter() - start
        if args.compile_only:
            status.show("compiling ...")
            report = compiled_only(config, layer, strict_memory=args.strict_memory)
            compile_seconds, run_seconds, passed = report.compile_seconds, None, None
        else:
            status.show("compiling and running on the simulated IPU ...")
            result = run_layer(config, layer, strict_memory=args.strict_memory)
            report, compile_seconds = result.engine.report, result.compile_seconds
            run_seconds = result.run_seconds
            passed = result.passed if result.checked else None
    if not args.compile_only:
        _print_failures(result)
    print(f"shards            {layer.num_shards}")
    report.print_summary()
    print(f"FLOPs             {layer.flops()}")
    print(f"build / compile   {built:.3f} s / {compile_seconds:.3f} s"
          + ("" if run_seconds is None else f"; run {run_seconds:.3f} s")
          + (f" (products: {library_name()})" if config.backend == "numba" else ""))
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        report.to_json(os.path.join(args.profile, "report.json"))
        report.to_html(os.path.join(args.profile, "report.html"), layer_title(config))
        if not args.compile_only:  # no run, no trace
            result.engine.write_trace(os.path.join(args.profile, "trace.json"))
        print(f"profile           {args.profile}/report.json, report.html"
              + ("" if args.compile_only else ", trace.json"))
    if not args.compile_only and passed is None:
        print("check             none: nothing read back (--ignore-data)")
    if passed is None:
        return 0
    print("check             " + ("PASSED" if passed else "FAILED") + " against the float64 "
          f"reference (rel {config.tolerances()[0]}, abs {config.tolerances()[1]})")
    return 0 if passed else 1

