"""``gruc passes``: list the passes and their options (what ``-p`` pipelines may name)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap

from gruc.passes import PASSES
from gruc.text import first_paragraph


def register(parser: argparse.ArgumentParser) -> None:
    """``gruc passes``'s flags, on the parser :func:`gruc.cli.build_parser` made for it."""
    parser.set_defaults(run=run)


def option_docs(cls: type) -> dict[str, str]:
    """Each option's attribute docstring (the string under the field in the class body), which
    Python keeps nowhere at run time: read from the class's source, if it has one."""
    try:
        body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    except (OSError, TypeError):
        return {}
    docs = {}
    for field, after in zip(body, body[1:]):
        if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[field.target.id] = first_paragraph(after.value.value)
    return docs


def run(args: argparse.Namespace) -> int:
    for name, cls in sorted(PASSES.items()):
        print(f"{name}: {first_paragraph(cls.__doc__)}")
        docs = option_docs(cls)
        for field in dataclasses.fields(cls):
            about = f"  {docs[field.name]}" if field.name in docs else ""
            print(f"    {field.name.replace('_', '-')}={field.default!r}{about}")
    return 0
