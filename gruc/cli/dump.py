"""``gruc dump``: build the GRU layer ``gruc gru`` would run and print its module.

The layer flags are ``gruc gru``'s; ``-p PIPELINE`` runs passes first (``--print-between-passes``
shows the IR after each one on stderr), and ``--format`` picks text IR (the default, re-parsable by
``gruc opt``), JSON or the DOT dataflow graph.  Nothing is compiled or run.
"""

from __future__ import annotations

import argparse

from gruc.cli.gru import add_layer_flags, config_from
from gruc.cli.opt import (FORMATS, add_pipeline_flags, apply_pipeline, format_module, output_file,
                          write_output)
from gruc.ir.module import Module
from gruc.tools.gru_layer import build_layer
from gruc.status import StatusLine
from gruc.text import first_paragraph


def register(parser: argparse.ArgumentParser) -> None:
    """``gruc dump``'s flags, on the parser :func:`gruc.cli.build_parser` made for it."""
    parser.description = first_paragraph(__doc__)
    add_layer_flags(parser, runs=False)
    add_pipeline_flags(parser)
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text IR, JSON or DOT dataflow graph (default: text)")
    parser.add_argument("-o", "--output", metavar="OUT", type=output_file,
                        help="output file (default: stdout)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = config_from(args)
    with StatusLine() as status:
        status.show("building the layer ...")
        layer = build_layer(config)
    module = apply_pipeline(Module(layer.graph, layer.programs), args)
    write_output(format_module(module, args.format), args.output)
    return 0
