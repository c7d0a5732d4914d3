"""The GRU layer as a whole program: what poplibs' ``gru_layer`` tool builds, runs and checks.

:class:`GruLayerConfig` holds the tool's flags (sizes, type, phase, variants, target); 
:func:`build_layer` builds the graph and programs for them; :func:`run_layer` writes poplibs'
random host data, runs the layer on the simulated IPU and compares every output with the float64
reference (:mod:`gruc.popnn.gru_reference`) using poplibs' ``checkIsClose`` rule.  The ``gruc gru``
command, the tests and planning sweeps all go through here, so they build the same layer.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from gruc.errors import GrucTypeError
from gruc.ir.graph import Graph
from gruc.ir.heap import deferred_full_collections
from gruc.ir.program import Sequence
from gruc.ir.tensor import Tensor
from gruc.popnn import gru, gru_reference
from gruc.popnn.gru_params import GruParams, parse_activation
from gruc.runtime.engine import Engine
from gruc.target import MAX_IPUS, MAX_TILES_PER_IPU, DeviceType, Target
from gruc.tools.run import ToolRun
from gruc.types import UNSIGNED_INT, dtype_of, float_type_name
from gruc.validated import GrucModel

TRAINING_READS = {"input_grad": "input_grad", "init_state_grad": "init_state_grad",
                  "attention_grad": "attentions_grad"}
"""Host read name -> :class:`~gruc.popnn.gru.GruGradients` field, for the backward phases."""

HALF_GRADIENT_SHARE = 0.1
"""How far (a share of the tensor's largest value) half gradients of a layer with saturating gates
may miss the reference for :meth:`LayerRun.known_reason` to name half arithmetic as the cause:
the default half training layer misses by 3.6 % at most."""

WEIGHT_GRADIENT_READS = ("input_weights", "output_weights", "biases")
"""The weight gradients the ``wu`` and ``all`` phases read, as ``<name>_grad``."""


class GruLayerConfig(GrucModel):
    """poplibs ``gru_layer`` flags, in snake_case."""

    sequence_size: int = Field(20, ge=1, description="S, time steps.")
    input_size: int = Field(64, ge=1, description="I, input features.")
    output_size: int = Field(64, ge=1, description="H, hidden units.")
    batch_size: int = Field(8, ge=1, description="B, batch rows.")
    data_type: str = Field("float", description="half or float.")
    phase: Literal["fwd", "bwd", "wu", "all"] = Field(
        "fwd", description="fwd: inference; bwd: + the backward pass (gru_bwd); wu, all: + the "
                           "weight update (gru_bwd_with_wu), as poplibs' tool.")
    reset_after: bool = False
    cell_order: tuple[str, str, str] = ("reset", "update", "candidate")
    activation: str = "tanh"
    recurrent_activation: str = "sigmoid"
    shards: int | None = Field(None, ge=1, description="numShards (default: poplibs' heuristic).")
    code_reuse: bool | None = Field(None, description="rnnCodeReuse (default: shards > 15).")
    with_attention: bool = Field(False, description="AUGRU.")
    variable_time_steps: tuple[int, ...] | None = Field(
        None, description="Lengths: one for all rows or one per row (params.var_time_steps).")
    with_real_time_steps: bool = Field(False, description="Random per-row lengths (realTimeSteps).")
    output_all_sequence: bool = Field(True, description="Output every step (else the last).")
    ignore_input_gradient: bool = False
    save_intermediates: bool = Field(
        False, description="Read back the forward's saved intermediates and check them (in "
                           "inference: run a training forward to save them).  Refused with full "
                           "recomputation, which saves no gates.")
    recomputation_mode: Literal["none", "full"] = Field(
        "none", description="Training (recomputationMode): none saves every gate for the "
                            "backward pass; full saves none and recomputes them there.")
    available_memory_proportion: float | None = Field(None, ge=0, allow_inf_nan=False)
    partials_type: str | None = None
    device_type: DeviceType = Field(
        "ipu2", description="IPU generation: ipu1 (poplibs' IpuModel1) or ipu2 (IpuModel2).")
    tiles_per_ipu: int | None = Field(None, ge=1, le=MAX_TILES_PER_IPU,
                                      description="Default: all of the device's (ipu2: 1472).")
    ipus: int = Field(1, ge=1, le=MAX_IPUS)
    memory_model: Literal["poplar", "tensors"] = Field(
        "poplar", description="What memory counts: everything Poplar puts on a tile, or tensor "
                              "data alone (for comparison).")
    compile_ipu_code: bool = Field(
        True, description="Compile the program to IPU code, so memory holds code (poplibs' "
                          "test IPUModels did not: IPUModel::compileIPUCode false).")
    ignore_data: bool = Field(
        False, description="Nothing read back (poplibs' --ignore-data): no host reads, so no "
                           "output is checked and what only the host would read is not kept "
                           "live after its last use, as poplibs' benchmarks measured layers.  "
                           "Inputs are still written.")
    rel_tolerance: float | None = Field(None, ge=0, allow_inf_nan=False)
    abs_tolerance: float | None = Field(None, ge=0, allow_inf_nan=False)
    seed: int = Field(1002, ge=0, description="Host data seed (MT19937's, as poplibs' tool).")
    weights_range: float = Field(
        1.0, gt=0, allow_inf_nan=False,
        description="Host weights and biases are drawn uniform in ±this (poplibs' tool: 1).  "
                    "With ±1 a recurrence 128 or more wide is chaotic over tens of steps: the "
                    "float64 reference itself moves by the whole output range when a weight "
                    "changes in its seventh digit, so no float32 run can match it; 1/sqrt(H), "
                    "as torch initialises them, keeps every size checkable.")
    backend: Literal["numba", "numpy"] = "numba"

    @field_validator("data_type")
    @classmethod
    def _type(cls, value: str) -> str:
        return float_type_name(value, "data type")

    @field_validator("partials_type")
    @classmethod
    def _partials(cls, value: str | None) -> str | None:
        """Checked here, with the flag's name, not later by the layer's options."""
        return None if value is None else cls._type(value)

    @field_validator("cell_order", mode="before")
    @classmethod
    def _cell_order(cls, value: Any) -> Any:
        """Refused now, naming the flag, rather than when the layer is built (a sweep would
        otherwise plan every other configuration before finding the typo)."""
        gru_reference.normalize_cell_order(value)
        return value

    @field_validator("activation", "recurrent_activation")
    @classmethod
    def _activation(cls, value: str) -> str:
        parse_activation(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "GruLayerConfig":
        """The rules between flags: variable and real time steps exclude each other, variable
        lengths are one or one per batch row, each within the sequence, real time steps need
        every step output (poplibs' own rule, in its words), recomputation is a training choice
        that leaves no gates to read back, and the weights range is one the data type holds (weights rounded to infinity make the reference NaN, which the check
        would match with the device's NaN)."""
        if self.variable_time_steps is not None:
            if self.with_real_time_steps:
                raise ValueError("variable time steps and real time steps are exclusive")
            if len(self.variable_time_steps) not in (1, self.batch_size):
                raise ValueError(f"variable time steps {list(self.variable_time_steps)} must give "
                                 f"1 or batch-size ({self.batch_size}) lengths")
            bad = [n for n in self.variable_time_steps if not 1 <= n <= self.sequence_size]
            if bad:
                raise ValueError(f"variable time steps {bad} are outside 1..sequence-size "
                                 f"({self.sequence_size})")
        if self.with_real_time_steps and not self.output_all_sequence:
            raise ValueError("The outputFullSequence should be true if realTimeSteps given")
        if self.recomputation_mode != "none":
            if self.phase == "fwd":
                raise ValueError(f"recomputation mode {self.recomputation_mode} only changes "
                                 "training: give a phase of bwd, wu or all")
            if self.save_intermediates:
                raise ValueError(f"save intermediates reads back the saved gates, and "
                                 f"recomputation mode {self.recomputation_mode} saves none: "
                                 "drop one")
        largest = float(np.finfo(dtype_of(self.data_type).storage).max)
        if self.weights_range > largest:  # data rounded to infinity: a NaN reference, no check
            raise ValueError(f"weights range {self.weights_range:g} is more than "
                             f"{self.data_type} can hold (at most {largest:g})")
        return self

    def target(self) -> Target:
        return Target.of(self.device_type, num_ipus=self.ipus, tiles_per_ipu=self.tiles_per_ipu,
                         compile_ipu_code=self.compile_ipu_code)

    def options(self) -> dict[str, Any]:
        """poplibs GRU options: ``inferenceOnly`` always, the others only when given."""
        result: dict[str, Any] = {"inferenceOnly": self.phase == "fwd"
                                  and not self.save_intermediates}
        if self.recomputation_mode != "none":
            result["recomputationMode"] = self.recomputation_mode
        for key, value in (("numShards", self.shards), ("rnnCodeReuse", self.code_reuse),
                           ("availableMemoryProportion", self.available_memory_proportion),
                           ("partialsType", self.partials_type)):
            if value is not None:
                result[key] = value
        return result

    def tolerances(self) -> tuple[float, float]:
        rel, absolute = gru_reference.default_tolerances(self.data_type)
        return (rel if self.rel_tolerance is None else self.rel_tolerance,
                absolute if self.abs_tolerance is None else self.abs_tolerance)


@dataclass
class GruLayer:
    """A built layer: its graph, programs, parameters and host-visible tensor names."""

    config: GruLayerConfig
    graph: Graph
    programs: list[Sequence]
    params: GruParams
    num_shards: int
    writes: dict[str, Tensor] = field(default_factory=dict)
    reads: dict[str, Tensor] = field(default_factory=dict)

    def flops(self) -> int:
        """poplibs' FLOP estimate of the layer's phase (``bwd`` adds the backward pass, ``wu`` and
        ``all`` the weight update too)."""
        total = gru.get_basic_gru_cell_fwd_flops(self.params)
        if self.config.phase != "fwd":
            total += gru.get_basic_gru_cell_bwd_flops(self.params)
        if self.config.phase in ("wu", "all"):
            total += gru.get_basic_gru_cell_wu_flops(self.params)
        return total


@deferred_full_collections()
def build_layer(config: GruLayerConfig) -> GruLayer:
    """Build the layer's graph and its program (nothing compiled yet)."""
    if not isinstance(config, GruLayerConfig):
        raise GrucTypeError(f"build_layer needs a GruLayerConfig, got {type(config).__name__}")
    graph = Graph(config.target())
    b, s = config.batch_size, config.sequence_size
    lengths = None
    if config.variable_time_steps is not None or config.with_real_time_steps:
        count = b if config.with_real_time_steps else len(config.variable_time_steps)
        lengths = graph.add_variable(UNSIGNED_INT, (count,), "lengths")
        graph.set_tile_mapping(lengths, 0)
    params = GruParams(
        dtype=config.data_type, batch_size=b, max_time_steps=s,
        layer_sizes=(config.input_size, config.output_size),
        var_time_steps=lengths if config.variable_time_steps is not None else None,
        output_full_sequence=config.output_all_sequence,
        calc_input_gradients=not config.ignore_input_gradient, cell_order=config.cell_order,
        reset_after=config.reset_after, activation=config.activation,
        recurrent_activation=config.recurrent_activation)
    options = config.options()
    x = gru.create_input(graph, params, "input", options)
    h0 = gru.create_initial_state(graph, params, "initState", options)
    weights = gru.create_weights(graph, params, "weights", options)
    prog = Sequence()
    layer = GruLayer(config, graph, [prog], params, gru.num_shards(graph, params, options))
    layer.writes.update({"input": x, "init_state": h0, "input_weights": weights.input_weights,
                         "output_weights": weights.output_weights, "biases": weights.biases})
    real = lengths if config.with_real_time_steps else None
    training = config.phase != "fwd"
    attention = None
    if config.with_attention:
        attention = gru.create_attention(graph, params, "attention", options)
        layer.writes["attention"] = attention
        result = gru.au_gru_fwd(graph, params, h0, x, weights, prog, attention,
                                save_intermediates=config.save_intermediates or training,
                                real_time_steps=real, options=options)
    else:
        result = gru.gru_fwd(graph, params, h0, x, weights, prog,
                             save_intermediates=config.save_intermediates or training,
                             real_time_steps=real, options=options)
    if lengths is not None:
        layer.writes["lengths"] = lengths
    layer.reads["output"] = result.output
    if config.save_intermediates:
        layer.reads["intermediates"] = result.intermediates
    if training:
        _build_backward(layer, h0, x, weights, result, attention, real)
    for name, tensor in layer.writes.items():
        graph.create_host_write(name, tensor)
    if not config.ignore_data:
        for name, tensor in layer.reads.items():
            graph.create_host_read(name, tensor)
    return layer


def _build_backward(layer: GruLayer, h0: Tensor, x: Tensor, weights: gru.GruWeights,
                    forward: gru.ForwardResult, attention: Tensor | None,
                    real_time_steps: Tensor | None) -> None:
    """The backward phases, as poplibs' tool builds them: ``bwd`` calls ``gru_bwd``, ``wu`` and
    ``all`` call ``gru_bwd_with_wu`` (the AUGRU variants with attention); every gradient is
    read."""
    config, graph, params = layer.config, layer.graph, layer.params
    options = config.options()
    grad_output = graph.add_variable(params.dtype, forward.output.shape, "grad_output")
    graph.map_tensor_linearly(grad_output)
    layer.writes["grad_output"] = grad_output
    arguments = (graph, params, layer.programs[0], h0, forward.intermediates, weights, x,
                 forward.output, grad_output)
    with_update = config.phase != "bwd"
    if attention is None:
        build = gru.gru_bwd_with_wu if with_update else gru.gru_bwd
        grads = build(*arguments, real_time_steps=real_time_steps, options=options)
    else:
        build = gru.au_gru_bwd_with_wu if with_update else gru.au_gru_bwd
        grads = build(*arguments, attention, real_time_steps=real_time_steps, options=options)
    for read, field_name in TRAINING_READS.items():
        tensor = getattr(grads, field_name)
        if tensor is not None:
            layer.reads[read] = tensor
    if grads.weights_grad is not None:
        for name in WEIGHT_GRADIENT_READS:
            layer.reads[f"{name}_grad"] = getattr(grads.weights_grad, name)


@dataclass
class LayerRun(ToolRun):
    """What :func:`run_layer` measured and checked."""

    layer: GruLayer
    outputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    failures: dict[str, int]
    """Per output: how many of its elements fail the check."""
    mismatches: dict[str, list[str]]
    """Per output: poplibs' line for each of its first 20 failing elements (none if it passes)."""
    build_seconds: float
    compile_seconds: float
    run_seconds: float

    @property
    def passed(self) -> bool:
        return not any(self.failures.values())

    def known_reason(self) -> str | None:
        """Why the check failed, in one line, where the numbers are known to fail it whatever
        the compiler does (None when it passed, or for a failure with no known reason — a bug
        to look at):

        * with weights wider than 1/sqrt(H) a recurrence 128 or more wide is chaotic: the
          float64 reference itself moves by the whole output range when a weight changes in its
          seventh digit;
        * in half, the gates of a layer with such weights saturate, and the backward takes a
          gate's derivative from its half output (``1 - c²``, ``u (1 - u)``, as poplibs does),
          which near ±1 is off by tens of percent: gradients then miss poplibs' element-wise
          tolerances while staying within :data:`HALF_GRADIENT_SHARE` of their tensor's largest
          value (``docs/reliability.md``)."""
        config = self.layer.config
        torch_range = 1 / math.sqrt(config.output_size)
        if self.passed or config.weights_range <= torch_range:
            return None
        if config.output_size >= 128:
            return (f"weights in +-{config.weights_range:g} can make a recurrence "
                    f"{config.output_size} wide chaotic: the float64 reference itself then moves "
                    "this much when a weight changes in its seventh digit; --weights-range "
                    f"{torch_range:.3g} draws them as torch initialises them")
        failing = [name for name, count in self.failures.items() if count]
        shares = [worst / largest if largest else math.inf
                  for worst, largest in map(self.worst_error, failing)]
        if (config.data_type == "half" and all(name.endswith("_grad") for name in failing)
                and max(shares) <= HALF_GRADIENT_SHARE):
            return (f"half: with weights in +-{config.weights_range:g} the gates of a layer "
                    f"{config.output_size} wide saturate, and a gate's derivative taken from its "
                    "half output near +-1 is off by tens of percent; every failing gradient is "
                    f"within {100 * max(shares):.2g}% of its largest |expected| "
                    "(docs/reliability.md); --weights-range "
                    f"{torch_range:.3g}, as torch initialises them, keeps the gates unsaturated")
        return None

    def worst_error(self, name: str) -> tuple[float, float]:
        """The largest ``|actual - expected|`` of output ``name`` and the largest ``|expected|``:
        what an element-wise check with an absolute tolerance cannot say of a tensor whose
        values are large (half gradients of a layer 64 wide reach tens)."""
        actual, expected = self.outputs[name].astype(np.float64), self.expected[name]
        with np.errstate(invalid="ignore"):
            difference = np.abs(actual - expected)
        return (float(np.nanmax(difference, initial=0.0)),
                float(np.nanmax(np.abs(expected), initial=0.0)))


def host_data(config: GruLayerConfig) -> tuple[gru_reference.RandomInputs, np.ndarray | None]:
    """poplibs' random host data for the layer, rounded to its type, and the lengths if any."""
    data = gru_reference.random_inputs(
        config.sequence_size, config.batch_size, config.input_size, config.output_size,
        reset_after=config.reset_after, attention=config.with_attention,
        output_full_sequence=config.output_all_sequence,
        random_lengths=config.with_real_time_steps, round_to=config.data_type, seed=config.seed,
        weights_range=config.weights_range)
    lengths = (np.asarray(config.variable_time_steps, dtype=np.int64)
               if config.variable_time_steps is not None else data.lengths)
    return data, lengths


def reference_results(config: GruLayerConfig, data: gru_reference.RandomInputs,
                      lengths: np.ndarray | None) -> dict[str, np.ndarray]:
    """Every value the layer can read, from the float64 reference, by host read name."""
    forward = gru_reference.forward(
        data.x, data.h0, data.input_weights, data.output_weights, data.biases,
        cell_order=config.cell_order, reset_after=config.reset_after,
        activation=config.activation, recurrent_activation=config.recurrent_activation,
        attention=data.attention, lengths=lengths,
        output_full_sequence=config.output_all_sequence)
    expected = {"output": forward.output, "intermediates": forward.intermediates}
    if config.phase == "fwd":
        return expected
    backward = gru_reference.backward(forward, data.grad_output,
                                      calc_input_gradients=not config.ignore_input_gradient)
    expected.update(input_grad=backward.input_grad, init_state_grad=backward.init_state_grad,
                    attention_grad=backward.attention_grad)
    if config.phase != "bwd":
        update = gru_reference.weight_update(forward, backward)
        expected.update({f"{name}_grad": getattr(update, name) for name in WEIGHT_GRADIENT_READS})
    return expected


def run_layer(config: GruLayerConfig, layer: GruLayer | None = None,
              pipeline: str | None = None, strict_memory: bool = False) -> LayerRun:
    """Build (unless given), compile (with ``pipeline`` and ``strict_memory``: as
    :class:`Engine`'s), run and check the layer against the float64 reference (nothing is read
    back or checked with ``ignore_data``: ``LayerRun.checked`` is False)."""
    start = time.perf_counter()
    layer = layer or build_layer(config)
    built = time.perf_counter()
    engine = Engine(layer.graph, layer.programs, backend=config.backend, pipeline=pipeline,
                    memory_model=config.memory_model, strict_memory=strict_memory)
    compiled = time.perf_counter()
    data, lengths = host_data(config)
    values = {"input": data.x, "init_state": data.h0, "input_weights": data.input_weights,
              "output_weights": data.output_weights, "biases": data.biases,
              "attention": data.attention, "lengths": lengths, "grad_output": data.grad_output}
    for name in layer.writes:
        engine.write_tensor(name, values[name])
    engine.run(0)
    ran = time.perf_counter()
    if config.ignore_data:
        return LayerRun(layer, engine, {}, {}, {}, {}, built - start, compiled - built,
                        ran - compiled)
    expected = reference_results(config, data, lengths)
    outputs = {name: engine.read_tensor(name) for name in layer.reads}
    rel, absolute = config.tolerances()
    failures, mismatches = {}, {}
    for name, value in outputs.items():
        close = gru_reference.close_elements(value, expected[name], rel, absolute, name=name)
        failures[name] = int(close.size - np.count_nonzero(close))
        mismatches[name] = gru_reference.check_is_close(
            value, expected[name], rel, absolute, name=name)[1] if failures[name] else []
    return LayerRun(layer, engine, outputs, expected, failures, mismatches, built - start,
                    compiled - built, ran - compiled)
