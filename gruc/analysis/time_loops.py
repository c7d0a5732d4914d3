"""Time loops: the RNN loops ``shard`` splits, found in a module and described exactly.

A *time loop* is a ``Repeat(n, body)`` in an entry Sequence whose body slices and updates
*sequence tensors* with ``DynamicSlice`` / ``DynamicUpdate`` vertices (one row of an ``[n, M]``
base) at a one-element *counter*.  The counter is set by a ``Copy`` from a constant before the
loop, moved by ``+1`` / ``-1`` by a one-vertex ``MapInPlace`` as the first or last step of the
body, and read by nothing else.  Those facts pin down which row each step touches, which is what
cutting the time axis needs; anything that breaks one of them raises ``GrucProgramError`` saying
which, rather than being guessed around.  An analysis apart from the pass (like liveness), so
tests and benchmarks can ask which tensors are sequences.
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
from gruc.ir.program import Call, Copy, Execute, Program, Repeat, RepeatWhileTrue, Sequence
from gruc.ir.tensor import Variable

__all__ = ["TimeLoop", "find_time_loops"]

_DYNAMIC = (DYNAMIC_SLICE, DYNAMIC_UPDATE)


@dataclass(eq=False)
class TimeLoop:
    """One matched time loop (see the module docstring)."""

    loop: Repeat
    init: Copy
    counter: Variable
    step: int
    """+1 (forward) or -1 (reverse)."""
    advance_first: bool
    dynamic: tuple[ComputeSet, ...]
    """The compute sets of the body holding the slice / update vertices."""
    rows: dict[int, tuple[np.ndarray, np.ndarray]]
    """Per sequence variable (index): the element ids the loop's bases view and each one's row."""

    @property
    def steps(self) -> int:
        return self.loop.count


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


def _match(graph: Graph, effects: EffectTable, parent: Sequence, at: int) -> TimeLoop | None:
    """The time loop at ``parent.programs[at]``, None if that Repeat slices nothing."""
    loop = parent.programs[at]
    dynamic = [cs for cs in dict.fromkeys(n.compute_set for n in loop.body.walk()
                                          if isinstance(n, Execute))
               if any(v.kind in _DYNAMIC for v in cs.vertices)]
    if not dynamic:
        return None
    offsets = {v.fields["offset"].variables()[0] for cs in dynamic for v in cs.vertices
               if v.kind in _DYNAMIC}
    expect(len(offsets) == 1, GrucProgramError,
           f"time loop slices at {len(offsets)} different offsets; one counter is needed")
    (counter,) = offsets
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
                   and base.rank == 2 and base.dim(0) == loop.count and window.dim(0) == 1,
                   GrucProgramError, f"compute set {cs.name!r} is not one-row slices of "
                                     f"{loop.count}-row bases at one counter")
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
    step = _advance(leaves[advances[0]].compute_set, counter)
    for node in leaves:
        reads = effects.of(node).touched
        if isinstance(node, Call):
            reads = reads | {v for n in node.function.program.walk() for v in effects.of(n).touched}
        if isinstance(node, Execute) and node.compute_set in dynamic:
            bases = {w.index for v in node.compute_set.vertices for w in v.fields["base"].variables()}
            window = reads - bases - {counter.index}
            expect(not window & sequences, GrucProgramError,
                   f"compute set {node.compute_set.name!r} uses a sequence tensor as a row")
        elif node is not leaves[advances[0]]:
            expect(counter.index not in reads and not reads & sequences, GrucProgramError,
                   f"a step of the time loop reads counter {counter.name!r} or a whole sequence "
                   "tensor; the time axis cannot be cut under it")
    init = next((n for n in reversed(parent.programs[:at])
                 if counter.index in effects.of(n).writes | effects.of(n).reads), None)
    expect(isinstance(init, Copy) and _scalar(init.src) is not None, GrucProgramError,
           f"counter {counter.name!r} must be set from a constant just before its loop")
    first = 0 if step == 1 else loop.count - 1
    start = first - step * (advances[0] == 0)
    expect(_scalar(init.src) == int(np.array(start).astype(counter.dtype.storage)),
           GrucProgramError, f"counter {counter.name!r} starts at {_scalar(init.src)}; the loop "
                             f"visits rows 0..{loop.count - 1} only from {start}")
    return TimeLoop(loop, init, counter, step, advances[0] == 0, tuple(dynamic),
                    {v: (np.concatenate(i), np.concatenate(r)) for v, (i, r) in rows.items()})


def find_time_loops(module: Module) -> tuple[list[TimeLoop], list[RepeatWhileTrue]]:
    """The module's time loops, and its variable-length loops that slice at a counter."""
    graph, effects = module.graph, EffectTable(module.graph)
    uses = Counter(id(node) for node in module.walk())
    loops, variable, seen = [], [], set()
    for node in (n for program in module.programs for n in program.walk()):
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, RepeatWhileTrue) and any(
                isinstance(n, Execute) and any(v.kind in _DYNAMIC for v in n.compute_set.vertices)
                for n in node.body.walk()):
            variable.append(node)
        if not isinstance(node, Sequence):
            continue
        for at, child in enumerate(node.programs):
            found = _match(graph, effects, node, at) if isinstance(child, Repeat) else None
            if found is not None:
                expect(uses[id(child)] == 1 and uses[id(found.init)] == 1, GrucProgramError,
                       f"the time loop over counter {found.counter.name!r} is shared by several "
                       "places in the program")
                loops.append(found)
    return loops, variable
