"""Matrix products (poplin ``matMul`` and friends), planned across tiles as poplin plans them.

``mat_mul(graph, a, b, prog)`` computes ``[m, k] x [k, n] -> [m, n]`` (or, with a leading group
dimension, ``[g, m, k] x [g, k, n] -> [g, m, n]``) the way poplibs does:

1. **Plan** (:mod:`gruc.ops.matmul_plan`, poplin's planner re-derived): the product is a
   convolution whose field is n (or m), whose input channels are k and output channels the other;
   the groups, field and channels are cut into blocks, a tile per block, with the vertex (the AMP,
   else MACs) and channel grouping poplin would choose, by poplin's own cost model under the
   ``availableMemoryProportion`` bound.  When no single pass fits, n is cut into *serial* slices
   run one after the other.  Plans are cached by (target, shapes, types, options), as poplibs'
   ``PlanningCache`` does.
2. **Rearrangement**: an operand broadcast to more than seven tiles that is not laid out as the
   plan wants is first copied into that layout (poplin's ``inViewMaxBroadcastDests``), so the
   broadcast reads one tidy copy.
3. **Partial products**: one ``MatMulPartials`` vertex per slice: every tile multiplies its
   ``[mb, kb]`` block of A by its ``[kb, nb]`` block of B into its block of a ``[g, Pk, m, n]``
   partials tensor (``partialsType``), in interleaved memory for the AMP; what a tile needs from
   other tiles is exchanged to it.
4. **Reduction**: the ``Pk`` partials of each output element are added in the stages poplin's
   ``getMultiStageReducePlan`` chooses (one below 16 partials, two below 125, else three), each a
   ``MatMulReduce`` compute set on the tiles that computed them.  With a single k block and
   partials of the output's type the partials *are* the output.

``create_mat_mul_input_lhs`` / ``_rhs`` allocate A / B laid out as the plan for those shapes
wants — each block spread over the tiles that use it — so a product needs no more exchange than
the broadcast of each block to its other users (a GRU creates its weights this way);
``pre_arrange_mat_mul_input_rhs`` copies an existing B into that layout once (a backward pass's
weights: transposes them on their tiles where poplin does, :mod:`gruc.ops.weight_transpose`; so
does ``mat_mul`` itself for a ``TRAINING_BWD`` B not pre-arranged), after which products with
``inputRHSIsPreArranged`` check that B really has it.  ``mat_mul_acc`` is poplin's
``matMulAcc``: the product into a temporary, then ``scaledAddTo``.

Options, by poplibs name (a dict) or as a :class:`MatMulOptions`: ``availableMemoryProportion``
(>= 0, default 0.6), ``partialsType`` (half | float, default float; ignored when narrower than the
output, as in poplibs), ``fullyConnectedPass`` (NONE, INFERENCE_FWD, TRAINING_FWD, TRAINING_BWD,
TRAINING_WU: a training layer's forward product is planned jointly with its backward and
weight-update products, whose plans follow from it, as poplin plans them; an inference pass keeps
the AMP's partial groups to its units; only a plain product regroups its output; see
``docs/matmul-planner.md``) and ``inputRHSIsPreArranged``.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
from pydantic import Field, field_validator

from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError
from gruc.ir.codelets.conv_costs import reduce_stages
from gruc.ir.codelets.matmul import MATMUL_PARTIALS, MATMUL_REDUCE, MATMUL_TYPES, Blocking
from gruc.ir.graph import Graph, check_op_args
from gruc.ir.program import Copy, Execute, Sequence as Seq
from gruc.ir.tensor import Tensor, as_ints, require_writable
from gruc.ops.elementwise import finite_scale, scaled_add_to
from gruc.ops.matmul_plan import BROADCAST_REARRANGE, MatMulPlan, block_tile_grid, plan_product
from gruc.ops.regroup import regroup_for_plan
from gruc.ops.weight_transpose import (common_divisors, transpose_block_sizes,
                                       transpose_weights, transposed_block_tiles,
                                       transposes_weights)
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
        description="Pass of a fully connected layer: an inference pass keeps the AMP's partial "
                    "groups to its units; only a plain product regroups its output.")
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
def _partials_type(options: MatMulOptions, out_type: DType) -> DType:
    """poplibs: a partials type narrower than the output's is ignored."""
    return out_type if options.partials_type.size < out_type.size else options.partials_type


def plan_mat_mul(target: Target, dtype: DType | str, a_shape: Sequence[int],
                 b_shape: Sequence[int], options: "Mapping[str, Any] | MatMulOptions | None" = None,
                 *, out_type: DType | str | None = None) -> MatMulPlan:
    """The plan ``mat_mul`` (and ``mat_mul_acc``) uses for these shapes.  Cached."""
    if not isinstance(target, Target):
        raise GrucTypeError(f"plan_mat_mul needs a gruc Target, got {type(target).__name__}")
    opts = matmul_options(options)
    in_type = _float_type("plan_mat_mul", dtype)
    out = _float_type("plan_mat_mul", out_type) if out_type is not None else in_type
    shape = _dims("plan_mat_mul", a_shape, b_shape)
    return plan_product(target, shape, in_type, _partials_type(opts, out), out,
                        float(opts.available_memory_proportion), opts.fully_connected_pass.value)


# ---- layouts ----------------------------------------------------------------------------------
def spread_tiles(geometry: Blocking, letters: str, orientation: str,
                 tile_order: str = "standard") -> np.ndarray:
    """Tiles of an operand with axes ``letters`` (``"gmk"`` for A, ``"gkn"`` for B, ``"gmn"`` for
    the output): each of its blocks is cut, in row-major order, into equal pieces, one for each
    block of the product that uses it (the blocks along the missing axis), as poplin maps a
    tensor by its users (``mapTensorsByUse``)."""
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
    within *= users  # in place: a wide layer's weights are 45 million elements, 8 bytes each
    within //= extent[0] * extent[1] * extent[2]
    index[over] = within
    grid = block_tile_grid(geometry, orientation, tile_order).astype(np.int32)
    return grid[index["g"], index["k"], index["m"], index["n"]]


def _set_tiles(graph: Graph, tensor: Tensor, tiles: np.ndarray) -> None:
    """Map ``tensor`` by the tile of each element (no runs made and expanded again)."""
    graph.set_tile_mapping(tensor, tiles.reshape(tensor.shape))


def _map_operand(graph: Graph, tensor: Tensor, plan: MatMulPlan, letters: str) -> None:
    """Map A (``"gmk"``), B (``"gkn"``) or the output (``"gmn"``) as the plan wants, slice by slice
    (A, used by every slice, as the first slice wants it)."""
    grouped = _grouped(tensor)
    if "n" not in letters:
        _set_tiles(graph, grouped, spread_tiles(plan.blocking(plan.slice_width), letters,
                                                plan.orientation, plan.tile_order))
        return
    for begin, end in plan.slices():
        part = grouped.slice(begin, end, 2) if plan.serial > 1 else grouped
        _set_tiles(graph, part, spread_tiles(plan.blocking(end - begin), letters,
                                             plan.orientation, plan.tile_order))


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
    """B once in the layout the product reads (poplin ``preArrangeMatMulInputRHS``); pass the
    result with ``inputRHSIsPreArranged``.  A ``TRAINING_BWD`` B is transposed on its own tiles
    where poplin would (:mod:`gruc.ops.weight_transpose`); any other B is copied into the layout
    ``create_mat_mul_input_rhs`` gives."""
    check_op_args(graph, prog, "pre_arrange_mat_mul_input_rhs")
    _check_tensor("pre_arrange_mat_mul_input_rhs", "B", graph, b)
    label = name or "matmul_rhs_arranged"
    transposed = _transposed_weights(graph, a_shape, b, matmul_options(options), prog, label)
    if transposed is not None:
        return transposed
    arranged = create_mat_mul_input_rhs(graph, b.dtype, a_shape, b.shape, label, options)
    prog.add(Copy(b, arranged))
    return arranged


def _transposition(target: Target, dtype: DType, a_shape: Sequence[int], b_shape: Sequence[int],
                   opts: MatMulOptions) -> tuple[MatMulPlan, MatMulPlan] | None:
    """The forward and backward plans of a ``TRAINING_BWD`` product whose weights poplin may
    transpose (both plans make them the field operand); None for any other product."""
    if opts.fully_connected_pass is not FullyConnectedPass.TRAINING_BWD:
        return None
    G, M, K, N = _dims("mat_mul", a_shape, b_shape)
    backward = plan_mat_mul(target, dtype, (G, M, K), (G, K, N), opts)
    forward_opts = opts.model_copy(update={"fully_connected_pass": FullyConnectedPass.TRAINING_FWD,
                                           "input_rhs_is_pre_arranged": False})
    forward = plan_mat_mul(target, dtype, (G, M, N), (G, N, K), forward_opts)
    return (forward, backward) if transposes_weights(forward, backward) else None


def _transposed_weights(graph: Graph, a_shape: Sequence[int], b: Tensor, opts: MatMulOptions,
                        prog: Seq, name: str) -> Tensor | None:
    """B transposed block by block on its tiles, as poplin's ``fullyConnectedWeightTranspose``
    does before a backward product; None where poplin leaves it to the product."""
    plans = _transposition(graph.target, b.dtype, a_shape, b.shape, opts)
    if plans is None:
        return None
    grouped = _grouped(b)
    sizes = transpose_block_sizes(*plans, graph.element_tiles(grouped).reshape(grouped.shape),
                                  b.dtype.size == 2)
    if sizes is None:
        return None
    return transpose_weights(graph, grouped, sizes, prog, name).reshape(b.shape)


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
        plans = _transposition(graph.target, b.dtype, a.shape, b.shape, opts)
        if plans is None or not _in_transposed_blocks(graph, b, *plans):
            _check_pre_arranged(what, graph, b, expected)
    return plan


def _in_transposed_blocks(graph: Graph, b: Tensor, forward: MatMulPlan,
                          backward: MatMulPlan) -> bool:
    """Whether B lies as a weight transposition leaves it: blocks of some size the transposition
    may take, each on one tile."""
    _, _, K, N = backward.shape
    tiles = graph.element_tiles(_grouped(b)).reshape(-1, K, N)
    for rows in common_divisors(backward.method.in_chans_per_group, K)[:-1]:
        for cols in common_divisors(forward.method.in_chans_per_group, N)[:-1]:
            if np.array_equal(tiles, transposed_block_tiles(tiles, rows, cols)):
                return True
    return False


def _check_pre_arranged(what: str, graph: Graph, b: Tensor, plan: MatMulPlan) -> None:
    """Hold ``inputRHSIsPreArranged`` to its word: B must be laid out block for block as the plan
    wants.  A wrong layout would still compute (only more bytes move), so it is refused here."""
    tiles = graph.element_tiles(b).reshape(_grouped(b).shape)
    for begin, end in plan.slices():
        want = spread_tiles(plan.blocking(end - begin), "gkn", plan.orientation, plan.tile_order)
        if not np.array_equal(tiles[:, :, begin:end], want):
            raise GrucValueError(f"{what}: inputRHSIsPreArranged is set but B {list(b.shape)} is "
                                 "not laid out as pre_arrange_mat_mul_input_rhs (or "
                                 "create_mat_mul_input_rhs) lays it out for this A shape and "
                                 "these options")


def _arranged(graph: Graph, operand: Tensor, plan: MatMulPlan, geometry: Blocking, letters: str,
              prog: Seq, label: str, always: bool) -> Tensor:
    """``operand`` as the partial products read it: itself, or a copy in the plan's layout
    (poplin's rearrangement before the exchange) when it is broadcast to more than
    :data:`~gruc.ops.matmul_plan.BROADCAST_REARRANGE` tiles and not laid out so, or ``always``:
    a weight-update product rearranges both operands whatever their layout (poplin's
    ``inputRearrangementIsExpensive`` / ``weightRearrangementIsExpensive``: the pass changes
    which dimension is innermost), each copied into a variable of its own."""
    if always:  # channels innermost first, where poplin regroups (gruc.ops.regroup)
        channels_last = operand if letters == "gmk" else operand.dim_shuffle((0, 2, 1))
        regrouped = regroup_for_plan(graph, channels_last, plan.method.in_chans_per_group, prog,
                                     f"{label}.{letters[1:]}")
        operand = regrouped if letters == "gmk" else regrouped.dim_shuffle((0, 2, 1))
    elif (geometry.n.count if letters == "gmk" else geometry.m.count) <= BROADCAST_REARRANGE:
        return operand  # few users: the product's own exchange gathers it
    want = spread_tiles(geometry, letters, plan.orientation, plan.tile_order).reshape(-1)
    if not always and np.array_equal(graph.element_tiles(operand), want):
        return operand
    arranged = graph.add_variable(operand.dtype, operand.shape, f"{label}.{letters[1:]}_arranged")
    _set_tiles(graph, arranged, want)
    prog.add(Copy(operand, arranged))
    return arranged


def _stage_tiles(geometry: Blocking, grid: np.ndarray, groups: int) -> np.ndarray:
    """Tiles of an intermediate reduction result ``[G, groups, M, N]``: each output block's
    ``groups`` rows spread, in row-major order, over the tiles that computed its partials."""
    Pk = geometry.k.count
    g_of, m_of, n_of = geometry.g.block_of(), geometry.m.block_of(), geometry.n.block_of()
    G, M, N = geometry.g.size, geometry.m.size, geometry.n.size
    gb, mb, nb = (axis.block_sizes() for axis in (geometry.g, geometry.m, geometry.n))
    g_in = np.arange(G) - g_of * geometry.g.block
    m_in = np.arange(M) - m_of * geometry.m.block
    n_in = np.arange(N) - n_of * geometry.n.block
    size = (gb[g_of][:, None, None, None] * mb[m_of][None, None, :, None]
            * nb[n_of][None, None, None, :])
    within = (((np.arange(groups)[None, :, None, None] * gb[g_of][:, None, None, None]
                + g_in[:, None, None, None]) * mb[m_of][None, None, :, None]
               + m_in[None, None, :, None]) * nb[n_of][None, None, None, :]
              + n_in[None, None, None, :])
    piece = within * Pk // (groups * size)
    return grid[g_of[:, None, None, None], piece, m_of[None, None, :, None],
                n_of[None, None, None, :]]


def _reduce(graph: Graph, partials: Tensor, out: Tensor, geometry: Blocking, grid: np.ndarray,
            prog: Seq, label: str) -> None:
    """Add ``partials`` ``[G, Pk, M, N]`` into ``out`` ``[G, M, N]`` in poplin's stages: each
    stage sums runs of partial rows into the next stage's rows, spread over the tiles that hold
    the block's partials; the last writes ``out`` (a single partial row: a conversion)."""
    G, _, M, N = partials.shape
    current = partials
    stages = reduce_stages(partials.shape[1]) or [(1, 1)]
    for index, (groups, per) in enumerate(stages):
        last = index == len(stages) - 1
        if last:
            result = out.expand([1])
        else:
            result = graph.add_variable(partials.dtype, (G, groups, M, N),
                                        f"{label}.reduce{index}")
            _set_tiles(graph, result, _stage_tiles(geometry, grid, groups))
        rows = current.shape[1]
        full, tail = rows // per, rows % per
        cs = graph.add_compute_set(f"{label}.reduce" + ("" if last else str(index)))
        if full:
            sums = result.slice(0, full, 1).reshape((G * full, M, N))
            terms = current.slice(0, full * per, 1).reshape((G * full, per, M, N))
            graph.add_vertex(cs, MATMUL_REDUCE, {"out": sums, "partials": terms})
        if tail:
            graph.add_vertex(cs, MATMUL_REDUCE,
                             {"out": result.slice(full, full + 1, 1).reshape((G, M, N)),
                              "partials": current.slice(full * per, rows, 1)})
        prog.add(Execute(cs))
        current = result


def _emit(graph: Graph, plan: MatMulPlan, a: Tensor, b: Tensor, out: Tensor, prog: Seq,
          name: str, rearrange: bool) -> None:
    """The rearrangements (of both operands if ``rearrange``), partial products and reductions
    of every serial slice (operands all grouped)."""
    for s, (begin, end) in enumerate(plan.slices()):
        label = name if plan.serial == 1 else f"{name}.{s}"
        geometry = plan.blocking(end - begin)
        grid = block_tile_grid(geometry, plan.orientation, plan.tile_order)
        b_part, out_part = (b, out) if plan.serial == 1 else (b.slice(begin, end, 2),
                                                              out.slice(begin, end, 2))
        a_used = _arranged(graph, a, plan, geometry, "gmk", prog, label, rearrange)
        b_used = _arranged(graph, b_part, plan, geometry, "gkn", prog, label, rearrange)
        if plan.direct:
            partials = out_part.expand([1])
        else:
            partials = graph.add_variable(plan.partials_type, geometry.partials_shape,
                                          f"{label}.partials")
            _set_tiles(graph, partials, geometry.partials_tiles(grid))
        cs = graph.add_compute_set(f"{label}.partials")
        graph.add_vertex(cs, MATMUL_PARTIALS, {"a": a_used, "b": b_used, "partials": partials},
                         blocks=tuple(int(v) for v in geometry.block),
                         method=plan.method.as_param(), orientation=plan.orientation)
        prog.add(Execute(cs))
        if not plan.direct:
            _reduce(graph, partials, out_part, geometry, grid, prog, label)


def mat_mul(graph: Graph, a: Tensor, b: Tensor, prog: Seq, *, out_type: DType | str | None = None,
            options: "Mapping[str, Any] | MatMulOptions | None" = None, name: str = "") -> Tensor:
    """``A x B`` as a new tensor (poplin ``matMul`` / ``matMulGrouped``): ``[m, k] x [k, n] ->
    [m, n]`` or ``[g, m, k] x [g, k, n] -> [g, m, n]``; of ``out_type`` (default: A's type)."""
    check_op_args(graph, prog, "mat_mul")
    plan = _prepare("mat_mul", graph, a, b, options, out_type)
    opts = matmul_options(options)
    if not opts.input_rhs_is_pre_arranged:
        transposed = _transposed_weights(graph, a.shape, b, opts, prog, f"{name or 'matmul'}.b")
        b = b if transposed is None else transposed
    G, M, _, N = plan.shape
    dtype = a.dtype if out_type is None else dtype_of(out_type)
    out = graph.add_variable(dtype, (G, M, N) if a.rank == 3 else (M, N), name or "matmul")
    _map_operand(graph, out, plan, "gmn")
    _emit(graph, plan, _grouped(a), _grouped(b), _grouped(out), prog, name or "matmul",
          opts.fully_connected_pass is FullyConnectedPass.TRAINING_WU)
    return out


def mat_mul_acc(graph: Graph, c: Tensor, k: float | Tensor, a: Tensor, b: Tensor, prog: Seq, *,
                options: "Mapping[str, Any] | MatMulOptions | None" = None, name: str = "") -> None:
    """``C += k * A x B`` in place (poplin ``matMulAcc``: the product into a temporary of C's
    type, then ``scaledAddTo``); ``k`` is a number or a one-element half / float tensor."""
    what = "mat_mul_acc"
    check_op_args(graph, prog, what)
    _check_tensor(what, "C", graph, c)
    require_writable(c, what)
    plan = _prepare(what, graph, a, b, options, c.dtype)
    G, M, _, N = plan.shape
    if c.shape != ((G, M, N) if a.rank == 3 else (M, N)):
        raise GrucShapeError(f"{what}: C {list(c.shape)} does not match A {list(a.shape)} x B "
                             f"{list(b.shape)}")
    if isinstance(k, Tensor):
        _check_tensor(what, "k", graph, k)
        if k.num_elements != 1:
            raise GrucShapeError(f"{what}: k must have one element, got shape {list(k.shape)}")
        if (set(k.variables()) & set(c.variables())
                and np.isin(k.flat_ids(), c.flat_ids()).any()):
            raise GrucValueError(f"{what}: k is an element of C, which the accumulation "
                                 "overwrites; copy it to a tensor of its own first")
    else:
        k = finite_scale(k, f"{what}: k (a number or a one-element tensor)")
    label = name or "matmul_acc"
    product = mat_mul(graph, a, b, prog, out_type=c.dtype, options=options,
                      name=f"{label}.product")
    scaled_add_to(graph, c, product, k, prog, name=label)
