"""GRU layer parameters, options and weights: what ``popnn::gru`` takes besides tensors.

:class:`GruParams` is poplibs' ``GruParams`` with one source of truth (poplibs keeps deprecated
mirror fields next to ``rnn``; gruc derives the :class:`RnnParams` from the layer's own fields).
:class:`GruOptions` parses poplibs' option dictionary (``{"inferenceOnly": False, ...}``) with the
same names, rejecting unknown keys and bad values by name; :func:`saved_intermediates` says what
a training forward keeps for its backward under each ``recomputationMode``.  Gate order: poplibs computes in the
fixed internal order reset, update, candidate; ``cell_order`` only permutes dim 0 of the weights,
biases and weight gradients at the API boundary (:func:`to_internal_order`,
:func:`from_internal_order`).
"""

from __future__ import annotations

import numbers
from enum import Enum
from typing import Annotated, Any, ClassVar, NamedTuple

import numpy as np
from pydantic import BeforeValidator, ConfigDict, Field, field_validator, model_validator

from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError, expect
from gruc.ir.graph import check_op_args
from gruc.ir.tensor import Tensor, concat
from gruc.rnn_geometry import RnnParams
from gruc.popnn.gru_reference import normalize_cell_order
from gruc.types import DType, dtype_of
from gruc.validated import GrucModel, OptionFlags

GATES = ("reset", "update", "candidate")
"""The internal gate order (poplibs' ``BasicGruCellUnit`` enum order)."""


def float_dtype(value: Any) -> DType:
    """The layer's element type: HALF or FLOAT (by DType or name).  A ``ValueError`` (not
    ``dtype_of``'s GrucTypeError) so pydantic names the field it came from."""
    try:
        dtype = dtype_of(value)
    except GrucTypeError as error:
        raise ValueError(str(error)) from None
    if not dtype.is_float:
        raise ValueError(f"must be half or float, got {dtype.name}")
    return dtype


FloatDType = Annotated[DType, BeforeValidator(float_dtype)]
"""A model field holding a layer's element type, HALF or FLOAT, given by DType or name."""


class Activation(str, Enum):
    """Activations poplibs' GRU accepts (``popnn::NonLinearityType`` names)."""

    TANH = "tanh"
    SIGMOID = "sigmoid"
    HARD_SIGMOID = "hard_sigmoid"
    RELU = "relu"
    SOFTMAX = "softmax"


def parse_activation(value: Any) -> Activation:
    """An activation by name (any case, ``-`` for ``_``); a ValueError listing the allowed ones."""
    name = str(getattr(value, "value", value)).lower().replace("-", "_")
    try:
        return Activation(name)
    except ValueError:
        allowed = ", ".join(a.value for a in Activation)
        why = (" (gelu is the float64 reference's only: the device layer saves activation "
               "outputs, and gelu's gradient needs its input)" if name == "gelu" else "")
        raise ValueError(f"unknown activation {value!r}; allowed: {allowed}{why}") from None


class GruParams(GrucModel):
    """The shape and variant of one GRU layer."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    dtype: FloatDType = Field(
        description="Element type of activations and weights (HALF or FLOAT).")
    batch_size: int = Field(ge=1, description="Batch rows B.")
    max_time_steps: int = Field(ge=1, description="Sequence length S (the loop's maximum).")
    layer_sizes: tuple[int, int] = Field(description="(input size I, hidden size H).")
    var_time_steps: Tensor | None = Field(
        None, description="Lengths: an integer tensor of shape [B] (per row) or [1] (all rows).")
    output_full_sequence: bool = Field(True, description="Output [S,B,H] (else the last state).")
    calc_input_gradients: bool = Field(True, description="Backward computes input gradients.")
    cell_order: tuple[str, str, str] = Field(GATES, description="Gate order of dim 0 of weights.")
    reset_after: bool = Field(False, description="Apply the reset gate after the matmul (Keras v1).")
    activation: Activation = Field(Activation.TANH, description="Candidate activation.")
    recurrent_activation: Activation = Field(Activation.SIGMOID, description="Gate activation.")

    @field_validator("layer_sizes", mode="before")
    @classmethod
    def _layer_sizes(cls, value: Any) -> tuple[int, int]:
        """``(input size, hidden size)`` from a list or tuple of two positive integers (numpy's
        too), as plain ints; a wrong count gets poplibs' message."""
        if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
            raise ValueError(f"layer sizes must be a pair (input size, hidden size), got {value!r}")
        sizes = tuple(value)
        if len(sizes) != 2:
            raise ValueError(f"Invalid GRU params (layerSize != 2): got {len(sizes)} sizes")
        if any(not isinstance(n, numbers.Integral) or isinstance(n, (bool, np.bool_)) or n < 1
               for n in sizes):
            raise ValueError(f"layer sizes must be integers >= 1, got {list(sizes)}")
        return tuple(int(n) for n in sizes)  # type: ignore[return-value] (numpy ints too)

    @field_validator("cell_order", mode="before")
    @classmethod
    def _cell_order(cls, value: Any) -> tuple[str, str, str]:
        return normalize_cell_order(value)

    @field_validator("activation", "recurrent_activation", mode="before")
    @classmethod
    def _activation(cls, value: Any) -> Activation:
        return parse_activation(value)

    @model_validator(mode="after")
    def _lengths(self) -> "GruParams":
        """poplibs' lengths rules (rank 1, size 1 or B) are RnnParams' to check."""
        lengths = self.var_time_steps
        if lengths is not None and lengths.dtype.is_float:
            raise ValueError(f"the lengths tensor must be integer, got {lengths.dtype.name}")
        self.rnn  # noqa: B018 (validates the lengths' shape against the batch)
        return self

    @property
    def input_size(self) -> int:
        return self.layer_sizes[0]

    @property
    def hidden_size(self) -> int:
        return self.layer_sizes[1]

    @property
    def rnn(self) -> RnnParams:
        """The generic RNN parameters (sequence layout, shard limits)."""
        shape = None if self.var_time_steps is None else tuple(self.var_time_steps.shape)
        return RnnParams(dtype=self.dtype, batch_size=self.batch_size,
                         max_time_steps=self.max_time_steps, layer_sizes=self.layer_sizes,
                         var_time_steps_shape=shape)

    def with_lengths(self, lengths: Tensor | None) -> "GruParams":
        """The same layer with another lengths tensor, checked as a new one would be (a copy
        with an update would skip the lengths rules)."""
        return type(self)(**{**dict(self), "var_time_steps": lengths})


_PARTIALS = {"half": "half", "float": "float"}


class RecomputationMode(str, Enum):
    """What a training forward saves for the backward pass, and so what the backward recomputes
    (named after poplibs' LSTM ``recomputationMode``; poplibs' GRU has no such option).

    * ``none``: every gate output of every step is saved, ``[S, k, B, H]``;
    * ``full``: no gate is saved; each backward step runs the forward cell again from
      ``h_{t-1}`` and ``x_t``, with the same builder, vertices and matmul plans, so the
      recomputed gates are bit-identical to the saved ones.  Only the state sequence the
      backward needs anyway is kept: the output when it is the full sequence, else ``h`` alone.

    (poplibs' LSTM ``cellAndTanh`` recomputes the cell's tanh only; a GRU has no such separate
    output to spare.)"""

    NONE = "none"
    FULL = "full"


def parse_recomputation_mode(value: Any) -> RecomputationMode:
    """A recomputation mode by name (any case); a ValueError naming the allowed ones."""
    name = str(getattr(value, "value", value)).lower()
    try:
        return RecomputationMode(name)
    except ValueError:
        allowed = ", ".join(mode.value for mode in RecomputationMode)
        raise ValueError(f"recomputationMode {value!r} is not one of: {allowed}") from None


def saved_intermediates(params: "GruParams", mode: RecomputationMode) -> tuple[str, ...]:
    """The rows a training forward saves per step, in order, under ``mode``: ``r, u, c,
    (h if not full sequence), (c_rec)`` without recomputation; with full recomputation only
    ``h``, and only when the output is not the full sequence (which holds every ``h``)."""
    keep_state = () if params.output_full_sequence else ("h",)
    if mode is RecomputationMode.FULL:
        return keep_state
    return ("r", "u", "c", *keep_state, *(("c_rec",) if params.reset_after else ()))


class GruOptions(OptionFlags):
    """poplibs' GRU option flags; build from a dict with :meth:`parse`."""

    kind: ClassVar[str] = "GRU"

    inference_only: bool = Field(
        True, alias="inferenceOnly",
        description="Forward only (the products' fullyConnectedPass; gruc plans every pass alike).")
    partials_type: str = Field("float", alias="partialsType",
                               description="Matmul partials type: half or float.")
    available_memory_proportion: float | None = Field(
        None, alias="availableMemoryProportion", ge=0,
        description="Fraction of tile memory matmuls may use for temporaries (default 0.6).")
    num_shards: int | None = Field(None, alias="numShards",
                                   description="Time shards (1..max); default: poplibs' heuristic.")
    rnn_code_reuse: bool | None = Field(None, alias="rnnCodeReuse",
                                        description="Build the loop body once and call it.")
    recomputation_mode: RecomputationMode = Field(
        RecomputationMode.NONE, alias="recomputationMode",
        description="Training: none (save every gate) or full (recompute the gates in the "
                    "backward pass); give the forward and the backward the same.")

    @field_validator("recomputation_mode", mode="before")
    @classmethod
    def _recomputation(cls, value: Any) -> RecomputationMode:
        return parse_recomputation_mode(value)

    @field_validator("partials_type", mode="before")
    @classmethod
    def _partials(cls, value: Any) -> str:
        """``partialsType`` as ``half`` or ``float``, from a name in any case or a type; pydantic
        names the option, the message names the allowed values."""
        if isinstance(value, str):
            name = value.lower()
        else:
            try:
                name = dtype_of(value).name
            except GrucTypeError:  # pydantic names the option; the message the allowed values
                name = None
        if name not in _PARTIALS:
            raise ValueError(f"partialsType {value!r} is not one of: half, float")
        return name

    def matmul_options(self, fully_connected_pass: str) -> dict[str, Any]:
        """The options every matmul of the layer gets (poplibs' ``getMMOpts``)."""
        result: dict[str, Any] = {"partialsType": self.partials_type,
                                  "fullyConnectedPass": fully_connected_pass}
        if self.available_memory_proportion is not None:
            result["availableMemoryProportion"] = self.available_memory_proportion
        return result


class GruWeights(NamedTuple):
    """The layer's weights, dim 0 in cell order: [3,I,H], [3,H,H], [3,H] or [3,2,H]."""

    input_weights: Tensor
    output_weights: Tensor
    biases: Tensor


def to_internal_order(tensor: Tensor, cell_order: tuple[str, ...]) -> Tensor:
    """A view of ``tensor`` (gates on dim 0 in ``cell_order``) in reset, update, candidate order."""
    return concat([tensor.slice(cell_order.index(g), cell_order.index(g) + 1, 0) for g in GATES])


def from_internal_order(tensor: Tensor, cell_order: tuple[str, ...]) -> Tensor:
    """A view of ``tensor`` (gates in internal order) in ``cell_order``."""
    return concat([tensor.slice(GATES.index(g), GATES.index(g) + 1, 0) for g in cell_order])


def weights_in_order(weights: GruWeights, order: tuple[str, ...], to_internal: bool) -> GruWeights:
    convert = to_internal_order if to_internal else from_internal_order
    return GruWeights(*(convert(t, order) for t in weights))


def check_layer_args(graph: Any, params: Any, prog: Any, what: str) -> None:
    """The graph, parameters and program every GRU builder takes, checked first: a swapped
    argument is named here rather than failing deep inside the layer with an AttributeError."""
    check_op_args(graph, prog, what)
    if not isinstance(params, GruParams):
        raise GrucTypeError(f"{what} needs GruParams, got {type(params).__name__}")


def check_tensor(what: str, tensor: Any, shape: tuple[int, ...], dtype: DType,
                 hint: str = "") -> None:
    """Raise naming the GRU argument ``what`` unless it is a tensor of ``shape`` and ``dtype``."""
    expect(isinstance(tensor, Tensor), GrucTypeError,
           f"GRU {what} must be a gruc Tensor, got {type(tensor).__name__}{hint}")
    expect(tensor.shape == shape, GrucShapeError,
           f"GRU {what} has shape {list(tensor.shape)}, the layer needs {list(shape)}{hint}")
    expect(tensor.dtype == dtype, GrucTypeError,
           f"GRU {what} is {tensor.dtype.name}, the layer is {dtype.name}")


def check_in_graph(graph: Any, tensors: dict[str, Any]) -> None:
    """Raise naming the GRU argument that belongs to another graph than the layer's (after the
    type checks: every value is a Tensor or None).  Found here, not when an engine verifies the
    program that mixes two graphs' variables."""
    for what, tensor in tensors.items():
        expect(tensor is None or tensor.graph is graph, GrucValueError,
               f"GRU {what} belongs to another graph than the one the layer is built in")


def require_attention(builder: str, attention: Any) -> None:
    """An AUGRU builder given no attention scores would quietly build a plain GRU: refuse."""
    expect(attention is not None, GrucTypeError,
           f"{builder} needs the attention scores, a [batch, steps] tensor, got None (a GRU "
           f"without attention is {builder.replace('au_gru', 'gru')})")


def check_weights(params: GruParams, weights: GruWeights) -> None:
    """Raise naming the weight tensor whose type or shape does not fit the layer."""
    if not isinstance(weights, GruWeights):
        raise GrucTypeError(f"GRU weights must be GruWeights(input_weights, output_weights, "
                            f"biases), got {type(weights).__name__}")
    i, h = params.layer_sizes
    expected = {"input_weights": (3, i, h), "output_weights": (3, h, h),
                "biases": (3, 2, h) if params.reset_after else (3, h)}
    for (name, shape), tensor in zip(expected.items(), weights):
        check_tensor(name, tensor, shape, params.dtype)
