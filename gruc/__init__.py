"""gruc: Graphcore's Poplar programming model on any machine.

Build a dataflow program with a Poplar-like API, record it as IR, transform it with passes and run
it on a simulated multi-tile IPU that accounts for every byte on every tile.

The names below are loaded when first used (PEP 562), not when ``gruc`` is imported: the engine
brings numba, numpy and the compiled kernels with it (0.6 s), and ``gruc``'s command line must be
able to answer Ctrl-C, or ``--help``, before paying for that.  ``from gruc import Engine`` and
``from gruc import *`` work as with eager imports.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "gruc.errors": ("GrucError", "GrucTypeError", "GrucValueError", "GrucShapeError",
                    "GrucIndexError", "GrucMappingError", "GrucOptionError", "GrucParseError",
                    "GrucVerifyError", "GrucProgramError", "GrucOutOfMemory", "GrucMemoryError",
                    "GrucFileError"),
    "gruc.ir.graph": ("ComputeSet", "Function", "Graph", "Vertex"),
    "gruc.ir.mapping": ("TileMapping",),
    "gruc.ir.module": ("Module",),
    "gruc.ir.program": ("Program", "Sequence", "Execute", "Copy", "WriteUndef", "Repeat",
                        "RepeatWhileTrue", "TimeLoop", "If", "Call", "PrintTensor", "Sync"),
    "gruc.ir.tensor": ("Tensor", "Variable", "concat"),
    "gruc.runtime.engine": ("Engine",),
    "gruc.target": ("Target",),
    "gruc.types": ("BOOL", "FLOAT", "HALF", "INT", "UNSIGNED_INT", "DType"),
}
_MODULE_OF = {name: module for module, names in _PUBLIC.items() for name in names}

__all__ = [*_MODULE_OF, "__version__"]


def __getattr__(name: str):
    """Load a public name from its module on first use, then keep it as a plain attribute."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'gruc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
