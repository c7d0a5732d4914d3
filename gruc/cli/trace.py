"""``gruc trace [LAYER]``: run a layer and write the Chrome trace of its BSP execution.

The layer is the GRU layer of ``gruc gru``'s flags (the default), ``fc`` the fully connected
layer of ``gruc fc``'s or ``gemm`` the product of ``gruc gemm``'s (``gruc trace fc --input-size
64 --output-size 32``).

The trace (``chrome://tracing`` or ui.perfetto.dev) has one process per IPU, a control track and
at most 64 tile-group tracks per IPU, so a 1,472-tile run stays small enough to load.  The layer is
checked against the float64 reference as by its own command: the exit code is 1 if the check fails.
"""

from __future__ import annotations

import argparse
import json
import sys

from gruc.cli.gru import add_strict_memory_flag
from gruc.cli.layers import ShownLayer, add_layer_commands
from gruc.cli.opt import STDIO, output_file, write_output
from gruc.status import StatusLine
from gruc.text import plural
from gruc.text import first_paragraph


def register(parser: argparse.ArgumentParser) -> None:
    """``gruc trace [LAYER]``'s layers and flags, on the parser :func:`gruc.cli.build_parser`
    made for it."""
    add_layer_commands(parser, first_paragraph(__doc__), _add_trace_flags)


def _add_trace_flags(parser: argparse.ArgumentParser, shown: ShownLayer) -> None:
    """What ``gruc trace`` takes besides the layer's flags."""
    parser.add_argument("-o", "--output", metavar="OUT", default="trace.json", type=output_file,
                        help="trace file, - for stdout (default: trace.json)")
    add_strict_memory_flag(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the layer and write its Chrome trace (even when the layer fails its check); exit code 1
    if it fails the check against the float64 reference."""
    shown: ShownLayer = args.shown
    config = shown.config_from(args)
    with StatusLine() as status:
        status.show("building the layer ...")
        layer = shown.build(config)
        status.show("compiling and running on the simulated IPU ...")
        result = shown.run(config, layer, None, args.strict_memory)
    trace = result.engine.chrome_trace()
    text = json.dumps(trace)
    write_output(text, args.output)
    # with the trace on stdout, the summary goes to stderr so the JSON stays clean
    out = sys.stderr if args.output == STDIO else sys.stdout
    print(f"trace             {args.output}: {len(trace['traceEvents'])} events, "
          f"{len(text) / 1024:.1f} KiB, {trace['otherData']['cycles']} cycles, "
          f"{plural(trace['otherData']['tiles_per_track'], 'tile')} per track", file=out)
    if not result.checked:
        print("check             none: nothing read back (--ignore-data)", file=out)
        return 0
    print("check             " + ("PASSED" if result.passed else "FAILED")
          + " against the float64 reference", file=out)
    return 0 if result.passed else 1
