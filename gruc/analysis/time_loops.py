"""Time loops: what an RNN's ``TimeLoop`` nodes slice, row by row, checked against what they say.

A :class:`~gruc.ir.program.TimeLoop` names its counter, its direction, its shard and the
absolute time steps it covers.  What cutting its time axis needs besides is which element of
which sequence tensor each step touches: the bases of its ``DynamicSlice`` / ``DynamicUpdate``
vertices (one row of an ``[n, M]`` base) at the counter.  :func:`find_time_loops` reads that off
the body and checks the node's claims on the way: the body moves the counter by one in the
declared direction, first or last, once; nothing else reads the counter or a whole sequence; the
reset starts the counter where the first step needs it.  Anything else raises
``GrucProgramError`` saying which, rather than being guessed around.  An analysis apart from the
``shard`` pass (like liveness), so tests and benchmarks can ask which tensors are sequences.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from gruc.errors import GrucProgramError, expect
from gruc.ir import expr as ex
from gruc.ir.codelets.dynamic import DYNAMIC_SLICE, DYNAMIC_UPDATE
from gruc.ir.codelets.elementwise import MAP_IN_PLACE
from gruc.ir.effects import EffectTable
from gruc.ir.graph import ComputeSet, Graph
from gruc.ir.module import Module
from gruc.ir.program import Call, Execute, Program, Repeat, RepeatWhileTrue, Sequence, TimeLoop
from gruc.ir.tensor import Variable

__all__ = ["SlicedLoop", "find_time_loops"]

_DYNAMIC = (DYNAMIC_SLICE, DYNAMIC_UPDATE)


@dataclass(eq=False)
class SlicedLoop:
    """A fixed-length time loop and the rows it slices (see the module docstring)."""

    node: TimeLoop
    advance_first: bool
    """Whether the body moves the counter before its first slice (else after its last store)."""
    dynamic: tuple[ComputeSet, ...]
    """The compute sets of the body holding the slice / update vertices."""
    rows: dict[int, tuple[np.ndarray, np.ndarray]]
    """Per sequence variable (index): the element ids the loop's bases view and each one's row."""

    @property
    def loop(self) -> Repeat:
        return self.node.loop

    @property
    def counter(self) -> Variable:
        (variable,) = self.node.counter.variables()
        return variable

    @property
    def step(self) -> int:
        """+1 (forward) or -1 (reverse)."""
        return self.node.direction

    @property
    def steps(self) -> int:
        return self.node.steps


def _scalar(tensor) -> int | None:
    """The value of a one-element view of a constant, else None."""
    (variable,) = tensor.variables()
    if tensor.num_elements != 1 or not variable.is_constant:
        return None
    return int(variable.constant.reshape(-1)[int(tensor.flat_ids()[0]) - variable.first_id])


def _advance(cs: ComputeSet, counter: Variable) -> int | None:
    """+1 / -1 if ``cs`` is one ``MapInPlace`` moving ``counter`` by one, else None."""
    if len(cs.vertices) != 1 or cs.vertices[0].kind is not MAP_IN_PLACE:
        return None
    vertex = cs.vertices[0]
    inout = vertex.fields["inout"]
    if vertex.fields.get("ins") or inout.variables() != [counter]:
        return None
    moved = [int(ex.evaluate(vertex.params["expr"], [np.array([x], counter.dtype.storage)],
                             [counter.dtype])[0]) - x for x in (5, 1000)]
    return moved[0] if moved[0] == moved[1] and moved[0] in (1, -1) else None


def _leaves(node: Program) -> list[Program]:
    """The body's steps in order; control flow other than Sequence is refused."""
    if isinstance(node, Sequence):
        return [leaf for child in node.programs for leaf in _leaves(child)]
    expect(not node.children(), GrucProgramError,
           f"a time loop body holds a nested {type(node).__name__}; only straight-line bodies "
           "are sharded")
    return [node]


def _match(graph: Graph, effects: EffectTable, node: TimeLoop) -> SlicedLoop:
    """The rows a fixed-length time loop slices, its claims checked (see the module docstring)."""
    loop = node.loop
    (counter,) = node.counter.variables()
    expect(node.counter.num_elements == counter.num_elements, GrucProgramError,
           f"time loop counter {counter.name!r} is a view of a larger variable; a counter is a "
           "one-element variable of its own")
    dynamic = [cs for cs in dict.fromkeys(n.compute_set for n in loop.body.walk()
                                          if isinstance(n, Execute))
               if any(v.kind in _DYNAMIC for v in cs.vertices)]
    offsets = {v.fields["offset"].variables()[0] for cs in dynamic for v in cs.vertices
               if v.kind in _DYNAMIC}
    expect(offsets == {counter}, GrucProgramError,
           f"the time loop over counter {counter.name!r} slices at "
           f"{sorted(v.name for v in offsets) or 'no offset'}; every row it slices or stores "
           "is at its counter")
    rows: dict[int, tuple[list, list]] = defaultdict(lambda: ([], []))
    for cs in dynamic:
        others = sorted({v.kind.name for v in cs.vertices if v.kind not in _DYNAMIC})
        expect(not others, GrucProgramError,
               f"compute set {cs.name!r} holds {', '.join(others)} vertices beside the time "
               "loop's row slices; only compute sets of DynamicSlice / DynamicUpdate vertices "
               "can be cut by time step")
        for v in cs.vertices:
            base, window = v.fields["base"], v.fields.get("out", v.fields.get("update"))
            expect(v.fields["offset"].num_elements == 1
                   and base.rank == 2 and base.dim(0) == node.steps and window.dim(0) == 1,
                   GrucProgramError, f"compute set {cs.name!r} is not one-row slices of "
                                     f"{node.steps}-row bases at one counter")
            ids = base.flat_ids()
            row = np.repeat(np.arange(base.dim(0)), base.dim(1))
            owner = graph.variable_of_id(ids)
            for variable in np.unique(owner):  # a view's sources may include unviewed ones
                rows[int(variable)][0].append(ids[owner == variable])
                rows[int(variable)][1].append(row[owner == variable])
    sequences = set(rows)
    leaves = _leaves(loop.body)
    advances = [k for k, n in enumerate(leaves) if isinstance(n, Execute)
                and _advance(n.compute_set, counter) is not None]
    expect(len(advances) == 1 and advances[0] in (0, len(leaves) - 1), GrucProgramError,
           f"counter {counter.name!r} must be moved once, first or last in the loop body")
    moved = _advance(leaves[advances[0]].compute_set, counter)
    expect(moved == node.direction, GrucProgramError,
           f"the {'reverse' if node.reverse else 'forward'} time loop moves counter "
           f"{counter.name!r} by {moved:+d}")
    for leaf in leaves:
        reads = effects.of(leaf).touched
        if isinstance(leaf, Call):
            reads = reads | {v for n in leaf.function.program.walk() for v in effects.of(n).touched}
        if isinstance(leaf, Execute) and leaf.compute_set in dynamic:
            bases = {w.index for v in leaf.compute_set.vertices
                     for w in v.fields["base"].variables()}
            window = reads - bases - {counter.index}
            expect(not window & sequences, GrucProgramError,
                   f"compute set {leaf.compute_set.name!r} uses a sequence tensor as a row")
        elif leaf is not leaves[advances[0]]:
            expect(counter.index not in reads and not reads & sequences, GrucProgramError,
                   f"a step of the time loop reads counter {counter.name!r} or a whole sequence "
                   "tensor; the time axis cannot be cut under it")
    first = 0 if node.direction == 1 else node.steps - 1
    start = first - node.direction * (advances[0] == 0)
    value = _scalar(node.reset.src)
    expect(value == int(np.array(start).astype(counter.dtype.storage)), GrucProgramError,
           f"counter {counter.name!r} starts at {value if value is not None else 'a variable'}; "
           f"the loop visits rows 0..{node.steps - 1} only from {start}")
    return SlicedLoop(node, advances[0] == 0, tuple(dynamic),
                      {v: (np.concatenate(i), np.concatenate(r)) for v, (i, r) in rows.items()})


def find_time_loops(module: Module) -> tuple[list[SlicedLoop], list[TimeLoop]]:
    """The module's fixed-length time loops with the rows they slice, and its variable-length
    ones (a ``RepeatWhileTrue`` loop: its trips are only known at run time)."""
    graph, effects = module.graph, EffectTable(module.graph)
    uses = Counter(id(node) for node in module.walk())
    loops, variable, seen = [], [], set()
    for node in (n for program in module.programs for n in program.walk()):
        if not isinstance(node, TimeLoop) or id(node) in seen:
            continue
        seen.add(id(node))
        expect(uses[id(node)] == 1, GrucProgramError,
               f"the time loop over counter {node.counter.variables()[0].name!r} is shared by "
               "several places in the program")
        if isinstance(node.loop, RepeatWhileTrue):
            variable.append(node)
        else:
            loops.append(_match(graph, effects, node))
    return loops, variable
