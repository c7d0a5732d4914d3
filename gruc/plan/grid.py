"""Sweep grids: which layer flags vary, over which values, and the configurations they make.

A :class:`SweepSpec` names the kind of layer it plans (``gru``, the default, ``fc`` or ``gemm``:
:data:`~gruc.plan.layers.PLANNED_LAYERS`) and holds fixed flags and swept ones (each with a tuple
of values); its configurations are the cross product, first swept flag outermost, each validated
by the kind's model (:class:`~gruc.tools.gru_layer.GruLayerConfig`,
:class:`~gruc.tools.products.FcConfig`, :class:`~gruc.tools.products.GemmConfig`).
:func:`parse_values` reads one flag's values from the command line:

* a list ``1,4,16``;
* a range ``START:STOP`` or ``START:STOP:STEP`` — **inclusive** of ``STOP`` when the steps land on
  it (``128:1024:128`` is 128, 256, ..., 1024; ``1:10:4`` is 1, 5, 9), like the value lists people
  write by hand; a negative step counts down; float flags take float ranges;
* flags whose single value is already a comma list (the GRU layer's ``--cell-order`` and
  ``--variable-time-steps``) separate alternatives with ``/``:
  ``--variable-time-steps 97,67,87/50,50,50``.

A spec's ``ties`` and ``products`` make some flags follow others (:mod:`gruc.plan.derived`):
every configuration gets them derived, and a combination whose fixed product does not divide is
skipped (:meth:`SweepSpec.grid` says which).
"""

from __future__ import annotations

import argparse
import itertools
import math
from typing import Any, Callable

from pydantic import Field, model_validator

from gruc.errors import GrucTypeError, GrucValueError
from gruc.plan.derived import Derivation, NotAMultiple, check_relations, flag_of, resolve
from gruc.plan.layers import PLANNED_LAYERS, planned_layer
from gruc.plan.planned import PlannedLayer, effective_pipeline
from gruc.plan.rows import cell_text
from gruc.validated import GrucModel

MAX_CONFIGURATIONS = 1_000_000
"""A grid larger than this is almost surely a typo in a range (and would not finish anyway)."""


class SweepSpec(GrucModel):
    """A planning sweep over the flags of one kind of layer (its model's field names)."""

    layer: str = Field("gru", description="The kind of layer planned: "
                                          f"{', '.join(PLANNED_LAYERS)}.")
    fixed: dict[str, Any] = Field(default_factory=dict,
                                  description="Flags every configuration shares.")
    swept: dict[str, tuple[Any, ...]] = Field(
        default_factory=dict, description="Flags to sweep, each with its values (in order); the "
                                          "cross product is swept, the first flag outermost.")
    pipeline: str | None = Field(
        None, description="Pass pipeline to compile with (None: the engine's default; '': none).")
    ties: tuple[tuple[str, str], ...] = Field(
        (), description="(A, B) pairs: flag B takes flag A's value (see gruc.plan.derived).")
    products: tuple[tuple[str, str, int], ...] = Field(
        (), description="(A, B, N): A * B = N, the factor not given derived from the other.")
    searched: str | None = Field(
        None, description="The flag a find-max searches: it drives the flags tied to it.")

    @model_validator(mode="after")
    def _known_flags(self) -> "SweepSpec":
        """Refuse, when the spec is made, a grid no sweep should start: a layer gruc does not
        plan, flags a plan of it does not depend on, a flag both fixed and swept, a swept flag
        without values, a pipeline that does not parse, more than MAX_CONFIGURATIONS points."""
        allowed = planned_layer(self.layer).flags
        for name in [*self.fixed, *self.swept]:
            if name not in allowed:
                raise ValueError(f"{name!r} is not a layer flag a {self.layer} plan depends "
                                 f"on; flags: {', '.join(allowed)}")
        both = sorted(set(self.fixed) & set(self.swept))
        if both:
            raise ValueError(f"flags {both} are both fixed and swept")
        empty = [name for name, values in self.swept.items() if not values]
        if empty:
            raise ValueError(f"swept flags {empty} have no values")
        effective_pipeline(self.pipeline)  # a pipeline that does not parse is refused here
        kind = self.kind  # relations wrong whatever a study gives are refused here
        check_relations(self.ties, self.products, flags=kind.flags,
                        integer_flags=kind.searchable)
        size = self.size
        if size > MAX_CONFIGURATIONS:
            raise ValueError(f"the grid has {size} configurations, more than "
                             f"{MAX_CONFIGURATIONS}; check the ranges")
        return self

    @property
    def derivation(self) -> Derivation:
        """The flags that follow others in this study, resolved: a driver given twice, or none,
        is refused here (:func:`~gruc.plan.derived.resolve`)."""
        kind = self.kind
        defaults = {name: field.default for name, field in kind.model.model_fields.items()}
        return resolve(self.ties, self.products, flags=kind.flags, integer_flags=kind.searchable,
                       given=[*self.fixed, *self.swept], searched=self.searched,
                       defaults=defaults)

    @property
    def derived(self) -> tuple[str, ...]:
        """The flags no configuration gives, derived from others (columns of every row)."""
        return self.derivation.derived

    @property
    def kind(self) -> PlannedLayer:
        """The kind of layer planned."""
        return PLANNED_LAYERS[self.layer]

    @property
    def size(self) -> int:
        """How many configurations the grid has."""
        return math.prod(len(values) for values in self.swept.values())

    @property
    def parameters(self) -> tuple[str, ...]:
        """The swept flags, in grid order (the leading columns of every row)."""
        return tuple(self.swept)

    def configs(self) -> list[Any]:
        """Every configuration of the grid, validated (less those :meth:`grid` skips)."""
        return self.grid()[0]

    def grid(self) -> tuple[list[Any], list[str]]:
        """Every configuration of the grid, validated, with its derived flags set; and why each
        combination a fixed product does not divide was skipped.  A combination the layer
        refuses raises :class:`~gruc.errors.GrucValueError` naming it, and so does a flag the
        layer has no default for that is neither fixed nor swept."""
        model, derivation = self.kind.model, self.derivation
        given = {*self.fixed, *self.swept, *derivation.derived}
        lacking = [name for name, field in model.model_fields.items()
                   if field.is_required() and name not in given]
        if lacking:
            flags = ", ".join(map(flag_of, lacking))
            raise GrucValueError(f"{self.layer} plans need {', '.join(lacking)} ({flags}): "
                                 "give each one value, a list or a range")
        result, skipped = [], []
        for combo in itertools.product(*self.swept.values()):
            values = dict(zip(self.swept, combo))
            named = ", ".join(f"{k}={cell_text(v)}" for k, v in values.items())
            where = f"configuration {named}" if named else "the fixed flags"
            try:
                flags = derivation.apply({**self.fixed, **values})
            except NotAMultiple as error:
                skipped.append(f"{where}: {error}")
                continue
            try:
                result.append(model(**flags))
            except GrucValueError as error:
                raise type(error)(f"{where}: {error}") from None
        return result, skipped

    def with_value(self, name: str, value: Any) -> "SweepSpec":
        """This sweep with flag ``name`` fixed to ``value`` (no longer swept)."""
        return self.but(fixed={**self.fixed, name: value},
                        swept={k: v for k, v in self.swept.items() if k != name})

    def but(self, **changes: Any) -> "SweepSpec":
        """This spec with ``changes`` to its fields, validated again."""
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        return SweepSpec(**{**fields, **changes})


def _number_range(text: str, convert: Callable[[str], Any], flag: str) -> tuple:
    """The values of ``START:STOP[:STEP]``, STOP included when the steps reach it (counted in
    integers for an integer flag; for a float one a small tolerance absorbs float error).  Float values are rounded to 12 decimals so ``0.1:0.3:0.1`` gives 0.3, not
    0.30000000000000004."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(p.strip() for p in parts):
        raise GrucValueError(f"{flag} range {text!r} must be START:STOP or START:STOP:STEP")
    if convert not in (int, float):
        raise GrucValueError(f"{flag} takes no ranges ({text!r}); give a list like a,b,c")
    try:
        start, stop = convert(parts[0]), convert(parts[1])
        step = convert(parts[2]) if len(parts) == 3 else convert("1")
    except ValueError:
        raise GrucValueError(f"{flag} range {text!r} needs {convert.__name__} bounds and step") \
            from None
    if not all(math.isfinite(value) for value in (start, stop, step)):
        raise GrucValueError(f"{flag} range {text!r} needs finite bounds and step")
    if step == 0:
        raise GrucValueError(f"{flag} range {text!r} has step 0")
    if convert is int:  # exact: a float quotient miscounts past 2^53
        count = (stop - start) // step + 1
    else:
        count = math.floor((stop - start) / step + 1e-9) + 1
    if count < 1:
        raise GrucValueError(f"{flag} range {text!r} is empty (STOP is behind START for STEP "
                             f"{step})")
    if count > MAX_CONFIGURATIONS:
        raise GrucValueError(f"{flag} range {text!r} has {count} values; check it")
    if convert is int:
        return tuple(start + k * step for k in range(count))
    return tuple(round(start + k * step, 12) for k in range(count))


def check_spec(spec: object, what: str) -> None:
    """Sweep entry points take a :class:`SweepSpec`; anything else is named, not failed on."""
    if not isinstance(spec, SweepSpec):
        raise GrucTypeError(f"{what} needs a SweepSpec, got {type(spec).__name__}")


def parse_values(text: str, convert: Callable[[str], Any], *, flag: str,
                 tuple_valued: bool = False) -> tuple:
    """The values of one flag from its command-line text (see the module doc for the forms)."""
    text = text.strip()
    if not tuple_valued and ":" in text:
        return _number_range(text, convert, flag)
    separator = "/" if tuple_valued else ","
    parts = [part.strip() for part in text.split(separator)]
    if not all(parts):
        raise GrucValueError(f"{flag} value {text!r} has an empty item; write "
                             f"a{separator}b{separator}c")
    values = []
    for part in parts:
        try:
            values.append(convert(part))
        except (ValueError, argparse.ArgumentTypeError) as error:
            raise GrucValueError(f"{flag} value {part!r}: {error}") from None
    return tuple(dict.fromkeys(values))  # a value given twice is one configuration
