"""GRU weights to and from PyTorch, Keras and ONNX layouts (host-side numpy, exact conversions).

Every framework stores the same three gates, but each in its own order and orientation, and with
its own bias convention.  poplibs (and gruc) keep ``input_weights [3, I, H]``, ``output_weights
[3, H, H]`` and ``biases [3, H]`` (reset-before) or ``[3, 2, H]`` (reset-after: ``[g][0]`` input
side, ``[g][1]`` recurrent side), gates on dim 0 in the layer's ``cell_order``, row-vector
convention (``x @ W``).  The layouts converted here:

* **PyTorch** ``nn.GRU``: gates (r, z, n) stacked on the ``3H`` rows of ``weight_ih_l{k}
  [3H, I]`` and ``weight_hh_l{k} [3H, H]`` (column-vector convention, so each gate block is the
  transpose of poplibs'); ``bias_ih_l{k}`` and ``bias_hh_l{k}`` ``[3H]``; ``_reverse`` suffix for
  the second direction.
* **Keras** ``GRU``: gates (z, r, h) side by side on the ``3H`` columns of ``kernel [I, 3H]`` and
  ``recurrent_kernel [H, 3H]``; ``bias [2, 3H]`` (``reset_after=True``: input side, recurrent
  side) or ``[3H]`` (``reset_after=False``).
* **ONNX** ``GRU``: gates (z, r, h) on the rows of ``W [D, 3H, I]`` and ``R [D, 3H, H]``;
  ``B [D, 6H]`` = ``Wb`` (z, r, h) then ``Rb`` (z, r, h); ``D`` = 1, or 2 for a bidirectional
  node (forward, reverse).

(r = reset, z = update, n / h = candidate.)  Every framework's state update is ``h' = z ∘ h +
(1 − z) ∘ c``, the same as poplibs', so the gate weights carry over unchanged.

Which reset placement each layout represents, and the bias rule
---------------------------------------------------------------
* **PyTorch** ``nn.GRU`` is always reset-after
  (``n = tanh(W_in x + b_in + r ∘ (W_hn h + b_hn))``): :func:`from_torch` gives ``[3, 2, H]``
  biases, and :func:`to_torch` refuses reset-before weights, which no ``nn.GRU`` computes.
* **Keras** ``reset_after=True`` is reset-after with ``bias [2, 3H]`` (row 0 input side, row 1
  recurrent side); ``reset_after=False`` is poplibs' default formula
  (``hh = tanh(x W_h + b_h + (r ∘ h) U_h)``) with a single input-side bias ``[3H]``.  Both are
  exact.
* **ONNX** ``linear_before_reset=1`` is reset-after (``Wb`` → ``[g][0]``, ``Rb`` → ``[g][1]``).
  ``linear_before_reset=0`` is reset-before: ONNX adds ``Rbh + Wbh`` *outside* the reset product
  (``h~ = g(x Wh^T + (r ∘ h) Rh^T + Rbh + Wbh)``), so for that formula all three recurrent biases
  fold exactly into the input-side ones by addition (PopART does the same) and :func:`to_onnx`
  writes reset-before weights back with ``Rb = 0``.

The exact folding rule: a recurrent bias may be added into the input-side bias of the same gate
iff it is added to the pre-activation *outside* any product with the reset gate.  That holds for
the reset and update gates always, and for the candidate only in the reset-before formula.  In the
reset-after formula ``c = φ(x W_c + b_c + r ∘ (h U_c + b_h,c))`` the recurrent candidate bias is
multiplied by ``r``, so it cannot be folded and reset-after layers keep ``[3, 2, H]`` biases.
Converting between the two reset placements is never exact (``r ∘ (h U)`` is not ``(r ∘ h) U``,
whatever the biases), so no function here does it: a reset-after model becomes a layer built
with ``reset_after=True`` and a reset-before one a layer with ``reset_after=False``.

Activations, clipping and sequence lengths are layer settings, not weights, and are not converted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError, expect
from gruc.popnn.gru_params import GruParams
from gruc.popnn.gru_reference import GATES, normalize_cell_order

TORCH_GATES = ("reset", "update", "candidate")
"""PyTorch's gate order along the ``3H`` rows of ``weight_ih`` / ``weight_hh`` (r, z, n)."""

KERAS_GATES = ("update", "reset", "candidate")
"""Keras's gate order along the ``3H`` columns of ``kernel`` / ``recurrent_kernel`` (z, r, h)."""

ONNX_GATES = ("update", "reset", "candidate")
"""ONNX's gate order along the ``3H`` rows of ``W`` / ``R`` and each half of ``B`` (z, r, h)."""

ONNX_DIRECTIONS = {1: "forward", 2: "bidirectional"}
"""ONNX's ``direction`` attribute for the number of directions :func:`to_onnx` writes."""


def _array(name: str, value: Any) -> np.ndarray:
    """``value`` as a float numpy array (torch tensors included), keeping float dtypes exactly."""
    if hasattr(value, "detach"):                      # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except ValueError as error:  # a ragged nest of lists
        raise GrucShapeError(f"{name} is not an array of one shape: {error}") from None
    if array.dtype.kind in "iu":
        return array.astype(np.float64)
    expect(array.dtype.kind == "f", GrucTypeError,
           f"{name} must hold real numbers (float or integer), got dtype {array.dtype}")
    return array


def _shape_check(name: str, array: np.ndarray, shape: tuple[int, ...], meaning: str) -> None:
    expect(array.shape == shape, GrucShapeError,
           f"{name} has shape {list(array.shape)}, expected {list(shape)} ({meaning})")


def _units(name: str, array: np.ndarray, axis: int) -> int:
    """``H`` from a ``3H`` axis, refusing axes that do not hold three gates."""
    expect(array.ndim > axis and array.shape[axis] % 3 == 0 and array.shape[axis] > 0,
           GrucShapeError, f"{name} has shape {list(array.shape)}: its dim {axis} must stack "
           f"three gates (a positive multiple of 3)")
    return array.shape[axis] // 3


def _split(array: np.ndarray, order: tuple[str, ...], axis: int) -> dict[str, np.ndarray]:
    """The three equal gate blocks of ``array`` along ``axis``, by gate name."""
    return dict(zip(order, np.split(array, 3, axis=axis)))


def _join(blocks: Mapping[str, np.ndarray], order: tuple[str, ...], axis: int) -> np.ndarray:
    return np.concatenate([blocks[gate] for gate in order], axis=axis)


@dataclass(frozen=True, eq=False)
class GruHostWeights:
    """One GRU layer's weights on the host, in poplibs' layout, gates on dim 0 in ``cell_order``.

    ``input_weights [3, I, H]``, ``output_weights [3, H, H]``, ``biases [3, H]`` (reset-before) or
    ``[3, 2, H]`` (reset-after); the bias shape *is* the reset placement, so a set of weights
    cannot be paired with the wrong formula.  The arrays are read-only copies.
    """

    input_weights: np.ndarray
    output_weights: np.ndarray
    biases: np.ndarray
    cell_order: tuple[str, str, str] = GATES

    def __post_init__(self) -> None:
        order = normalize_cell_order(self.cell_order)
        wi = _array("input_weights", self.input_weights)
        wo = _array("output_weights", self.output_weights)
        b = _array("biases", self.biases)
        expect(wi.ndim == 3 and wi.shape[0] == 3 and min(wi.shape) > 0, GrucShapeError,
               f"input_weights has shape {list(wi.shape)}, expected [3, I, H] (gates on dim 0)")
        i, h = wi.shape[1:]
        _shape_check("output_weights", wo, (3, h, h), f"[3, H, H] with H = {h} from input_weights")
        expect(b.shape in ((3, h), (3, 2, h)), GrucShapeError,
               f"biases has shape {list(b.shape)}, expected [3, {h}] (reset-before) or "
               f"[3, 2, {h}] (reset-after: [g][0] input side, [g][1] recurrent side)")
        for field, value in (("input_weights", wi), ("output_weights", wo), ("biases", b)):
            frozen = np.array(value, copy=True)
            frozen.flags.writeable = False
            object.__setattr__(self, field, frozen)
        object.__setattr__(self, "cell_order", order)

    @property
    def input_size(self) -> int:
        return self.input_weights.shape[1]

    @property
    def hidden_size(self) -> int:
        return self.input_weights.shape[2]

    @property
    def reset_after(self) -> bool:
        return self.biases.ndim == 3

    def gates(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(input [I,H], recurrent [H,H], bias [H] or [2,H])`` blocks keyed by gate name."""
        return tuple({gate: array[k] for k, gate in enumerate(self.cell_order)}
                     for array in (self.input_weights, self.output_weights, self.biases))

    def in_order(self, cell_order: Iterable[str]) -> "GruHostWeights":
        """The same weights with dim 0 in another gate order."""
        order = normalize_cell_order(cell_order)
        return _from_gates(*self.gates(), order)

    def arrays(self) -> dict[str, np.ndarray]:
        """``{"input_weights", "output_weights", "biases"}``: what the layer's tensors take."""
        return {"input_weights": self.input_weights, "output_weights": self.output_weights,
                "biases": self.biases}

    def layer_params(self, *, dtype: Any, batch_size: int, max_time_steps: int,
                     **settings: Any) -> GruParams:
        """The :class:`GruParams` of a layer these weights fit (sizes, reset placement and cell
        order from the weights; anything else, e.g. ``output_full_sequence``, in ``settings``)."""
        for fixed in ("layer_sizes", "reset_after", "cell_order"):
            expect(fixed not in settings, GrucValueError,
                   f"layer_params takes {fixed} from the weights; do not pass it")
        return GruParams(dtype=dtype, batch_size=batch_size, max_time_steps=max_time_steps,
                         layer_sizes=(self.input_size, self.hidden_size),
                         reset_after=self.reset_after, cell_order=self.cell_order, **settings)


def _from_gates(inputs: Mapping[str, np.ndarray], recurrent: Mapping[str, np.ndarray],
                biases: Mapping[str, np.ndarray], cell_order: Iterable[str]) -> GruHostWeights:
    order = normalize_cell_order(cell_order)
    return GruHostWeights(np.stack([inputs[g] for g in order]),
                          np.stack([recurrent[g] for g in order]),
                          np.stack([biases[g] for g in order]), order)


# ---- PyTorch ------------------------------------------------------------------------------------
def _state_dict(source: Any) -> Mapping[str, Any]:
    """A state dict from an ``nn.GRU`` (anything with ``state_dict()``) or a mapping."""
    if hasattr(source, "state_dict") and callable(source.state_dict):
        source = source.state_dict()
    expect(isinstance(source, Mapping), GrucTypeError,
           f"from_torch needs an nn.GRU or its state dict, got {type(source).__name__}")
    return source


def _torch_suffix(layer: int, direction: int) -> str:
    expect(isinstance(layer, (int, np.integer)) and layer >= 0, GrucValueError,
           f"layer must be an integer >= 0, got {layer!r}")
    expect(direction in (0, 1), GrucValueError,
           f"direction must be 0 (forward) or 1 (reverse), got {direction!r}")
    return f"l{layer}" + ("_reverse" if direction == 1 else "")


def from_torch(source: Any, layer: int = 0, direction: int = 0, *,
               cell_order: Iterable[str] = GATES, prefix: str = "") -> GruHostWeights:
    """One layer and direction of a PyTorch ``nn.GRU`` (module or state dict) as host weights.

    ``prefix`` selects the GRU inside a bigger model's state dict (e.g. ``"encoder.rnn."``).  A
    GRU built with ``bias=False`` has no bias entries; its biases are zeros.  Torch's ``[3H, I]``
    rows become ``[I, H]`` blocks (torch multiplies column vectors, poplibs row vectors).
    """
    state = _state_dict(source)
    suffix = _torch_suffix(layer, direction)
    keys = {kind: f"{prefix}{kind}_{suffix}"
            for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
    for kind in ("weight_ih", "weight_hh"):
        if keys[kind] not in state:
            present = sorted(k for k in state if k.startswith(f"{prefix}weight_ih_l"))
            raise GrucValueError(f"no {keys[kind]!r} in the state dict; its GRU weights are "
                                 f"{present or 'none'} (check layer, direction and prefix)")
    w_ih = _array(keys["weight_ih"], state[keys["weight_ih"]])
    w_hh = _array(keys["weight_hh"], state[keys["weight_hh"]])
    expect(w_ih.ndim == 2, GrucShapeError,
           f"{keys['weight_ih']} has shape {list(w_ih.shape)}, expected [3H, I]")
    h = _units(keys["weight_ih"], w_ih, 0)
    _shape_check(keys["weight_hh"], w_hh, (3 * h, h), "[3H, H]: rows r, z, n")
    has_bias = [keys[kind] in state for kind in ("bias_ih", "bias_hh")]
    expect(all(has_bias) or not any(has_bias), GrucValueError,
           f"the state dict has only one of {keys['bias_ih']!r} and {keys['bias_hh']!r}; an "
           f"nn.GRU has both (bias=True) or neither (bias=False)")
    if any(has_bias):
        b_ih = _array(keys["bias_ih"], state[keys["bias_ih"]])
        b_hh = _array(keys["bias_hh"], state[keys["bias_hh"]])
        for kind, bias in (("bias_ih", b_ih), ("bias_hh", b_hh)):
            _shape_check(keys[kind], bias, (3 * h,), "[3H]: r, z, n")
    else:
        b_ih = b_hh = np.zeros(3 * h, dtype=w_ih.dtype)
    inputs = {g: block.T for g, block in _split(w_ih, TORCH_GATES, 0).items()}
    recurrent = {g: block.T for g, block in _split(w_hh, TORCH_GATES, 0).items()}
    bias_in, bias_rec = _split(b_ih, TORCH_GATES, 0), _split(b_hh, TORCH_GATES, 0)
    biases = {g: np.stack([bias_in[g], bias_rec[g]]) for g in TORCH_GATES}
    return _from_gates(inputs, recurrent, biases, cell_order)


def to_torch(weights: GruHostWeights, layer: int = 0, direction: int = 0, *,
             prefix: str = "") -> dict[str, np.ndarray]:
    """State-dict entries (numpy) of one ``nn.GRU`` layer and direction.

    Load them with
    ``module.load_state_dict({k: torch.from_numpy(v) for k, v in ...}, strict=False)``.
    Reset-before weights are refused: ``nn.GRU`` only computes the reset-after formula.
    """
    expect(isinstance(weights, GruHostWeights), GrucTypeError,
           f"to_torch needs GruHostWeights, got {type(weights).__name__}")
    expect(weights.reset_after, GrucValueError,
           "torch.nn.GRU applies the reset gate after the recurrent matmul (reset-after); these "
           f"weights are reset-before (biases {list(weights.biases.shape)}), which no torch "
           "layout represents: use a layer built with reset_after=True")
    suffix = _torch_suffix(layer, direction)
    inputs, recurrent, biases = weights.gates()
    return {
        f"{prefix}weight_ih_{suffix}": _join({g: w.T for g, w in inputs.items()}, TORCH_GATES, 0),
        f"{prefix}weight_hh_{suffix}": _join({g: w.T for g, w in recurrent.items()},
                                             TORCH_GATES, 0),
        f"{prefix}bias_ih_{suffix}": _join({g: b[0] for g, b in biases.items()}, TORCH_GATES, 0),
        f"{prefix}bias_hh_{suffix}": _join({g: b[1] for g, b in biases.items()}, TORCH_GATES, 0),
    }


def from_torch_stack(source: Any, *, cell_order: Iterable[str] = GATES,
                     prefix: str = "") -> tuple[tuple[GruHostWeights, ...], ...]:
    """Every layer and direction of an ``nn.GRU``: ``result[layer][direction]``.

    The number of layers and directions is read from the state dict's keys, as torch names them.
    """
    state = _state_dict(source)
    num_layers = 0
    while f"{prefix}weight_ih_l{num_layers}" in state:
        num_layers += 1
    expect(num_layers > 0, GrucValueError,
           f"no {prefix}weight_ih_l0 in the state dict: not an nn.GRU (keys: {sorted(state)[:8]})")
    directions = 2 if f"{prefix}weight_ih_l0_reverse" in state else 1
    return tuple(tuple(from_torch(state, layer, direction, cell_order=cell_order, prefix=prefix)
                       for direction in range(directions)) for layer in range(num_layers))


def to_torch_stack(weights: Sequence[Sequence[GruHostWeights]], *,
                   prefix: str = "") -> dict[str, np.ndarray]:
    """The whole state dict (numpy) of an ``nn.GRU`` from ``weights[layer][direction]``.

    Refused, by layer, unless one ``nn.GRU`` can load it: at least one layer, every layer with
    the same 1 or 2 directions and hidden size, and each layer after the first taking the
    previous layer's output (directions x hidden size) as its input."""
    expect(len(weights) > 0, GrucValueError, "to_torch_stack needs at least one layer")
    count, hidden = len(weights[0]), None
    state: dict[str, np.ndarray] = {}
    for layer, directions in enumerate(weights):
        expect(len(directions) in (1, 2), GrucValueError,
               f"layer {layer} has {len(directions)} directions; nn.GRU has 1 or 2")
        expect(len(directions) == count, GrucValueError,
               f"layer {layer} has {len(directions)} directions, layer 0 has {count}: an "
               "nn.GRU's layers all have the same")
        for direction, layer_weights in enumerate(directions):
            hidden = layer_weights.hidden_size if hidden is None else hidden
            expect(layer_weights.hidden_size == hidden, GrucShapeError,
                   f"layer {layer} direction {direction} has hidden size "
                   f"{layer_weights.hidden_size}, layer 0 has {hidden}")
            expect(layer == 0 or layer_weights.input_size == count * hidden, GrucShapeError,
                   f"layer {layer} direction {direction} takes {layer_weights.input_size} inputs; "
                   f"after layer {layer - 1} it must take {count} x {hidden}")
            state.update(to_torch(layer_weights, layer, direction, prefix=prefix))
    return state


# ---- Keras --------------------------------------------------------------------------------------
class KerasGruWeights(NamedTuple):
    """A Keras ``GRU`` layer's weights in ``get_weights()`` order, so
    ``layer.set_weights(list(w))`` loads them."""

    kernel: np.ndarray            # [I, 3H], columns z, r, h
    recurrent_kernel: np.ndarray  # [H, 3H]
    bias: np.ndarray              # [2, 3H] (reset_after) or [3H]

    @property
    def reset_after(self) -> bool:
        return self.bias.ndim == 2


def from_keras(kernel: Any, recurrent_kernel: Any, bias: Any = None, *, reset_after: bool = True,
               cell_order: Iterable[str] = GATES) -> GruHostWeights:
    """A Keras ``GRU`` layer's weights (``layer.get_weights()``) as host weights.

    ``reset_after`` is the Keras layer's setting (Keras's default is True); it fixes the bias
    layout, ``[2, 3H]`` or ``[3H]``, which is checked.  ``bias=None`` (``use_bias=False``) gives
    zero biases.
    """
    expect(isinstance(reset_after, (bool, np.bool_)), GrucTypeError,
           f"reset_after must be True or False, got {reset_after!r}")
    k = _array("kernel", kernel)
    rk = _array("recurrent_kernel", recurrent_kernel)
    expect(k.ndim == 2, GrucShapeError, f"kernel has shape {list(k.shape)}, expected [I, 3H]")
    h = _units("kernel", k, 1)
    _shape_check("recurrent_kernel", rk, (h, 3 * h), "[H, 3H]: columns z, r, h")
    bias_shape = (2, 3 * h) if reset_after else (3 * h,)
    if bias is None:
        b = np.zeros(bias_shape, dtype=k.dtype)
    else:
        b = _array("bias", bias)
        _shape_check("bias", b, bias_shape,
                     "reset_after=True: [2, 3H], input side then recurrent side" if reset_after
                     else "reset_after=False: one input-side bias [3H]")
    inputs = _split(k, KERAS_GATES, 1)
    recurrent = _split(rk, KERAS_GATES, 1)
    if reset_after:
        sides = [_split(row, KERAS_GATES, 0) for row in b]
        biases = {g: np.stack([sides[0][g], sides[1][g]]) for g in KERAS_GATES}
    else:
        biases = _split(b, KERAS_GATES, 0)
    return _from_gates(inputs, recurrent, biases, cell_order)


def to_keras(weights: GruHostWeights) -> KerasGruWeights:
    """Keras ``GRU`` weights for a layer with ``reset_after=weights.reset_after`` (both exact)."""
    expect(isinstance(weights, GruHostWeights), GrucTypeError,
           f"to_keras needs GruHostWeights, got {type(weights).__name__}")
    inputs, recurrent, biases = weights.gates()
    if weights.reset_after:
        bias = np.stack([_join({g: b[side] for g, b in biases.items()}, KERAS_GATES, 0)
                         for side in (0, 1)])
    else:
        bias = _join(biases, KERAS_GATES, 0)
    return KerasGruWeights(_join(inputs, KERAS_GATES, 1), _join(recurrent, KERAS_GATES, 1), bias)


# ---- ONNX ---------------------------------------------------------------------------------------
class OnnxGruWeights(NamedTuple):
    """An ONNX ``GRU`` node's weight inputs and the attributes they imply."""

    W: np.ndarray                 # [num_directions, 3H, I], rows z, r, h
    R: np.ndarray                 # [num_directions, 3H, H]
    B: np.ndarray                 # [num_directions, 6H]: Wb (z, r, h) then Rb (z, r, h)
    linear_before_reset: int      # 1: reset-after, 0: reset-before
    direction: str                # "forward" or "bidirectional"
    hidden_size: int


def from_onnx(W: Any, R: Any, B: Any = None, *, linear_before_reset: int = 0, direction: int = 0,
              cell_order: Iterable[str] = GATES) -> GruHostWeights:
    """One direction of an ONNX ``GRU`` node's ``W``, ``R``, ``B`` inputs as host weights.

    ``direction`` indexes dim 0 (0 forward, 1 the reverse half of a bidirectional node).
    ``linear_before_reset=1`` gives reset-after weights with ``[3, 2, H]`` biases;
    ``linear_before_reset=0`` gives reset-before weights whose biases are ``Wb + Rb`` (exact for
    that formula: see the module doc).  A missing ``B`` is zeros, as in ONNX.
    """
    expect(linear_before_reset in (0, 1), GrucValueError,
           f"linear_before_reset must be 0 or 1, got {linear_before_reset!r}")
    w = _array("W", W)
    r = _array("R", R)
    expect(w.ndim == 3, GrucShapeError,
           f"W has shape {list(w.shape)}, expected [num_directions, 3H, I]")
    directions = w.shape[0]
    expect(directions in (1, 2), GrucShapeError,
           f"W has {directions} directions (dim 0 of {list(w.shape)}); ONNX allows 1 or 2")
    expect(isinstance(direction, (int, np.integer)) and 0 <= direction < directions,
           GrucValueError, f"direction {direction!r} is not in 0..{directions - 1} for W of "
           f"shape {list(w.shape)}")
    h = _units("W", w, 1)
    _shape_check("R", r, (directions, 3 * h, h), "[num_directions, 3H, H]: rows z, r, h")
    if B is None:
        b = np.zeros((directions, 6 * h), dtype=w.dtype)
    else:
        b = _array("B", B)
        _shape_check("B", b, (directions, 6 * h), "[num_directions, 6H]: Wb then Rb, each z, r, h")
    inputs = {g: block.T for g, block in _split(w[direction], ONNX_GATES, 0).items()}
    recurrent = {g: block.T for g, block in _split(r[direction], ONNX_GATES, 0).items()}
    input_side, recurrent_side = np.split(b[direction], 2)
    wb, rb = _split(input_side, ONNX_GATES, 0), _split(recurrent_side, ONNX_GATES, 0)
    if linear_before_reset:
        biases = {g: np.stack([wb[g], rb[g]]) for g in ONNX_GATES}
    else:
        biases = {g: wb[g] + rb[g] for g in ONNX_GATES}
    return _from_gates(inputs, recurrent, biases, cell_order)


def to_onnx(weights: GruHostWeights | Sequence[GruHostWeights]) -> OnnxGruWeights:
    """An ONNX ``GRU`` node's ``W``, ``R``, ``B`` for one direction or two (forward, reverse).

    Reset-after weights give ``linear_before_reset=1``; reset-before weights give
    ``linear_before_reset=0`` with their biases as ``Wb`` and ``Rb = 0``.  Both directions of a
    bidirectional node share one ``linear_before_reset`` and one size, so mixed sets are refused.
    """
    layers = [weights] if isinstance(weights, GruHostWeights) else list(weights)
    expect(len(layers) in (1, 2) and all(isinstance(w, GruHostWeights) for w in layers),
           GrucValueError, "to_onnx takes GruHostWeights for 1 or 2 directions, got "
           f"{[type(w).__name__ for w in layers]}")
    first = layers[0]
    for other in layers[1:]:
        expect(other.reset_after == first.reset_after, GrucValueError,
               "the two directions of an ONNX GRU share linear_before_reset; got one reset-after "
               "and one reset-before set of weights")
        expect((other.input_size, other.hidden_size) == (first.input_size, first.hidden_size),
               GrucShapeError, f"the two directions differ in size: (I, H) = "
               f"{(first.input_size, first.hidden_size)} and "
               f"{(other.input_size, other.hidden_size)}")
    w_all, r_all, b_all = [], [], []
    for layer in layers:
        inputs, recurrent, biases = layer.gates()
        w_all.append(_join({g: w.T for g, w in inputs.items()}, ONNX_GATES, 0))
        r_all.append(_join({g: w.T for g, w in recurrent.items()}, ONNX_GATES, 0))
        if layer.reset_after:
            wb = _join({g: b[0] for g, b in biases.items()}, ONNX_GATES, 0)
            rb = _join({g: b[1] for g, b in biases.items()}, ONNX_GATES, 0)
        else:
            wb = _join(biases, ONNX_GATES, 0)
            rb = np.zeros_like(wb)
        b_all.append(np.concatenate([wb, rb]))
    return OnnxGruWeights(np.stack(w_all), np.stack(r_all), np.stack(b_all),
                          int(first.reset_after), ONNX_DIRECTIONS[len(layers)], first.hidden_size)


__all__ = ["TORCH_GATES", "KERAS_GATES", "ONNX_GATES", "GruHostWeights", "KerasGruWeights",
           "OnnxGruWeights", "from_torch", "to_torch", "from_torch_stack", "to_torch_stack",
           "from_keras", "to_keras", "from_onnx", "to_onnx"]
