"""Pydantic at the boundary, GrucError to the user.

Every validated configuration (Target, GruParams, GruOptions, sweep specs) derives from
:class:`GrucModel`: frozen, ``extra="forbid"`` so a misspelt key is rejected rather than ignored,
and with pydantic's ``ValidationError`` turned into a :class:`~gruc.errors.GrucValueError` whose
message names each bad field, the value given and what is allowed — one line per problem.
"""

from __future__ import annotations

from typing import Any

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


class GrucModel(BaseModel):
    """Base of gruc's validated, immutable configuration models."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    def __init__(self, **data: Any) -> None:
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
