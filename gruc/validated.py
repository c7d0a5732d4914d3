"""Pydantic at the boundary, GrucError to the user.

Every validated configuration (Target, GruParams, GruOptions, sweep specs) derives from
:class:`GrucModel`: frozen, ``extra="forbid"`` so a misspelt key is rejected rather than ignored,
and with pydantic's ``ValidationError`` turned into a :class:`~gruc.errors.GrucValueError` whose
message names each bad field, the value given and what is allowed — one line per problem.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from gruc.errors import GrucOptionError, GrucTypeError, GrucValueError


def describe_validation_error(model_name: str, error: ValidationError) -> str:
    """Render pydantic's errors as ``Model.field = value: reason`` lines."""
    lines = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"])
        reason = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            reason = "unknown field"
        if field:
            lines.append(f"{model_name}.{field} = {item.get('input')!r}: {reason}")
        else:
            lines.append(f"{model_name}: {reason}")
    return "; ".join(lines)


def _scalar_kinds(annotation: Any) -> set[type]:
    """The plain scalar types a field annotation admits (``int | None`` -> ``{int}``)."""
    options = typing.get_args(annotation) if typing.get_origin(annotation) in (
        typing.Union, types.UnionType) else (annotation,)
    return {kind for kind in options if kind in (bool, int, float)}


class GrucModel(BaseModel):
    """Base of gruc's validated, immutable configuration models.

    Numbers are taken as numbers: pydantic's lax mode would read ``True`` as the tile count 1,
    ``"16"`` as 16 and ``"no"`` as False, hiding a caller's mix-up, so a bool where a number is
    wanted, or a string where a number or a switch is, is a GrucTypeError.  (Option models whose
    poplibs counterparts are string flags set ``numbers_from_strings``.)  Infinite and NaN floats
    are refused: no figure of a target, layer or option is infinite."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True,
                              allow_inf_nan=False)
    numbers_from_strings: ClassVar[bool] = False

    def __init__(self, **data: Any) -> None:
        fields = type(self).model_fields
        for name, value in data.items():
            field = fields.get(name) or next((f for f in fields.values() if f.alias == name), None)
            kinds = _scalar_kinds(field.annotation) if field is not None else set()
            if not kinds:
                continue
            wanted = " or ".join(k.__name__ for k in sorted(kinds, key=lambda k: k.__name__))
            loose_bool = isinstance(value, (bool, np.bool_)) and bool not in kinds
            loose_string = isinstance(value, str) and not type(self).numbers_from_strings
            if loose_bool or loose_string:
                raise GrucTypeError(f"{type(self).__name__}.{name} = {value!r}: must be "
                                    f"{wanted}, not {type(value).__name__}")
        try:
            super().__init__(**data)
        except ValidationError as error:
            message = describe_validation_error(type(self).__name__, error)
            if any(item["type"] == "extra_forbidden" for item in error.errors()):
                allowed = ", ".join(sorted(type(self).model_fields))
                raise GrucOptionError(f"{message} (allowed fields: {allowed})") from None
            raise GrucValueError(message) from None

    def __setattr__(self, name: str, value: Any) -> None:
        """Frozen: pydantic's own refusal is a ValidationError, not a GrucError."""
        raise GrucTypeError(f"{type(self).__name__} is immutable: cannot set {name!r}; build a "
                            f"new {type(self).__name__} with the value you want")


class OptionFlags(GrucModel):
    """poplibs-style option flags: built from a dict of poplibs names (``{"partialsType":
    "half"}``; field names work too), a model, or None.  poplibs' OptionFlags are strings, so
    numbers may come as strings.  Every problem is a GrucOptionError in poplibs' words, naming
    the option as the caller spelt it."""

    model_config = ConfigDict(populate_by_name=True)
    numbers_from_strings: ClassVar[bool] = True
    kind: ClassVar[str] = "option"
    """What the options configure, for messages (``"GRU"``, ``"matmul"``)."""

    @classmethod
    def parse(cls, options: Any) -> Any:
        """The options of ``options`` (None, a model, or a dict by poplibs or field names).  An
        unknown key is refused before validation, and a bad value's message is reworded to name the
        option as poplibs does, both as GrucOptionErrors."""
        if options is None:
            return cls()
        if isinstance(options, cls):
            return options
        if not isinstance(options, Mapping):
            raise GrucTypeError(f"{cls.kind} options must be a dict or {cls.__name__}, got "
                                  f"{type(options).__name__}")
        names = {field.alias or name: name for name, field in cls.model_fields.items()}
        unknown = [key for key in options if key not in names and key not in names.values()]
        if unknown:
            raise GrucOptionError(f"Unrecognised {cls.kind} option {unknown[0]!r}; valid "
                                  f"options: {', '.join(sorted(names))}")
        try:
            return cls(**options)
        except GrucOptionError:
            raise
        except GrucValueError as error:  # a bad value of a known option is an option error
            message = str(error)
            for poplibs_name, name in names.items():
                for spelt in (name, poplibs_name):
                    message = message.replace(f"{cls.__name__}.{spelt} ", f"{poplibs_name} ")
            raise GrucOptionError(f"bad {cls.kind} option: {message}") from None
