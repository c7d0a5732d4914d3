"""The verifier: the rules a well-formed module obeys, checked apart from construction.

Builders check their arguments as they go, but passes rewrite modules and parsers read text, so
the rules are checked again here, between passes in tests (``verify-each``).  A broken rule
raises :class:`~gruc.errors.GrucVerifyError` whose message shows the offending line of the
printed IR with its neighbours, so the reader sees the culprit in context.

Rules:

* every tensor a module uses belongs to its graph and every variable it uses is fully mapped;
* compute sets and functions named by programs belong to the graph;
* each vertex has the fields and parameters its kind declares, passes its kind's shape and type
  check, and writes no element twice (an Output or InOut field holds no repeated element);
* an InOut field does not alias any other field of its vertex;
* no two vertices of a compute set the module executes race: none writes an element another
  reads or writes (they run at once, in no order; :mod:`gruc.ir.races` finds it from strided
  boxes, without listing elements);
* a Copy does not write a constant or the same element twice;
* a variable that is read is written somewhere (by a program, the host, or as a constant);
* with ``require_local=True`` (after the ``exchange`` pass): every vertex of a compute set the
  module executes touches only the memory of the tile it runs on.  For an untiled vertex that means
  the fields shaped like its ``split`` field, element by element; other fields (a matmul's operand
  blocks and partial sums) are exchanged by the kind itself.  Compute sets nothing executes (a
  pass's leftovers, still in the shared graph) move no data and are not checked for locality.
"""

from __future__ import annotations

import numpy as np

from gruc.errors import GrucError, GrucMappingError, GrucProgramError, GrucVerifyError
from gruc.ir.effects import EffectTable
from gruc.ir.graph import ComputeSet, Graph, Vertex
from gruc.ir.module import Module
from gruc.ir.program import (Call, Copy, Execute, If, Program, Repeat, RepeatWhileTrue, Sequence,
                              TimeLoop)
from gruc.ir.races import find_race
from gruc.ir.tensor import Tensor, share_elements
from gruc.ir.vertices import Direction

CONTEXT_LINES = 3


def _context(module: Module, culprit: object) -> str:
    """The printed IR around ``culprit``'s line, the line itself marked with ``>``."""
    from gruc.ir.printer import print_module_with_lines  # the printer imports this package

    try:
        text, lines = print_module_with_lines(module)
    except GrucError as error:
        return f"(the module could not be printed: {error})"
    all_lines = text.splitlines()
    at = lines.get(id(culprit))
    if at is None:
        return "(the offending object is not part of the printed module)"
    first, last = max(1, at - CONTEXT_LINES), min(len(all_lines), at + CONTEXT_LINES)
    width = len(str(last))
    return "\n".join(f"{'>' if n == at else ' '} {n:>{width}} | {all_lines[n - 1]}"
                     for n in range(first, last + 1))


class _Verifier:
    """Checks the rules of the module docstring on one module; every failure shows the printed IR
    around its culprit."""
    def __init__(self, module: Module, require_local: bool) -> None:
        self.module = module
        self.graph: Graph = module.graph
        self.require_local = require_local
        self.mapped: set[int] = set()
        """Indices of variables already found fully mapped (per-tile vertices name the same big
        variable thousands of times; checking it once keeps verification linear)."""

    def fail(self, culprit: object, message: str, error: type[GrucError] = GrucVerifyError
             ) -> None:
        raise error(f"{message}\n{_context(self.module, culprit)}")

    # ---- tensors ------------------------------------------------------------------------------
    def tensor(self, culprit: object, tensor: Tensor, role: str) -> None:
        """``tensor`` belongs to this graph and every variable under it is fully mapped (each
        variable looked at once, see ``mapped``); a GrucMappingError says how to map one that is
        not."""
        if not isinstance(tensor, Tensor) or tensor.graph is not self.graph:
            self.fail(culprit, f"{role} is not a tensor of this graph")
        for var in tensor.variables():
            if var.index in self.mapped:
                continue
            if self.graph.is_fully_mapped(var):
                self.mapped.add(var.index)
            else:
                self.fail(culprit, f"{role} uses variable {var.name!r} "
                                   f"{var.dtype}{list(var.shape)}, which is not fully mapped to "
                                   "tiles; map it (set_tile_mapping / map_tensor_linearly)",
                          GrucMappingError)

    def no_repeats(self, culprit: object, tensor: Tensor, role: str) -> None:
        if tensor.has_repeats():
            self.fail(culprit, f"{role} writes some elements more than once (it is a broadcast "
                               "or overlapping view)")

    # ---- vertices -----------------------------------------------------------------------------
    def vertex(self, vertex: Vertex, executed: bool) -> None:
        """A vertex against its kind: fields and parameters as declared, no repeated element in a
        field it writes, the kind's own check, no aliasing InOut, and locality when required and
        ``executed``."""
        kind = vertex.kind
        for name in vertex.fields:
            if name not in kind.fields:
                self.fail(vertex, f"vertex {kind.name} has no field {name!r}")
        for name, spec in kind.fields.items():
            if name not in vertex.fields and not spec.optional:
                self.fail(vertex, f"vertex {kind.name} is missing field {name!r}")
        if sorted(vertex.params) != sorted(kind.params):
            self.fail(vertex, f"vertex {kind.name} takes parameters {list(kind.params)}, "
                              f"has {sorted(vertex.params)}")
        for name, tensor in vertex.tensors():
            self.tensor(vertex, tensor, f"field {name!r} of vertex {kind.name}")
            base = name.split("[")[0]
            if kind.fields[base].direction.writes:
                self.no_repeats(vertex, tensor, f"field {name!r} of vertex {kind.name}")
        if kind.check is not None:
            try:
                kind.check(vertex)
            except GrucError as error:
                self.fail(vertex, f"vertex {kind.name}: {error}")
        self.in_out_alias(vertex)
        if self.require_local and executed:
            self.locality(vertex)

    def in_out_alias(self, vertex: Vertex) -> None:
        """An InOut field must share no element with any other field of its vertex: updated in
        place, it would otherwise change what the vertex reads or writes through the other field."""
        if not any(spec.direction is Direction.INOUT for spec in vertex.kind.fields.values()):
            return
        fields = vertex.tensors()
        for name, tensor in fields:
            if vertex.kind.fields[name.split("[")[0]].direction is not Direction.INOUT:
                continue
            for other_name, other in fields:
                if other_name != name and share_elements(tensor, other):
                    self.fail(vertex, f"InOut field {name!r} of vertex {vertex.kind.name} aliases "
                                      f"field {other_name!r}: an in-place operand must not overlap "
                                      "any other operand")

    def locality(self, vertex: Vertex) -> None:
        """A tiled vertex touches only its tile; an untiled one keeps each element of a field shaped
        like its ``split`` field on the tile of the split element it pairs with (other fields the
        kind exchanges itself)."""
        graph = self.graph
        if vertex.tile is not None:
            for name, tensor in vertex.tensors():
                tiles = graph.element_tiles(tensor)
                if np.any(tiles != vertex.tile):
                    far = int(tiles[tiles != vertex.tile][0])
                    self.fail(vertex, f"field {name!r} of vertex {vertex.kind.name} on tile "
                                      f"{vertex.tile} has elements on tile {far}; exchange them first")
            return
        split = vertex.fields[vertex.kind.split]
        home = graph.element_tiles(split)
        for name, tensor in vertex.tensors():
            if tensor.shape != split.shape:
                continue
            away = graph.element_tiles(tensor) != home
            if np.any(away):
                self.fail(vertex, f"field {name!r} of vertex {vertex.kind.name} has "
                                  f"{int(away.sum())} elements on other tiles than the elements of "
                                  f"{vertex.kind.split!r} they pair with; exchange them first")

    # ---- programs -----------------------------------------------------------------------------
    def programs(self) -> None:
        """What the programs name belongs to the graph, copies write neither constants nor an
        element twice, predicates are mapped; then every vertex, checked for locality only in a
        compute set some program executes."""
        graph = self.graph
        compute_sets = {id(cs) for cs in graph.compute_sets}
        functions = {id(f) for f in graph.functions}
        for node in self.module.walk():
            if isinstance(node, Execute) and id(node.compute_set) not in compute_sets:
                self.fail(node, f"Execute names compute set {node.compute_set.name!r}, "
                                "which is not in this graph")
            elif isinstance(node, Call) and id(node.function) not in functions:
                self.fail(node, f"Call names function {node.function.name!r}, "
                                "which is not in this graph")
            elif isinstance(node, Copy):
                self.tensor(node, node.src, "Copy source")
                self.tensor(node, node.dst, "Copy destination")
                if any(v.is_constant for v in node.dst.variables()):
                    self.fail(node, "Copy writes into a constant")
                self.no_repeats(node, node.dst, "Copy destination")
            elif isinstance(node, (If, RepeatWhileTrue)):
                self.tensor(node, node.predicate, f"{type(node).__name__} predicate")
            elif isinstance(node, TimeLoop) and node.counter.dtype.storage.kind not in "iu":
                self.fail(node, f"TimeLoop counter is {node.counter.dtype.name}; a step counter "
                                "is an integer")
        executed = {id(node.compute_set) for node in self.module.walk() if isinstance(node, Execute)}
        for cs in graph.compute_sets:
            for vertex in cs.vertices:
                self.vertex(vertex, id(cs) in executed)
            if id(cs) in executed:
                self.races(cs)

    def races(self, cs: ComputeSet) -> None:
        """No two vertices of ``cs`` write one element, and none reads what another writes."""
        race = find_race(cs.vertices, self.graph.variables)
        if race is None:
            return
        first, second = race.first, race.second
        variable = self.graph.variables[int(self.graph.variable_of_id(race.element))]
        where = np.unravel_index(race.element - variable.first_id, variable.shape)
        kinds = [cs.vertices[a.vertex].kind.name for a in (first, second)]
        self.fail(cs.vertices[second.vertex],
                  f"vertices {first.vertex} ({kinds[0]}) and {second.vertex} ({kinds[1]}) of "
                  f"compute set {cs.name!r} race on element {[int(k) for k in where]} of "
                  f"{variable.name!r}: field {first.field!r} of the first writes it and field "
                  f"{second.field!r} of the second {'writes' if second.writes else 'reads'} it. "
                  "The vertices of a compute set run at once, in no order: give them disjoint "
                  "elements or put them in compute sets run one after the other")

    def reads_have_writers(self) -> None:
        """Every variable read somewhere is written somewhere (a step, a host write or a constant
        value).  Order is not considered here: :func:`check_initialized` asks whether a write comes
        first."""
        graph = self.graph
        effects = EffectTable(graph)
        written: set[int] = set()
        read_at: dict[int, object] = {}
        for node in self.module.walk():
            effect = effects.of(node)
            written |= effect.writes
            for var in effect.reads:
                read_at.setdefault(var, node)
        for stream in graph.host_writes.values():
            written.update(v.index for v in stream.variables())
        for var, node in sorted(read_at.items()):
            variable = graph.variables[var]
            if var not in written and not variable.is_constant:
                self.fail(node, f"variable {variable.name!r} is read but nothing writes it "
                                "(no program, host write or constant value)")

    def run(self) -> None:
        for name, tensor in {**self.graph.host_writes, **self.graph.host_reads}.items():
            self.tensor(tensor, tensor, f"host stream {name!r}")
        self.programs()
        self.reads_have_writers()


def verify(module: Module, *, require_local: bool = False) -> None:
    """Raise :class:`GrucVerifyError` if ``module`` breaks a rule; return None if it is valid."""
    _Verifier(module, require_local).run()


class _Initialized:
    """Which variables may hold a value at each step of a program, in execution order.

    "May": an ``If`` joins what either branch writes, a loop body counts as run (``Repeat(0)``
    aside) and a write of any element makes the whole variable written, so a step is flagged only
    if nothing at all could have given it a value — the error is never a false alarm.  A step's
    own writes count for its reads (an InOut field, a dynamic update of a fresh tensor)."""

    def __init__(self, module: Module) -> None:
        self.graph = module.graph
        self.effects = EffectTable(module.graph)
        self.host = {v.index for t in self.graph.host_writes.values() for v in t.variables()}
        self.host |= {v.index for v in self.graph.variables if v.is_constant}
        self.active: set[int] = set()
        """Functions being walked: a Call back into one of them adds nothing new."""

    def writes(self, node: Program) -> set[int]:
        """Every variable ``node`` (and any function it calls) may write."""
        result: set[int] = set()
        for step in node.walk():
            result |= self.effects.of(step).writes
            if isinstance(step, Call) and id(step.function) not in self.active:
                self.active.add(id(step.function))
                result |= self.writes(step.function.program)
                self.active.discard(id(step.function))
        return result

    def visit(self, node: Program, written: set[int], program: int) -> set[int]:
        """The variables that may be written after ``node`` runs, given ``written`` before it,
        failing at the first read nothing could have written.  A call into a function already being
        walked adds nothing (recursion ends); a ``while`` reads its predicate after its condition
        has run."""
        if isinstance(node, (Sequence, TimeLoop)):
            for child in node.children():
                written = self.visit(child, written, program)
            return written
        if isinstance(node, Repeat):
            return self.visit(node.body, written, program) if node.count else written
        if isinstance(node, Call):
            if id(node.function) in self.active:
                return written
            self.active.add(id(node.function))
            written = self.visit(node.function.program, written, program)
            self.active.discard(id(node.function))
            return written
        if isinstance(node, RepeatWhileTrue):
            written = self.visit(node.condition, written, program)
            self.leaf(node, written, program)
            return self.visit(node.body, written, program)
        written = self.leaf(node, written, program)
        if isinstance(node, If):
            return (self.visit(node.then, set(written), program)
                    | self.visit(node.otherwise, set(written), program))
        return written

    def leaf(self, node: Program, written: set[int], program: int) -> set[int]:
        """``written`` plus the leaf's writes (its own writes count for its reads); a read of
        anything else, empty variables aside, is a GrucProgramError naming the program and the
        variable."""
        effect = self.effects.of(node)
        written = written | effect.writes
        for index in sorted(effect.reads - written):
            var = self.graph.variables[index]
            if not var.num_elements:
                continue
            raise GrucProgramError(
                f"program {program} reads {var.name!r} {var.dtype}{list(var.shape)} in "
                f"{type(node).__name__} before anything writes it: write it first (a program "
                "step, graph.create_host_write and engine.write_tensor, or add_constant)")
        return written


def check_initialized(module: Module) -> dict[str, str]:
    """Raise :class:`GrucProgramError` if a program reads a variable before anything could have
    written it; return the host reads whose tensor nothing ever writes (stream -> variable name).

    The engine calls this on the programs it is given, so the error names the user's tensor and
    program rather than surfacing as a verifier failure inside the first pass.  Within a
    program, "before" is execution order; what the host writes, constants and what any *other*
    entry program writes count as written from the start (programs share one device state and
    may run in any order).  A host read of a tensor nothing writes is not an error by itself (the
    stream still holds the tensor's memory, which a memory study may want); the engine refuses
    to *read* it (``Engine.read_tensor``).  Empty variables hold nothing to read."""
    walker = _Initialized(module)
    writes = [walker.writes(program) for program in module.programs]
    for k, program in enumerate(module.programs):
        others = set().union(*(w for j, w in enumerate(writes) if j != k))
        walker.visit(program, walker.host | others, k)
    ever = walker.host.union(*writes)
    unwritten = {}
    for name, tensor in module.graph.host_reads.items():
        never = [v for v in tensor.variables() if v.index not in ever and v.num_elements]
        if never:
            unwritten[name] = f"{never[0].name!r} {never[0].dtype}{list(never[0].shape)}"
    return unwritten
