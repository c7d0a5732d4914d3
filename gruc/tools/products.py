"""poplibs' product tools: ``fully_connected_layer`` (``gruc fc``) and
``general_matrix_multiply`` (``gruc gemm``), built, planned, run and checked as poplibs' tools
do (``tools/fully_connected_layer.cpp`` and ``tools/general_matrix_multiply.cpp`` of the era of
Poplar's published figures; see ``docs/matmul-planner.md``).

**fully_connected_layer** (``FcConfig``): ``G`` groups of a layer with ``I`` inputs and ``O``
outputs, batch ``B``.  The activations ``[G, B, I]`` and weights ``[G, I, O]`` are created for the
forward product's plan (``TRAINING_FWD``), the output gradients ``[G, B, O]`` for the backward
one's.  Program 0, the forward pass: ``out = act x W`` (plus the bias).  Program 1, the backward
pass: ``in_grad = out_grad x Wᵀ`` (the weights first transposed block by block on their tiles,
or copied into the backward plan's layout, as poplin's ``fullyConnectedWeightTranspose`` does),
then the weight update ``W += -lr · actᵀ x
out_grad`` (poplin's ``matMulAcc``: the product, then a scaled add; the bias steps by the summed
gradients).  ``pass_`` runs one of them (``fwd``, ``bwd``, ``wu``) or all.  The learning rate is
poplibs' tool's, 1.  Every tensor the tool streams to or from the host is host-visible, as the
tool's compiled stream copies make them, data or not.

**general_matrix_multiply** (``GemmConfig``): ``C = beta · C + alpha · op(A) x op(B)`` over ``G``
groups, ``op`` a transpose where asked (then the product is planned as poplibs' tool plans it:
``TRAINING_WU`` for a transposed A, ``TRAINING_BWD`` for a transposed B); ``C`` is laid out as
the product, whose result is added to it in place.  With ``ignore_data`` nothing is streamed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from gruc.ir.graph import Graph
from gruc.ir.program import Repeat, Sequence
from gruc.ir.tensor import Tensor
from gruc.ops.elementwise import add_in_place, map_in_place, scaled_add_to
from gruc.ops.matmul import (MatMulPlan, create_mat_mul_input_lhs, create_mat_mul_input_rhs,
                             mat_mul, mat_mul_acc, plan_mat_mul, pre_arrange_mat_mul_input_rhs)
from gruc.ops.reduce import reduce
from gruc.ir import expr as ex
from gruc.popnn.gru_reference import check_is_close
from gruc.runtime.engine import Engine
from gruc.target import MAX_IPUS, MAX_TILES_PER_IPU, DeviceType, Target
from gruc.tools.run import ToolRun
from gruc.types import DType, dtype_of, float_type_name
from gruc.validated import GrucModel

PASSES = ("fwd", "bwd", "wu", "all")
LEARNING_RATE = 1.0
"""poplibs' ``fully_connected_layer`` steps the weights by 1 x the gradient (its learning rate
is 0.5 only for data it would check with uniform random values, which its benchmarks never
select)."""

TOLERANCES = {"float": (1e-3, 1e-5), "half": (0.05, 0.05)}
"""Default ``(relative, absolute)`` tolerances of the checks by data type (half sums of thousands
of products carry rounding of a few parts in a thousand of their magnitude)."""


class ProductToolConfig(GrucModel):
    """What every product tool takes: data type, matmul options, target, checking."""

    data_type: str = Field("half", description="half or float (poplibs' tools default to half).")
    available_memory_proportion: float = Field(0.6, ge=0, allow_inf_nan=False)
    partials_type: str = Field("float", description="Matmul partials: half or float.")
    device_type: DeviceType = "ipu2"
    tiles_per_ipu: int | None = Field(None, ge=1, le=MAX_TILES_PER_IPU)
    ipus: int = Field(1, ge=1, le=MAX_IPUS)
    compile_ipu_code: bool = True
    memory_model: Literal["poplar", "tensors"] = "poplar"
    ignore_data: bool = Field(False, description="Nothing written, read back or checked.")
    seed: int = Field(1002, ge=0)
    rel_tolerance: float | None = Field(None, ge=0, allow_inf_nan=False)
    abs_tolerance: float | None = Field(None, ge=0, allow_inf_nan=False)
    backend: Literal["numba", "numpy"] = "numba"

    @field_validator("data_type", "partials_type")
    @classmethod
    def _float_type(cls, value: str) -> str:
        return float_type_name(value)

    @property
    def dtype(self) -> DType:
        return dtype_of(self.data_type)

    def target(self) -> Target:
        return Target.of(self.device_type, num_ipus=self.ipus, tiles_per_ipu=self.tiles_per_ipu,
                         compile_ipu_code=self.compile_ipu_code)

    def matmul_options(self, fc_pass: str | None = None) -> dict[str, Any]:
        options: dict[str, Any] = {"availableMemoryProportion": self.available_memory_proportion,
                                   "partialsType": self.partials_type}
        if fc_pass is not None:
            options["fullyConnectedPass"] = fc_pass
        return options

    def tolerances(self) -> tuple[float, float]:
        rel, absolute = TOLERANCES[self.data_type]
        return (rel if self.rel_tolerance is None else self.rel_tolerance,
                absolute if self.abs_tolerance is None else self.abs_tolerance)


class FcConfig(ProductToolConfig):
    """poplibs ``fully_connected_layer`` flags, in snake_case."""

    batch_size: int = Field(1, ge=1, description="B, rows of activations.")
    input_size: int = Field(..., ge=1, description="I, input features.")
    output_size: int = Field(..., ge=1, description="O, output features.")
    num_groups: int = Field(1, ge=1, description="G, independent layers.")
    bias: bool = True
    pass_: Literal["fwd", "bwd", "wu", "all"] = Field(
        "all", description="The passes run: fwd, bwd, wu or all (poplibs' --single-phase).")


class GemmConfig(ProductToolConfig):
    """poplibs ``general_matrix_multiply`` flags, in snake_case."""

    m: int = Field(..., ge=1)
    k: int = Field(..., ge=1)
    n: int = Field(..., ge=1)
    g: int = Field(1, ge=1, description="Groups.")
    alpha: float = Field(1.0, allow_inf_nan=False)
    beta: float = Field(1.0, allow_inf_nan=False)
    transpose_a: bool = Field(False, description="A is stored [k, m] (left-matrix-op transpose).")
    transpose_b: bool = Field(False, description="B is stored [n, k] (right-matrix-op transpose).")


@dataclass
class ProductLayer:
    """A built tool: its graph and programs, the host tensors, and the plan of each product."""

    config: ProductToolConfig
    graph: Graph
    programs: list[Sequence]
    writes: dict[str, Tensor] = field(default_factory=dict)
    reads: dict[str, Tensor] = field(default_factory=dict)
    plans: dict[str, MatMulPlan] = field(default_factory=dict)
    flop_count: int = 0

    def flops(self) -> int:
        return self.flop_count

    @property
    def runs(self) -> tuple[int, ...]:
        """The programs one invocation of the tool runs, in order."""
        return tuple(range(len(self.programs)))


def _product(graph: Graph, layer: ProductLayer, name: str, a: Tensor, b: Tensor, prog: Sequence,
             options: dict[str, Any], acc: tuple[Tensor, Any] | None = None) -> Tensor | None:
    """``a x b`` into a new tensor (or, with ``acc = (c, k)``, ``c += k · a x b``), noting its
    plan and FLOPs."""
    layer.plans[name] = plan_mat_mul(graph.target, a.dtype, a.shape, b.shape, options,
                                     out_type=a.dtype)
    G = a.shape[0] if a.rank == 3 else 1
    layer.flop_count += 2 * G * a.shape[-2] * a.shape[-1] * b.shape[-1]
    if acc is None:
        return mat_mul(graph, a, b, prog, options=options, name=name)
    mat_mul_acc(graph, acc[0], acc[1], a, b, prog, options=options, name=name)
    return None


def build_fc(config: FcConfig) -> ProductLayer:
    """``fully_connected_layer``'s graph and programs (see the module docstring)."""
    graph = Graph(config.target())
    G, B, I, O = config.num_groups, config.batch_size, config.input_size, config.output_size
    dtype = config.dtype
    fwd_options = config.matmul_options("TRAINING_FWD")
    bwd_options = config.matmul_options("TRAINING_BWD")
    wu_options = config.matmul_options("TRAINING_WU")
    act = create_mat_mul_input_lhs(graph, dtype, (G, B, I), (G, I, O), "prevAct", fwd_options)
    weights = create_mat_mul_input_rhs(graph, dtype, (G, B, I), (G, I, O), "weights",
                                       fwd_options)
    layer = ProductLayer(config, graph, [], writes={"prevAct": act, "weights": weights})
    biases = None
    if config.bias:
        biases = graph.add_variable(dtype, (G, O), "biases")
        graph.map_tensor_linearly(biases)
        layer.writes["biases"] = biases
    passes = ("fwd", "bwd", "wu") if config.pass_ == "all" else (config.pass_,)
    if "fwd" in passes:
        fwd = Sequence()
        out = _product(graph, layer, "fwd", act, weights, fwd, fwd_options)
        if biases is not None:
            add_in_place(graph, out, biases.expand([1]).broadcast(B, 1), fwd, "bias")
        layer.reads["nextAct"] = out
        layer.programs.append(fwd)
    if "bwd" in passes or "wu" in passes:
        grads = create_mat_mul_input_lhs(graph, dtype, (G, B, O), (G, O, I), "zDeltas",
                                         bwd_options)
        layer.writes["zDeltas"] = grads
        back = Sequence()
        if "bwd" in passes:
            arranged = pre_arrange_mat_mul_input_rhs(graph, (G, B, O), weights.dim_shuffle(
                (0, 2, 1)), back, bwd_options, name="weights_bwd")
            layer.reads["prevDeltas"] = _product(
                graph, layer, "bwd", grads, arranged, back,
                {**bwd_options, "inputRHSIsPreArranged": True})
        if "wu" in passes:
            # a float factor, as poplin's matMulAcc takes it: compiled into the vertex, no tensor
            _product(graph, layer, "wu", act.dim_shuffle((0, 2, 1)), grads, back, wu_options,
                     acc=(weights, -LEARNING_RATE))
            if biases is not None:
                summed = reduce(graph, grads, (1,), "add", back, name="bias_grad")
                scaled_add_to(graph, biases, summed, -LEARNING_RATE, back, name="bias_update")
            layer.reads["weights"] = weights
            if biases is not None:
                layer.reads["biases"] = biases
        layer.programs.append(back)
    _streams(layer, always=True)
    return layer


def build_gemm(config: GemmConfig) -> ProductLayer:
    """``general_matrix_multiply``'s graph and program (see the module docstring)."""
    graph = Graph(config.target())
    G, M, K, N = config.g, config.m, config.k, config.n
    dtype = config.dtype
    fc_pass = "TRAINING_BWD" if config.transpose_b else "TRAINING_WU" if config.transpose_a \
        else None
    options = config.matmul_options(fc_pass)
    a = create_mat_mul_input_lhs(graph, dtype, (G, M, K), (G, K, N), "matA", options)
    b = create_mat_mul_input_rhs(graph, dtype, (G, M, K), (G, K, N), "matB", options)
    a_stored = _stored(graph, a, config.transpose_a, "matA")
    b_stored = _stored(graph, b, config.transpose_b, "matB")
    a_op = a_stored.dim_shuffle((0, 2, 1)) if config.transpose_a else a_stored
    b_op = b_stored.dim_shuffle((0, 2, 1)) if config.transpose_b else b_stored
    layer = ProductLayer(config, graph, [], writes={"matA": a_stored, "matB": b_stored})
    body = Sequence()
    product = _product(graph, layer, "gemm", a_op, b_op, body, options)
    c = graph.clone(product, "matC")
    if config.beta == 1.0:
        scaled_add_to(graph, c, product, config.alpha, body, name="axpby")
    else:
        map_in_place(graph, config.beta * ex._1 + config.alpha * ex._2, [c, product], body,
                     name="axpby")
    layer.writes["matC"] = c
    layer.reads["matC"] = c
    layer.programs.append(Sequence(Repeat(1, body)))
    _streams(layer, always=False)
    return layer


def _stored(graph: Graph, operand: Tensor, transposed: bool, name: str) -> Tensor:
    """The tensor the tool stores for an operand: itself, or, when the tool is told the operand
    is transposed, a ``[G, cols, rows]`` variable laid out so its transpose view is ``operand``'s
    layout (what poplibs' tool creates)."""
    if not transposed:
        return operand
    stored = graph.add_variable(operand.dtype, (operand.shape[0], operand.shape[2],
                                                operand.shape[1]), f"{name}_stored")
    graph.set_tile_mapping(stored.dim_shuffle((0, 2, 1)), graph.get_tile_mapping(operand))
    return stored


def _streams(layer: ProductLayer, always: bool) -> None:
    """Host streams of the tool's tensors.  The inputs are always written (without data their
    first values are whatever memory holds, but something is there); results are read back
    always (``fully_connected_layer`` compiles its stream copies even without data, which keeps
    them live) or unless ``ignore_data`` (``general_matrix_multiply``)."""
    for name, tensor in layer.writes.items():
        layer.graph.create_host_write(name, tensor)
    if layer.config.ignore_data and not always:
        return
    for name, tensor in layer.reads.items():
        layer.graph.create_host_read(f"{name}_out" if name in layer.writes else name, tensor)


def host_inputs(layer: ProductLayer) -> dict[str, np.ndarray]:
    """poplibs-style random host data for every written tensor, rounded to the data type."""
    rng = np.random.default_rng(layer.config.seed)
    values = {}
    for name, tensor in layer.writes.items():
        data = rng.uniform(-1.0, 1.0, tensor.shape)
        values[name] = data.astype(tensor.dtype.storage).astype(np.float64)
    return values


def fc_reference(config: FcConfig, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 results of the FC layer's passes, by host read name."""
    act, weights = values["prevAct"], values["weights"]
    result = {}
    passes = ("fwd", "bwd", "wu") if config.pass_ == "all" else (config.pass_,)
    if "fwd" in passes:
        out = act @ weights
        if "biases" in values:
            out = out + values["biases"][:, None, :]
        result["nextAct"] = out
    if "bwd" in passes:
        result["prevDeltas"] = values["zDeltas"] @ weights.transpose(0, 2, 1)
    if "wu" in passes:
        grads = values["zDeltas"]
        result["weights_out"] = weights - LEARNING_RATE * act.transpose(0, 2, 1) @ grads
        if "biases" in values:
            result["biases_out"] = values["biases"] - LEARNING_RATE * grads.sum(axis=1)
    return result


def gemm_reference(config: GemmConfig, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 ``beta · C + alpha · op(A) x op(B)``."""
    a, b = values["matA"], values["matB"]
    a = a.transpose(0, 2, 1) if config.transpose_a else a
    b = b.transpose(0, 2, 1) if config.transpose_b else b
    return {"matC_out": config.beta * values["matC"] + config.alpha * (a @ b)}


def product_reference(config: ProductToolConfig, values: dict[str, np.ndarray]
                      ) -> dict[str, np.ndarray]:
    return (fc_reference(config, values) if isinstance(config, FcConfig)
            else gemm_reference(config, values))


@dataclass
class ProductRun(ToolRun):
    """What :func:`run_product_layer` ran and checked."""

    layer: ProductLayer
    mismatches: dict[str, list[str]]
    compile_seconds: float
    run_seconds: float

    @property
    def passed(self) -> bool:
        return not any(self.mismatches.values())


def run_product_layer(layer: ProductLayer, strict_memory: bool = False,
                      pipeline: str | None = None) -> ProductRun:
    """Compile and run every program of the tool once, in order, and check every result against
    the float64 reference (nothing is written or checked with ``ignore_data``: the programs run
    on the zeros device memory starts with).  ``strict_memory``: a layer that does not fit raises
    :class:`~gruc.errors.GrucOutOfMemory` before running; ``pipeline``: the passes to compile with,
    as :class:`~gruc.runtime.engine.Engine`'s (default: the engine's)."""
    config = layer.config
    start = time.perf_counter()
    engine = Engine(layer.graph, layer.programs, backend=config.backend, pipeline=pipeline,
                    memory_model=config.memory_model, strict_memory=strict_memory)
    compiled = time.perf_counter()
    values = {} if config.ignore_data else host_inputs(layer)
    for name, value in values.items():
        engine.write_tensor(name, value)
    engine.run(layer.runs)  # one invocation of the tool: its programs in order
    ran = time.perf_counter()
    mismatches: dict[str, list[str]] = {}
    if not config.ignore_data:
        expected = product_reference(config, values)
        rel, absolute = config.tolerances()
        for name, want in expected.items():
            ok, lines = check_is_close(engine.read_tensor(name), want, rel, absolute, name=name)
            mismatches[name] = [] if ok else lines
    return ProductRun(layer, engine, mismatches, compiled - start, ran - compiled)
