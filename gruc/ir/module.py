"""A Module: a graph plus the programs an engine can run on it — the unit passes transform.

Poplar's ``Engine(graph, programs)`` takes exactly this pair; the text IR prints one module per
file, passes take a module and return one, and the runtime compiles one.

A module a pass returns is *sealed* (:meth:`Module.sealed`): valid by the pass's contract and
never changed afterwards, since a pass makes a new module rather than editing one.  Facts
derived from a sealed module — that it is valid, its liveness — are therefore kept on the module
itself (:meth:`Module.derived`) and go with it: a later pass's result is another module, which
starts with none, so nothing derived is ever stale and nothing outlives its module in a global
table.  A caller's module is not sealed (the caller may still change its programs): it is
checked and analysed afresh each time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeVar

from gruc.errors import GrucTypeError
from gruc.ir.graph import Function, Graph
from gruc.ir.program import Call, Program


Derived = TypeVar("Derived")


@dataclass(eq=False)
class Module:
    """``graph`` and its entry ``programs`` (program ``i`` is what ``engine.run(i)`` runs)."""

    graph: Graph
    programs: list[Program] = field(default_factory=list)
    _sealed: bool = field(default=False, init=False, repr=False)
    _derived: dict[Callable[..., Any], Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.graph, Graph):
            raise GrucTypeError(f"Module graph must be a Graph, got {type(self.graph).__name__}")
        self.programs = list(self.programs)
        for k, p in enumerate(self.programs):
            if not isinstance(p, Program):
                raise GrucTypeError(f"program {k} must be a Program, got {type(p).__name__}")

    @property
    def is_sealed(self) -> bool:
        """Whether a pass made this module (or it was verified and sealed): see the docstring."""
        return self._sealed

    def sealed(self) -> "Module":
        """This module as a pass hands it on: valid and unchanging from here on (the caller of
        this vouches for valid: a pass by its contract, or a verification).  A module not sealed
        yet — a caller's, whose programs the caller may still change — gives a new module over
        the same graph and programs, so only modules no caller holds are ever trusted."""
        if self._sealed:
            return self
        sealed = Module(self.graph, self.programs)
        sealed._sealed = True
        return sealed

    def derived(self, analysis: Callable[["Module"], Derived]) -> Derived:
        """``analysis(self)``: computed once for a sealed module and kept on it, so the passes
        after the one that made it do not analyse the same module again; computed afresh for a
        module that is not sealed, whose programs may have changed since."""
        if not self._sealed:
            return analysis(self)
        if analysis not in self._derived:
            self._derived[analysis] = analysis(self)
        return self._derived[analysis]

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
