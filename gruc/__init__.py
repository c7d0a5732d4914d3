"""gruc: Graphcore's Poplar programming model on any machine.

Build a dataflow program with a Poplar-like API, record it as IR, transform it with passes and run
it on a simulated multi-tile IPU that accounts for every byte on every tile.
"""

from gruc.errors import (GrucError, GrucIndexError, GrucMappingError, GrucMemoryError,
                         GrucOptionError, GrucOutOfMemory, GrucParseError, GrucProgramError,
                         GrucShapeError, GrucTypeError, GrucValueError, GrucVerifyError)
from gruc.ir.graph import ComputeSet, Function, Graph, Vertex
from gruc.ir.mapping import TileMapping
from gruc.ir.module import Module
from gruc.ir.program import (Call, Copy, Execute, If, PrintTensor, Program, Repeat,
                             RepeatWhileTrue, Sequence, Sync, WriteUndef)
from gruc.ir.tensor import Tensor, Variable, concat
from gruc.runtime.engine import Engine
from gruc.target import Target
from gruc.types import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, DType

__version__ = "0.1.0"

__all__ = [
    "Engine", "BOOL", "FLOAT", "HALF", "INT", "UNSIGNED_INT", "DType", "Target", "Graph", "ComputeSet",
    "Vertex", "Function", "Module", "Tensor", "Variable", "TileMapping", "concat", "Program",
    "Sequence", "Execute", "Copy", "WriteUndef", "Repeat", "RepeatWhileTrue", "If", "Call",
    "PrintTensor", "Sync", "GrucError", "GrucTypeError", "GrucValueError", "GrucShapeError",
    "GrucIndexError", "GrucMappingError", "GrucOptionError", "GrucParseError", "GrucVerifyError",
    "GrucProgramError", "GrucOutOfMemory", "GrucMemoryError", "__version__",
]
