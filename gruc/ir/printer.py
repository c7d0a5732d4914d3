"""The text IR printer: a :class:`~gruc.ir.module.Module` as one deterministic text (docs/ir.md).

Printing is the contract side of the text IR (docs/ir.md): the same module prints to the same
bytes in every run and process (nothing depends on ``id()`` or hash order), and the parser reads
every printed module back.  Names are a printing concern: tensors, compute sets and functions
carry only optional hints, and :class:`Naming` turns them into unique SSA names in
first-appearance order, the way JAX's ``JaxprPpContext`` does.  The JSON serialiser reuses the same
:class:`Naming`, so the two formats agree on every name.

Scale by structure: a tile mapping is printed from its runs (numpy), as groups of tile
progressions (:func:`mapping_groups`), so a linear mapping over 1472 tiles is one short line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np

from gruc.errors import GrucTypeError
from gruc.ir import expr as ex
from gruc.ir.graph import ComputeSet, Function, Graph, Vertex
from gruc.ir.layout import SliceOp, ViewOp
from gruc.ir.mapping import UNMAPPED, runs_of
from gruc.ir.module import Module
from gruc.ir.program import (Call, Copy, Execute, If, PrintTensor, Program, Repeat,
                             RepeatWhileTrue, Sequence, Sync, TimeLoop, WriteUndef)
from gruc.ir.tensor import Tensor, Variable
from gruc.types import BOOL, DType

__all__ = ["print_module", "print_module_with_lines", "Naming", "mapping_groups", "split_bounds",
           "constant_runs", "format_scalar", "format_type", "format_param"]

INDENT = "  "
_NOT_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.]+")
MappingGroup = tuple[int, int, int, int, int]
"""``(tile, step, count, elements, grain)``: see docs/ir.md, "Mappings"."""


# ------------------------------------------------------------------------------------ naming
class _Namespace:
    """Unique names from hints: ``x``, ``x_1``, ``x_2``...; an empty hint gets ``0``, ``1``...

    A hint is sanitised first: each run of characters outside ``[A-Za-z0-9_.]`` becomes ``_`` and
    trailing underscores are dropped (``"gru/w é"`` → ``gru_w``).
    """

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.next_suffix: dict[str, int] = {}
        self.next_number = 0

    def fresh(self, hint: str) -> str:
        """A name no one has yet, from ``hint`` (see the class).  The next suffix is remembered per
        base, so many tensors with one hint do not search from ``_1`` each time."""
        base = _NOT_NAME_CHARS.sub("_", hint).rstrip("_")
        if not base:
            while str(self.next_number) in self.used:
                self.next_number += 1
            name = str(self.next_number)
        elif base not in self.used:
            name = base
        else:
            k = self.next_suffix.get(base, 1)
            while f"{base}_{k}" in self.used:
                k += 1
            self.next_suffix[base] = k + 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


@dataclass
class Naming:
    """Everything the printer and the JSON serialiser decide about names and order.

    ``tensors`` maps ``id(tensor)`` to its SSA name (``%x``); ``views`` lists the views to define,
    in dependency (and first-appearance) order; ``symbols`` maps ``id`` of a compute set or function
    to its ``@`` symbol.  Objects that belong to another graph still get names, so a broken module
    can be printed for the verifier, but they are never defined in the text.
    """

    module: Module
    tensors: dict[int, str] = field(default_factory=dict)
    views: list[Tensor] = field(default_factory=list)
    symbols: dict[int, str] = field(default_factory=dict)
    _hints: dict[int, str] = field(default_factory=dict)
    _values: _Namespace = field(default_factory=_Namespace)
    _symbols: _Namespace = field(default_factory=_Namespace)
    _keep: list[object] = field(default_factory=list)

    @classmethod
    def of(cls, module: Module) -> "Naming":
        if not isinstance(module, Module):
            raise GrucTypeError(f"expected a gruc Module, got {type(module).__name__}")
        naming = cls(module)
        naming._collect()
        return naming

    # names
    def tensor(self, tensor: Tensor) -> str:
        """The SSA name of ``tensor``; a new one is named now, after the views it is built from."""
        key = id(tensor)
        if key not in self.tensors:
            self._define(tensor)
        return self.tensors[key]

    def symbol(self, obj: ComputeSet | Function) -> str:
        key = id(obj)
        if key not in self.symbols:
            self._keep.append(obj)  # ids stay unique while the naming lives
            self.symbols[key] = "@" + self._symbols.fresh(getattr(obj, "name", ""))
        return self.symbols[key]

    # collection, in the order the printer writes uses
    def _collect(self) -> None:
        """Name everything in the order the printer first writes it (variables, symbols, host
        streams, vertex fields, functions, programs), so names and view definitions follow first
        appearance and do not depend on which lookup came first."""
        graph = self.module.graph
        for var in graph.variables:
            self._name_value(var, var.name)
        for obj in [*graph.compute_sets, *graph.functions]:
            self.symbol(obj)
        for table in (graph.host_writes, graph.host_reads):
            for tensor in table.values():
                self.tensor(tensor)
        for cs in graph.compute_sets:
            for vertex in cs.vertices:
                for value in ordered_fields(vertex).values():
                    for t in (value if isinstance(value, tuple) else (value,)):
                        self.tensor(t)
        for function in graph.functions:
            self._collect_program(function.program)
        for program in self.module.programs:
            self._collect_program(program)

    def _collect_program(self, root: Program) -> None:
        """Name the tensors, compute sets and functions of one program tree in printed order
        (children pushed in reverse on a stack)."""
        stack: list[object] = [root]
        while stack:
            item = stack.pop()
            if isinstance(item, Tensor):
                self.tensor(item)
            elif isinstance(item, Execute):
                self.symbol(item.compute_set)
            elif isinstance(item, Call):
                self.symbol(item.function)
            else:
                stack.extend(reversed(printed_parts(item)))

    def _name_value(self, tensor: Tensor, hint: str) -> None:
        self._keep.append(tensor)
        self._hints[id(tensor)] = hint
        self.tensors[id(tensor)] = "%" + self._values.fresh(hint)

    def _define(self, tensor: Tensor) -> None:
        """Name ``tensor`` and, first, every unnamed view it is built from (post-order)."""
        if not isinstance(tensor, Tensor):
            raise GrucTypeError(f"expected a gruc Tensor, got {type(tensor).__name__}")
        stack: list[tuple[Tensor, bool]] = [(tensor, False)]
        while stack:
            t, ready = stack.pop()
            if id(t) in self.tensors:
                continue
            if isinstance(t, Variable) or t.op is None:  # a foreign variable: named, not defined
                self._name_value(t, getattr(t, "name", ""))
                continue
            if not ready:
                stack.append((t, True))
                stack.extend((s, False) for s in reversed(t.sources) if id(s) not in self.tensors)
                continue
            self._name_value(t, self._hints[id(t.sources[0])])
            if t.graph is self.module.graph:
                self.views.append(t)


def ordered_fields(vertex: Vertex) -> dict[str, Any]:
    """The vertex's connected fields in the order its kind declares them (unknown ones last)."""
    declared = [name for name in vertex.kind.fields if name in vertex.fields]
    return {name: vertex.fields[name]
            for name in declared + [n for n in vertex.fields if n not in vertex.kind.fields]}


def ordered_params(vertex: Vertex) -> dict[str, Any]:
    """The vertex's parameters in the order its kind declares them (unknown ones last)."""
    declared = [name for name in vertex.kind.params if name in vertex.params]
    return {name: vertex.params[name]
            for name in declared + [n for n in vertex.params if n not in vertex.kind.params]}


def printed_parts(node: Program) -> tuple[object, ...]:
    """The tensors and sub-programs a program node prints, in printed order."""
    if isinstance(node, Copy):
        return (node.src, node.dst)
    if isinstance(node, WriteUndef | PrintTensor):
        return (node.tensor,)
    if isinstance(node, If):
        return (node.predicate, node.then, node.otherwise)
    if isinstance(node, RepeatWhileTrue):
        return (node.condition, node.predicate, node.body)
    return node.children()


def display_name(naming: Naming, obj: ComputeSet | Function) -> str | None:
    """The object's real name if its symbol does not spell it, else None."""
    name = getattr(obj, "name", "")
    return None if naming.symbol(obj) == "@" + name else name


# ------------------------------------------------------------------------------ mappings
def mapping_groups(tiles: np.ndarray, lengths: np.ndarray) -> list[MappingGroup]:
    """Groups ``(tile, step, count, elements, grain)`` that describe the runs ``tiles``/``lengths``.

    Greedy over the maximal runs: take the longest arithmetic progression of tiles from the current
    run; if its runs are equal, or follow poplibs' even split in grains (``linear_partition``), it
    is one group; otherwise it splits into stretches of equal runs.  Unmapped runs (tile -1) are
    groups of their own.  Work is per group, with numpy searches, never per element.
    """
    tiles = np.asarray(tiles, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(tiles)
    groups: list[MappingGroup] = []
    if n == 0:
        return groups
    diffs = np.diff(tiles)
    breaks = np.flatnonzero(diffs[1:] != diffs[:-1]) + 1
    unmapped = np.flatnonzero(tiles == UNMAPPED)
    i = 0
    while i < n:
        tile = int(tiles[i])
        if tile == UNMAPPED or i + 1 == n or tiles[i + 1] == UNMAPPED:
            groups.append((tile, 0, 1, int(lengths[i]), int(lengths[i])))
            i += 1
            continue
        k = np.searchsorted(breaks, i, side="right")
        end = int(breaks[k]) + 1 if k < len(breaks) else n
        u = np.searchsorted(unmapped, i, side="right")
        if u < len(unmapped):
            end = min(end, int(unmapped[u]))
        groups.extend(_window_groups(tile, int(diffs[i]), lengths[i:end]))
        i = end
    return groups


def split_bounds(count: int, elements: int, grain: int) -> np.ndarray:
    """Run boundaries of ``elements`` split over ``count`` runs in grains (poplibs' linear rule)."""
    grains = -(-elements // grain)
    return np.minimum((np.arange(count + 1, dtype=np.int64) * grains // count) * grain, elements)


def _window_groups(tile: int, step: int, lengths: np.ndarray) -> list[MappingGroup]:
    """Groups for runs on one progression of tiles: one group when the runs are equal or follow
    poplibs' even split in grains (the gcd and 1, 2, 4, 8 tried), two runs as two groups, otherwise
    a group per stretch of equal runs."""
    count = len(lengths)
    first = int(lengths[0])
    if count == 1:
        return [(tile, 0, 1, first, first)]
    if np.all(lengths == first):
        return [(tile, step, count, count * first, first)]
    elements = int(lengths.sum())
    if count < 3:  # two runs read better as two runs
        return [(tile + k * step, 0, 1, int(n), int(n)) for k, n in enumerate(lengths.tolist())]
    gcd = int(np.gcd.reduce(lengths[:-1]))
    for grain in dict.fromkeys([gcd] + [g for g in (1, 2, 4, 8) if gcd % g == 0]):
        if np.array_equal(np.diff(split_bounds(count, elements, grain)), lengths):
            return [(tile, step, count, elements, grain)]
    begins, ends = runs_of(lengths)
    result = []
    for b, e in zip(begins.tolist(), ends.tolist()):
        size = int(lengths[b])
        result.append((tile + b * step, step if e - b > 1 else 0, e - b, (e - b) * size, size))
    return result


def format_group(group: MappingGroup) -> str:
    """A group as the text writes it: ``_``, a tile or ``start:stop[:step]``, then ``x grain`` when
    every tile has ``grain`` elements, else ``~ elements/grain`` (poplibs' split)."""
    tile, step, count, elements, grain = group
    if tile == UNMAPPED:
        tiles = "_"
    elif count == 1:
        tiles = str(tile)
    else:
        stop = tile + count * step
        tiles = f"{tile}:{stop}" if step == 1 else f"{tile}:{stop}:{step}"
    if elements == count * grain:
        return f"{tiles} x {grain}"
    return f"{tiles} ~ {elements}/{grain}"


def variable_groups(graph: Graph, var: Variable) -> list[MappingGroup]:
    mapping = graph.get_tile_mapping(var)
    return mapping_groups(mapping.tiles, mapping.ends - mapping.begins)


# ------------------------------------------------------------------------------ values
def constant_runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Begins and counts of runs of bit-identical elements of a flattened constant."""
    flat = np.ascontiguousarray(values).reshape(-1)
    bits = flat.view(f"u{flat.dtype.itemsize}") if flat.dtype.itemsize in (1, 2, 4, 8) else flat
    begins, ends = runs_of(bits)
    return begins, ends - begins


def format_scalar(value: Any, dtype: DType) -> str:
    """One constant element: numpy's shortest round-trip form for the stored type."""
    if dtype == BOOL:
        return "true" if bool(value) else "false"
    if dtype.is_float:
        return str(dtype.storage.type(value))
    return str(int(value))


def format_type(dtype: DType, shape: tuple[int, ...]) -> str:
    return f"{dtype.short}[{','.join(str(n) for n in shape)}]"


def format_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)


def format_param(value: Any) -> str:
    """A vertex parameter (or a header value) in text form; see docs/ir.md."""
    if value is None:
        return "none"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        return format_string(value)
    if isinstance(value, DType):
        return value.short
    if isinstance(value, ex.Expr):
        return ex.to_text(value)
    if isinstance(value, tuple):
        inner = ", ".join(format_param(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(format_param(v) for v in value) + "]"
    raise GrucTypeError(f"cannot print a parameter of type {type(value).__name__} ({value!r:.60}); "
                        "allowed: int, float, str, bool, None, DType, Expr, tuple, list")


def view_args(op: ViewOp) -> dict[str, Any]:
    """The op's dataclass fields by name (tuples as lists): its printed arguments."""
    return {f.name: list(getattr(op, f.name)) if isinstance(getattr(op, f.name), tuple)
            else getattr(op, f.name) for f in fields(op)}


# ------------------------------------------------------------------------------ printer
class _Printer:
    """Writes one module's lines and remembers where each object starts (``where``: the verifier
    names the line of what it refuses)."""
    def __init__(self, module: Module) -> None:
        self.module = module
        self.naming = Naming.of(module)
        self.lines: list[str] = []
        self.where: dict[int, int] = {}

    def mark(self, obj: object) -> None:
        """Record that ``obj`` starts on the next line to be completed."""
        self.where.setdefault(id(obj), len(self.lines) + 1)

    def emit(self, obj: object | None, text: str) -> None:
        if obj is not None:
            self.mark(obj)
        self.lines.append(text)

    def name(self, tensor: Tensor) -> str:
        return self.naming.tensor(tensor)

    def run(self) -> tuple[str, dict[int, int]]:
        """The text and the line of each object.  Variables come first, in graph order, so parsing
        gives back the same element ids; then views (in dependency order), streams, compute sets,
        functions and programs."""
        graph = self.module.graph
        target = ", ".join(f"{key}={format_param(value)}"
                           for key, value in graph.target.model_dump().items())
        self.emit(None, f"module target({target})")
        for var in graph.variables:
            self.variable(graph, var)
        for view in self.naming.views:
            self.view(view)
        for keyword, table in (("host_write", graph.host_writes), ("host_read", graph.host_reads)):
            for stream, tensor in table.items():
                self.emit(None, f"{keyword} {format_string(stream)} {self.name(tensor)}")
        for cs in graph.compute_sets:
            self.compute_set(cs)
        for function in graph.functions:
            self.mark(function)
            self.statement(function.program, 0, f"func {self.header(function)} ")
        for k, program in enumerate(self.module.programs):
            self.statement(program, 0, f"program {k} ")
        return "\n".join(self.lines) + "\n", self.where

    def header(self, obj: ComputeSet | Function) -> str:
        shown = display_name(self.naming, obj)
        symbol = self.naming.symbol(obj)
        return symbol if shown is None else f"{symbol} {format_string(shown)}"

    def variable(self, graph: Graph, var: Variable) -> None:
        """A ``var`` or ``const`` line with its mapping as groups; a constant's values are runs of
        bit-identical elements (``v x n``), so a filled tensor is one item and ``-0.0`` stays
        itself."""
        groups = ", ".join(format_group(g) for g in variable_groups(graph, var))
        kind = "var" if var.constant is None else "const"
        text = (f"{self.name(var)} = {kind} {format_type(var.dtype, var.shape)} "
                f"{format_string(var.name)} map=[{groups}]")
        if var.constant is not None:
            flat = np.asarray(var.constant).reshape(-1)
            begins, counts = constant_runs(flat)
            picked = flat[begins]
            items = [format_scalar(v, var.dtype) + ("" if c == 1 else f" x {c}")
                     for v, c in zip(picked, counts.tolist())]
            text += f" values=[{', '.join(items)}]"
        self.emit(var, text)

    def view(self, view: Tensor) -> None:
        op = view.op
        sources = ", ".join(self.name(s) for s in view.sources)
        if isinstance(op, SliceOp):
            args = " [" + ", ".join(f"{b}:{e}" for b, e in zip(op.begin, op.end)) + "]"
        else:
            args = "".join(f" {key}=" + (f"[{','.join(str(v) for v in value)}]"
                                         if isinstance(value, list) else str(value))
                           for key, value in view_args(op).items())
        self.emit(view, f"{self.name(view)} = {op.keyword} {sources}{args} : "
                        f"{format_type(view.dtype, view.shape)}")

    def compute_set(self, cs: ComputeSet) -> None:
        if not cs.vertices:
            self.emit(cs, f"cs {self.header(cs)} {{}}")
            return
        self.emit(cs, f"cs {self.header(cs)} {{")
        for vertex in cs.vertices:
            self.emit(vertex, INDENT + self.vertex(vertex))
        self.emit(None, "}")

    def vertex(self, vertex: Vertex) -> str:
        connected = []
        for name, value in ordered_fields(vertex).items():
            if isinstance(value, tuple):
                connected.append(f"{name}=[{', '.join(self.name(t) for t in value)}]")
            else:
                connected.append(f"{name}={self.name(value)}")
        text = f"{vertex.kind.name}({', '.join(connected)})"
        for name, value in ordered_params(vertex).items():
            text += f" {name}={format_param(value)}"
        if vertex.tile is not None:
            text += f" tile={vertex.tile}"
        return text

    # programs: ``head`` is the text before the node on its first line (indentation included)
    def statement(self, node: Program, depth: int, head: str) -> None:
        """Print ``node`` at nesting ``depth`` after ``head``.  ``while`` and ``if`` take back the
        last line of their first part to continue it, so ``} %p {`` and ``} else {`` join up as the
        parser reads them."""
        self.mark(node)
        if isinstance(node, Sequence):
            if not node.programs:
                self.emit(None, head + "{}")
                return
            self.emit(None, head + "{")
            for child in node.programs:
                self.statement(child, depth + 1, INDENT * (depth + 1))
            self.emit(None, INDENT * depth + "}")
        elif isinstance(node, Repeat):
            self.statement(node.body, depth, head + f"repeat {node.count} ")
        elif isinstance(node, TimeLoop):
            self.emit(None, head + f"timeloop {'reverse' if node.reverse else 'forward'} first "
                      f"{node.first_step} steps {node.steps} shard {node.shard} of "
                      f"{node.shards} {{")
            for child in node.children():
                self.statement(child, depth + 1, INDENT * (depth + 1))
            self.emit(None, INDENT * depth + "}")
        elif isinstance(node, RepeatWhileTrue):
            self.statement(node.condition, depth, head + "while ")
            self.statement(node.body, depth, self.lines.pop() + f" {self.name(node.predicate)} ")
        elif isinstance(node, If):
            self.statement(node.then, depth, head + f"if {self.name(node.predicate)} ")
            self.statement(node.otherwise, depth, self.lines.pop() + " else ")
        else:
            self.emit(None, head + self.leaf(node))

    def leaf(self, node: Program) -> str:
        """A leaf node's one line; a node type without a form is a GrucTypeError, never a silent gap
        in the text."""
        leaf: dict[type, Callable[[Any], str]] = {
            Execute: lambda n: f"execute {self.naming.symbol(n.compute_set)}",
            Copy: lambda n: f"copy {self.name(n.src)} -> {self.name(n.dst)}",
            WriteUndef: lambda n: f"write_undef {self.name(n.tensor)}",
            Call: lambda n: f"call {self.naming.symbol(n.function)}",
            PrintTensor: lambda n: f"print {format_string(n.label)} {self.name(n.tensor)}",
            Sync: lambda n: "sync",
        }
        for cls, render in leaf.items():
            if isinstance(node, cls):
                return render(node)
        raise GrucTypeError(f"cannot print program node {type(node).__name__}")


def print_module_with_lines(module: Module) -> tuple[str, dict[int, int]]:
    """The module's text and, for every Variable, view, ComputeSet, Vertex, Function and Program
    node printed, ``id(obj)`` → the 1-based line where it is defined (first line, if printed twice).
    """
    return _Printer(module).run()


def print_module(module: Module) -> str:
    """The module in the text IR of docs/ir.md: deterministic, and :func:`parse_module` reads it."""
    return _Printer(module).run()[0]

