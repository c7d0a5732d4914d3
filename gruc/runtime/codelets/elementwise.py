"""Elementwise codelets (``Map``, ``MapInPlace``) on both engines, and their cycle estimates.

numpy: the expression's reference semantics (:func:`gruc.ir.expr.compile_evaluator`) over the
gathered operands.  numba: one generated kernel per expression, type signature and access shape —
a single loop that loads each operand, evaluates the whole tree on scalars (each node converted to
its compute type, transcendentals from :mod:`gruc.runtime.fastmath`) and stores the result, with
no temporaries — except where a transcendental meets runs of a few elements, whose operands are
first staged into contiguous arrays (:func:`staged_kernel_source`), in the element order that
leaves the fewest runs; an operand no step writes (a bias) is staged again only after the host
writes it.  Maps are prepared by an executable hook, which knows each vertex's step.  Vertices
touching HALF data run on numpy, since numba cannot load float16 on a CPU, and so do those whose
output overwrites, at other elements, what an operand still has to read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from gruc.ir import expr as ex
from gruc.ir.codelets.elementwise import MAP, MAP_IN_PLACE
from gruc.ir.graph import Vertex
from gruc.ir.layout import Strided
from gruc.ir.vertices import VertexKind
from gruc.runtime.codelets import poplibs_estimates as pe
from gruc.runtime.codelets.regions import tile_regions
from gruc.runtime.cost import cycle_estimator
from gruc.runtime.interp import NUMPY_VERTICES, Prepared, RunHooks, numpy_vertex
from gruc.runtime.kernels import (KERNEL_HEADER, Unchanged, find_segments, load_kernel,
                                  numba_executable_hook, runs_by_address, streams)
from gruc.runtime.lower import (DeviceMemory, Executable, ExecuteStep, LoweredVertex, Operand,
                                aligned_array)
from gruc.target import RPT_COUNT_MAX, Target
from gruc.types import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, DType

# ---- numpy ------------------------------------------------------------------------------------


def _prepare_numpy(vertex: LoweredVertex, out: Operand, operands: tuple[Operand, ...]) -> Prepared:
    """The reference run of a map: gather every operand, evaluate the tree with the expression's own
    semantics, then store, so every operand is read before anything is written."""
    evaluate = ex.compile_evaluator(vertex.params["expr"], [op.dtype for op in operands])

    def run(memory: DeviceMemory) -> None:
        result = evaluate([memory.view(op.dtype)[op.index] for op in operands])
        memory.view(out.dtype)[out.index] = np.broadcast_to(result, out.index.shape)

    return run


def _operands(vertex: LoweredVertex) -> tuple[Operand, tuple[Operand, ...]]:
    """The written operand and the expression's operands ``_1, _2, ...`` in order."""
    if vertex.kind is MAP_IN_PLACE:
        inout = vertex.fields["inout"]
        return inout, (inout, *vertex.fields["ins"])
    return vertex.fields["out"], tuple(vertex.fields["ins"])


@numpy_vertex(MAP)
@numpy_vertex(MAP_IN_PLACE)
def _numpy_map(vertex: LoweredVertex) -> Prepared:
    return _prepare_numpy(vertex, *_operands(vertex))


# ---- numba ------------------------------------------------------------------------------------
_CONSTRUCTOR = {FLOAT.name: "np.float32", INT.name: "np.int32", UNSIGNED_INT.name: "np.uint32",
                BOOL.name: "bool"}
_OF_FLOAT = {INT.name: "int32_of_float", UNSIGNED_INT.name: "uint32_of_float"}
"""Float-to-integer casts, with the results :mod:`gruc.ir.expr` defines for NaN and overflow."""
_FAST_FLOAT32 = {ex.Unary.EXP: "exp32({0})", ex.Unary.TANH: "tanh32({0})",
                 ex.Unary.SIGMOID: "sigmoid32({0})"}


def _literal(value: bool | int | float) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float) and not math.isfinite(value):
        return "math.nan" if math.isnan(value) else ("math.inf" if value > 0 else "-math.inf")
    return repr(value)


class ScalarCode:
    """Statements computing one expression tree on scalar locals ``a1 .. aN``."""

    def __init__(self, operand_dtypes: list[DType], indent: str) -> None:
        self.dtypes = operand_dtypes
        self.indent = indent
        self.lines: list[str] = []
        self.count = 0

    def emit(self, node: ex.Expr) -> str:
        """Append the statements for ``node``; return the local holding its value."""
        if isinstance(node, ex.PlaceHolder):
            return f"a{node.index}"
        node_type = ex.result_dtype(node, self.dtypes)
        if isinstance(node, ex.Const):
            value = _literal(node.value)
        elif isinstance(node, ex.Cast):
            value = self.emit(node.arg)
            if node.dtype.name in _OF_FLOAT and ex.result_dtype(node.arg, self.dtypes).is_float:
                value = f"{_OF_FLOAT[node.dtype.name]}({value})"
        else:
            args = [self.emit(child) for child in ex.children(node)]
            operand_type = ex.result_dtype(ex.children(node)[0], self.dtypes)
            template = (_FAST_FLOAT32[node.op] if operand_type is FLOAT and node.op in _FAST_FLOAT32
                        else ex.scalar_source(node.op, operand_type))
            value = template.format(*args)
        self.count += 1
        name = f"t{self.count}"
        self.lines.append(f"{self.indent}{name} = {_CONSTRUCTOR[node_type.name]}({value})")
        return name


def gather_kernel_source(expr: ex.Expr, operand_dtypes: list[DType]) -> str:
    """Source of ``kernel(out, out_index, m1, i1, ...)``: per-element indices."""
    code = ScalarCode(operand_dtypes, " " * 8)
    result = code.emit(expr)
    params = "".join(f", m{k}, i{k}" for k in range(1, len(operand_dtypes) + 1))
    loads = [f"        a{k} = m{k}[i{k}[k]]" for k in range(1, len(operand_dtypes) + 1)]
    return "\n".join([KERNEL_HEADER + f"def kernel(out, out_index{params}):",
                      "    for k in range(out_index.shape[0]):",
                      *loads, *code.lines, f"        out[out_index[k]] = {result}", ""])


def segment_kernel_source(expr: ex.Expr, operand_dtypes: list[DType], streaming: list[bool],
                          same_as_out: list[bool]) -> str:
    """Source of ``kernel(out, out_base, m1, b1, ..., lengths)``: runs of consecutive elements.

    Each run is sliced out before the inner loop, so LLVM sees unit-stride, non-negative indexing
    and vectorises.  An operand that is the output itself (an in-place update) is read through the
    output's own slice: two slices of one buffer at the same address defeat LLVM's overlap check.
    """
    code = ScalarCode(operand_dtypes, " " * 12)
    result = code.emit(expr)
    count = len(operand_dtypes)
    params = "".join(f", m{k}, b{k}" for k in range(1, count + 1))
    runs = [f"        x{k} = y" if same_as_out[k - 1]
            else f"        x{k} = m{k}[b{k}[s]:b{k}[s] + n]" if streaming[k - 1]
            else f"        a{k} = m{k}[b{k}[s]]" for k in range(1, count + 1)]
    loads = [f"            a{k} = x{k}[j]" for k in range(1, count + 1) if streaming[k - 1]]
    return "\n".join([KERNEL_HEADER + f"def kernel(out, out_base{params}, lengths):",
                      "    for s in range(lengths.shape[0]):",
                      "        n = lengths[s]", "        y = out[out_base[s]:out_base[s] + n]", *runs,
                      "        for j in range(n):",
                      *loads, *code.lines, f"            y[j] = {result}", ""])


def staged_kernel_source(expr: ex.Expr, operand_dtypes: list[DType], streaming: list[bool]) -> str:
    """Source of ``kernel(out, o_runs, m1, r1, ..., y, x1, ...)``: operands staged through
    contiguous arrays.

    Where operands are laid out differently on their tiles (a matmul's output beside a sequence
    slice), the runs in which *all* of them are consecutive hold a few elements each, and a loop
    over them does little but set up slices and finish scalar remainders — a transcendental costs
    ten times its vector price there.  So each streaming operand is copied on its own runs
    (``r<k>``: memory start, position, length, in address order) into a contiguous array ``x<k>``,
    the expression runs once over them all into ``y``, and ``y`` goes back on the output's runs:
    all reads before any write, as in the definition.  A fixed operand (one element broadcast)
    is ``m<k>[r<k>[0, 0]]``.
    """
    code = ScalarCode(operand_dtypes, " " * 8)
    result = code.emit(expr)
    count = len(operand_dtypes)
    moving = [k for k in range(1, count + 1) if streaming[k - 1]]
    params = "".join(f", m{k}, r{k}" for k in range(1, count + 1))
    staging = "".join(f", x{k}" for k in range(1, count + 1))

    def copy(runs: str, source: str, target: str, source_at: str, target_at: str) -> list[str]:
        return [f"    for s in range({runs}.shape[1]):",
                f"        start, at, n = {runs}[0, s], {runs}[1, s], {runs}[2, s]",
                f"        source, target = {source}[{source_at}:{source_at} + n], "
                f"{target}[{target_at}:{target_at} + n]",  # slices: LLVM vectorises
                "        for j in range(n):", "            target[j] = source[j]"]

    lines = [KERNEL_HEADER + f"def kernel(out, o_runs{params}, y{staging}):"]
    for k in moving:
        lines += copy(f"r{k}", f"m{k}", f"x{k}", "start", "at")
    lines += [f"    a{k} = m{k}[r{k}[0, 0]]" for k in range(1, count + 1) if not streaming[k - 1]]
    lines += ["    z = y[:y.shape[0]]", *[f"    v{k} = x{k}[:y.shape[0]]" for k in moving],
              "    for j in range(y.shape[0]):", *[f"        a{k} = v{k}[j]" for k in moving],
              *code.lines, f"        z[j] = {result}"]
    lines += copy("o_runs", "y", "out", "at", "start")
    return "\n".join(lines + [""])


STAGED_BELOW = 32
"""Stage the operands of a vertex with a transcendental when the runs common to all its operands
average fewer elements than this; without a transcendental, only when they average fewer than
:data:`~gruc.runtime.kernels.SEGMENT_MIN_AVERAGE` (else the run loop's remainders are cheap)."""


STAGED_MIN_AVERAGE = 2
"""Stage only if the runs copied on every call average at least this many elements: a run costs
about what a few elements do, and the per-element gather kernel loads an index per element and
operand (measured on a GRU gate: 2,048 elements in runs of 3, staged 15 us, gathered 28 us)."""


def _expensive(expression: ex.Expr) -> bool:
    """Whether the tree has an op that costs a host CPU many times an add (``OpDef.costly``: a
    transcendental, a division): such a tree is worth staging into contiguous arrays
    (:data:`STAGED_BELOW`)."""
    return any(isinstance(node, (ex.UnaryOp, ex.BinaryOp, ex.TernaryOp))
               and ex.OPS[node.op].costly for node in ex.walk(expression))


def _run_table(index: np.ndarray) -> np.ndarray:
    """``[3, runs]`` int64: memory start, flat position and length of each run, by address."""
    return np.stack(runs_by_address(index)).astype(np.int64)


def _run_count(index: np.ndarray) -> int:
    return 1 + int(np.count_nonzero(np.diff(index) != 1)) if len(index) else 0


def _staging_order(out: Operand, moving: list[Operand]) -> np.ndarray:
    """The order in which the elements are staged: the flat order, or the address order of the
    output or of one moving operand, whichever leaves the fewest runs to copy.

    A tile holding a ``[2, 16]`` block of a ``[32, 1024]`` output keeps it in 32 consecutive
    addresses, but in flat order it is two runs (one per row), each a cache line or two apart
    from anything the loop copies next; in the output's address order it is one run, and so is
    every operand laid out the same way.  The expression is elementwise and the kernel reads
    everything before writing, so any order computes the same values."""
    flat = [op.index.reshape(-1) for op in (out, *moving)]
    orders = [np.arange(len(flat[0]), dtype=np.int64)]
    orders += [np.argsort(index, kind="stable") for index in flat]
    costs = [sum(_run_count(index[order]) for index in flat) for order in orders]
    return orders[int(np.argmin(costs))]


def _staged(expression: ex.Expr, out: Operand, operands: tuple[Operand, ...],
            unchanged: Callable[[Operand], Unchanged]) -> Prepared | None:
    """The kernel of :func:`staged_kernel_source` with its run tables and staging arrays; None
    if the operands' own runs are too short to pay (scattered element by element).

    An operand no step writes (a bias, weights nothing updates) is copied only when the host has
    written it since the step last staged it (``unchanged``): its staging array, which only this
    kernel writes, still holds it.  Operands steps write change on almost every call: asking
    would cost more than it saves."""
    streaming = [streams(op.index) for op in operands]
    kept = [unchanged(op) if moves else None for op, moves in zip(operands, streaming)]
    kept = [keep if keep and keep.only_the_host_writes else None for keep in kept]
    every_step = [moves and not keep for moves, keep in zip(streaming, kept)]
    order = _staging_order(out, [op for op, moving in zip(operands, every_step) if moving])
    tables = [_run_table(op.index.reshape(-1)[order] if moves else op.index.reshape(-1)[:1])
              for op, moves in zip(operands, streaming)]
    out_runs = _run_table(out.index.reshape(-1)[order])
    # what pays is what moves on every run (an operand only the host writes moves once)
    moved = [out_runs] + [table for table, moving in zip(tables, every_step) if moving]
    if sum(table.shape[1] for table in moved) * STAGED_MIN_AVERAGE > len(moved) * out.index.size:
        return None
    dtypes = [op.dtype for op in operands]
    kernel = load_kernel(staged_kernel_source(expression, dtypes, streaming))
    y = aligned_array(out.index.size, out.dtype.storage)
    staging = [aligned_array(len(y) if moves else 0, op.dtype.storage)
               for op, moves in zip(operands, streaming)]
    nothing = np.zeros((3, 0), np.int64)

    def run(memory: DeviceMemory) -> None:
        args = []
        for op, table, keep in zip(operands, tables, kept):
            args += [memory.view(op.dtype), nothing if keep and keep(memory) else table]
        kernel(memory.view(out.dtype), out_runs, *args, y, *staging)

    return run


def _touches_half(expression: ex.Expr, out: Operand, operands: tuple[Operand, ...]) -> bool:
    """Whether an operand, the output or any node of the tree is half (numba has no float16:
    a ``cast`` to half inside a float expression, which in-place fusion makes, included)."""
    dtypes = [op.dtype for op in operands]
    return (out.dtype is HALF or HALF in dtypes
            or any(not isinstance(node, ex.PlaceHolder) and ex.result_dtype(node, dtypes) is HALF
                   for node in ex.walk(expression)))


def _reads_what_it_wrote(out: Operand, operands: tuple[Operand, ...]) -> bool:
    """Whether an element loop (which reads element ``k``'s operands, then writes its output)
    would read an address it already wrote: an operand that is a view of the output's variables
    with a shared address at a later element than the output's (``x.reverse(0)`` written from
    ``x``).  The definition reads every operand before writing; the staged kernel does too.
    Operands of other variables cannot share the output's bytes: both are live at the step."""
    written = {v.index for v in out.tensor.variables()}
    targets = out.index.reshape(-1)
    if not targets.size:
        return False
    order = np.argsort(targets, kind="stable")
    addresses = targets[order]
    for op in operands:
        if not written & {v.index for v in op.tensor.variables()}:
            continue
        reads = np.broadcast_to(op.index, out.index.shape).reshape(-1)
        if np.array_equal(reads, targets):
            continue  # in place: each element reads its own address before writing it
        found = np.minimum(np.searchsorted(addresses, reads), len(addresses) - 1)
        shared = addresses[found] == reads
        if np.any(order[found[shared]] < np.flatnonzero(shared)):  # written at an earlier element
            return True
    return False


def _numba_map(vertex: LoweredVertex, unchanged: Callable[[Operand], Unchanged]) -> Prepared:
    """How a map vertex runs on the numba backend: the numpy definition where numba cannot match it
    (half data, an output overwriting what an operand still reads); else operands staged into
    contiguous arrays where runs are short (or short and the tree costly) and staging pays, a loop
    over segments, or a gather by index."""
    out, operands = _operands(vertex)
    dtypes = [op.dtype for op in operands]
    expression = ex.bind_const_types(vertex.params["expr"], dtypes)
    if _touches_half(expression, out, operands) or _reads_what_it_wrote(out, operands):
        return NUMPY_VERTICES[vertex.kind](vertex)
    segments = find_segments(out.index, [op.index for op in operands])
    short = segments is None or (len(segments.lengths) * STAGED_BELOW > len(out.index)
                                 and _expensive(expression))
    staged = _staged(expression, out, operands, unchanged) if short and out.index.size else None
    if staged is not None:
        return staged
    if segments is None:
        kernel = load_kernel(gather_kernel_source(expression, dtypes))

        def run_gather(memory: DeviceMemory) -> None:
            args = []
            for op in operands:
                args += [memory.view(op.dtype), op.index]
            kernel(memory.view(out.dtype), out.index, *args)

        return run_gather
    same_as_out = [op.dtype == out.dtype and np.array_equal(base, segments.out_base)
                   for op, base in zip(operands, segments.bases)]
    kernel = load_kernel(segment_kernel_source(expression, dtypes, list(segments.streaming),
                                               same_as_out))

    def run(memory: DeviceMemory) -> None:
        args = []
        for op, base in zip(operands, segments.bases):
            args += [memory.view(op.dtype), base]
        kernel(memory.view(out.dtype), segments.out_base, *args, segments.lengths)

    return run


@numba_executable_hook
def _prepare_maps(executable: Executable, hooks: RunHooks) -> dict[int, Prepared]:
    """Every ``Map`` and ``MapInPlace`` vertex, told how to ask whether an operand may have
    changed since its step last read it (:class:`~gruc.runtime.kernels.Unchanged`)."""
    prepared: dict[int, Prepared] = {}
    for leaf in executable.leaves:
        if not isinstance(leaf, ExecuteStep):
            continue
        unchanged = partial(Unchanged, executable=executable, step_counts=hooks.step_counts,
                            reading_step=leaf.step)
        for vertex in leaf.vertices:
            if vertex.kind in (MAP, MAP_IN_PLACE):
                prepared[id(vertex)] = _numba_map(vertex, unchanged)
    return prepared


# ---- cycles -----------------------------------------------------------------------------------
# A map vertex is costed as the poplibs codelet(s) a Poplar program runs for the same work on each
# tile (docs/cycle-model.md, "Vertex estimators"): a one-op tree as popops' unary, binary, scalar
# broadcast, cast, fill, select or clamp vertices; a popnn non-linearity gradient as
# NonLinearityGrad; a tree poplibs would fuse as its generated codelet; any other tree op by op.
SCALAR, VECTOR, FULL = "scalar", "vector", "full"
"""How an operand meets the output: one element broadcast, a repeating broadcast, or one
element per output element (a temporary of an unfused tree is ``FULL``)."""


@dataclass(frozen=True)
class MapCodelet:
    """One poplibs element-wise codelet run over the map's output on every tile."""

    family: str
    """``unary``, ``binary``, ``broadcast`` (scalar), ``cast``, ``fill``, ``select``,
    ``broadcast_select``, ``clamp``, ``fused``, ``grad`` or ``scaled_add``."""
    dtype: DType
    """The operand type its table is keyed by (a cast's source type)."""
    op: ex.Op | None = None
    in_place: bool = False
    out_dtype: DType | None = None
    inputs: int = 0
    """A fused codelet's input tensors."""
    fused_ops: int = 1
    constant: bool = False
    """A ``scaled_add``'s scale is a number known when the graph is built (poplibs'
    ``isConstant``), not a tensor."""


def operand_kind(tensor) -> str:
    """:data:`SCALAR`, :data:`VECTOR` or :data:`FULL` for a map operand (broadcast to the
    output's shape by the builder)."""
    if tensor.num_elements <= 1:
        return SCALAR
    if not tensor.has_repeats():  # (asked first: a long concatenation's ids are never listed)
        return FULL
    layout = tensor.layout()
    return SCALAR if isinstance(layout, Strided) and not any(layout.strides) else VECTOR


def _grad_patterns(dtype: DType) -> dict[ex.Expr, str]:
    """popnn's input gradients as :mod:`gruc.ops.nonlinearity` writes them (output ``_1``,
    output gradient ``_2``; half computed in float), by kind."""
    one, zero = ex.Const(1.0), ex.Const(0.0)
    builders = {"sigmoid": lambda y, g: g * (y * (one - y)),
                "tanh": lambda y, g: g * (one - y * y),
                "relu": lambda y, g: ex.select(g, zero, y > zero)}
    patterns = {}
    for kind, build in builders.items():
        tree = build(ex._1, ex._2) if dtype is not HALF else ex.Cast(
            build(ex.Cast(ex._1, FLOAT), ex.Cast(ex._2, FLOAT)), HALF)
        patterns[ex.bind_const_types(tree, [dtype, dtype])] = kind
    return patterns


_GRAD_PATTERNS = {dtype: _grad_patterns(dtype) for dtype in (FLOAT, HALF)}


def _child_kind(node: ex.Expr, kinds: list[str]) -> str:
    if isinstance(node, ex.Const):
        return SCALAR
    if isinstance(node, ex.PlaceHolder):
        return kinds[node.index - 1]
    return FULL


def _one_op(node: ex.Expr, dtypes: list[DType], kinds: list[str], in_place: bool) -> MapCodelet:
    """The popops vertex family of one operation node (ElementWise.cpp's choice); ``in_place``:
    the node writes its first operand (:func:`_in_place_path`)."""
    args = ex.children(node)
    arg_types = [ex.result_dtype(a, dtypes) for a in args]
    arg_kinds = [_child_kind(a, kinds) for a in args]
    out_type = ex.result_dtype(node, dtypes)
    if isinstance(node, ex.Cast):
        return MapCodelet("cast", arg_types[0], out_dtype=out_type)
    if isinstance(node, ex.UnaryOp):
        table = pe.UNARY_IN_PLACE if in_place else pe.UNARY
        if (node.op, arg_types[0].name) in table:
            return MapCodelet("unary", arg_types[0], node.op, in_place, out_type)
    elif isinstance(node, ex.BinaryOp):
        dtype = arg_types[0]
        table = pe.BROADCAST_IN_PLACE if in_place else pe.BROADCAST
        commutes = node.op in _COMMUTATIVE
        if (arg_kinds[1] == SCALAR or (arg_kinds[0] == SCALAR and commutes and not in_place)) \
                and (node.op, dtype.name) in table:
            return MapCodelet("broadcast", dtype, node.op, in_place, out_type)
        table = pe.BINARY_IN_PLACE if in_place else pe.BINARY
        if (node.op, dtype.name) in table:
            return MapCodelet("binary", dtype, node.op, in_place, out_type)
    elif node.op is ex.Ternary.SELECT:
        if arg_kinds[0] == SCALAR and arg_kinds[1] == SCALAR and arg_kinds[2] != SCALAR \
                and not in_place:
            return MapCodelet("broadcast_select", arg_types[0], node.op, False, out_type)
        return MapCodelet("select", arg_types[0], node.op, in_place, out_type)
    else:
        return MapCodelet("clamp", arg_types[0], node.op, in_place, out_type)
    # no popops table entry (RELU, in-place comparisons): the cost of a one-op generated codelet
    return MapCodelet("fused", arg_types[0], node.op, in_place, out_type,
                      inputs=sum(kind != SCALAR for kind in arg_kinds) or 1)


_COMMUTATIVE = frozenset({ex.Binary.ADD, ex.Binary.MUL, ex.Binary.MAX, ex.Binary.MIN,
                          ex.Binary.EQ, ex.Binary.NE, ex.Binary.AND, ex.Binary.OR})
"""``isBinaryOpCommutative``: a scalar first operand is swapped to second for these."""


def _fusable(expression: ex.Expr, kinds: list[str]) -> bool:
    """``isExpressionSupported`` of 2021-03: every input tensor of the output's shape without
    aliases (no scalars yet), every constant finite, more than one operation."""
    finite = all(not isinstance(node, ex.Const) or isinstance(node.value, (bool, int))
                 or math.isfinite(node.value) for node in ex.walk(expression))
    return bool(kinds) and all(kind == FULL for kind in kinds) and finite \
        and ex.num_ops(expression) > 1


def map_codelets(expression: ex.Expr, dtypes: list[DType], kinds: list[str], in_place: bool,
                 kind: VertexKind = MAP) -> list[MapCodelet]:
    """The poplibs codelets that do a map's work: one for a one-op tree, a popnn gradient, or a
    fused tree; else one per operation node (poplibs' unfused evaluation, each into a temporary
    laid out like the output, the root in place when the map is and its first operand is
    ``_1``).  ``dtypes`` and ``kinds`` are the operands' (``_1`` first)."""
    expression = optimised(ex.bind_const_types(expression, dtypes))
    out_type = ex.result_dtype(expression, dtypes)
    if ex.num_ops(expression) == 0:
        if isinstance(expression, ex.Const):
            return [MapCodelet("fill", out_type)]
        return [MapCodelet("fused", out_type, inputs=1)]  # a copy: no popops vertex
    if kind is MAP and len(dtypes) == 2 and dtypes[0] is dtypes[1] is out_type \
            and kinds == [FULL, FULL] and expression in _GRAD_PATTERNS.get(out_type, {}):
        return [MapCodelet("grad", out_type, out_dtype=out_type)]
    if _is_scaled_add(expression, dtypes, kinds, kind):
        return [MapCodelet("scaled_add", dtypes[0], in_place=True,
                           constant=isinstance(expression.rhs.rhs, ex.Const))]
    if ex.num_ops(expression) > 1 and _fusable(expression, kinds):
        fused = sum(isinstance(node, (ex.UnaryOp, ex.BinaryOp, ex.TernaryOp))
                    for node in ex.walk(expression))
        return [MapCodelet("fused", dtypes[0], inputs=len(dtypes), fused_ops=fused,
                           in_place=in_place, out_dtype=out_type)]
    codelets: list[MapCodelet] = []

    def visit(node: ex.Expr, writes: bool) -> None:
        if isinstance(node, (ex.PlaceHolder, ex.Const)):
            return
        for k, child in enumerate(ex.children(node)):
            visit(child, writes and k == 0 and not isinstance(node, ex.Cast))
        codelets.append(_one_op(node, dtypes, kinds, writes))

    visit(expression, in_place and _in_place_path(expression))
    return codelets


def _is_scaled_add(expression: ex.Expr, dtypes: list[DType], kinds: list[str],
                   kind: VertexKind) -> bool:
    """Whether a map is popops' ``scaledAddTo(A, B, scale)`` as gruc's ``scaled_add_to`` builds
    it — in place, ``_1 + _2 * s`` with ``s`` a number or a one-element tensor, A and B of one
    float type — which poplibs runs as ``ScaledAddSupervisor`` / ``ScaledAdd2D`` vertices, not
    as a generated codelet (a ``mapInPlace`` of that very tree written by hand is read the same
    way)."""
    if kind is not MAP_IN_PLACE or len(dtypes) not in (2, 3) or dtypes[0] is not dtypes[1] \
            or dtypes[0] not in (FLOAT, HALF) or kinds[1] != FULL:
        return False
    if len(dtypes) == 3 and kinds[2] != SCALAR:
        return False
    scale = ex.PlaceHolder(3) if len(dtypes) == 3 else None
    if not (isinstance(expression, ex.BinaryOp) and expression.op is ex.Binary.ADD
            and expression.lhs == ex.PlaceHolder(1) and isinstance(expression.rhs, ex.BinaryOp)
            and expression.rhs.op is ex.Binary.MUL and expression.rhs.lhs == ex.PlaceHolder(2)):
        return False
    factor = expression.rhs.rhs
    return factor == scale if scale is not None else isinstance(factor, ex.Const)


def _in_place_path(expression: ex.Expr) -> bool:
    """Whether poplibs' unfused ``mapInPlace`` works in place: the operations on the leftmost
    path from the root write their first operand when that path ends at ``_1`` and it is the last
    ``_1`` its traversal meets — the only one, as the leftmost leaf is met first (else the
    result is computed aside and copied into ``_1``: a copy gruc's Map does not make)."""
    node = expression
    while not isinstance(node, (ex.PlaceHolder, ex.Const)):
        node = ex.children(node)[0]
    ones = sum(isinstance(n, ex.PlaceHolder) and n.index == 1 for n in ex.walk(expression))
    return isinstance(node, ex.PlaceHolder) and node.index == 1 and ones == 1


def optimised(expression: ex.Expr) -> ex.Expr:
    """poplibs' ``optimise`` (``enableExpressionOptimizations``, on by default): ``pow(x, c)``
    with ``c`` 0.5, -0.5, -1 or 2 becomes sqrt, rsqrt, inverse or square (``c`` 1: ``x``)."""
    if isinstance(expression, (ex.PlaceHolder, ex.Const)):
        return expression
    args = [optimised(child) for child in ex.children(expression)]
    if isinstance(expression, ex.BinaryOp) and expression.op is ex.Binary.POW \
            and isinstance(args[1], ex.Const) and args[1].dtype in (FLOAT, HALF):
        value = float(args[1].value)
        unary = {0.5: ex.Unary.SQRT, -0.5: ex.Unary.RSQRT, -1.0: ex.Unary.INVERSE,
                 2.0: ex.Unary.SQUARE}.get(value)
        if unary is not None:
            return ex.UnaryOp(unary, args[0])
        if value == 1.0:
            return args[0]
    return ex.with_children(expression, args)


class TileWork:
    """A map's output on every tile: its contiguous regions, and per codelet family the cycles of
    the supervisor vertex (a tile with one region) or of the worker vertices (the others) that
    poplibs' builders would make."""

    def __init__(self, regions: tuple[np.ndarray, np.ndarray], elements: np.ndarray,
                 target: Target) -> None:
        self.region_tile, self.region_size = regions
        self.elements = np.asarray(elements, dtype=np.int64)
        self.num_tiles = target.num_tiles
        self.workers = target.num_worker_contexts
        self.target = target
        self.regions_per_tile = np.bincount(self.region_tile, minlength=self.num_tiles)

    def supervised(self, limit: int | None = None) -> np.ndarray:
        """Tiles whose one region gets a supervisor vertex (within ``limit`` elements a worker,
        ``validateRegionSizeForSupervisorVertex``)."""
        mask = self.regions_per_tile == 1
        return mask if limit is None else mask & (self.elements <= limit * self.workers)

    def split(self, skip: np.ndarray | None, grain: int, min_elements: int,
              max_region: int | None = None) -> pe.WorkerSplit:
        keep = slice(None) if skip is None else ~skip[self.region_tile]
        return pe.split_regions(self.region_tile[keep], self.region_size[keep], grain,
                                min_elements, self.workers, max_region)

    def on_tiles(self, split: pe.WorkerSplit, vertex_cycles: np.ndarray) -> np.ndarray:
        return pe.worker_tile_cycles(split.vertex_tile, vertex_cycles, self.num_tiles,
                                     self.workers)

    def cycles(self, codelet: MapCodelet) -> np.ndarray:
        """Machine cycles of ``codelet`` on every tile."""
        return getattr(self, f"_{codelet.family}")(codelet)

    def _element_limit(self, codelet: MapCodelet) -> int | None:
        """``maxVertexElementsPerRegion(in, out)``: rpt count times the elements a loop does."""
        src, dst = codelet.dtype, codelet.out_dtype or codelet.dtype
        if src is not HALF and dst is not FLOAT:
            return None
        width = 4 if (src.is_float and dst is BOOL) or (src is dst is HALF) else \
            2 if src is dst is FLOAT else 1
        return RPT_COUNT_MAX * width

    def _grain(self, dtype: DType) -> int:
        return max(self.target.vector_width(dtype), pe.ATOMIC_STORE_GRANULARITY)

    def _supervisor_or_workers(self, codelet: MapCodelet, supervisor, row, base) -> np.ndarray:
        limit = self._element_limit(codelet)
        alone = self.supervised(limit)
        cycles = np.where(alone, supervisor(self.elements), 0)
        grain = self._grain(codelet.dtype)
        split = self.split(alone, grain, 2 * grain, limit)
        return cycles + self.on_tiles(split, split.per_vertex(row(split.row_size), base))

    def _unary(self, c: MapCodelet) -> np.ndarray:
        info = (pe.UNARY_IN_PLACE if c.in_place else pe.UNARY)[(c.op, c.dtype.name)]
        width = self.target.vector_width(c.dtype)
        return self._supervisor_or_workers(
            c, lambda n: pe.unary_op_1d_supervisor(n, info, width, self.workers),
            lambda n: pe.unary_inner_loop(n, info, width), pe.UNARY_2D_BASE)

    def _binary(self, c: MapCodelet) -> np.ndarray:
        info = (pe.BINARY_IN_PLACE if c.in_place else pe.BINARY)[(c.op, c.dtype.name)]
        width = self.target.vector_width(c.dtype)
        external = pe.has_external_codelet(c.op, c.dtype)
        return self._supervisor_or_workers(
            c, lambda n: pe.binary_op_1d_supervisor(n, info, width, external, self.workers,
                                                    c.in_place),
            lambda n: pe.binary_inner_loop(n, info, width, external), pe.binary_2d_base(c.in_place))

    def _broadcast(self, c: MapCodelet) -> np.ndarray:
        """``binaryOpBroadcastScalar``: a supervisor vertex per region when the tile has one
        region, or fewer than six of at least ``3 grain`` elements each; else
        ``BroadcastScalar2DData`` workers."""
        info = (pe.BROADCAST_IN_PLACE if c.in_place else pe.BROADCAST)[(c.op, c.dtype.name)]
        width = self.target.vector_width(c.dtype)
        overhead = pe.broadcast_overhead(c.op, c.dtype)
        grain = self._grain(c.dtype)
        limit = self._element_limit(c)
        small = np.bincount(self.region_tile, weights=self.region_size < (self.workers + 1) // 2
                            * grain, minlength=self.num_tiles) > 0
        alone = (self.regions_per_tile == 1) | ((self.regions_per_tile < self.workers) & ~small)
        alone &= self.regions_per_tile > 0
        if limit is not None:
            alone &= self.elements <= limit * self.workers
        per_region = pe.broadcast_scalar_1d_supervisor(self.region_size, info, width, overhead,
                                                       self.workers)
        cycles = np.bincount(self.region_tile, weights=np.where(alone[self.region_tile],
                                                                  per_region, 0),
                             minlength=self.num_tiles).astype(np.int64)
        split = self.split(alone, grain, 2 * grain, limit)
        rows = pe.broadcast_loop(split.row_size, info, width, overhead) + pe.BROADCAST_2D_ROW
        return cycles + self.on_tiles(split, split.per_vertex(rows, pe.BROADCAST_2D_BASE))

    def _cast(self, c: MapCodelet) -> np.ndarray:
        """``popops/Cast.cpp``: ``CastSupervisor`` for one region, else ``Cast`` (a vertex of
        one row) or ``Cast2d`` workers split by the float vector width."""
        to_half = c.out_dtype is HALF
        float_half = {c.dtype, c.out_dtype} == {FLOAT, HALF}
        alone = self.supervised()
        cycles = np.where(alone, pe.cast_supervisor(self.elements, to_half, self.workers), 0)
        width = self.target.vector_width(FLOAT)
        split = self.split(alone, width, 2 * width)
        two_d = split.per_vertex(pe.CAST_2D_ROW + pe.ceil_div(split.row_size, 2), pe.CAST_2D_BASE)
        one = pe.cast_worker(split.vertex_elements(), float_half, to_half)
        return cycles + self.on_tiles(split, np.where(split.vertex_rows() == 1, one, two_d))

    def _fill(self, c: MapCodelet) -> np.ndarray:
        """``popops/Fill.cpp``: ``Fill`` (one row) or ``Fill2d`` workers, always."""
        half = c.dtype is HALF
        width = self.target.vector_width(c.dtype)
        split = self.split(None, width, 2 * width)
        two_d = split.per_vertex(pe.fill_2d_row(split.row_size, half), pe.fill_2d_base(half))
        one = pe.fill(split.vertex_elements(), half)
        return self.on_tiles(split, np.where(split.vertex_rows() == 1, one, two_d))

    def _workers_only(self, c: MapCodelet, rows: np.ndarray, base: int) -> np.ndarray:
        grain = self._grain(c.dtype)
        split = self.split(None, grain, 2 * grain)
        return self.on_tiles(split, split.per_vertex(rows(split.row_size), base))

    def _scaled_add(self, c: MapCodelet) -> np.ndarray:
        """popops ``scaledAddTo`` (``ScaledAdd.cpp`` ``scaledArithmetic{Const,Tensor}Impl``): a
        ``ScaledAddSupervisor`` on a tile whose output is one region of at most ``rpt x vw x W``
        elements, else ``ScaledAdd2D`` workers split by the vector width (at least two vectors
        a vertex, rows of at most ``rpt x vw``)."""
        width = self.target.vector_width(c.dtype)
        is_float = c.dtype is FLOAT
        alone = self.supervised(RPT_COUNT_MAX * width)
        cycles = np.where(alone, pe.scaled_add_supervisor(self.elements, is_float, c.constant,
                                                          self.workers), 0)
        split = self.split(alone, width, 2 * width, RPT_COUNT_MAX * width)
        rows = pe.scaled_add_2d_row(split.row_size, is_float, c.constant)
        return cycles + self.on_tiles(split, split.per_vertex(rows, pe.SCALED_ADD_2D_BASE))

    def _select(self, c: MapCodelet) -> np.ndarray:
        """``Select`` workers; ``SelectInPlace``'s estimator charges each row for the number
        of *rows* (``in1.size()``), a quirk kept."""
        if not c.in_place:
            return self._workers_only(c, pe.select_row, pe.SELECT_BASE)
        grain = self._grain(c.dtype)
        split = self.split(None, grain, 2 * grain)
        rows = split.vertex_rows()
        return self.on_tiles(split, pe.SELECT_BASE + rows * pe.select_row(rows))

    def _broadcast_select(self, c: MapCodelet) -> np.ndarray:
        return self._workers_only(c, lambda n: pe.broadcast_select_row(n, c.dtype),
                                  pe.BROADCAST_SELECT_BASE)

    def _clamp(self, c: MapCodelet) -> np.ndarray:
        return self._workers_only(c, lambda n: pe.clamp_row(n, c.dtype), pe.CLAMP_BASE)

    def _fused(self, c: MapCodelet) -> np.ndarray:
        """A generated codelet per worker vertex, split with the first input's grain."""
        grain = self._grain(c.dtype)
        split = self.split(None, grain, 2 * grain)
        width = self.target.vector_width(c.dtype)
        return self.on_tiles(split, pe.fused_map_vertex(split.vertex_elements(), c.inputs, width,
                                                         c.fused_ops))

    def _grad(self, c: MapCodelet) -> np.ndarray:
        """popnn ``NonLinearityGradSupervisor`` for one region, else ``NonLinearityGrad2D``
        workers split by the vector width."""
        width = self.target.vector_width(c.dtype)
        is_float = c.dtype is FLOAT
        alone = self.supervised()
        cycles = np.where(alone, pe.non_linearity_grad_supervisor(
            self.elements, width, is_float, self.workers), 0)
        split = self.split(alone, width, 2 * width)
        rows = pe.non_linearity_grad_2d_row(split.row_size, width, is_float)
        return cycles + self.on_tiles(split, split.per_vertex(rows, pe.GRAD_2D_BASE))


@cycle_estimator(MAP)
@cycle_estimator(MAP_IN_PLACE)
def _map_cycles(vertex: Vertex, elements: np.ndarray, target: Target) -> np.ndarray:
    """The cycles of the poplibs codelets of :func:`map_codelets` over the output's regions."""
    out = vertex.fields[vertex.kind.split]
    in_place = vertex.kind is MAP_IN_PLACE
    operands = ((out,) if in_place else ()) + tuple(vertex.fields["ins"])
    if not np.any(elements):
        return np.zeros(target.num_tiles, dtype=np.int64)
    if vertex.tile is None:
        regions = tile_regions(out, elements)
    else:
        _, sizes = tile_regions(out)
        regions = (np.full(len(sizes), vertex.tile, dtype=np.int64), sizes)
    kinds = [operand_kind(t) for t in operands]
    if in_place:
        kinds[0] = FULL
    work = TileWork(regions, elements, target)
    total = np.zeros(target.num_tiles, dtype=np.int64)
    for codelet in map_codelets(vertex.params["expr"], [t.dtype for t in operands], kinds,
                                in_place, vertex.kind):
        total += work.cycles(codelet)
    return total
