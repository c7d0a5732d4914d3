"""Every error gruc raises on purpose, in one place.

All of them derive from :class:`GrucError`, so a caller (or the CLI, which turns them into a one-line
message and exit code 2) can catch the family without catching programming errors.  Each message
names the offending value and what would have been allowed.
"""

from __future__ import annotations


class GrucError(Exception):
    """Base class: a request gruc cannot honour, explained in the message."""


class GrucTypeError(GrucError, TypeError):
    """A value of the wrong type or element type (dtype) was given."""


class GrucValueError(GrucError, ValueError):
    """A value of the right type but outside what is allowed (sizes, ranges, options)."""


class GrucShapeError(GrucValueError):
    """Tensor shapes that do not fit together."""


class GrucIndexError(GrucValueError, IndexError):
    """An index, slice or tile number past the end of what it indexes."""


class GrucOptionError(GrucValueError):
    """An unknown option key or a bad option value (poplibs' ``invalid_option``)."""


class GrucMappingError(GrucValueError):
    """A tile mapping that is incomplete, overlapping or names a tile the target lacks."""


class GrucFileError(GrucError, OSError):
    """A file gruc was asked to read or write cannot be: the message names the path and the
    system's reason.  An ``OSError`` too, so ``except OSError`` still catches it."""

    @classmethod
    def about(cls, path: object, doing: str, error: OSError) -> "GrucFileError":
        """``cannot <doing> <path>: <reason>`` for the ``OSError`` a read or write of ``path``
        raised, keeping its ``errno`` and naming ``path`` as its ``filename``."""
        path = str(path)
        made = cls(f"cannot {doing} {path}: {error.strerror or error}")
        made.errno, made.strerror, made.filename = error.errno, error.strerror, path
        return made

    def __str__(self) -> str:
        """The message alone (``OSError`` would show ``[Errno n] reason: 'path'`` once its
        attributes are set)."""
        return str(self.args[0]) if self.args else ""


class GrucParseError(GrucError):
    """Text IR or a pipeline string that does not parse; the message gives line and column."""


class GrucVerifyError(GrucError):
    """The IR breaks one of the verifier's rules; the message shows the IR around the culprit."""


class GrucProgramError(GrucError):
    """A program that cannot run as written (e.g. reading a tensor nothing ever wrote)."""


class GrucMemoryError(GrucProgramError):
    """A checked engine (``Engine(..., checked=True)``) caught a vertex or copy about to touch
    memory outside its operands' allocated regions on its tile; the message names the step,
    vertex, field and address."""


class GrucOutOfMemory(GrucError):
    """A compiled program needs more bytes on some tile than the tile has (``strict_memory``).

    ``details`` holds the memory report's lines where the compile made one (which tiles are
    over, by how much, and what is on them): what ``--strict-memory`` prints before its one
    error line."""

    def __init__(self, message: str, details: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.details = tuple(details)


def expect(condition: bool, error: type[GrucError], message: str) -> None:
    """Raise ``error(message)`` unless ``condition`` holds; keeps argument checks one line each."""
    if not condition:
        raise error(message)
