"""A Module: a graph plus the programs an engine can run on it — the unit passes transform.

Poplar's ``Engine(graph, programs)`` takes exactly this pair; the text IR prints one module per
file, passes take a module and return one, and the runtime compiles one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from gruc.errors import GrucTypeError
from gruc.ir.graph import Graph
from gruc.ir.program import Program


@dataclass(eq=False)
class Module:
    """``graph`` and its entry ``programs`` (program ``i`` is what ``engine.run(i)`` runs)."""

    graph: Graph
    programs: list[Program] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.graph, Graph):
            raise GrucTypeError(f"Module graph must be a Graph, got {type(self.graph).__name__}")
        self.programs = list(self.programs)
        for k, p in enumerate(self.programs):
            if not isinstance(p, Program):
                raise GrucTypeError(f"program {k} must be a Program, got {type(p).__name__}")

    def walk(self) -> Iterator[Program]:
        """Every program node of the entry programs and of the graph's functions, pre-order."""
        for program in self.programs:
            yield from program.walk()
        for function in self.graph.functions:
            yield from function.program.walk()
