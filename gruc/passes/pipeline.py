"""Pipelines: pass lists written as strings, parsed in one place, run with verification between.

A pipeline string names passes separated by commas, each optionally with options in braces:
``inplace-fusion,shard{num-shards=4},plan-memory{strict=true}``.  Option names are the pass's
dataclass fields in kebab-case; values are parsed by the field's type (int, float, bool, str, or
an optional of one of them, ``none`` for None).  :func:`parse_pipeline` and :func:`format_pipeline`
are inverses, so a pipeline printed in a report can be pasted back on a command line.

:func:`run_pipeline` verifies its input (a broken input is reported as such, not as the failure of
the first pass) and applies the passes in order.  With ``verify_each`` the verifier runs after
every pass (tests run with it on), so a pass that breaks the IR is named at once; with
``print_between`` the module is printed after each pass; with ``time_passes`` each pass's wall time
is recorded in the returned :class:`PipelineRun`.
"""

from __future__ import annotations

import dataclasses
import re
import time
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Protocol

from gruc.errors import (GrucError, GrucOptionError, GrucParseError, GrucTypeError,
                         GrucVerifyError)
from gruc.ir.module import Module


class Pass(Protocol):
    """A module transformation: a frozen dataclass with a ``name`` and one ``apply``."""

    name: ClassVar[str]

    def apply(self, module: Module) -> Module:
        """Return the transformed module (the input may be reused or left unchanged)."""


_ITEM = re.compile(r"\s*([a-z][a-z0-9-]*)\s*(?:\{([^{}]*)\})?\s*(?:,|$)")


def _registry() -> dict[str, type]:
    from gruc.passes import PASSES  # the table imports every pass module

    return PASSES


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _parse_value(text: str, annotation: Any, where: str) -> Any:
    """One option value as the field's annotation allows: ``none`` for an optional field, else the
    first of its types that reads the text (a bool as true/false, 1/0 or yes/no); a GrucOptionError
    naming ``where`` otherwise."""
    text = text.strip()
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) or \
        typing.get_origin(annotation) is typing.Union else (annotation,)
    if type(None) in options and text.lower() == "none":
        return None
    for kind in (t for t in options if t is not type(None)):
        if kind is bool:
            if text.lower() in ("true", "1", "yes"):
                return True
            if text.lower() in ("false", "0", "no"):
                return False
        elif kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                continue
        elif kind is str:
            return text
    allowed = " or ".join(getattr(t, "__name__", str(t)) for t in options)
    raise GrucOptionError(f"{where}: value {text!r} is not a valid {allowed}")


def _make_pass(name: str, options_text: str | None) -> Pass:
    """The pass ``name`` with options from ``key=value`` text, keys spelt with dashes as
    ``gruc passes`` lists them.  Unknown, repeated and malformed options are refused, never
    ignored."""
    registry = _registry()
    if name not in registry:
        raise GrucOptionError(f"unknown pass {name!r}; passes: {', '.join(sorted(registry))}")
    cls = registry[name]
    fields = _field_types(cls)
    kwargs: dict[str, Any] = {}
    items = [part.strip() for part in options_text.split(",")] if options_text else []
    if items and not all(items):
        raise GrucParseError(f"pass {name!r}: empty option in {{{options_text}}}; write "
                             "key=value items separated by single commas")
    for item in items:
        if "=" not in item:
            raise GrucParseError(f"pass {name!r}: option {item!r} must be written key=value")
        key, value = item.split("=", 1)
        attribute = key.strip().replace("-", "_")
        if attribute not in fields:
            valid = ", ".join(k.replace("_", "-") for k in fields) or "none"
            raise GrucOptionError(f"pass {name!r} has no option {key.strip()!r}; options: {valid}")
        if attribute in kwargs:
            raise GrucOptionError(f"pass {name!r}: option {key.strip()!r} is given twice")
        kwargs[attribute] = _parse_value(value, fields[attribute], f"pass {name!r} option {key.strip()!r}")
    try:
        return cls(**kwargs)
    except GrucError as error:
        raise GrucOptionError(f"pass {name!r}: {error}") from None


def parse_pipeline(text: str) -> list[Pass]:
    """The passes a pipeline string names, with their options."""
    if not isinstance(text, str):
        raise GrucParseError(f"a pipeline must be a string, got {type(text).__name__}")
    passes, at = [], 0
    text = text.strip()
    while at < len(text):
        match = _ITEM.match(text, at)
        if match is None or match.end() == at:
            raise GrucParseError(f"cannot parse pipeline {text!r} at column {at + 1}: expected "
                                 "pass-name or pass-name{key=value,...}")
        passes.append(_make_pass(match.group(1), match.group(2)))
        at = match.end()
    if text.endswith(","):
        raise GrucParseError(f"cannot parse pipeline {text!r} at column {len(text) + 1}: "
                             "expected a pass name after the last ','")
    return passes


def _format_value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def format_pipeline(passes: list[Pass]) -> str:
    """The pipeline string of ``passes`` (options that differ from their defaults only)."""
    items = []
    for p in passes:
        options = []
        for f in dataclasses.fields(p):
            value = getattr(p, f.name)
            default = f.default if f.default is not dataclasses.MISSING else None
            if value != default:
                options.append(f"{f.name.replace('_', '-')}={_format_value(value)}")
        items.append(p.name + ("{" + ",".join(options) + "}" if options else ""))
    return ",".join(items)


@dataclass
class PipelineRun:
    """What running a pipeline did: the module after each pass and the time each took."""

    module: Module
    timings: list[tuple[str, float]] = field(default_factory=list)


def run_pipeline(module: Module, pipeline: str | list[Pass], *, verify_each: bool = False,
                 print_between: Callable[[str, Module], None] | None = None,
                 time_passes: bool = False) -> PipelineRun:
    """Apply ``pipeline`` to ``module``; see the module docstring for the switches."""
    from gruc.ir.verify import verify
    from gruc.passes.rewrite import verified

    if not isinstance(module, Module):
        raise GrucTypeError(f"run_pipeline needs a Module, got {type(module).__name__}")
    passes = parse_pipeline(pipeline) if isinstance(pipeline, str) else list(pipeline)
    run = PipelineRun(module)
    if passes or verify_each:  # the first pass would verify it anyway, and blame itself
        try:
            run.module = verified(module)
        except GrucError as error:
            raise type(error)(f"the input module is not valid: {error}") from None
    for p in passes:
        start = time.perf_counter()
        try:
            run.module = p.apply(run.module)
        except GrucError as error:
            raise type(error)(f"pass {p.name!r} failed: {error}") from None
        if time_passes:
            run.timings.append((p.name, time.perf_counter() - start))
        if verify_each:
            try:
                verify(run.module)
            except GrucVerifyError as error:
                raise GrucVerifyError(f"after pass {p.name!r}: {error}") from None
        if print_between is not None:
            print_between(p.name, run.module)
    return run
