"""A module over a graph of its own: what its programs use, copied into a new graph.

Why.  A caller's module shares its graph with the caller, who may still run other programs on it,
so a pass may only *add* to that graph (:mod:`gruc.passes.rewrite`).  A pass that deletes — the
compute sets and variables nothing executes or reads any more — gives its result a graph of its
own instead: :func:`copy_module` copies into a new graph what the module uses and nothing else,
and the caller's graph and programs stay as they were.  With ``erase_unused=False`` everything is
copied (``shard``, which moves tiles of existing variables, wants a graph it may change).

What a module uses: the functions its entry programs call (:attr:`Module.functions`), the
compute sets an ``Execute`` of those programs or bodies runs, its host streams (the module's
interface with the host), and the variables any of them names — through a vertex field, a
program step (copy, write_undef, print, a predicate) or a stream.  A variable still mapped but
named by none of them is erased with the compute sets that were its only users.  Kept objects
keep their order, names and parameters, so the copy prints as the module did, less what was
erased (names the printer had to suffix may lose their suffix).

Ids.  A variable keeps its element ids (its index, the position in ``graph.variables``, closes
up over the erased ones): the copy's tile table is the source's, shared until either graph
writes to it (:mod:`gruc.ir.tile_table`), and a tensor of the caller's graph names the same
elements of the copy, so a memory plan of the copy answers for the caller's tensors.  Erased
variables leave unused ids behind, which nothing maps or plans; parsing the copy's text numbers
the ids afresh, which changes no figure (analyses depend on the order of ids, which is kept).

Cost: the structure kept, not the elements (decision 3).  Each kept view is made once over the
copy's variables and keeps the layout it had worked out; vertices, compute sets and program
nodes are made again around them; no tile is copied, and the effects the source graph had
worked out for the module's steps are carried over (renumbered), so the analyses that follow —
a memory plan's liveness — do not walk every step's elements again.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Iterable

from gruc.ir.effects import EffectTable
from gruc.ir.graph import ComputeSet, Function, Graph, Vertex
from gruc.ir.module import Module
from gruc.ir.program import Execute, Program, Sequence
from gruc.ir.tensor import Tensor, Variable

__all__ = ["copy_module", "without_unused"]


def copy_module(module: Module, *, erase_unused: bool = True) -> Module:
    """``module`` over a new graph holding what it uses (everything without ``erase_unused``);
    see the module docstring.  ``module`` and its graph are left as they are."""
    source = module.graph
    if erase_unused:
        return _copy(module, *_used(module))
    return _copy(module, list(source.compute_sets), list(source.functions),
                 list(source.variables))


def without_unused(module: Module) -> Module:
    """``module`` over a graph holding only what it uses: a copy (:func:`copy_module`) if its
    graph holds anything else, else ``module`` itself (nothing to erase, nothing to copy)."""
    graph = module.graph
    compute_sets, functions, variables = _used(module)
    if (len(compute_sets), len(functions), len(variables)) == \
            (len(graph.compute_sets), len(graph.functions), len(graph.variables)):
        return module
    return _copy(module, compute_sets, functions, variables)


def _used(module: Module) -> tuple[list[ComputeSet], list[Function], list[Variable]]:
    """The compute sets, functions and variables ``module`` uses, each in graph order."""
    functions = module.functions
    compute_sets = _executed(module)
    named = {id(variable) for tensor in _named_tensors(module, compute_sets, functions)
             for variable in tensor.variables()}
    return compute_sets, functions, [v for v in module.graph.variables if id(v) in named]


def _copy(module: Module, compute_sets: list[ComputeSet], functions: list[Function],
          variables: list[Variable]) -> Module:
    copier = _Copier(module.graph)
    for variable in variables:
        copy = copier.graph.adopt_variable(variable)
        copier.tensors[id(variable)] = copy
        copier.indices[variable.index] = copy.index
    return copier.module(module, compute_sets, functions)


def _executed(module: Module) -> list[ComputeSet]:
    """The compute sets the module's programs and called bodies execute, in graph order."""
    executed = {id(node.compute_set) for node in module.walk() if isinstance(node, Execute)}
    return [cs for cs in module.graph.compute_sets if id(cs) in executed]


def _step_tensors(node: Program) -> Iterable[Tensor]:
    """The tensors a program node names itself (not through its children)."""
    if isinstance(node, Sequence):
        return ()
    return (value for value in (getattr(node, f.name) for f in fields(node))
            if isinstance(value, Tensor))


def _vertex_tensors(vertex: Vertex) -> Iterable[Tensor]:
    for value in vertex.fields.values():
        yield from value if isinstance(value, tuple) else (value,)


def _named_tensors(module: Module, compute_sets: list[ComputeSet],
                   functions: list[Function]) -> Iterable[Tensor]:
    """Every tensor the kept parts of ``module`` name: streams, vertex fields, program steps."""
    graph = module.graph
    for table in (graph.host_writes, graph.host_reads):
        yield from table.values()
    for cs in compute_sets:
        for vertex in cs.vertices:
            yield from _vertex_tensors(vertex)
    for root in [*module.programs, *(function.program for function in functions)]:
        for node in root.walk():
            yield from _step_tensors(node)


class _Copier:
    """The copy under way: each source object's copy, by ``id`` of the source object (the
    source module holds them all while the copy is made)."""

    def __init__(self, source: Graph) -> None:
        self.graph = source.copy_frame()
        self.tensors: dict[int, Tensor] = {}
        self.symbols: dict[int, ComputeSet | Function] = {}
        self.programs: dict[int, Program] = {}
        self.indices: dict[int, int] = {}
        """Index of each kept variable in the source graph -> in the copy."""
        self.effects = (EffectTable(source), EffectTable(self.graph))

    def tensor(self, tensor: Tensor) -> Tensor:
        """The copy of ``tensor``: its variable's, or the view made again over its sources'
        copies (recursively, as a view's layout is worked out)."""
        found = self.tensors.get(id(tensor))
        if found is None:
            found = tensor.view_over(tuple(map(self.tensor, tensor.sources)))
            self.tensors[id(tensor)] = found
        return found

    def vertex(self, vertex: Vertex) -> Vertex:
        tensor = self.tensor
        connected = {name: tuple(map(tensor, value)) if type(value) is tuple else tensor(value)
                     for name, value in vertex.fields.items()}
        return Vertex(vertex.kind, connected, vertex.params, vertex.tile)  # (never changed)

    def program(self, node: Program) -> Program:
        """``node`` made again over the copies of the tensors, compute sets, functions and
        programs it names (any node kind: its dataclass fields tell), with the effect the
        source graph knew for it (:meth:`~gruc.ir.effects.EffectTable.carry`).  A node found
        at several places is made once, so what was shared stays shared."""
        found = self.programs.get(id(node))
        if found is None:
            found = self.programs[id(node)] = self._program(node)
        return found

    def _program(self, node: Program) -> Program:
        if isinstance(node, Sequence):
            return Sequence(*(self.program(child) for child in node.programs))
        changes = {}
        for f in fields(node):
            value = getattr(node, f.name)
            if isinstance(value, Program):
                changes[f.name] = self.program(value)
            elif isinstance(value, Tensor):
                changes[f.name] = self.tensor(value)
            elif isinstance(value, (ComputeSet, Function)):
                changes[f.name] = self.symbols[id(value)]
        copy = replace(node, **changes)
        source, copied = self.effects
        source.carry(node, copy, self.indices, copied)
        return copy

    def module(self, module: Module, compute_sets: list[ComputeSet],
               functions: list[Function]) -> Module:
        """Fill the copy with ``compute_sets``, ``functions`` and every host stream, and return
        ``module``'s programs over it.  A function is made before any body is copied, so a call
        to a function defined later (or to itself) finds its copy."""
        graph = self.graph
        for cs in compute_sets:
            copy = ComputeSet(cs.name, [self.vertex(vertex) for vertex in cs.vertices])
            graph.compute_sets.append(copy)
            self.symbols[id(cs)] = copy
        for function in functions:
            copy = Function(function.name, Sequence())
            graph.functions.append(copy)
            self.symbols[id(function)] = copy
        for function in functions:
            self.symbols[id(function)].program = self.program(function.program)
        for copied, table in ((graph.host_writes, module.graph.host_writes),
                              (graph.host_reads, module.graph.host_reads)):
            copied.update((name, self.tensor(tensor)) for name, tensor in table.items())
        return Module(graph, [self.program(program) for program in module.programs])
