"""The layers ``gruc viz`` and ``gruc trace`` show: ``gru`` (the default, the layer of ``gruc
gru``), ``fc`` (``gruc fc``) and ``gemm`` (``gruc gemm``), each with its own command's flags.

Why one table: a report or a trace of a fully connected layer or a product is as much a planner's
question as a GRU's (poplibs' product benchmarks are most of Poplar's published figures), and
each command that shows a layer should build, compile, run and check it exactly as the layer's
own command does, so ``gruc viz fc ...`` and ``gruc fc ... --profile`` draw the same numbers.
A command picks its layer with a first word (``gruc viz fc --input-size 8 ...``); words that
start with a flag mean the GRU layer, as before (``gruc viz --batch-size 4``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable

from gruc.cli import fc as fc_command
from gruc.cli import gemm as gemm_command
from gruc.cli import gru as gru_command
from gruc.cli import products
from gruc.tools.gru_layer import build_layer, run_layer
from gruc.tools.products import FcConfig, GemmConfig, build_fc, build_gemm, run_product_layer

DEFAULT_LAYER = "gru"


@dataclass(frozen=True)
class ShownLayer:
    """One kind of layer a report or trace is made of: its flags, and its command's way of
    building, compiling (``compiled``: not run, its report counting the runs the command would
    make) and running (``run``: compiled, run and checked; the result has ``engine``,
    ``checked`` and ``passed``) it."""

    name: str
    summary: str
    flags: list
    """``(flag, config field, type, help)`` of the layer's command."""
    add_flags: Callable[[argparse.ArgumentParser], None]
    config_from: Callable[[argparse.Namespace], Any]
    title: Callable[[Any], str]
    build: Callable[[Any], Any]
    compiled: Callable[[Any, Any, "str | None", bool], Any]
    run: Callable[[Any, Any, "str | None", bool], Any]


def _product(name: str, command: Any, model: type, build: Callable[[Any], Any],
             required: tuple[str, ...]) -> ShownLayer:
    """A product tool's layer (``gruc fc``, ``gruc gemm``)."""
    flags = command.FLAGS + products.COMMON_FLAGS
    return ShownLayer(
        name, f"the {command.TITLE} of gruc {name}", flags,
        add_flags=lambda parser: products.add_layer_flags(parser, command.FLAGS, required),
        config_from=lambda args: products.config_from(args, command.FLAGS, model),
        title=lambda config: f"gruc: {command.title(config)}", build=build,
        compiled=products.compiled_only,
        run=lambda config, layer, pipeline, strict: run_product_layer(layer, strict, pipeline))


SHOWN_LAYERS = {
    "gru": ShownLayer(
        "gru", "the GRU layer of gruc gru (the default)", gru_command.FLAGS,
        add_flags=gru_command.add_layer_flags, config_from=gru_command.config_from,
        title=gru_command.layer_title, build=build_layer, compiled=gru_command.compiled_only,
        run=run_layer),
    "fc": _product("fc", fc_command, FcConfig, build_fc, ("--input-size", "--output-size")),
    "gemm": _product("gemm", gemm_command, GemmConfig, build_gemm, ("--m", "--k", "--n")),
}
"""The layers ``gruc viz`` and ``gruc trace`` take, by their first word."""


def add_layer_commands(parser: argparse.ArgumentParser, description: str,
                       add_command_flags: Callable[[argparse.ArgumentParser, ShownLayer], None]
                       ) -> None:
    """A sub-command per layer on ``parser`` (a :class:`~gruc.cli.OneLineParser`; ``gru`` when
    the words start with a flag), each with the layer's flags and then ``add_command_flags``'s
    (the showing command's own: output, pipeline, ...); the chosen layer is ``args.shown``."""
    parser.description = description
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.default_command = DEFAULT_LAYER
    layers = parser.add_subparsers(dest="layer", metavar="LAYER", required=True,
                                   title=f"layers (default: {DEFAULT_LAYER})")
    for name, shown in SHOWN_LAYERS.items():
        command = layers.add_parser(name, help=shown.summary, description=description,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        shown.add_flags(command)
        add_command_flags(command, shown)
        command.set_defaults(shown=shown)
