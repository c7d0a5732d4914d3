"""A :class:`~gruc.ir.module.Module` as JSON data, with the same content and names as the text IR.

``module_to_json`` returns plain lists, dicts, strings, numbers, booleans and None, so
``json.dumps(obj, sort_keys=True)`` is deterministic; ``module_from_json`` rebuilds the module
through :class:`~gruc.ir.parser.ModuleBuilder`, the builder the text parser uses, so the two formats
cannot drift apart: ``print_module(module_from_json(module_to_json(m))) == print_module(m)``.
The layout is documented at the end of docs/ir.md.  Malformed data raises
:class:`~gruc.errors.GrucParseError` naming the JSON path of the culprit.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

import numpy as np

from gruc.errors import GrucError, GrucParseError, GrucTypeError
from gruc.ir import expr as ex
from gruc.ir.layout import VIEW_OPS
from gruc.ir.module import Module
from gruc.ir.builder import DTYPES, ModuleBuilder
from gruc.ir.printer import (Naming, constant_runs, format_param, ordered_fields, ordered_params,
                             variable_groups, view_args)
from gruc.ir.program import (Call, Copy, Execute, If, PrintTensor, Program, Repeat,
                             RepeatWhileTrue, Sequence, Sync, TimeLoop, WriteUndef)
from gruc.target import Target
from gruc.types import DType

__all__ = ["module_to_json", "module_from_json", "FORMAT", "VERSION"]

FORMAT = "gruc-module"
VERSION = 1
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


# ------------------------------------------------------------------------------ to JSON
def _float(value: float) -> float | str:
    return value if math.isfinite(value) else repr(value)


def _param(value: Any) -> Any:
    """A vertex parameter as JSON data.  What JSON cannot tell apart from a list or a string
    (tuples, types, expressions, non-finite floats) is a one-key tagged object, so loading gives
    back the same value."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, DType):
        return {"dtype": value.short}
    if isinstance(value, ex.Expr):
        return {"expr": ex.to_json(value)}
    if isinstance(value, tuple):
        return {"tuple": [_param(v) for v in value]}
    if isinstance(value, list):
        return [_param(v) for v in value]
    return format_param(value)  # raises the printer's GrucTypeError for unsupported values


def _program(naming: Naming, node: Program) -> dict[str, Any]:
    """A program tree as nested objects keyed by ``op``, tensors and symbols by the names
    :class:`~gruc.ir.printer.Naming` gives them in the text."""
    name = naming.tensor
    if isinstance(node, Sequence):
        return {"op": "seq", "body": [_program(naming, p) for p in node.programs]}
    if isinstance(node, Execute):
        return {"op": "execute", "cs": naming.symbol(node.compute_set)}
    if isinstance(node, Copy):
        return {"op": "copy", "src": name(node.src), "dst": name(node.dst)}
    if isinstance(node, WriteUndef):
        return {"op": "write_undef", "tensor": name(node.tensor)}
    if isinstance(node, Repeat):
        return {"op": "repeat", "count": node.count, "body": _program(naming, node.body)}
    if isinstance(node, TimeLoop):
        return {"op": "timeloop", "reverse": node.reverse, "first": node.first_step,
                "steps": node.steps, "shard": node.shard, "shards": node.shards,
                "reset": _program(naming, node.reset), "loop": _program(naming, node.loop)}
    if isinstance(node, RepeatWhileTrue):
        return {"op": "while", "cond": _program(naming, node.condition),
                "pred": name(node.predicate), "body": _program(naming, node.body)}
    if isinstance(node, If):
        return {"op": "if", "pred": name(node.predicate), "then": _program(naming, node.then),
                "else": _program(naming, node.otherwise)}
    if isinstance(node, Call):
        return {"op": "call", "func": naming.symbol(node.function)}
    if isinstance(node, PrintTensor):
        return {"op": "print", "label": node.label, "tensor": name(node.tensor)}
    if isinstance(node, Sync):
        return {"op": "sync"}
    raise GrucTypeError(f"cannot serialise program node {type(node).__name__}")


def module_to_json(module: Module) -> dict[str, Any]:
    """The module as JSON-serialisable data (layout: docs/ir.md, "JSON")."""
    naming = Naming.of(module)
    graph = module.graph
    name = naming.tensor
    variables = []
    for var in graph.variables:
        entry: dict[str, Any] = {
            "name": name(var), "label": var.name,
            "kind": "var" if var.constant is None else "const",
            "dtype": var.dtype.short, "shape": list(var.shape),
            "map": [list(group) for group in variable_groups(graph, var)]}
        if var.constant is not None:
            flat = np.asarray(var.constant).reshape(-1)
            begins, counts = constant_runs(flat)
            values = flat[begins].tolist()
            if var.dtype.is_float:
                values = [_float(v) for v in values]
            entry["values"] = [[v, c] for v, c in zip(values, counts.tolist())]
        variables.append(entry)
    views = [{"name": name(v), "op": v.op.keyword, "sources": [name(s) for s in v.sources],
              "args": view_args(v.op), "dtype": v.dtype.short, "shape": list(v.shape)}
             for v in naming.views]
    compute_sets = []
    for cs in graph.compute_sets:
        vertices = []
        for vertex in cs.vertices:
            fields = {key: [name(t) for t in value] if isinstance(value, tuple) else name(value)
                      for key, value in ordered_fields(vertex).items()}
            params = {key: _param(value) for key, value in ordered_params(vertex).items()}
            vertices.append({"kind": vertex.kind.name, "fields": fields, "params": params,
                             "tile": vertex.tile})
        compute_sets.append({"symbol": naming.symbol(cs), "name": cs.name, "vertices": vertices})
    functions = [{"symbol": naming.symbol(f), "name": f.name,
                  "program": _program(naming, f.program)} for f in graph.functions]
    return {
        "format": FORMAT, "version": VERSION,
        "target": graph.target.model_dump(),
        "variables": variables,
        "views": views,
        "host_writes": [[stream, name(t)] for stream, t in graph.host_writes.items()],
        "host_reads": [[stream, name(t)] for stream, t in graph.host_reads.items()],
        "compute_sets": compute_sets,
        "functions": functions,
        "programs": [_program(naming, p) for p in module.programs],
    }


# ------------------------------------------------------------------------------ from JSON
class _Loader:
    """Rebuilds a module from :func:`module_to_json` data through a :class:`ModuleBuilder`, every
    shape of the data checked first, so each failure is a GrucParseError naming its JSON path."""
    def __init__(self) -> None:
        self.builder: ModuleBuilder | None = None

    @staticmethod
    def fail(path: str, message: str) -> NoReturn:
        raise GrucParseError(f"{path}: {message}")

    def get(self, obj: Any, key: str, path: str, kind: type | tuple[type, ...]) -> Any:
        """``obj[key]``, required and of ``kind`` (a bool is not taken for an int unless ``kind``
        says so); a string with a lone surrogate is refused, as the text parser refuses it."""
        if not isinstance(obj, dict):
            self.fail(path, f"expected an object, got {type(obj).__name__}")
        if key not in obj:
            self.fail(path, f"missing key {key!r}")
        value = obj[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
            self.fail(f"{path}.{key}", f"expected {_kind_name(kind)}, got {value!r:.60}")
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                self.fail(f"{path}.{key}", "the string holds a lone surrogate, which no UTF-8 file "
                                           "can store")
        return value

    def only(self, obj: Any, path: str, *keys: str) -> None:
        """Refuse keys the format does not have: a misspelt one would otherwise be ignored."""
        extra = sorted(set(obj) - set(keys)) if isinstance(obj, dict) else []
        if extra:
            self.fail(path, f"unknown key {extra[0]!r}; allowed: {', '.join(keys)}")

    def ints(self, value: Any, path: str) -> list[int]:
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                  for v in value):
            self.fail(path, f"expected a list of integers, got {value!r:.60}")
        return value

    def dtype(self, value: Any, path: str) -> DType:
        if not isinstance(value, str) or value not in DTYPES:
            self.fail(path, f"expected a type ({', '.join(DTYPES)}), got {value!r:.40}")
        return DTYPES[value]

    def tensor(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or value not in self.builder.tensors:
            self.fail(path, f"{value!r:.40} is not a defined tensor")
        return value

    def call(self, path: str, function, *args, **kwargs) -> Any:
        try:
            return function(*args, **kwargs)
        except GrucParseError:
            raise
        except GrucError as error:
            self.fail(path, str(error))

    def load(self, obj: Any) -> Module:
        """The module of a whole document, in the order the text defines things: target, variables,
        views, streams, compute sets, then every function declared before any body is read (a call
        may name a later function), then the programs."""
        if not isinstance(obj, dict):
            self.fail("$", f"expected an object, got {type(obj).__name__}")
        if obj.get("format") != FORMAT or type(obj.get("version")) is not int \
                or obj["version"] != VERSION:
            self.fail("$", f"expected format {FORMAT!r} version {VERSION}")
        self.only(obj, "$", "format", "version", "target", "variables", "views", "host_writes",
                  "host_reads", "compute_sets", "functions", "programs")
        target = self.get(obj, "target", "$", dict)
        self.builder = builder = self.call("$.target", ModuleBuilder,
                                           self.call("$.target", lambda: Target(**target)))
        for k, var in enumerate(self.get(obj, "variables", "$", list)):
            self.variable(var, f"$.variables[{k}]")
        for k, view in enumerate(self.get(obj, "views", "$", list)):
            path = f"$.views[{k}]"
            self.only(view, path, "name", "op", "sources", "args", "dtype", "shape")
            op = self.get(view, "op", path, str)
            if op not in VIEW_OPS:
                self.fail(f"{path}.op", f"unknown view op {op!r}")
            sources = [self.tensor(s, f"{path}.sources[{i}]")
                       for i, s in enumerate(self.get(view, "sources", path, list))]
            args = self.get(view, "args", path, dict)
            for key, value in args.items():
                if not (isinstance(value, int) and not isinstance(value, bool)):
                    self.ints(value, f"{path}.args.{key}")
            shape = tuple(self.ints(self.get(view, "shape", path, list), f"{path}.shape"))
            self.call(path, builder.view, self.get(view, "name", path, str), op, sources, args,
                      self.dtype(self.get(view, "dtype", path, str), f"{path}.dtype"), shape)
        for key in ("host_writes", "host_reads"):
            for k, item in enumerate(self.get(obj, key, "$", list)):
                path = f"$.{key}[{k}]"
                if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                    self.fail(path, "expected [stream name, tensor]")
                self.call(path, builder.host_stream, key == "host_writes", item[0],
                          self.tensor(item[1], f"{path}[1]"))
        compute_sets = self.get(obj, "compute_sets", "$", list)
        for k, cs in enumerate(compute_sets):
            self.compute_set(cs, f"$.compute_sets[{k}]")
        functions = self.get(obj, "functions", "$", list)
        for k, function in enumerate(functions):
            path = f"$.functions[{k}]"
            self.only(function, path, "symbol", "name", "program")
            self.call(path, builder.declare_function, self.get(function, "symbol", path, str),
                      self.get(function, "name", path, str))
        for k, function in enumerate(functions):
            path = f"$.functions[{k}]"
            program = self.program(self.get(function, "program", path, dict), f"{path}.program")
            self.call(path, builder.define_function, function["symbol"], program)
        programs = [self.program(p, f"$.programs[{k}]")
                    for k, p in enumerate(self.get(obj, "programs", "$", list))]
        return self.call("$", builder.finish, programs)

    def variable(self, var: Any, path: str) -> None:
        kind = self.get(var, "kind", path, str)
        if kind not in ("var", "const"):
            self.fail(f"{path}.kind", f"expected 'var' or 'const', got {kind!r:.40}")
        self.only(var, path, "kind", "name", "label", "dtype", "shape", "map",
                  *(("values",) if kind == "const" else ()))
        dtype = self.dtype(self.get(var, "dtype", path, str), f"{path}.dtype")
        shape = tuple(self.ints(self.get(var, "shape", path, list), f"{path}.shape"))
        groups = []
        for k, group in enumerate(self.get(var, "map", path, list)):
            group = self.ints(group, f"{path}.map[{k}]")
            if len(group) != 5:
                self.fail(f"{path}.map[{k}]", "expected [tile, step, count, elements, grain]")
            groups.append(tuple(group))
        values = None
        if kind == "const":
            values = []
            for k, item in enumerate(self.get(var, "values", path, list)):
                if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], int)
                        and not isinstance(item[1], bool)
                        and isinstance(item[0], (bool, int, float, str))):
                    self.fail(f"{path}.values[{k}]", "expected [value, count]")
                value = item[0]
                if isinstance(value, str):
                    if value not in _NON_FINITE:
                        self.fail(f"{path}.values[{k}]", f"unknown value {value!r:.20}")
                    value = _NON_FINITE[value]
                values.append((value, item[1]))
        self.call(path, self.builder.variable, self.get(var, "name", path, str),
                  self.get(var, "label", path, str), dtype, shape, groups, values)

    def compute_set(self, cs: Any, path: str) -> None:
        builder = self.builder
        self.only(cs, path, "symbol", "name", "vertices")
        created = self.call(path, builder.compute_set, self.get(cs, "symbol", path, str),
                            self.get(cs, "name", path, str))
        for k, vertex in enumerate(self.get(cs, "vertices", path, list)):
            where = f"{path}.vertices[{k}]"
            self.only(vertex, where, "kind", "fields", "params", "tile")
            fields = {}
            for key, value in self.get(vertex, "fields", where, dict).items():
                if isinstance(value, list):
                    fields[key] = [self.tensor(t, f"{where}.fields.{key}[{i}]")
                                   for i, t in enumerate(value)]
                else:
                    fields[key] = self.tensor(value, f"{where}.fields.{key}")
            params = {key: self.param(value, f"{where}.params.{key}")
                      for key, value in self.get(vertex, "params", where, dict).items()}
            tile = vertex.get("tile") if isinstance(vertex, dict) else None
            if tile is not None and not (isinstance(tile, int) and not isinstance(tile, bool)):
                self.fail(f"{where}.tile", f"expected an integer or null, got {tile!r:.40}")
            self.call(where, builder.vertex, created, self.get(vertex, "kind", where, str),
                      fields, params, tile)

    def param(self, value: Any, path: str, depth: int = 0) -> Any:
        """The value :func:`_param` wrote: JSON scalars and lists as they are, tagged objects back
        into tuples, types, expressions and non-finite floats."""
        if depth > 200:  # as the text parser: deep nesting must not become a RecursionError
            self.fail(path, "parameter values nest more than 200 levels deep")
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, list):
            return [self.param(v, f"{path}[{k}]", depth + 1) for k, v in enumerate(value)]
        if isinstance(value, dict) and len(value) == 1:
            (tag, inner), = value.items()
            if tag == "float" and inner in _NON_FINITE:
                return _NON_FINITE[inner]
            if tag == "dtype":
                return self.dtype(inner, f"{path}.dtype")
            if tag == "expr":
                try:
                    return ex.from_json(inner)
                except GrucError as error:
                    self.fail(f"{path}.expr", str(error))
            if tag == "tuple" and isinstance(inner, list):
                return tuple(self.param(v, f"{path}.tuple[{k}]", depth + 1)
                             for k, v in enumerate(inner))
        self.fail(path, f"unknown parameter value {value!r:.60}")

    def program(self, node: Any, path: str, depth: int = 0) -> Program:
        """The program tree :func:`_program` wrote, keys checked per op; nesting is capped at 200 as
        in the text parser, so a deep document is an error rather than a RecursionError."""
        if depth > 200:
            self.fail(path, "programs nest more than 200 levels deep")
        op = self.get(node, "op", path, str)
        builder = self.builder

        def sub(key: str) -> Program:
            return self.program(self.get(node, key, path, dict), f"{path}.{key}", depth + 1)

        def tensor(key: str) -> Any:
            return builder.tensor(self.tensor(self.get(node, key, path, str), f"{path}.{key}"))

        def symbol(key: str, table: dict[str, Any]) -> Any:
            value = self.get(node, key, path, str)
            if value not in table:
                self.fail(f"{path}.{key}", f"{value!r:.40} is not defined")
            return table[value]

        builders = {
            "seq": lambda: Sequence(*[self.program(p, f"{path}.body[{k}]", depth + 1)
                                      for k, p in enumerate(self.get(node, "body", path, list))]),
            "execute": lambda: Execute(symbol("cs", builder.compute_sets)),
            "copy": lambda: Copy(tensor("src"), tensor("dst")),
            "write_undef": lambda: WriteUndef(tensor("tensor")),
            "repeat": lambda: Repeat(self.get(node, "count", path, int), sub("body")),
            "while": lambda: RepeatWhileTrue(sub("cond"), tensor("pred"), sub("body")),
            "timeloop": lambda: TimeLoop(sub("reset"), sub("loop"),
                                         self.get(node, "reverse", path, bool),
                                         *(self.get(node, key, path, int)
                                           for key in ("first", "steps", "shard", "shards"))),
            "if": lambda: If(tensor("pred"), sub("then"), sub("else")),
            "call": lambda: Call(symbol("func", builder.functions)),
            "print": lambda: PrintTensor(self.get(node, "label", path, str), tensor("tensor")),
            "sync": Sync,
        }
        if op not in builders:
            self.fail(f"{path}.op",
                      f"unknown program op {op!r:.40}; allowed: {', '.join(builders)}")
        self.only(node, path, "op", *_PROGRAM_KEYS[op])
        return self.call(path, builders[op])


_PROGRAM_KEYS = {"seq": ("body",), "execute": ("cs",), "copy": ("src", "dst"),
                 "write_undef": ("tensor",), "repeat": ("count", "body"),
                 "while": ("cond", "pred", "body"),
                 "timeloop": ("reverse", "first", "steps", "shard", "shards", "reset", "loop"),
                 "if": ("pred", "then", "else"),
                 "call": ("func",), "print": ("label", "tensor"), "sync": ()}
"""The keys of each program node besides ``op`` (what :func:`_program` writes)."""


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer",
             float: "a number", bool: "a boolean"}
    return " or ".join(names.get(k, k.__name__) for k in _as_tuple(kind))


def module_from_json(obj: Any) -> Module:
    """The module :func:`module_to_json` described; malformed data raises GrucParseError."""
    return _Loader().load(obj)
