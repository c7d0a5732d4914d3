"""A Module: a graph plus the programs an engine can run on it — the unit passes transform.

Poplar's ``Engine(graph, programs)`` takes exactly this pair; the text IR prints one module per
file, passes take a module and return one, and the runtime compiles one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from gruc.errors import GrucTypeError
from gruc.ir.graph import Function, Graph
from gruc.ir.program import Call, Program


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

    @property
    def functions(self) -> list[Function]:
        """The functions this module runs: those its entry programs call, directly or through one
        another, in the graph's order (a callee is added before any body that calls it).  A graph
        may also hold functions this module never calls (another module's, or a body a pass
        replaced with a new function): they are not compiled, planned or run with it."""
        called: dict[int, Function] = {}
        pending = list(self.programs)
        while pending:
            for node in pending.pop().walk():
                if isinstance(node, Call) and id(node.function) not in called:
                    called[id(node.function)] = node.function
                    pending.append(node.function.program)
        in_graph = [f for f in self.graph.functions if id(f) in called]
        listed = {id(f) for f in in_graph}  # another graph's function (the verifier refuses it)
        return in_graph + [f for k, f in called.items() if k not in listed]  # goes last

    def walk(self) -> Iterator[Program]:
        """Every program node of the entry programs and of the bodies of the functions they call,
        pre-order (a body once, however many calls run it)."""
        for program in self.programs:
            yield from program.walk()
        for function in self.functions:
            yield from function.program.walk()
