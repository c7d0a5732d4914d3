"""Matrix products (poplin ``matMul`` and friends), planned across tiles.

``mat_mul(graph, a, b, prog)`` computes ``[m, k] x [k, n] -> [m, n]`` (or, with a leading group
dimension, ``[g, m, k] x [g, k, n] -> [g, m, n]``) the way poplibs' planner does, in outline:

1. **Plan.**  Cut g, m, k and n into blocks and give each block to a tile
   (:class:`~gruc.ir.codelets.matmul.Blocking`).  Among all block sizes that use at most the
   target's tiles, choose the one with the fewest estimated cycles — the partial product's
   multiply-accumulates at the target's vector width, plus the exchange of the operand blocks a
   tile does not hold, plus the reduction over the k-split — subject to the per-tile temporaries
   (received operand blocks and partials) fitting in ``availableMemoryProportion`` of a tile.
   When no single pass fits, n is cut into *serial* slices run one after the other, whose
   temporaries the memory planner lets share bytes (poplibs' serial splits).  Plans are cached by
   (target, shapes, types, options), as poplibs' ``PlanningCache`` does.
2. **Partial products.**  One ``MatMulPartials`` vertex per slice: every tile multiplies its
   ``[mb, kb]`` block of A by its ``[kb, nb]`` block of B into its block of a ``[g, Pk, m, n]``
   partials tensor (``partialsType``), in its own memory.
3. **Reduction.**  One ``MatMulReduce`` vertex adds the ``Pk`` partials of every output element on
   the output's tile (the output block is spread over the tiles that computed its partials).  With
   a single k block and partials of the output's type the partials *are* the output.

``create_mat_mul_input_lhs`` / ``_rhs`` allocate A / B laid out as the plan for those shapes
wants — each block spread over the tiles that use it — so a product needs no more exchange than
the broadcast of each block to its other users (a GRU creates its weights this way);
``pre_arrange_mat_mul_input_rhs`` copies an existing B into that layout once, after which products
with ``inputRHSIsPreArranged`` check that B really has it.  gruc's partial-product vertex reads
operands in any layout (what it lacks locally is exchanged and counted), so there is no separate
per-call rearrangement to skip: the layout only decides how many bytes move.

Options, by poplibs name (a dict) or as a :class:`MatMulOptions`: ``availableMemoryProportion``
(>= 0, default 0.6), ``partialsType`` (half | float, default float; ignored when narrower than the
output, as in poplibs), ``fullyConnectedPass`` (NONE, INFERENCE_FWD, TRAINING_FWD, TRAINING_BWD,
TRAINING_WU: accepted and validated for compatibility; gruc plans every pass alike) and
``inputRHSIsPreArranged``.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
from pydantic import Field, field_validator

from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError
from gruc.ir.codelets.matmul import MATMUL_TYPES, Blocking, mac_cycles
from gruc.ir.graph import Graph, check_op_args
from gruc.ir.mapping import TileMapping
from gruc.ir.program import Copy, Execute, Sequence as Seq
from gruc.ir.tensor import Tensor, as_ints, require_writable
from gruc.ops.elementwise import finite_scale
from gruc.target import Target
from gruc.types import FLOAT, DType, dtype_of
from gruc.validated import OptionFlags

__all__ = ["FullyConnectedPass", "MatMulOptions", "MatMulPlan", "plan_mat_mul", "mat_mul",
           "mat_mul_acc", "create_mat_mul_input_lhs", "create_mat_mul_input_rhs",
           "pre_arrange_mat_mul_input_rhs"]


# ---- options ----------------------------------------------------------------------------------
class FullyConnectedPass(str, enum.Enum):
    """poplin's ``fullyConnectedPass``: which pass of a fully connected layer a product is."""

    NONE = "NONE"
    INFERENCE_FWD = "INFERENCE_FWD"
    TRAINING_FWD = "TRAINING_FWD"
    TRAINING_BWD = "TRAINING_BWD"
    TRAINING_WU = "TRAINING_WU"


class MatMulOptions(OptionFlags):
    """poplin's matmul options; build from a dict of poplibs names with :func:`matmul_options`."""

    kind: ClassVar[str] = "matmul"

    available_memory_proportion: float = Field(
        0.6, ge=0, alias="availableMemoryProportion",
        description="Fraction of a tile's bytes the plan may use for temporaries.")
    partials_type: DType = Field(FLOAT, alias="partialsType",
                                 description="Type of the partial products: half or float.")
    fully_connected_pass: FullyConnectedPass = Field(
        FullyConnectedPass.NONE, alias="fullyConnectedPass",
        description="Pass of a fully connected layer (informational).")
    input_rhs_is_pre_arranged: bool = Field(
        False, alias="inputRHSIsPreArranged",
        description="B comes from pre_arrange_mat_mul_input_rhs with the same A shape.")

    @field_validator("partials_type", mode="before")
    @classmethod
    def _partials(cls, value: Any) -> DType:
        """``partialsType`` as a DType, by name or as a type; anything but half or float is refused
        (a ValueError, which pydantic reports against the option)."""
        try:
            dtype = dtype_of(value)
        except GrucTypeError:
            dtype = None
        if dtype not in MATMUL_TYPES:
            raise ValueError(f"must be half or float, not {value!r}")
        return dtype

    @field_validator("fully_connected_pass", mode="before")
    @classmethod
    def _pass(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


def matmul_options(options: "Mapping[str, Any] | MatMulOptions | None") -> MatMulOptions:
    """Options from a dict of poplibs names (snake_case field names work too), a model or None."""
    return MatMulOptions.parse(options)


# ---- shapes -----------------------------------------------------------------------------------
def _dims(what: str, a_shape: Sequence[int], b_shape: Sequence[int]) -> tuple[int, int, int, int]:
    """``(G, M, K, N)`` of ``A x B``; G = 1 for matrices."""
    a_shape, b_shape = as_ints(a_shape, f"{what} A shape"), as_ints(b_shape, f"{what} B shape")
    if len(a_shape) == 2 and len(b_shape) == 2:
        (M, K), (K2, N) = a_shape, b_shape
        G = G2 = 1
    elif len(a_shape) == 3 and len(b_shape) == 3:
        (G, M, K), (G2, K2, N) = a_shape, b_shape
    else:
        raise GrucShapeError(f"{what}: A {list(a_shape)} and B {list(b_shape)} must both be "
                             "matrices [m, k] x [k, n] or both grouped [g, m, k] x [g, k, n]")
    if K != K2 or G != G2:
        reason = (f"A has {K} columns but B has {K2} rows" if K != K2
                  else f"A has {G} groups but B has {G2}")
        raise GrucShapeError(f"{what}: cannot multiply A {list(a_shape)} by B {list(b_shape)}: "
                             f"{reason}")
    if min(G, M, K, N) < 1:
        raise GrucShapeError(f"{what}: A {list(a_shape)} and B {list(b_shape)} must not be empty")
    return G, M, K, N


def _grouped(tensor: Tensor) -> Tensor:
    return tensor if tensor.rank == 3 else tensor.expand([0])


def _check_tensor(what: str, role: str, graph: Graph, tensor: Any) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise GrucTypeError(f"{what}: {role} must be a Tensor, got {type(tensor).__name__}")
    if tensor.graph is not graph:
        raise GrucValueError(f"{what}: {role} belongs to another graph")
    if tensor.dtype not in MATMUL_TYPES:
        raise GrucTypeError(f"{what}: {role} must be half or float, got {tensor.dtype.name}")
    return tensor


def _float_type(what: str, value: DType | str) -> DType:
    dtype = dtype_of(value)
    if dtype not in MATMUL_TYPES:
        raise GrucTypeError(f"{what}: type must be half or float, got {dtype.name}")
    return dtype


# ---- the plan ---------------------------------------------------------------------------------
VERTEX_OVERHEAD_ESTIMATE = 50
"""Cycles of starting a vertex on a tile, as the cycle model counts them (``gruc.runtime.cost``)."""

MAX_SERIAL_SLICES = 64
"""Most serial slices of n a plan uses.  Each slice is two compute sets and its own temporaries
in the IR, so beyond this the plan settles for the least memory it can reach (and says it does
not fit) rather than growing the program."""


@dataclass(frozen=True)
class MatMulPlan:
    """How a product is cut into blocks and tiles, and what the planner expects it to cost."""

    shape: tuple[int, int, int, int]
    """``(G, M, K, N)``."""
    block: tuple[int, int, int, int]
    """Block sizes ``(gb, mb, kb, nb)``."""
    serial: int
    """Slices of n run one after another (1: a single pass)."""
    slice_width: int
    """Columns of n per serial slice (the last may be narrower)."""
    partials_type: DType
    direct: bool
    """One k block and partials of the output's type: the partial products are the output."""
    cycles: int
    """Estimated cycles of the whole product (all slices)."""
    temporary_bytes: int
    """Estimated peak bytes of temporaries (received operands, partials) on one tile."""
    fits: bool
    """``temporary_bytes`` is within ``availableMemoryProportion`` of a tile."""

    def slices(self) -> list[tuple[int, int]]:
        """``(begin, end)`` columns of n of every serial slice."""
        N, width = self.shape[3], self.slice_width
        return [(begin, min(begin + width, N)) for begin in range(0, N, width)]

    def blocking(self, width: int) -> Blocking:
        """The block geometry of a slice ``width`` columns wide."""
        G, M, K, _ = self.shape
        gb, mb, kb, nb = self.block
        return Blocking.of((G, M, K, width), (gb, mb, kb, min(nb, width)))

    @property
    def num_tiles(self) -> int:
        """Tiles the first slice uses (one per block)."""
        return self.blocking(self.slice_width).num_blocks


def _candidate_blocks(size: int) -> np.ndarray:
    """Every distinct block size ``ceil(size / p)``, p = 1..size."""
    return np.unique(-(-size // np.arange(1, size + 1, dtype=np.int64)))


def _align(nbytes: np.ndarray, alignment: int) -> np.ndarray:
    return -(-nbytes // alignment) * alignment


def _evaluate(target: Target, shape: tuple[int, int, int, int], in_type: DType,
              partials_type: DType, direct_ok: bool) -> dict[str, np.ndarray]:
    """Cycles and per-tile temporary bytes of every block size that fits on the target.

    Costs are those of the busiest tile (a full block); operands are assumed laid out as
    ``create_mat_mul_input_*`` lays them (each block spread over the tiles that use it).
    """
    G, M, K, N = shape
    sizes = [_candidate_blocks(n) for n in (G, M, K, N)]
    counts = [-(-n // s) for n, s in zip((G, M, K, N), sizes)]
    grids = np.meshgrid(*[np.arange(len(s)) for s in sizes], indexing="ij")
    blocks = counts[0][grids[0]] * counts[1][grids[1]] * counts[2][grids[2]] * counts[3][grids[3]]
    keep = blocks <= target.num_tiles  # never empty: one block of everything always fits
    gb, mb, kb, nb = (s[g[keep]] for s, g in zip(sizes, grids))
    Pm, Pk, Pn = (c[g[keep]] for c, g in zip(counts[1:], grids[1:]))
    in_size, p_size, xb = in_type.size, partials_type.size, target.exchange_bytes_per_cycle
    rows = gb * mb * nb
    compute = VERTEX_OVERHEAD_ESTIMATE + mac_cycles(rows, kb, target.vector_width(in_type))
    received = gb * mb * kb * (Pn - 1) / Pn + gb * kb * nb * (Pm - 1) / Pm
    cycles = compute + np.ceil(received * in_size / xb) + target.sync_cycles
    direct = (Pk == 1) & direct_ok
    owned = -(-rows // Pk)
    reduce = (VERTEX_OVERHEAD_ESTIMATE + -(-owned // target.vector_width(partials_type)) * (Pk + 1)
              + np.ceil(rows * (Pk - 1) / Pk * p_size / xb) + target.sync_cycles)
    cycles = cycles + np.where(direct, 0, reduce)
    alignment = target.memory_alignment
    temporary = (_align(gb * kb * (mb + nb) * in_size, alignment)
                 + np.where(direct, 0, _align(rows * p_size, alignment)))
    return {"block": np.stack([gb, mb, kb, nb], axis=1), "cycles": cycles.astype(np.int64),
            "temporary": temporary.astype(np.int64), "direct": direct}


@functools.lru_cache(maxsize=512)
def _plan(target: Target, shape: tuple[int, int, int, int], in_type: DType, partials_type: DType,
          out_type: DType, proportion: float) -> MatMulPlan:
    """The fastest blocking whose temporaries fit ``proportion`` of a tile, with the fewest serial
    slices of n that allow a fit (each slice adds compute sets to the IR).  When none fits within
    MAX_SERIAL_SLICES, the blocking with the least temporary memory (then cycles), marked as not
    fitting."""
    budget = proportion * target.bytes_per_tile
    direct_ok = partials_type == out_type
    G, M, K, N = shape
    fallback = None
    for width in _candidate_blocks(N)[::-1].tolist():  # 1, 2, 3, ... serial slices
        serial = -(-N // width)
        if serial > MAX_SERIAL_SLICES:
            break
        candidates = _evaluate(target, (G, M, K, width), in_type, partials_type, direct_ok)
        total = candidates["cycles"] * serial
        fits = candidates["temporary"] <= budget
        if np.any(fits):
            best = int(np.flatnonzero(fits)[np.argmin(total[fits])])
            return _make_plan(shape, candidates, best, serial, width, partials_type, total, True)
        least = int(np.lexsort((total, candidates["temporary"]))[0])
        key = (int(candidates["temporary"][least]), int(total[least]))
        if fallback is None or key < fallback[0]:
            fallback = (key, candidates, least, serial, width, total)
    _, candidates, best, serial, width, total = fallback
    return _make_plan(shape, candidates, best, serial, width, partials_type, total, False)


def _make_plan(shape, candidates, best, serial, width, partials_type, total, fits) -> MatMulPlan:
    return MatMulPlan(shape=shape, block=tuple(int(v) for v in candidates["block"][best]),
                      serial=int(serial), slice_width=int(width), partials_type=partials_type,
                      direct=bool(candidates["direct"][best]), cycles=int(total[best]),
                      temporary_bytes=int(candidates["temporary"][best]), fits=fits)


def _partials_type(options: MatMulOptions, out_type: DType) -> DType:
    """poplibs: a partials type narrower than the output's is ignored."""
    return out_type if options.partials_type.size < out_type.size else options.partials_type


def plan_mat_mul(target: Target, dtype: DType | str, a_shape: Sequence[int],
                 b_shape: Sequence[int], options: "Mapping[str, Any] | MatMulOptions | None" = None,
                 *, out_type: DType | str | None = None) -> MatMulPlan:
    """The plan ``mat_mul`` uses for these shapes (``mat_mul_acc`` uses it too, with a reduction
    even when ``direct``: it must add to C).  Cached."""
    if not isinstance(target, Target):
        raise GrucTypeError(f"plan_mat_mul needs a gruc Target, got {type(target).__name__}")
    opts = matmul_options(options)
    in_type = _float_type("plan_mat_mul", dtype)
    out = _float_type("plan_mat_mul", out_type) if out_type is not None else in_type
    shape = _dims("plan_mat_mul", a_shape, b_shape)
    return _plan(target, shape, in_type, _partials_type(opts, out), out,
                 float(opts.available_memory_proportion))


# ---- layouts ----------------------------------------------------------------------------------
def block_tile_grid(geometry: Blocking) -> np.ndarray:
    """The tile of every block, ``[Pg, Pk, Pm, Pn]``: block ``b`` on tile ``b``."""
    return np.arange(geometry.num_blocks, dtype=np.int64).reshape(geometry.counts)


def spread_tiles(geometry: Blocking, letters: str) -> np.ndarray:
    """Tiles of an operand with axes ``letters`` (``"gmk"`` for A, ``"gkn"`` for B, ``"gmn"`` for
    the output): each of its blocks is cut, in row-major order, into equal pieces, one for each
    block of the product that uses it (the blocks along the missing axis)."""
    axes = {"g": geometry.g, "k": geometry.k, "m": geometry.m, "n": geometry.n}
    (over,) = set(axes) - set(letters)
    users = axes[over].count
    index, position, extent = {}, [], []
    for d, letter in enumerate(letters):
        axis = axes[letter]
        block = axis.block_of()
        shape = [1, 1, 1]
        shape[d] = axis.size
        index[letter] = block.reshape(shape)
        position.append((np.arange(axis.size) - block * axis.block).reshape(shape))
        extent.append(axis.block_sizes()[block].reshape(shape))
    within = (position[0] * extent[1] + position[1]) * extent[2] + position[2]
    index[over] = within * users // (extent[0] * extent[1] * extent[2])
    return block_tile_grid(geometry)[index["g"], index["k"], index["m"], index["n"]]


def _set_tiles(graph: Graph, tensor: Tensor, tiles: np.ndarray) -> None:
    graph.set_tile_mapping(tensor, TileMapping.from_element_tiles(tiles.reshape(-1)))


def _map_operand(graph: Graph, tensor: Tensor, plan: MatMulPlan, letters: str) -> None:
    """Map A (``"gmk"``), B (``"gkn"``) or the output (``"gmn"``) as the plan wants, slice by slice
    (A, used by every slice, as the first slice wants it)."""
    grouped = _grouped(tensor)
    if "n" not in letters:
        _set_tiles(graph, grouped, spread_tiles(plan.blocking(plan.slice_width), letters))
        return
    for begin, end in plan.slices():
        part = grouped.slice(begin, end, 2) if plan.serial > 1 else grouped
        _set_tiles(graph, part, spread_tiles(plan.blocking(end - begin), letters))


def create_mat_mul_input_lhs(graph: Graph, dtype: DType | str, a_shape: Sequence[int],
                             b_shape: Sequence[int], name: str = "",
                             options: "Mapping[str, Any] | MatMulOptions | None" = None) -> Tensor:
    """A new A (``a_shape``) laid out as the plan of ``A x B`` wants (poplin
    ``createMatMulInputLHS``)."""
    plan = plan_mat_mul(graph.target, dtype, a_shape, b_shape, options)
    a = graph.add_variable(dtype, a_shape, name or "matmul_lhs")
    _map_operand(graph, a, plan, "gmk")
    return a


def create_mat_mul_input_rhs(graph: Graph, dtype: DType | str, a_shape: Sequence[int],
                             b_shape: Sequence[int], name: str = "",
                             options: "Mapping[str, Any] | MatMulOptions | None" = None) -> Tensor:
    """A new B (``b_shape``) laid out as the plan of ``A x B`` wants (poplin
    ``createMatMulInputRHS``): repeated products with an A of ``a_shape`` exchange the least."""
    plan = plan_mat_mul(graph.target, dtype, a_shape, b_shape, options)
    b = graph.add_variable(dtype, b_shape, name or "matmul_rhs")
    _map_operand(graph, b, plan, "gkn")
    return b


def pre_arrange_mat_mul_input_rhs(graph: Graph, a_shape: Sequence[int], b: Tensor, prog: Seq,
                                  options: "Mapping[str, Any] | MatMulOptions | None" = None,
                                  name: str = "") -> Tensor:
    """B copied once into the layout ``create_mat_mul_input_rhs`` gives (poplin
    ``preArrangeMatMulInputRHS``); pass the result with ``inputRHSIsPreArranged``."""
    check_op_args(graph, prog, "pre_arrange_mat_mul_input_rhs")
    _check_tensor("pre_arrange_mat_mul_input_rhs", "B", graph, b)
    arranged = create_mat_mul_input_rhs(graph, b.dtype, a_shape, b.shape,
                                        name or "matmul_rhs_arranged", options)
    prog.add(Copy(b, arranged))
    return arranged


# ---- products ---------------------------------------------------------------------------------
def _prepare(what: str, graph: Graph, a: Tensor, b: Tensor, options,
             out_type: DType | str | None) -> MatMulPlan:
    """Check the operands and options; the plan for an output of ``out_type`` (default A's)."""
    opts = matmul_options(options)
    _check_tensor(what, "A", graph, a)
    _check_tensor(what, "B", graph, b)
    if a.dtype != b.dtype:
        raise GrucTypeError(f"{what}: A is {a.dtype.name} but B is {b.dtype.name}; they must "
                            "have one type")
    _dims(what, a.shape, b.shape)  # shape errors name the op the user called
    plan = plan_mat_mul(graph.target, a.dtype, a.shape, b.shape, opts,
                        out_type=a.dtype if out_type is None else _float_type(what, out_type))
    if opts.input_rhs_is_pre_arranged:
        expected = plan_mat_mul(graph.target, b.dtype, a.shape, b.shape, opts)
        _check_pre_arranged(what, graph, b, expected)
    return plan


def _check_pre_arranged(what: str, graph: Graph, b: Tensor, plan: MatMulPlan) -> None:
    """Hold ``inputRHSIsPreArranged`` to its word: B must be laid out block for block as the plan
    wants.  A wrong layout would still compute (only more bytes move), so it is refused here."""
    tiles = graph.element_tiles(b).reshape(_grouped(b).shape)
    for begin, end in plan.slices():
        want = spread_tiles(plan.blocking(end - begin), "gkn")
        if not np.array_equal(tiles[:, :, begin:end], want):
            raise GrucValueError(f"{what}: inputRHSIsPreArranged is set but B {list(b.shape)} is "
                                 "not laid out as pre_arrange_mat_mul_input_rhs (or "
                                 "create_mat_mul_input_rhs) lays it out for this A shape and "
                                 "these options")


def _emit(graph: Graph, plan: MatMulPlan, a: Tensor, b: Tensor, out: Tensor, prog: Seq,
          name: str, acc_fields: dict[str, Tensor] | None, k: float) -> None:
    """The partial products and reductions of every serial slice (operands all grouped);
    ``acc_fields`` (None for a plain product) turns the reduction into ``out += k * ...``."""
    direct = plan.direct and acc_fields is None
    for s, (begin, end) in enumerate(plan.slices()):
        label = name if plan.serial == 1 else f"{name}.{s}"
        geometry = plan.blocking(end - begin)
        tiles = block_tile_grid(geometry)
        b_part, out_part = (b, out) if plan.serial == 1 else (b.slice(begin, end, 2),
                                                              out.slice(begin, end, 2))
        sizes = geometry.received_sizes()
        received = graph.add_variable(a.dtype, (int(sizes.sum()),), f"{label}.received")
        _set_tiles(graph, received, np.repeat(tiles.reshape(-1), sizes))
        if direct:
            partials = out_part.expand([1])
        else:
            partials = graph.add_variable(plan.partials_type, geometry.partials_shape,
                                          f"{label}.partials")
            _set_tiles(graph, partials, geometry.partials_tiles(tiles))
        cs = graph.add_compute_set(f"{label}.partials")
        graph.add_vertex(cs, "MatMulPartials", {"a": a, "b": b_part, "partials": partials,
                                                "received": received},
                         blocks=tuple(int(v) for v in geometry.block))
        prog.add(Execute(cs))
        if direct:
            continue
        cs = graph.add_compute_set(f"{label}.reduce")
        if acc_fields is None:
            graph.add_vertex(cs, "MatMulReduce", {"out": out_part, "partials": partials})
        else:
            graph.add_vertex(cs, "MatMulReduceAcc",
                             {"out": out_part, "partials": partials, **acc_fields}, k=float(k))
        prog.add(Execute(cs))


def mat_mul(graph: Graph, a: Tensor, b: Tensor, prog: Seq, *, out_type: DType | str | None = None,
            options: "Mapping[str, Any] | MatMulOptions | None" = None, name: str = "") -> Tensor:
    """``A x B`` as a new tensor (poplin ``matMul`` / ``matMulGrouped``): ``[m, k] x [k, n] ->
    [m, n]`` or ``[g, m, k] x [g, k, n] -> [g, m, n]``; of ``out_type`` (default: A's type)."""
    check_op_args(graph, prog, "mat_mul")
    plan = _prepare("mat_mul", graph, a, b, options, out_type)
    G, M, _, N = plan.shape
    dtype = a.dtype if out_type is None else dtype_of(out_type)
    out = graph.add_variable(dtype, (G, M, N) if a.rank == 3 else (M, N), name or "matmul")
    _map_operand(graph, out, plan, "gmn")
    _emit(graph, plan, _grouped(a), _grouped(b), _grouped(out), prog, name or "matmul", None, 1.0)
    return out


def mat_mul_acc(graph: Graph, c: Tensor, k: float | Tensor, a: Tensor, b: Tensor, prog: Seq, *,
                options: "Mapping[str, Any] | MatMulOptions | None" = None, name: str = "") -> None:
    """``C += k * A x B`` in place (poplin ``matMulAcc``); ``k`` is a number or a one-element
    half / float tensor."""
    what = "mat_mul_acc"
    check_op_args(graph, prog, what)
    _check_tensor(what, "C", graph, c)
    require_writable(c, what)
    plan = _prepare(what, graph, a, b, options, c.dtype)
    G, M, _, N = plan.shape
    if c.shape != ((G, M, N) if a.rank == 3 else (M, N)):
        raise GrucShapeError(f"{what}: C {list(c.shape)} does not match A {list(a.shape)} x B "
                             f"{list(b.shape)}")
    acc_fields: dict[str, Tensor] = {}
    if isinstance(k, Tensor):
        _check_tensor(what, "k", graph, k)
        if k.num_elements != 1:
            raise GrucShapeError(f"{what}: k must have one element, got shape {list(k.shape)}")
        if (set(k.variables()) & set(c.variables())
                and np.isin(k.flat_ids(), c.flat_ids()).any()):
            raise GrucValueError(f"{what}: k is an element of C, which the accumulation "
                                 "overwrites; copy it to a tensor of its own first")
        acc_fields["scale"] = k
        k = 1.0
    else:
        finite_scale(k, f"{what}: k (a number or a one-element tensor)")
    _emit(graph, plan, _grouped(a), _grouped(b), _grouped(c), prog, name or "matmul_acc",
          acc_fields, float(k))

