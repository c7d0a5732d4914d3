"""Text for people: a count with its noun, and docstrings as the plain text ``--help`` shows.

Every layer writes such text (the memory plan, the report, the command line), so this module
imports nothing of gruc's.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":[a-z]+:`~?(?:[\w.]+\.)?([^`]+)`")
"""A Sphinx role, ``:func:`~gruc.x.name``` -> ``name`` (the last part of a dotted name)."""
_LITERAL = re.compile(r"``([^`]*)``|`([^`]*)`")
"""Inline literals, ````text```` or ```text```."""


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless the count is one: ``1 tile``, ``2 tiles``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def plain(text: str) -> str:
    """``text`` without reStructuredText's markup: roles and inline literals become the words
    they mark (help texts and listings are read in a terminal, not rendered)."""
    return _LITERAL.sub(lambda match: match.group(1) or match.group(2) or "",
                        _ROLE.sub(r"\1", text))


def first_paragraph(text: str | None) -> str:
    """The first paragraph of a docstring, on one line and plain."""
    return plain(" ".join((text or "").strip().split("\n\n")[0].split()))
