"""``gruc passes``: list the passes and their options (what ``-p`` pipelines may name)."""

from __future__ import annotations

import argparse
import dataclasses

from gruc.passes import PASSES


def register(commands) -> None:
    parser = commands.add_parser("passes", help="list passes and their options")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    for name, cls in sorted(PASSES.items()):
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        print(f"{name}: {doc}")
        for field in dataclasses.fields(cls):
            print(f"    {field.name.replace('_', '-')}={field.default!r}")
    return 0
