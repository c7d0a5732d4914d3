"""Element types: HALF, FLOAT, INT, UNSIGNED_INT, BOOL.

A type knows its byte size (which drives all memory accounting), the numpy dtype it is stored as
in simulated tile memory, and the numpy dtype it is computed in.  HALF is stored as float16 but
computed in float32, because numba has no float16 arithmetic on the CPU; results are rounded back
to float16 when stored, as a half-precision vertex would.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gruc.errors import GrucTypeError


@dataclass(frozen=True, slots=True)
class DType:
    """One element type of the IR."""

    name: str
    """Poplar-style name used in text IR and messages (``half``, ``float``, ``int``, ...)."""
    short: str
    """Short IR spelling (``f16``, ``f32``, ``i32``, ``u32``, ``bool``)."""
    size: int
    """Bytes per element in tile memory."""
    storage: np.dtype
    """numpy dtype of elements as stored in simulated memory."""
    compute: np.dtype
    """numpy dtype the vertices compute in."""

    @property
    def is_float(self) -> bool:
        return self.storage.kind == "f"

    def __repr__(self) -> str:
        return self.name.upper()

    def __str__(self) -> str:
        return self.short


HALF = DType("half", "f16", 2, np.dtype(np.float16), np.dtype(np.float32))
FLOAT = DType("float", "f32", 4, np.dtype(np.float32), np.dtype(np.float32))
INT = DType("int", "i32", 4, np.dtype(np.int32), np.dtype(np.int32))
UNSIGNED_INT = DType("unsigned_int", "u32", 4, np.dtype(np.uint32), np.dtype(np.uint32))
BOOL = DType("bool", "bool", 1, np.dtype(np.bool_), np.dtype(np.bool_))

ALL_TYPES: tuple[DType, ...] = (HALF, FLOAT, INT, UNSIGNED_INT, BOOL)
_BY_NAME = {t.name: t for t in ALL_TYPES} | {t.short: t for t in ALL_TYPES}
_BY_NAME |= {"unsigned": UNSIGNED_INT, "uint": UNSIGNED_INT, "float16": HALF, "float32": FLOAT}


def dtype_of(value: DType | str) -> DType:
    """Return the :class:`DType` named by ``value`` (a DType, or one of its names)."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value.lower() in _BY_NAME:
        return _BY_NAME[value.lower()]
    allowed = ", ".join(t.name for t in ALL_TYPES)
    raise GrucTypeError(f"unknown element type {value!r}; allowed: {allowed}")


def float_type_name(value: DType | str, what: str = "type") -> str:
    """The canonical name of the floating-point type ``value`` names by any name
    :func:`dtype_of` takes, so two spellings make one configuration (one sweep row); a
    ``ValueError`` naming ``value`` otherwise, as a pydantic validator raises it."""
    try:
        dtype = dtype_of(value)
    except GrucTypeError:
        dtype = None
    if dtype is None or not dtype.is_float:
        raise ValueError(f"{what} {value!r} is not one of: half, float")
    return dtype.name
