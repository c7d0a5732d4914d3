"""``gruc fc``: build, plan, run and check a fully connected layer (poplibs'
``fully_connected_layer`` tool): its forward product, backward product and weight update."""

from __future__ import annotations

import argparse

from gruc.cli.gru import _bool
from gruc.cli.products import add_flags, config_from, run_tool
from gruc.tools.products import PASSES, FcConfig, build_fc

FLAGS = [
    ("--batch-size", "batch_size", int, "B, rows of activations (default: 1)"),
    ("--input-size", "input_size", int, "I, input features (required)"),
    ("--output-size", "output_size", int, "O, output features (required)"),
    ("--num-groups", "num_groups", int, "G, independent layers (default: 1)"),
    ("--bias", "bias", _bool, "add and update a bias (0/1; default: 1)"),
    ("--pass", "pass_", str, f"{' | '.join(PASSES)} (default: all)"),
]


TITLE = "fully connected layer"


def title(config: FcConfig) -> str:
    """The layer in one line: its sizes, type and pass (a run's first line, a report's title)."""
    return (f"{TITLE}: B={config.batch_size} I={config.input_size} O={config.output_size} "
            f"G={config.num_groups} {config.data_type} pass={config.pass_}"
            + (" bias" if config.bias else ""))


def register(parser: argparse.ArgumentParser) -> None:
    """``gruc fc``'s flags, on the parser :func:`gruc.cli.build_parser` made for it."""
    parser.description = __doc__.splitlines()[0]
    add_flags(parser, FLAGS, required=("--input-size", "--output-size"))
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = config_from(args, FLAGS, FcConfig)
    return run_tool(args, title(config), config, build_fc)
