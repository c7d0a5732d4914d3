"""An independent float64 numpy model of poplibs' GRU layer: the oracle for every device result.

This is the Python counterpart of poplibs' double-precision host reference
(``lib/poplibs_test/Gru.cpp``: ``basicGruCellForwardPass``, ``basicGruCellBackwardPass``,
``basicGruCellParamUpdate``), written straight from the math and independent of gruc's IR.  It
covers everything the device layer offers: both reset placements (``reset_after``), AUGRU
attention, any cell order, per-row or scalar sequence lengths, full-sequence or last-state output,
every activation poplibs' GRU tests use, the backward pass and the weight update.

Conventions (the same as poplibs)
---------------------------------
* Row vectors: ``x_t`` is ``[B, I]``, the state ``h`` is ``[B, H]``, a gate weight is ``[I, H]`` or
  ``[H, H]``, so a gate pre-activation is ``x_t @ Wi[g] + h @ Wh[g] + b[g]``.
* Weights and biases arrive with dim 0 in ``cell_order`` (a permutation of ``"reset"``,
  ``"update"``, ``"candidate"``) and the weight gradients go back in the same order.  Internally,
  and in every intermediates tensor, the gate order is fixed: reset = 0, update = 1, candidate = 2.
* ``reset_after=False`` (arXiv 1406.1078v3)::

      r = σ(x Wi[r] + h Wh[r] + b[r])          u = σ(x Wi[u] + h Wh[u] + b[u])
      c = φ(x Wi[c] + (r ∘ h) Wh[c] + b[c])    h' = u ∘ h + (1 − u) ∘ c

  ``reset_after=True`` (Keras / cuDNN / ``torch.nn.GRU``), biases ``[3, 2, H]`` with ``[g][0]`` the
  input-side and ``[g][1]`` the recurrent-side bias::

      r = σ(x Wi[r] + h Wh[r] + b[r][0] + b[r][1])     (u likewise)
      c = φ(x Wi[c] + b[c][0] + r ∘ (h Wh[c] + b[c][1]))

  AUGRU scales the update gate by the attention score of the row: ``u ← (1 − a[b, t]) · u``.
* Sequence lengths ``len[b]``: at every step ``t ≥ len[b]`` the gates r, u, c and the stored output
  of row ``b`` are zero and its running state is latched (not updated).  The returned last state is
  therefore the state after step ``len[b] − 1``.
* Backward follows poplibs' step recursion (carried state gradient, latching of the carried
  gradient at padded steps), with derivatives computed from the activation *output* like poplibs'
  ``bwdNonLinearity``; see :data:`ACTIVATIONS` for the two places where that is not possible or
  where poplibs is wrong.  ``docs/gru-deviations.md`` lists every deliberate deviation.

Everything here is plain numpy in float64; results are fresh arrays the caller may modify.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from gruc.errors import GrucOptionError, GrucShapeError, GrucTypeError, GrucValueError

__all__ = [
    "ACTIVATIONS", "GATES", "DEFAULT_CELL_ORDER",
    "ForwardResult", "BackwardResult", "WeightGrads", "TrainStepResult", "RandomInputs",
    "forward", "backward", "weight_update", "train_step",
    "activation_forward", "activation_backward", "intermediate_names",
    "normalize_cell_order", "normalize_activation", "normalize_lengths",
    "check_is_close", "close_elements", "default_tolerances", "random_inputs",
]

# ------------------------------------------------------------------------------------------------
# Names
# ------------------------------------------------------------------------------------------------

GATES: tuple[str, str, str] = ("reset", "update", "candidate")
"""The fixed internal gate order (poplibs' ``BasicGruCellUnit``: reset 0, update 1, candidate 2)."""

DEFAULT_CELL_ORDER: tuple[str, str, str] = GATES
"""poplibs' ``getDefaultBasicGruCellOrder()``."""

RESET, UPDATE, CANDIDATE = 0, 1, 2

_GATE_ALIASES = {
    "reset": "reset", "reset_gate": "reset",
    "update": "update", "update_gate": "update",
    "candidate": "candidate", "cell": "candidate",
}

ACTIVATIONS: tuple[str, ...] = ("tanh", "sigmoid", "hard_sigmoid", "relu", "softmax", "gelu")
"""Activation names accepted for ``activation`` and ``recurrent_activation``.

* ``hard_sigmoid`` is ``clamp(0.2·x + 0.5, 0, 1)``; its derivative is 0.2 where the output lies
  strictly inside (0, 1), else 0 (poplibs applies its input-side test ``|x| ≤ 2.5`` to the output,
  which makes the derivative 0.2 everywhere -- a defect not copied here).
* ``softmax`` normalises over the hidden dimension (the innermost axis); backward is the exact
  Jacobian-vector product ``y ∘ g − y · Σ(y ∘ g)``.
* ``gelu`` is the tanh approximation ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``.  Its derivative
  cannot be written in terms of the output, so backward uses the saved pre-activation instead.
"""

_ACTIVATION_ALIASES = {name: name for name in ACTIVATIONS} | {"hardsigmoid": "hard_sigmoid"}

_TOLERANCES = {"float": (0.10, 1e-5), "half": (0.3, 7e-2)}
_DTYPE_ALIASES = {"float": "float", "float32": "float", "f32": "float",
                  "half": "half", "float16": "half", "f16": "half"}


def _name_of(value: Any) -> str | None:
    """A lower-case name for a string or an enum-like object (``.name`` / ``.value``), else None."""
    if isinstance(value, str):
        return value.strip().lower().replace("-", "_")
    for attr in ("value", "name"):
        inner = getattr(value, attr, None)
        if isinstance(inner, str):
            return inner.strip().lower().replace("-", "_")
    return None


def normalize_activation(value: Any, *, what: str = "activation") -> str:
    """Return the canonical activation name for ``value`` or raise :class:`GrucOptionError`."""
    name = _name_of(value)
    if name not in _ACTIVATION_ALIASES:
        raise GrucOptionError(f"unknown {what} {value!r}; allowed: {', '.join(ACTIVATIONS)}")
    return _ACTIVATION_ALIASES[name]


def normalize_cell_order(cell_order: Any) -> tuple[str, str, str]:
    """Return ``cell_order`` as a tuple of canonical gate names, checking it is a permutation."""
    try:
        items = None if isinstance(cell_order, (str, bytes)) else list(cell_order)
    except TypeError:
        items = None
    if items is None:
        raise GrucValueError(f"cell_order {cell_order!r} must be a sequence of three gate "
                             f"names, a permutation of {', '.join(GATES)}")
    names = []
    for item in items:
        name = _name_of(item)
        if name not in _GATE_ALIASES:
            raise GrucValueError(f"unknown gate {item!r} in cell_order {tuple(items)!r}; "
                                 f"allowed gate names: {', '.join(GATES)}")
        names.append(_GATE_ALIASES[name])
    if len(names) != 3 or sorted(names) != sorted(GATES):
        raise GrucValueError(f"cell_order {tuple(items)!r} is not a permutation of "
                             f"{', '.join(GATES)} (each gate exactly once)")
    return tuple(names)  # type: ignore[return-value]


def intermediate_names(*, output_full_sequence: bool, reset_after: bool) -> tuple[str, ...]:
    """Names of the ``k`` slices along dim 1 of the forward intermediates ``[S, k, B, H]``.

    Always ``reset, update, candidate``; then ``output`` (the new state h_t) when the layer does
    not return the full sequence; then ``candidate_recurrent`` (``h_{t-1} Wh[c] + b[c][1]``) with
    ``reset_after`` -- poplibs' ``GRU_FWD_INTERMEDIATE_*`` layout.
    """
    names = ["reset", "update", "candidate"]
    if not output_full_sequence:
        names.append("output")
    if reset_after:
        names.append("candidate_recurrent")
    return tuple(names)


# ------------------------------------------------------------------------------------------------
# Activations: forward from the input, backward from the output (and the input where needed)
# ------------------------------------------------------------------------------------------------

_GELU_K = float(np.sqrt(2.0 / np.pi))
_GELU_A = 0.044715


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Two branches so that neither overflows exp().
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    shifted = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return shifted / np.sum(shifted, axis=-1, keepdims=True)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_GELU_K * (x + _GELU_A * x ** 3)))


def _gelu_grad(x: np.ndarray) -> np.ndarray:
    t = np.tanh(_GELU_K * (x + _GELU_A * x ** 3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _GELU_K * (1.0 + 3.0 * _GELU_A * x * x)


_FORWARD: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "hard_sigmoid": lambda x: np.clip(0.2 * x + 0.5, 0.0, 1.0),
    "relu": lambda x: np.maximum(x, 0.0),
    "softmax": _softmax,
    "gelu": _gelu,
}

# Each backward rule maps (output y, pre-activation x, incoming gradient g) to the input gradient.
_BACKWARD: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "tanh": lambda y, x, g: (1.0 - y * y) * g,
    "sigmoid": lambda y, x, g: y * (1.0 - y) * g,
    "hard_sigmoid": lambda y, x, g: np.where((y > 0.0) & (y < 1.0), 0.2, 0.0) * g,
    "relu": lambda y, x, g: np.where(y > 0.0, g, 0.0),
    "softmax": lambda y, x, g: y * g - y * np.sum(y * g, axis=-1, keepdims=True),
    "gelu": lambda y, x, g: _gelu_grad(x) * g,
}


def activation_forward(name: str, x: np.ndarray) -> np.ndarray:
    """Apply activation ``name`` (one of :data:`ACTIVATIONS`) to ``x`` in float64."""
    return _FORWARD[normalize_activation(name)](np.asarray(x, dtype=np.float64))


def activation_backward(name: str, y: np.ndarray, grad: np.ndarray,
                        x: np.ndarray | None = None) -> np.ndarray:
    """Gradient at the input of activation ``name`` given its output ``y`` and output gradient.

    ``x`` (the pre-activation) is needed only for ``gelu``.
    """
    name = normalize_activation(name)
    if name == "gelu" and x is None:
        raise GrucValueError("the gelu derivative needs the pre-activation x; pass x=")
    y = np.asarray(y, dtype=np.float64)
    return _BACKWARD[name](y, None if x is None else np.asarray(x, np.float64),
                           np.asarray(grad, np.float64))


# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class ForwardResult:
    """Everything a forward pass produced, plus the inputs and settings backward needs."""

    output: np.ndarray
    """``[S, B, H]`` per-step outputs (zero at padded steps) if ``output_full_sequence``, else the
    latched last state ``[B, H]``."""
    intermediates: np.ndarray
    """``[S, k, B, H]`` as poplibs saves them, slices named by :func:`intermediate_names`
    (r, u, c, (h_t), (c_rec)), fixed gate order; every slice is zero at padded steps."""
    last_state: np.ndarray
    """``[B, H]`` the latched final state (equal to ``output`` when not ``output_full_sequence``)."""
    states: np.ndarray
    """``[S + 1, B, H]`` running (latched) state: ``states[t]`` is h_{t-1}, the state step ``t`` reads;
    ``states[0]`` is ``h0`` and ``states[S]`` is ``last_state``."""
    preactivations: np.ndarray
    """``[S, 3, B, H]`` gate pre-activations (r, u, c), unmasked; used for the gelu derivative."""
    update_before_attention: np.ndarray
    """``[S, B, H]`` the update gate before AUGRU's ``(1 − a)`` scaling (equal to the saved update gate
    without attention); masked like the gates.  Kept so backward need not divide by ``1 − a``."""
    # inputs and settings, as validated float64 copies / canonical names
    x: np.ndarray
    h0: np.ndarray
    input_weights: np.ndarray
    output_weights: np.ndarray
    biases: np.ndarray
    cell_order: tuple[str, str, str]
    reset_after: bool
    activation: str
    recurrent_activation: str
    attention: np.ndarray | None
    lengths: np.ndarray
    """``[B]`` int64 per-row sequence lengths (all ``S`` when none were given)."""
    output_full_sequence: bool

    @property
    def seq_len(self) -> int:
        return self.x.shape[0]

    @property
    def batch_size(self) -> int:
        return self.x.shape[1]

    @property
    def input_size(self) -> int:
        return self.x.shape[2]

    @property
    def hidden_size(self) -> int:
        return self.h0.shape[1]

    @property
    def gates(self) -> np.ndarray:
        """``[S, 3, B, H]`` the saved r, u, c (a view of the first three intermediates)."""
        return self.intermediates[:, :3]

    def intermediate(self, name: str) -> np.ndarray:
        """The ``[S, B, H]`` slice of :attr:`intermediates` called ``name``."""
        names = intermediate_names(output_full_sequence=self.output_full_sequence,
                                   reset_after=self.reset_after)
        if name not in names:
            raise GrucValueError(f"no intermediate {name!r} in this layer; it has: {', '.join(names)}")
        return self.intermediates[:, names.index(name)]


@dataclass(frozen=True, eq=False)
class BackwardResult:
    """Gradients of the backward pass (poplibs ``gruBwd`` / ``auGruBwd``)."""

    input_grad: np.ndarray | None
    """``[S, B, I]`` gradient of the input sequence, None unless ``calc_input_gradients``."""
    init_state_grad: np.ndarray
    """``[B, H]`` gradient of the initial state (poplibs' return value / ``lastGradLayerOut``)."""
    bwd_intermediates: np.ndarray
    """``[S, 3, B, H]`` gate pre-activation gradients dr, du, dc in fixed gate order."""
    attention_grad: np.ndarray | None
    """``[B, S]`` gradient of the attention scores (AUGRU only, else None)."""


@dataclass(frozen=True, eq=False)
class WeightGrads:
    """Weight gradients in cell order, summed over time and batch (poplibs ``gruWU``)."""

    input_weights: np.ndarray
    """``[3, I, H]``."""
    output_weights: np.ndarray
    """``[3, H, H]``."""
    biases: np.ndarray
    """``[3, H]``, or ``[3, 2, H]`` with ``reset_after`` (recurrent-side grads in ``[:, 1, :]``)."""


@dataclass(frozen=True, eq=False)
class TrainStepResult:
    """What :func:`train_step` returns."""

    forward: ForwardResult
    backward: BackwardResult
    weight_grads: WeightGrads


# ------------------------------------------------------------------------------------------------
# Validation helpers
# ------------------------------------------------------------------------------------------------

def _as_float64(name: str, value: Any) -> np.ndarray:
    """A fresh float64 copy of ``value`` (so later changes by the caller cannot leak in)."""
    if np.iscomplexobj(value):
        raise GrucTypeError(f"{name} must be real; got a complex array")
    try:
        return np.array(value, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise GrucTypeError(f"{name} must be a real numeric array; got {type(value).__name__} "
                            f"({exc})") from None


def _expect_shape(name: str, arr: np.ndarray, shape: tuple[int, ...], meaning: str) -> None:
    if arr.shape != shape:
        raise GrucShapeError(f"{name} has shape {list(arr.shape)}; expected {list(shape)} "
                             f"({meaning})")


def normalize_lengths(lengths: Any, seq_len: int, batch_size: int) -> np.ndarray:
    """Return per-row lengths ``[B]`` (int64) from None, an int, or an array of size ``B`` or 1.

    Every length must lie in ``1 .. seq_len``.
    """
    if lengths is None:
        return np.full(batch_size, seq_len, dtype=np.int64)
    arr = np.asarray(lengths)
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer)
                                     or np.issubdtype(arr.dtype, np.floating)):
        raise GrucTypeError(f"lengths {lengths!r} must be an int or integer array "
                            f"(dtype {arr.dtype} given)")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise GrucValueError(f"lengths {arr.tolist()!r} must be whole numbers in 1..{seq_len}")
    if arr.ndim > 1 or (arr.ndim == 1 and arr.size not in (1, batch_size)):
        raise GrucShapeError(f"lengths has shape {list(arr.shape)}; expected a scalar, [1] or "
                             f"[{batch_size}] (one length per batch row)")
    flat = arr.reshape(-1).astype(np.int64)
    bad = flat[(flat < 1) | (flat > seq_len)]
    if bad.size:
        raise GrucValueError(f"sequence length {int(bad[0])} out of range; lengths must lie in "
                             f"1..{seq_len} (the sequence size); got {flat.tolist()}")
    return np.broadcast_to(flat, (batch_size,)).copy()


def _as_bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise GrucTypeError(f"{name} must be a bool; got {value!r}")
    return bool(value)


# ------------------------------------------------------------------------------------------------
# Forward
# ------------------------------------------------------------------------------------------------

def forward(x, h0, input_weights, output_weights, biases, *,
            cell_order: Sequence[str] = DEFAULT_CELL_ORDER, reset_after: bool = False,
            activation: str = "tanh", recurrent_activation: str = "sigmoid",
            attention=None, lengths=None, output_full_sequence: bool = True) -> ForwardResult:
    """Run the GRU layer forward in float64 (poplibs ``gruFwd`` / ``auGruFwd`` with intermediates).

    Shapes: ``x [S, B, I]``, ``h0 [B, H]``, ``input_weights [3, I, H]``, ``output_weights [3, H, H]``,
    ``biases [3, H]`` (``[3, 2, H]`` with ``reset_after``), ``attention [B, S]`` or None,
    ``lengths`` None / int / ``[B]`` / ``[1]``.  Weights and biases are in ``cell_order``.
    """
    order = normalize_cell_order(cell_order)
    reset_after = _as_bool("reset_after", reset_after)
    output_full_sequence = _as_bool("output_full_sequence", output_full_sequence)
    act = normalize_activation(activation, what="activation")
    ract = normalize_activation(recurrent_activation, what="recurrent_activation")

    x = _as_float64("x", x)
    if x.ndim != 3 or min(x.shape) < 1:
        raise GrucShapeError(f"x has shape {list(x.shape)}; expected [S, B, I] with every size >= 1")
    S, B, I = x.shape
    h0 = _as_float64("h0", h0)
    if h0.ndim != 2 or h0.shape[0] != B or h0.shape[1] < 1:
        raise GrucShapeError(f"h0 has shape {list(h0.shape)}; expected [B, H] = [{B}, H] with "
                             f"B taken from x {list(x.shape)}")
    H = h0.shape[1]
    wi = _as_float64("input_weights", input_weights)
    _expect_shape("input_weights", wi, (3, I, H), "[3, I, H] in cell order")
    wh = _as_float64("output_weights", output_weights)
    _expect_shape("output_weights", wh, (3, H, H), "[3, H, H] in cell order")
    b = _as_float64("biases", biases)
    if reset_after:
        _expect_shape("biases", b, (3, 2, H),
                      "[3, 2, H] with reset_after: [g][0] input side, [g][1] recurrent side")
    else:
        _expect_shape("biases", b, (3, H), "[3, H] without reset_after")
    att = None
    if attention is not None:
        att = _as_float64("attention", attention)
        _expect_shape("attention", att, (B, S), "[B, S] attention scores")
    limits = normalize_lengths(lengths, S, B)

    # Internal gate order: perm[g] is the cell-order position holding internal gate g.
    perm = [order.index(g) for g in GATES]
    Wi, Wh = wi[perm], wh[perm]
    if reset_after:
        b_in, b_rec = b[perm, 0], b[perm, 1]
    else:
        b_in, b_rec = b[perm], np.zeros((3, H))
    sigma, phi = _FORWARD[ract], _FORWARD[act]

    states = np.empty((S + 1, B, H))
    states[0] = h0
    gates = np.zeros((S, 3, B, H))
    pre = np.zeros((S, 3, B, H))
    u_raw = np.zeros((S, B, H))
    outputs = np.zeros((S, B, H))
    c_rec_all = np.zeros((S, B, H))
    h = h0
    for t in range(S):
        xt = x[t]
        valid = (t < limits)[:, None]                       # [B, 1]
        pre_r = xt @ Wi[RESET] + h @ Wh[RESET] + b_in[RESET] + b_rec[RESET]
        pre_u = xt @ Wi[UPDATE] + h @ Wh[UPDATE] + b_in[UPDATE] + b_rec[UPDATE]
        r = sigma(pre_r)
        u0 = sigma(pre_u)
        u = u0 if att is None else (1.0 - att[:, t:t + 1]) * u0
        if reset_after:
            c_rec = h @ Wh[CANDIDATE] + b_rec[CANDIDATE]
            pre_c = xt @ Wi[CANDIDATE] + b_in[CANDIDATE] + r * c_rec
        else:
            c_rec = None
            pre_c = xt @ Wi[CANDIDATE] + (r * h) @ Wh[CANDIDATE] + b_in[CANDIDATE]
        c = phi(pre_c)
        h_new = u * h + (1.0 - u) * c

        pre[t] = pre_r, pre_u, pre_c
        gates[t] = np.where(valid, r, 0.0), np.where(valid, u, 0.0), np.where(valid, c, 0.0)
        u_raw[t] = np.where(valid, u0, 0.0)
        outputs[t] = np.where(valid, h_new, 0.0)
        if c_rec is not None:
            c_rec_all[t] = np.where(valid, c_rec, 0.0)
        h = np.where(valid, h_new, h)                       # latch finished rows
        states[t + 1] = h

    parts = [gates]
    if not output_full_sequence:
        parts.append(outputs[:, None])
    if reset_after:
        parts.append(c_rec_all[:, None])
    intermediates = np.concatenate(parts, axis=1)
    last = states[S].copy()
    return ForwardResult(
        output=outputs if output_full_sequence else last.copy(),
        intermediates=intermediates, last_state=last, states=states, preactivations=pre,
        update_before_attention=u_raw, x=x, h0=h0, input_weights=wi, output_weights=wh,
        biases=b, cell_order=order, reset_after=reset_after, activation=act,
        recurrent_activation=ract, attention=att, lengths=limits,
        output_full_sequence=output_full_sequence)


# ------------------------------------------------------------------------------------------------
# Backward
# ------------------------------------------------------------------------------------------------

def _internal_weights(fwd: ForwardResult):
    perm = [fwd.cell_order.index(g) for g in GATES]
    return fwd.input_weights[perm], fwd.output_weights[perm]


def backward(fwd: ForwardResult, grad_output, *, calc_input_gradients: bool = True) -> BackwardResult:
    """Back-propagate ``grad_output`` through the layer (poplibs ``gruBwd`` / ``auGruBwd``).

    ``grad_output`` is ``[S, B, H]`` when the forward returned the full sequence, else ``[B, H]``
    (the gradient of the latched last state).  Gradients arriving for padded outputs are ignored,
    since those outputs are constant zeros.
    """
    if not isinstance(fwd, ForwardResult):
        raise GrucTypeError(f"backward needs the ForwardResult of forward(); got {type(fwd).__name__}")
    calc_input_gradients = _as_bool("calc_input_gradients", calc_input_gradients)
    S, B, I, H = fwd.seq_len, fwd.batch_size, fwd.input_size, fwd.hidden_size
    g_out = _as_float64("grad_output", grad_output)
    if fwd.output_full_sequence:
        _expect_shape("grad_output", g_out, (S, B, H), "[S, B, H]: output_full_sequence is on")
    else:
        _expect_shape("grad_output", g_out, (B, H),
                      "[B, H]: output_full_sequence is off, so the output is the last state")

    Wi, Wh = _internal_weights(fwd)
    sigma_b, phi_b = _BACKWARD[fwd.recurrent_activation], _BACKWARD[fwd.activation]
    att = fwd.attention
    d_gates = np.zeros((S, 3, B, H))
    dx_all = np.zeros((S, B, I)) if calc_input_gradients else None
    d_att = np.zeros((B, S)) if att is not None else None
    c_rec_index = 3 + (not fwd.output_full_sequence)

    gh = np.zeros((B, H))                                   # gradient carried into state h_t
    for t in reversed(range(S)):
        valid = (t < fwd.lengths)[:, None]
        if fwd.output_full_sequence:
            g_t = g_out[t]
        else:
            g_t = g_out if t == S - 1 else np.zeros((B, H))
        dh = g_t + gh
        h_prev = fwd.states[t]
        r, u, c = fwd.intermediates[t, :3]                   # fixed order: reset, update, candidate
        u0 = fwd.update_before_attention[t]
        pre_r, pre_u, pre_c = fwd.preactivations[t]

        dc = np.where(valid, phi_b(c, pre_c, (1.0 - u) * dh), 0.0)
        gu = (h_prev - c) * dh
        if att is not None:
            a = att[:, t:t + 1]
            d_att[:, t] = np.where(valid[:, 0], -np.sum(u0 * gu, axis=1), 0.0)
            gu = (1.0 - a) * gu
        du = np.where(valid, sigma_b(u0, pre_u, gu), 0.0)
        if fwd.reset_after:
            c_rec = fwd.intermediates[t, c_rec_index]
            dr = sigma_b(r, pre_r, dc * c_rec)
            dh_via_c = (dc * r) @ Wh[CANDIDATE].T
        else:
            dhr = dc @ Wh[CANDIDATE].T
            dr = sigma_b(r, pre_r, dhr * h_prev)
            dh_via_c = dhr * r
        dr = np.where(valid, dr, 0.0)

        d_gates[t] = dr, du, dc
        if dx_all is not None:
            dx_all[t] = dr @ Wi[RESET].T + du @ Wi[UPDATE].T + dc @ Wi[CANDIDATE].T
        dh_prev = dh * u + dr @ Wh[RESET].T + du @ Wh[UPDATE].T + dh_via_c
        # A padded step copies the state through unchanged; only the gradient of the carried
        # state (and, for the last-state output, its incoming gradient) passes through it.
        passthrough = gh if fwd.output_full_sequence else dh
        gh = np.where(valid, dh_prev, passthrough)

    return BackwardResult(input_grad=dx_all, init_state_grad=gh, bwd_intermediates=d_gates,
                          attention_grad=d_att)


# ------------------------------------------------------------------------------------------------
# Weight update
# ------------------------------------------------------------------------------------------------

def weight_update(fwd: ForwardResult, bwd: BackwardResult) -> WeightGrads:
    """Weight and bias gradients (poplibs ``gruWU``), summed over steps and batch, in cell order.

    Only ``bwd.bwd_intermediates`` ([S, 3, B, H] dr, du, dc) is read from ``bwd``.
    """
    if not isinstance(fwd, ForwardResult):
        raise GrucTypeError(f"weight_update needs a ForwardResult; got {type(fwd).__name__}")
    S, B, H = fwd.seq_len, fwd.batch_size, fwd.hidden_size
    d = _as_float64("bwd_intermediates", getattr(bwd, "bwd_intermediates", None))
    _expect_shape("bwd_intermediates", d, (S, 3, B, H), "[S, 3, B, H]: dr, du, dc")
    dr, du, dc = d[:, RESET], d[:, UPDATE], d[:, CANDIDATE]
    x, h_prev = fwd.x, fwd.states[:S]
    r = fwd.intermediates[:, RESET]

    def outer(a, g):                                    # sum_t a_t^T g_t
        return np.einsum("tbi,tbh->ih", a, g)

    dWi = np.stack([outer(x, dr), outer(x, du), outer(x, dc)])
    if fwd.reset_after:
        dWh = np.stack([outer(h_prev, dr), outer(h_prev, du), outer(h_prev, dc * r)])
        db = np.stack([
            np.stack([dr.sum((0, 1)), dr.sum((0, 1))]),
            np.stack([du.sum((0, 1)), du.sum((0, 1))]),
            np.stack([dc.sum((0, 1)), (dc * r).sum((0, 1))]),
        ])
    else:
        dWh = np.stack([outer(h_prev, dr), outer(h_prev, du), outer(h_prev * r, dc)])
        db = np.stack([dr.sum((0, 1)), du.sum((0, 1)), dc.sum((0, 1))])

    # Back to cell order: position i holds the gate named cell_order[i].
    idx = [GATES.index(g) for g in fwd.cell_order]
    return WeightGrads(input_weights=dWi[idx], output_weights=dWh[idx], biases=db[idx])


def train_step(x, h0, input_weights, output_weights, biases, grad_output, *,
               cell_order: Sequence[str] = DEFAULT_CELL_ORDER, reset_after: bool = False,
               activation: str = "tanh", recurrent_activation: str = "sigmoid",
               attention=None, lengths=None, output_full_sequence: bool = True,
               calc_input_gradients: bool = True) -> TrainStepResult:
    """Forward, backward and weight update in one call (poplibs ``gruBwdWithWU`` after ``gruFwd``)."""
    fwd = forward(x, h0, input_weights, output_weights, biases, cell_order=cell_order,
                  reset_after=reset_after, activation=activation,
                  recurrent_activation=recurrent_activation, attention=attention,
                  lengths=lengths, output_full_sequence=output_full_sequence)
    bwd = backward(fwd, grad_output, calc_input_gradients=calc_input_gradients)
    return TrainStepResult(forward=fwd, backward=bwd, weight_grads=weight_update(fwd, bwd))


# ------------------------------------------------------------------------------------------------
# Comparison rule and test data (poplibs_test Util.cpp / gru_layer.cpp)
# ------------------------------------------------------------------------------------------------

def default_tolerances(dtype_name: Any) -> tuple[float, float]:
    """poplibs' ``gru_layer`` default ``(rel_tol, abs_tol)``: float (0.10, 1e-5), half (0.3, 7e-2)."""
    name = _name_of(dtype_name)
    if name not in _DTYPE_ALIASES:
        raise GrucValueError(f"no default tolerances for element type {dtype_name!r}; "
                             f"allowed: float, half")
    return _TOLERANCES[_DTYPE_ALIASES[name]]


def close_elements(actual, expected, rel_tol: float, abs_tol: float, *,
                   name: str = "value") -> np.ndarray:
    """Which elements pass poplibs' ``checkIsClose`` (the rules :func:`check_is_close` lists),
    as a boolean array of their shape."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        raise GrucShapeError(f"check_is_close: {name} actual shape {list(a.shape)} differs from "
                             f"expected shape {list(e.shape)}")
    if not (rel_tol >= 0 and abs_tol >= 0):
        raise GrucValueError(f"tolerances must be >= 0; got rel_tol={rel_tol!r}, abs_tol={abs_tol!r}")
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - e)
        finite = np.isfinite(a) & np.isfinite(e)
        ok = (a == e) | (np.isnan(a) & np.isnan(e))
        ok |= finite & (np.abs(a) < rel_tol) & (np.abs(e) < rel_tol)
        ok |= finite & (diff <= rel_tol * np.abs(a)) & (diff <= rel_tol * np.abs(e))
        ok |= finite & (diff <= abs_tol)
    return ok


def check_is_close(actual, expected, rel_tol: float, abs_tol: float, *,
                   name: str = "value", max_reported: int = 20) -> tuple[bool, list[str]]:
    """poplibs' ``checkIsClose``: compare element-wise, return ``(ok, first mismatches)``.

    An element pair ``(a, e)`` passes if any of these holds:

    1. ``a == e`` (this includes equal infinities);
    2. both are NaN;
    3. both magnitudes are below ``rel_tol`` (boost's ``small_with_tolerance`` -- loose by design:
       with the float default any two values under 0.1 pass);
    4. ``|a − e| ≤ rel_tol·|a|`` and ``|a − e| ≤ rel_tol·|e|`` (boost's strong
       ``close_at_tolerance``);
    5. ``|a − e| ≤ abs_tol``.

    A NaN on one side only, or unequal infinities, always fail.  The list holds one line per
    failing element for the first ``max_reported`` (20, as poplibs prints) of them, in C order.
    """
    ok = close_elements(actual, expected, rel_tol, abs_tol, name=name)
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    bad = np.argwhere(np.atleast_1d(~ok))
    lines = []
    for index in bad[:max_reported]:
        key = tuple(int(i) for i in index)
        av, ev = float(np.atleast_1d(a)[key]), float(np.atleast_1d(e)[key])
        lines.append(f"mismatch on {name}{list(key)}: actual {av!r}, expected {ev!r}, "
                     f"|diff| {abs(av - ev)!r} (rel_tol {rel_tol}, abs_tol {abs_tol})")
    return bool(np.all(ok)), lines


@dataclass(frozen=True, eq=False)
class RandomInputs:
    """Host data with poplibs' ``gru_layer`` distributions, as float64 arrays."""

    x: np.ndarray                 # [S, B, I]  U[-4, 4]
    h0: np.ndarray                # [B, H]     U[-3, 3]
    input_weights: np.ndarray     # [3, I, H]  U[-1, 1]
    output_weights: np.ndarray    # [3, H, H]  U[-1, 1]
    biases: np.ndarray            # [3, H] or [3, 2, H]  U[-1, 1]
    attention: np.ndarray | None  # [B, S]     U[0, 1]  (AUGRU only)
    lengths: np.ndarray | None    # [B]        U{1..S}  (random_lengths only)
    grad_output: np.ndarray       # [S, B, H] or [B, H]  U[-2, 2]

    def forward_kwargs(self) -> dict[str, Any]:
        """The data arguments of :func:`forward` (add the settings yourself)."""
        return dict(x=self.x, h0=self.h0, input_weights=self.input_weights,
                    output_weights=self.output_weights, biases=self.biases,
                    attention=self.attention, lengths=self.lengths)


HALF_ATTENTION_CEILING = 1 - 2 ** -7
"""The largest attention score :func:`random_inputs` draws for half data.  The device's AUGRU
backward recovers the update gate before attention as ``u / (1 - a)`` (as poplibs does, see
``docs/gru-deviations.md``), which multiplies the half rounding of ``u`` (2^-11) by ``1 / (1 - a)``:
a score that rounds to 1 gives no finite gradient, one of 0.9995 an error of 100 %.  Capped at
1 - 2^-7 the error stays within 2^-4 (drawn up to 1, 2 of 40 seeds of the default AUGRU layer
failed poplibs' half tolerances; capped, none)."""


def random_inputs(S: int, B: int, I: int, H: int, *, reset_after: bool = False,
                  attention: bool = False, output_full_sequence: bool = True,
                  random_lengths: bool = False, round_to: str | None = None,
                  seed: int = 1002, weights_range: float = 1.0) -> RandomInputs:
    """Random layer data drawn like poplibs' ``gru_layer`` (MT19937 seeded ``seed``).

    Values are float64; ``round_to="float"`` or ``"half"`` rounds them to that device type first
    (as ``gru_layer`` does), so a device run and the reference see the same numbers, and keeps
    attention scores below 1 in that type: at most :data:`HALF_ATTENTION_CEILING` for half.  The
    values are not bit-identical to poplibs' (different generator plumbing); the distributions
    are.  Weights and biases are poplibs' draws scaled by ``weights_range`` (the same stream of
    numbers whatever the range).
    """
    for label, size in (("S", S), ("B", B), ("I", I), ("H", H)):
        if not isinstance(size, (int, np.integer)) or size < 1:
            raise GrucValueError(f"{label} must be a positive int; got {size!r}")
    rng = np.random.Generator(np.random.MT19937(seed))
    x = rng.uniform(-4.0, 4.0, (S, B, I))
    h0 = rng.uniform(-3.0, 3.0, (B, H))
    wi = weights_range * rng.uniform(-1.0, 1.0, (3, I, H))
    wh = weights_range * rng.uniform(-1.0, 1.0, (3, H, H))
    if reset_after:
        biases = np.stack([rng.uniform(-1.0, 1.0, (3, H)), rng.uniform(-1.0, 1.0, (3, H))], axis=1)
    else:
        biases = rng.uniform(-1.0, 1.0, (3, H))
    biases = weights_range * biases
    lens = rng.integers(1, S + 1, B).astype(np.int64) if random_lengths else None
    att = rng.uniform(0.0, 1.0, (B, S)) if attention else None
    grad = rng.uniform(-2.0, 2.0, (S, B, H) if output_full_sequence else (B, H))
    if round_to is not None:
        kind = _DTYPE_ALIASES.get(_name_of(round_to) or "")
        if kind is None:
            raise GrucValueError(f"round_to {round_to!r} unknown; allowed: float, half, None")
        store = np.float32 if kind == "float" else np.float16

        def rnd(a):
            return None if a is None else a.astype(store).astype(np.float64)

        x, h0, wi, wh, biases, att, grad = map(rnd, (x, h0, wi, wh, biases, att, grad))
        if att is not None:
            att = np.minimum(att, HALF_ATTENTION_CEILING if kind == "half"
                             else float(np.nextafter(store(1), store(0))))
    return RandomInputs(x=x, h0=h0, input_weights=wi, output_weights=wh, biases=biases,
                        attention=att, lengths=lens, grad_output=grad)

