"""``gruc viz``: one self-contained, interactive HTML report of a program, its dataflow graph as
DOT, or a comparison of two saved reports.

The program is a layer — the GRU layer of ``gruc gru``'s flags (the default), ``fc`` the fully
connected layer of ``gruc fc``'s, ``gemm`` the product of ``gruc gemm``'s (``gruc viz fc
--input-size 64 --output-size 32``) — built, compiled, run and checked as its command does (the
exit code is 1 if the check fails), or a saved module given with ``--input`` (text IR or JSON), which is
compiled and run once on zeroed tensors so the report has each step's executions (a program
whose loops depend on its data is better shown with ``--compile-only``).  Both formats show the
program as compiled — by the engine's default pipeline, or by ``--pipeline`` ('' for the program
as built) — so the DOT graph's step numbers are the report's.  The report
(:mod:`gruc.runtime.page`) has the memory per tile by category, the tile map with a page per
tile, liveness over the program steps, the program tree, the cycles per step and per tile and the
BSP trace.  ``--compare A.json B.json`` compares two saved reports (``report.json`` of ``gruc gru
--profile``, or ``Report.to_json``) instead: per category, per tile, and which variables moved
(:mod:`gruc.runtime.compare`).
"""

from __future__ import annotations

import argparse
import sys

from gruc.cli.gru import add_strict_memory_flag
from gruc.cli.layers import DEFAULT_LAYER, ShownLayer, add_layer_commands
from gruc.cli.opt import STDIO, output_file, read_module, write_output
from gruc.errors import GrucValueError
from gruc.ir.module import Module
from gruc.ir.program import fewest_executions
from gruc.plan.static import plan_program
from gruc.runtime.engine import Engine, compile_program
from gruc.runtime.compare import compare_html, load_report
from gruc.runtime.page import require_plotly
from gruc.runtime.report import Report
from gruc.runtime.viz import dataflow_dot
from gruc.status import StatusLine
from gruc.text import first_paragraph

DEFAULT_OUTPUT = {"html": "report.html", "dot": "-"}

MOST_STEPS_RUN = 100_000_000
"""The most steps ``--input`` runs a saved module for: the numba engine takes at least 2 us a
step, so a run past this takes minutes to years (``repeat 4294967295``: three months) and is
refused before it starts."""


def register(parser: argparse.ArgumentParser) -> None:
    """``gruc viz [LAYER]``'s layers and flags, on the parser :func:`gruc.cli.build_parser` made
    for it."""
    add_layer_commands(parser, first_paragraph(__doc__), _add_viz_flags)


def _add_viz_flags(parser: argparse.ArgumentParser, shown: ShownLayer) -> None:
    """What ``gruc viz`` takes besides the layer's flags (a saved module or two saved reports
    only in place of the default layer: ``gruc viz --input m.gruc``)."""
    if shown.name == DEFAULT_LAYER:
        parser.add_argument("--input", metavar="IR", help="a saved module (text IR or JSON; - "
                            "for stdin) instead of the GRU layer; of the layer flags only "
                            "--backend may go with it (as may --format, --pipeline, "
                            "--compile-only, --strict-memory and -o)")
        parser.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                            help="compare two saved reports (report.json of gruc gru --profile) "
                                 "instead of reporting on a program; only -o goes with it")
    parser.set_defaults(input=None, compare=None)
    parser.add_argument("--format", choices=("html", "dot"), default="html",
                        help="html report or DOT dataflow graph (default: html)")
    parser.add_argument("--pipeline", metavar="PIPELINE",
                        help="pass pipeline to compile with, as `gruc opt -p` (default: the "
                             "engine's; '' for the program as built)")
    parser.add_argument("--compile-only", action="store_true",
                        help="plan and report; do not run (the layer's cycles are counted as "
                             "`gruc plan` counts them; a saved module's are not counted)")
    parser.add_argument("-o", "--output", metavar="OUT", type=output_file,
                        help="output file, - for stdout (default: report.html for html, stdout "
                             "for dot, compare.html for --compare)")
    add_strict_memory_flag(parser)
    parser.set_defaults(run=run)


def _report(args: argparse.Namespace, status: StatusLine) -> tuple[str, Report, bool]:
    """The report's title, the report of the compiled (and unless ``--compile-only``, run)
    program, and whether the layer's check passed (True when nothing was checked)."""
    shown: ShownLayer = args.shown
    config = shown.config_from(args)
    if args.input is None:
        status.show("building the layer ...")
        layer = shown.build(config)
        title = shown.title(config)
        if args.compile_only:
            status.show("compiling ...")
            return title, shown.compiled(config, layer, args.pipeline, args.strict_memory), True
        status.show("compiling and running on the simulated IPU ...")
        result = shown.run(config, layer, args.pipeline, args.strict_memory)
        return title, result.engine.report, result.passed
    status.show(f"reading {args.input} ...")
    module = read_module(args.input)
    if module.programs and not args.compile_only:
        steps = fewest_executions(module.programs[0])
        if steps > MOST_STEPS_RUN:
            raise GrucValueError(f"{args.input}: program 0 runs at least {steps:,} steps (its "
                                 f"loops' counts multiply), more than a simulated run can "
                                 f"finish ({MOST_STEPS_RUN:,}); --compile-only reports on it "
                                 "without running")
    status.show("compiling ...")
    if args.compile_only:  # compiled statically, as a layer's plan is: no kernels prepared
        return module_title(args.input), plan_program(
            module.graph, module.programs, runs=(), pipeline=args.pipeline,
            strict_memory=args.strict_memory), True
    engine = Engine(module.graph, module.programs, backend=config.backend, pipeline=args.pipeline,
                    strict_memory=args.strict_memory)
    if module.programs:
        status.show("running on the simulated IPU ...")
        engine.run(0)
    return module_title(args.input), engine.report, True


def module_title(path: str) -> str:
    """The page title of a saved module's report (``--input -``: from standard input)."""
    return "gruc: module from standard input" if path == STDIO else f"gruc: module {path}"


def run(args: argparse.Namespace) -> int:
    """The HTML report, or the DOT dataflow graph (compiled without costs, never run).  Layer flags
    beside ``--input`` are refused rather than ignored; exit code 1 if the layer fails its check."""
    given = [flag for flag, field, _, _ in args.shown.flags if field != "backend"
             and getattr(args, field) is not None]
    if args.input is not None and given:
        raise GrucValueError(f"--input takes the program from a file; drop {', '.join(given)}")
    if args.compare is not None:
        return _compare(args, args.output or "compare.html")
    output = args.output or DEFAULT_OUTPUT[args.format]
    if args.format == "html":
        require_plotly("the HTML report")
    if args.format == "dot":
        if args.input is not None:
            module = read_module(args.input)
        else:
            layer = args.shown.build(args.shown.config_from(args))
            module = Module(layer.graph, layer.programs)
        compiled = compile_program(module.graph, module.programs, pipeline=args.pipeline,
                                   strict_memory=args.strict_memory, costs=False)
        write_output(dataflow_dot(compiled.module), output)
        return 0
    with StatusLine() as status:
        title, report, passed = _report(args, status)
        status.show("drawing the report ...")
        page = report.to_html(title=title)
    write_output(page, output)
    # with the page on stdout, the summary goes to stderr so the HTML stays clean
    out = sys.stderr if output == STDIO else sys.stdout
    print(f"report            {output} ({len(page) / 1024:.1f} KiB)", file=out)
    if not passed:
        print("check             FAILED against the float64 reference", file=out)
    return 0 if passed else 1


def _compare(args: argparse.Namespace, output: str) -> int:
    """The comparison page of two saved reports; every other flag is refused, since nothing is
    built or run."""
    given = [flag for flag, field, _, _ in args.shown.flags if getattr(args, field) is not None]
    given += [flag for flag, value in (("--input", args.input), ("--pipeline", args.pipeline))
              if value is not None]
    given += [flag for flag, value in (("--compile-only", args.compile_only),
                                       ("--strict-memory", args.strict_memory),
                                       ("--format", args.format != "html")) if value]
    if given:
        raise GrucValueError(f"--compare reads two saved reports and builds nothing; drop "
                             f"{', '.join(given)}")
    require_plotly("the comparison page")
    first, second = args.compare
    page = compare_html(load_report(first), load_report(second), (first, second))
    write_output(page, output)
    out = sys.stderr if output == STDIO else sys.stdout
    print(f"comparison        {output} ({len(page) / 1024:.1f} KiB)", file=out)
    return 0
