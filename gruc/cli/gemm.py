"""``gruc gemm``: build, plan, run and check ``C = beta C + alpha op(A) op(B)`` (poplibs'
``general_matrix_multiply`` tool)."""

from __future__ import annotations

import argparse

from gruc.cli.gru import _bool
from gruc.cli.products import add_flags, config_from, run_tool
from gruc.tools.products import GemmConfig, build_gemm

FLAGS = [
    ("--m", "m", int, "rows of op(A) and C (required)"),
    ("--k", "k", int, "columns of op(A), rows of op(B) (required)"),
    ("--n", "n", int, "columns of op(B) and C (required)"),
    ("--g", "g", int, "groups (default: 1)"),
    ("--alpha", "alpha", float, "scale of the product (default: 1)"),
    ("--beta", "beta", float, "scale of C (default: 1)"),
    ("--transpose-a", "transpose_a", _bool, "A is stored [k, m]: op(A) = A^T (0/1)"),
    ("--transpose-b", "transpose_b", _bool, "B is stored [n, k]: op(B) = B^T (0/1)"),
]


TITLE = "general matrix multiply"


def title(config: GemmConfig) -> str:
    """The product in one line: its sizes, type, scales and transposes."""
    return (f"{TITLE}: G={config.g} M={config.m} K={config.k} N={config.n} "
            f"{config.data_type} alpha={config.alpha:g} beta={config.beta:g}"
            + (" A^T" if config.transpose_a else "") + (" B^T" if config.transpose_b else ""))


def register(parser: argparse.ArgumentParser) -> None:
    """``gruc gemm``'s flags, on the parser :func:`gruc.cli.build_parser` made for it."""
    parser.description = __doc__.splitlines()[0]
    add_flags(parser, FLAGS, required=("--m", "--k", "--n"))
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = config_from(args, FLAGS, GemmConfig)
    return run_tool(args, title(config), config, build_gemm)
