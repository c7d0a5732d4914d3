"""The GRU backward pass and weight update (port of poplibs' ``gruBwd``, ``auGruBwd``, ``gruWU``,
``auGruWU``, ``gruBwdWithWU`` and ``auGruBwdWithWU``).

Backward is a second time loop over the layer, run in reverse by the generic RNN builder
(:func:`gruc.ops.rnn.rnn` with ``reverse=True``).  Its state is the gradient carried into the
previous step's output (and, when the weight update is interleaved, the bias-gradient
accumulator); each step slices the saved forward intermediates r, u, c, (h), (c_rec), the
previous output ``h_{t-1}`` (the forward output shifted one step by
:func:`~gruc.ops.rnn.shift_rnn_tensor`) and the incoming output gradient, and produces the gate
gradients dr, du, dc, the input gradient and, for AUGRU, the attention gradient.  The math is
``docs/poplibs-notes.md`` §2.4 and :func:`gruc.popnn.gru_reference.backward`, which every result
here is checked against:

* ``dh = g_t + gh``; ``dc = φ'(c) ∘ (1 − u) ∘ dh``; ``du = σ'(u) ∘ (h_{t-1} − c) ∘ dh`` (AUGRU: the
  derivative is taken at the pre-attention gate ``u0 = u / (1 − a)``, the gradient scaled by
  ``1 − a``, and ``da = −Σ_h u0 ∘ (h_{t-1} − c) ∘ dh``);
* reset-before: ``[dx₂ | dhr] = dc · [Wi_c; Wh_c]ᵀ``, ``dr = σ'(r) ∘ dhr ∘ h_{t-1}``,
  ``[dx₁ | dh₁] = [dr, du] · [Wi_ru; Wh_ru]ᵀ``, ``dh_{t-1} = dhr ∘ r + dh ∘ u + dh₁``;
* reset-after: ``dr = σ'(r) ∘ dc ∘ c_rec``, ``dh_{t-1} = dh ∘ u + [dr, du, dc ∘ r] · Whᵀ``,
  ``dx = [dr, du, dc] · Wiᵀ``.

Why it is built this way (poplibs' reasons, kept):

* **Weights are transposed and pre-arranged once**, before the loop
  (``pre_arrange_mat_mul_input_rhs``: block by block on their own tiles where poplin's
  ``fullyConnectedWeightTranspose`` would, else copied into the per-step products' layout), so
  no step pays for it; without input gradients the input half is left out altogether.
* **Each step's elementwise work is a few fused vertices.**  An expression over operands of one
  shape becomes one vertex per tile; the per-row mask and the AUGRU ``1 − a`` are therefore
  broadcast once per step into ``[B, H]`` tensors, after which every map of the step fuses.
  Activation derivatives come from :func:`gruc.ops.nonlinearity.gradient_expression` (from the
  activation *output*), substituted into the step's expression; softmax, which needs a
  reduction, goes through :func:`~gruc.ops.nonlinearity.non_linearity_input_gradient`.
* **The weight update accumulates as it goes**: ``C += Aᵀ · dG`` (``mat_mul_acc``) into
  accumulators laid out like the weights, and the bias gradients keep their batch axis until the
  end, where one reduction per bias tensor sums it (a reduction per step would cost more than the
  step's additions).  The bias accumulator is carried as loop state, so each shard adds into a
  copy on its own tiles.
* **Interleaving** (``gru_bwd_with_wu``): accumulating inside the backward loop needs the
  transposed weights, ``3·H·(I + H)`` elements; a separate reverse loop afterwards needs the saved
  gate gradients, ``3·B·H·S``.  poplibs picks the smaller — inside iff ``I + H ≤ B·S``
  (:func:`interleaved_wu_is_beneficial`).

Recomputation (the ``recomputationMode`` option, given to the forward and the backward alike).
With ``full`` the forward saves no gates, and each backward step (and each step of a separate
weight-update loop, which needs the reset gate) first builds the forward step again from
``h_{t-1}`` and ``x_t`` with the forward's own cell, masked as the forward saves it: the same
vertices and plans, so the gradients are bit-identical to a saving layer's, for the cost of a
second forward pass and no ``[S, k, B, H]`` intermediates.

Sequence lengths.  With a scalar length the loops stop early; with per-row lengths every gate
gradient (dr, du, dc) is zero at a row's padded steps and the carried gradient is latched there,
as the reference does (poplibs masks only dc, which leaks a gradient through tanh and its
hard-sigmoid — ``docs/gru-deviations.md``).  Everything these builders return is zero at steps a
scalar length leaves out.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from gruc.errors import GrucValueError, expect
from gruc.ir import expr as ex
from gruc.ir.graph import Graph
from gruc.ir.program import Copy, Sequence, WriteUndef
from gruc.ir.tensor import Tensor, concat
from gruc.ops.elementwise import map, map_in_place, map_with_output, zero
from gruc.ops.matmul import mat_mul, mat_mul_acc, pre_arrange_mat_mul_input_rhs
from gruc.ops.nonlinearity import (NonLinearity, gradient_expression, non_linearity_input_gradient,
                                   non_linearity_of)
from gruc.ops.reduce import Operation, reduce, reduce_with_output
from gruc.ops.rnn import (RnnSlice, TimeStep, create_input_tensor, create_output_tensor, rnn,
                          shift_rnn_tensor)
from gruc.ops.rnn import create_initial_state as create_rnn_state
from gruc.rnn_geometry import code_reuse_default
from gruc.popnn.gru_params import (Activation, GruOptions, GruParams, GruWeights,
                                   RecomputationMode, check_in_graph, check_layer_args,
                                   check_tensor, check_weights, require_attention,
                                   saved_intermediates, weights_in_order)
from gruc.types import FLOAT, HALF, DType

__all__ = ["GruGradients", "interleaved_wu_is_beneficial", "gru_bwd", "au_gru_bwd", "gru_wu",
           "au_gru_wu", "gru_bwd_with_wu", "au_gru_bwd_with_wu"]


class GruGradients(NamedTuple):
    """What the backward and weight-update builders compute; a field is None when the builder
    does not compute it."""

    init_state_grad: Tensor | None
    """``[B, H]`` gradient of the initial state (None from ``gru_wu``)."""
    input_grad: Tensor | None
    """``[S, B, I]``; only when ``params.calc_input_gradients``."""
    bwd_intermediates: Tensor | None
    """``[S, 3, B, H]`` gate gradients dr, du, dc (fixed gate order); only from ``gru_bwd`` /
    ``au_gru_bwd`` with ``save_bwd_intermediates``."""
    weights_grad: GruWeights | None
    """Weight and bias gradients, gates on dim 0 in ``params.cell_order``; from the ``wu``
    builders."""
    attentions_grad: Tensor | None
    """``[B, S]`` gradient of the AUGRU attention scores."""


def interleaved_wu_is_beneficial(params: GruParams) -> bool:
    """poplibs' ``interleavedWUIsBeneficial``: the transposed weights (``3·H·(I + H)`` elements)
    are no bigger than the gate gradients a separate update would keep (``3·B·H·S``)."""
    return params.input_size + params.hidden_size <= params.batch_size * params.max_time_steps


# ---- expressions ---------------------------------------------------------------------------------
class _Terms:
    """The operands of one fused expression: each distinct tensor gets one placeholder.  For a half
    layer every operand is read as float, so the whole tree is evaluated in float and rounded to
    half once (:meth:`result`)."""

    def __init__(self, dtype: DType) -> None:
        self.dtype = dtype
        self.tensors: list[Tensor] = []

    def __call__(self, tensor: Tensor) -> ex.Expr:
        index = next((k for k, known in enumerate(self.tensors) if known is tensor), None)
        if index is None:
            self.tensors.append(tensor)
            index = len(self.tensors) - 1
        holder = ex.PlaceHolder(index + 1)
        return ex.Cast(holder, FLOAT) if self.dtype is HALF else holder

    def result(self, value: ex.Expr) -> ex.Expr:
        return ex.Cast(value, HALF) if self.dtype is HALF else value


def _substitute(expression: ex.Expr, values: dict[int, ex.Expr]) -> ex.Expr:
    """``expression`` with placeholder ``_k`` replaced by ``values[k]``."""
    if isinstance(expression, ex.PlaceHolder):
        return values[expression.index]
    kids = ex.children(expression)
    if not kids:
        return expression
    return ex.with_children(expression, [_substitute(kid, values) for kid in kids])


_GradientOf = Callable[[_Terms], ex.Expr]
"""Builds the gradient arriving at an activation's output, taking its tensors from the terms."""


# ---- weights -------------------------------------------------------------------------------------
class _TransposedWeights(NamedTuple):
    """The weights as the backward products consume them, pre-arranged (internal gate order)."""

    ru: Tensor | None        # [2H, (I+)H]  reset-before: reset and update gates
    c: Tensor | None         # [H, (I+)H]   reset-before: candidate
    inputs: Tensor | None    # [3H, I]      reset-after, only with input gradients
    outputs: Tensor | None   # [3H, H]      reset-after


def _pre_arrange(graph: Graph, params: GruParams, weights: GruWeights, mm: dict, prog: Sequence,
                 name: str) -> _TransposedWeights:
    """The weights transposed once for the per-step products (``pre_arrange_mat_mul_input_rhs``:
    transposed on their tiles, or copied into the products' layout)."""
    forward = _internal_weights(params, weights)
    b, i = params.batch_size, params.input_size
    skip = 0 if params.calc_input_gradients else i  # rows of the input weights, when unused

    def arrange(weights_t: Tensor, what: str) -> Tensor:
        return pre_arrange_mat_mul_input_rhs(graph, (b, weights_t.dim(0)), weights_t, prog, mm,
                                             f"{name}/{what}")

    if params.reset_after:
        return _TransposedWeights(
            None, None, arrange(forward.inputs.transpose(), "inputs_t")
            if params.calc_input_gradients else None, arrange(forward.outputs.transpose(),
                                                              "outputs_t"))
    return _TransposedWeights(arrange(forward.ru[skip:].transpose(), "ru_t"),
                              arrange(forward.c[skip:].transpose(), "c_t"), None, None)


# ---- weight update -------------------------------------------------------------------------------
class _Accumulators:
    """The weight update's sums (poplibs ``createWeightAccumulators`` / ``basicGruParamUpdate`` /
    ``basicGruParamUpdateFinal``): weight accumulators laid out like the weights, and the shape of
    the bias accumulator, which the loop carries as state with its batch axis."""

    def __init__(self, graph: Graph, params: GruParams, weights: GruWeights,
                 options: GruOptions, prog: Sequence, name: str) -> None:
        self.graph, self.params, self.name = graph, params, name
        self.mm = options.matmul_options("TRAINING_WU")
        self.biases = weights_in_order(weights, params.cell_order, to_internal=True).biases
        forward = _internal_weights(params, weights)
        if params.reset_after:   # [I, 3H], [H, 3H]
            self.sums = [graph.clone(forward.inputs, f"{name}/inputs_acc"),
                         graph.clone(forward.outputs, f"{name}/outputs_acc")]
        else:                    # [I+H, 2H], [I+H, H]
            self.sums = [graph.clone(forward.ru, f"{name}/ru_acc"),
                         graph.clone(forward.c, f"{name}/c_acc")]
        zero(graph, concat([t.flatten() for t in self.sums]), prog, f"{name}/zero_acc")

    @property
    def bias_rows(self) -> int:
        """Rows of the bias accumulator ``[rows, B, H]``: dr, du, dc, and with reset-after
        ``dc ∘ r``, the gradient of the recurrent-side candidate bias."""
        return 4 if self.params.reset_after else 3

    def initial_bias_sums(self, shards: int, prog: Sequence) -> Tensor:
        sums = create_rnn_state(self.graph, self.params.rnn, True, self.bias_rows, shards,
                                f"{self.name}/bias_acc")
        zero(self.graph, sums, prog, f"{self.name}/zero_bias_acc")
        return sums

    def add_step(self, x: Tensor, h_prev: Tensor, reset: Tensor, d_gates: Tensor,
                 bias_sums: Tensor, body: Sequence, reset_candidate: Tensor | None = None) -> None:
        """Add one step's gradients; ``reset_candidate`` is ``dc ∘ r`` if already computed."""
        graph, n, mm = self.graph, self.name, self.mm
        dr, du, dc = d_gates[0], d_gates[1], d_gates[2]
        if self.params.reset_after:
            if reset_candidate is None:
                reset_candidate = map(graph, ex._1 * ex._2, [dc, reset], body, f"{n}/dc_r")
            inputs_acc, outputs_acc = self.sums
            mat_mul_acc(graph, inputs_acc, 1.0, x.transpose(), concat([dr, du, dc], 1), body,
                        options=mm, name=f"{n}/d_inputs")
            mat_mul_acc(graph, outputs_acc, 1.0, h_prev.transpose(),
                        concat([dr, du, reset_candidate], 1), body, options=mm,
                        name=f"{n}/d_outputs")
            step_sums = concat([d_gates, reset_candidate.expand([0])])
        else:
            ru_acc, c_acc = self.sums
            mat_mul_acc(graph, ru_acc, 1.0, concat([x, h_prev], 1).transpose(),
                        concat([dr, du], 1), body, options=mm, name=f"{n}/d_ru")
            reset_state = map(graph, ex._1 * ex._2, [h_prev, reset], body, f"{n}/h_r")
            mat_mul_acc(graph, c_acc, 1.0, concat([x, reset_state], 1).transpose(), dc, body,
                        options=mm, name=f"{n}/d_c")
            step_sums = d_gates
        map_in_place(graph, ex._1 + ex._2, [bias_sums, step_sums], body, f"{n}/d_biases")

    def finish(self, bias_sums: Tensor, prog: Sequence) -> GruWeights:
        """Sum the bias accumulator over the batch; the gradients, gates in cell order."""
        graph, params, n = self.graph, self.params, self.name
        i = params.input_size
        biases = graph.clone(self.biases, f"{n}/biases_grad")
        if params.reset_after:
            reduce_with_output(graph, bias_sums.slice(0, 3), biases[:, 0], [1], Operation.ADD,
                               prog, name=f"{n}/input_biases")
            recurrent = concat([bias_sums.slice(0, 2), bias_sums.slice(3, 4)])
            reduce_with_output(graph, recurrent, biases[:, 1], [1], Operation.ADD, prog,
                               name=f"{n}/recurrent_biases")
            inputs_acc, outputs_acc = self.sums
            inputs, outputs = _unflatten_units(inputs_acc, 3), _unflatten_units(outputs_acc, 3)
        else:
            reduce_with_output(graph, bias_sums, biases, [1], Operation.ADD, prog,
                               name=f"{n}/biases")
            ru_acc, c_acc = self.sums
            inputs = concat([_unflatten_units(ru_acc[:i], 2), _unflatten_units(c_acc[:i], 1)])
            outputs = concat([_unflatten_units(ru_acc[i:], 2), _unflatten_units(c_acc[i:], 1)])
        return weights_in_order(GruWeights(inputs, outputs, biases), params.cell_order,
                                to_internal=False)


# ---- the backward step ---------------------------------------------------------------------------
class _BackwardCell:
    """Builds one step of the backward pass (poplibs ``backwardStepImpl`` and
    ``backwardStepImplResetAfter``) into a loop body; see the module doc for the math.

    Loop state: ``[gh]`` (the gradient carried into the previous output), plus the bias
    accumulator when the weight update is interleaved.  Inputs, in order: the output gradient
    (full-sequence output only), ``h_{t-1}``, the layer input (interleaved update or
    recomputation) and the AUGRU attention scores.  The step's gates come from the saved
    intermediates, or under full recomputation from ``recompute``, the forward's own cell.
    Created rows: the input gradient (if asked for), the attention gradient (AUGRU)."""

    def __init__(self, graph: Graph, params: GruParams, weights: _TransposedWeights,
                 options: GruOptions, accumulators: _Accumulators | None,
                 recompute: _Cell | None, attention: bool, name: str) -> None:
        self.graph, self.params, self.w = graph, params, weights
        self.mm = {**options.matmul_options("TRAINING_BWD"), "inputRHSIsPreArranged": True}
        self.accumulators = accumulators
        self.recompute = recompute
        self.attention = attention
        self.name = name

    def __call__(self, graph: Graph, step: TimeStep, state: list[Tensor], slices: RnnSlice,
                 created: list, body: Sequence) -> None:
        params, n = self.params, self.name
        full = params.output_full_sequence
        carried = state[0]
        rows = iter(slices.inputs)
        grad_next = next(rows) if full else None
        h_prev = next(rows)
        x = next(rows) if self.accumulators is not None or self.recompute is not None else None
        score = next(rows) if self.attention else None
        gates = (_saved_gates(params, slices.interim_in) if self.recompute is None
                 else self.recompute.recomputed(step, h_prev, x, score, body))
        reset, update, candidate = gates.reset, gates.update, gates.candidate
        d_gates = (slices.interim_out if slices.interim_out is not None
                   else graph.clone(concat([reset.expand([0]), update.expand([0]),
                                            candidate.expand([0])]), f"{n}/d_gates"))
        d_update, d_candidate = d_gates[1], d_gates[2]
        mask = None if step.mask is None else self._per_row(step.mask.expand([1]), ex._1,
                                                            carried, body, "mask")
        # dh: with a last-output-only layer the output gradient is the initial carried gradient
        d_out = (map(graph, ex._1 + ex._2, [grad_next, carried], body, f"{n}/dh") if full
                 else carried)

        self._gate_gradient(params.activation, candidate,
                            lambda t: (ex.Const(1.0) - t(update)) * t(d_out), mask, d_candidate,
                            body, "candidate")
        if score is None:
            self._gate_gradient(params.recurrent_activation, update,
                                lambda t: (t(h_prev) - t(candidate)) * t(d_out), mask, d_update,
                                body, "update")
        else:
            keep = self._per_row(score, ex.Const(1.0) - ex._1, carried, body, "keep")
            before = map(graph, ex._1 / ex._2, [update, keep], body, f"{n}/update_before")
            created[-1] = self._attention_gradient(before, h_prev, candidate, d_out, body)
            self._gate_gradient(params.recurrent_activation, before,
                                lambda t: t(keep) * (t(h_prev) - t(candidate)) * t(d_out), mask,
                                d_update, body, "update")

        if params.reset_after:
            d_prev_terms, d_input, reset_candidate = self._reset_after(
                reset, gates.candidate_recurrent, d_gates, body)
        else:
            d_prev_terms, d_input = self._reset_before(reset, h_prev, d_gates, body)
            reset_candidate = None
        if params.calc_input_gradients:
            created[0] = d_input
        self._carry(carried, d_out, update, d_prev_terms, mask, body)
        if self.accumulators is not None:
            self.accumulators.add_step(x, h_prev, reset, d_gates, state[1], body, reset_candidate)

    # -- pieces of the step --
    def _per_row(self, column: Tensor, expression: ex.Expr, like: Tensor, body: Sequence,
                 what: str) -> Tensor:
        """``expression`` of a ``[B, 1]`` column, broadcast into a ``[B, H]`` tensor mapped like
        ``like``: operands of one shape let the step's other maps fuse."""
        out = self.graph.clone(like, f"{self.name}/{what}")
        map_with_output(self.graph, expression, [column.broadcast_to(like.shape)], out, body,
                        f"{self.name}/{what}")
        return out

    def _gate_gradient(self, kind: Activation, output: Tensor, gradient: _GradientOf,
                       mask: Tensor | None, result: Tensor, body: Sequence, what: str) -> None:
        """``result = mask ∘ kind'(output) · gradient`` (the derivative taken from the output)."""
        graph, dtype, label = self.graph, self.params.dtype, f"{self.name}/d_{what}"
        nl = non_linearity_of(kind.value)
        terms = _Terms(dtype)
        if nl is NonLinearity.SOFTMAX:
            incoming = map(graph, terms.result(gradient(terms)), terms.tensors, body, label)
            jvp = non_linearity_input_gradient(graph, nl, output, incoming, body, label)
            if mask is None:
                body.add(Copy(jvp, result))
            else:
                map_with_output(graph, ex._1 * ex._2, [jvp, mask], result, body, f"{label}/mask")
            return
        value = _substitute(gradient_expression(nl, FLOAT), {1: terms(output), 2: gradient(terms)})
        if mask is not None:
            value = terms(mask) * value
        map_with_output(graph, terms.result(value), terms.tensors, result, body, label)

    def _attention_gradient(self, update_before: Tensor, h_prev: Tensor, candidate: Tensor,
                            d_out: Tensor, body: Sequence) -> Tensor:
        """``da = −Σ_h u0 ∘ (h_{t-1} − c) ∘ dh``, shape ``[B]``."""
        terms = _Terms(self.params.dtype)
        value = -(terms(update_before) * (terms(h_prev) - terms(candidate)) * terms(d_out))
        products = map(self.graph, terms.result(value), terms.tensors, body,
                       f"{self.name}/attention_terms")
        return reduce(self.graph, products, [1], Operation.ADD, body,
                      name=f"{self.name}/attention_grad")

    def _reset_before(self, reset: Tensor, h_prev: Tensor, d_gates: Tensor,
                      body: Sequence) -> tuple[list[tuple[Tensor, ...]], Tensor | None]:
        """Reset-before: ``[dx₂ | dhr] = dc · W_cᵀ``, then ``dr`` into ``d_gates[0]``, then
        ``[dx₁ | dh₁] = [dr, du] · W_ruᵀ``.  Returns the terms of ``dh_{t-1}`` (``dhr ∘ r`` and
        ``dh₁``) for :meth:`_carry`, and ``dx`` (None without input gradients: the weights then
        have no input rows, so the products give no x columns)."""
        graph, n, i = self.graph, self.name, self.params.input_size
        with_inputs = self.params.calc_input_gradients
        through_c = mat_mul(graph, d_gates[2], self.w.c, body, options=self.mm, name=f"{n}/dc_w")
        d_reset_state = through_c[:, i:] if with_inputs else through_c   # dhr
        self._gate_gradient(self.params.recurrent_activation, reset,
                            lambda t: t(d_reset_state) * t(h_prev), None, d_gates[0], body,
                            "reset")
        through_ru = mat_mul(graph, concat([d_gates[0], d_gates[1]], 1), self.w.ru, body,
                             options=self.mm, name=f"{n}/dru_w")
        d_input = None
        if with_inputs:
            d_input = map(graph, ex._1 + ex._2, [through_ru[:, :i], through_c[:, :i]], body,
                          f"{n}/dx")
        d_prev_ru = through_ru[:, i:] if with_inputs else through_ru
        return [(d_reset_state, reset), (d_prev_ru,)], d_input

    def _reset_after(self, reset: Tensor, candidate_recurrent: Tensor, d_gates: Tensor,
                     body: Sequence) -> tuple[list[tuple[Tensor, ...]], Tensor | None, Tensor]:
        """Reset-after: ``dr = σ'(r) ∘ dc ∘ c_rec`` (``c_rec`` saved or recomputed) into
        ``d_gates[0]``, ``[dr, du, dc ∘ r] · Whᵀ`` as the term of ``dh_{t-1}``, and
        ``dx = [dr, du, dc] · Wiᵀ`` if input gradients are asked for.  ``dc ∘ r`` is returned
        too, so the weight update need not form it again."""
        graph, n, params = self.graph, self.name, self.params
        d_candidate = d_gates[2]
        self._gate_gradient(params.recurrent_activation, reset,
                            lambda t: t(d_candidate) * t(candidate_recurrent), None, d_gates[0],
                            body, "reset")
        reset_candidate = map(graph, ex._1 * ex._2, [d_candidate, reset], body, f"{n}/dc_r")
        d_prev = mat_mul(graph, concat([d_gates[0], d_gates[1], reset_candidate], 1),
                         self.w.outputs, body, options=self.mm, name=f"{n}/dh_w")
        d_input = None
        if params.calc_input_gradients:
            d_input = mat_mul(graph, concat([d_gates[0], d_gates[1], d_candidate], 1),
                              self.w.inputs, body, options=self.mm, name=f"{n}/dx_w")
        return [(d_prev,)], d_input, reset_candidate

    def _carry(self, carried: Tensor, d_out: Tensor, update: Tensor,
               d_prev_terms: list[tuple[Tensor, ...]], mask: Tensor | None,
               body: Sequence) -> None:
        """``gh ← dh ∘ u + Σ terms`` — kept unchanged at a row's padded steps, where the step
        passes the state through (for a last-output layer ``dh`` is ``gh`` there anyway)."""
        terms = _Terms(self.params.dtype)
        old = terms(carried)                      # placeholder 1: updated in place
        value = terms(d_out) * terms(update)
        for factors in d_prev_terms:
            product = terms(factors[0])
            for factor in factors[1:]:
                product = product * terms(factor)
            value = value + product
        if mask is not None:
            value = terms(mask) * value + (ex.Const(1.0) - terms(mask)) * old
        map_in_place(self.graph, terms.result(value), terms.tensors, body, f"{self.name}/dh_prev")


class _UpdateCell:
    """One step of the separate weight-update loop (poplibs ``gruWUImpl``'s body).  State: the
    bias accumulator; inputs: the layer input, ``h_{t-1}`` and the gate gradients.  The reset
    gate is the saved one, or under full recomputation the forward cell's again (its gates
    only: the candidate is not needed here)."""

    def __init__(self, accumulators: _Accumulators, recompute: _Cell | None) -> None:
        self.accumulators = accumulators
        self.recompute = recompute

    def __call__(self, graph: Graph, step: TimeStep, state: list[Tensor], slices: RnnSlice,
                 created: list, body: Sequence) -> None:
        x, h_prev, d_gates = slices.inputs
        reset = (slices.interim_in[0] if self.recompute is None else
                 self.recompute.recomputed(step, h_prev, x, None, body, with_candidate=False).reset)
        self.accumulators.add_step(x, h_prev, reset, d_gates, state[0], body)


def _saved_gates(params: GruParams, saved: Tensor) -> _Gates:
    """A step's gates from its row of the saved intermediates ``[k, B, H]``."""
    rows = saved_intermediates(params, RecomputationMode.NONE)
    return _Gates(saved[0], saved[1], saved[2],
                  saved[rows.index("c_rec")] if params.reset_after else None)


def _recompute_cell(graph: Graph, params: GruParams, weights: GruWeights, options: GruOptions,
                    attention: bool, name: str) -> _Cell | None:
    """The forward's cell, to build the gates again in a backward step; None without full
    recomputation."""
    if options.recomputation_mode is RecomputationMode.NONE:
        return None
    return _Cell(graph, params, _internal_weights(params, weights), options, True, attention,
                 f"{name}/recompute")


# ---- shared set-up -------------------------------------------------------------------------------
def _check_common(params: GruParams, options: GruOptions, fwd_output_init: Tensor,
                  fwd_intermediates: Tensor | None, weights: GruWeights, fwd_input: Tensor,
                  fwd_output: Tensor) -> None:
    """The arguments every backward and weight-update builder takes; the forward intermediates
    are what the forward saves under the same ``recomputationMode``."""
    s, b, i, h = params.max_time_steps, params.batch_size, params.input_size, params.hidden_size
    dtype = params.dtype
    check_tensor("initial state (fwd_output_init)", fwd_output_init, (b, h), dtype)
    mode = options.recomputation_mode.value
    rows = saved_intermediates(params, options.recomputation_mode)
    if not rows:
        expect(fwd_intermediates is None, GrucValueError,
               f"GRU forward intermediates must be None with recomputationMode {mode} and "
               "output_full_sequence: the forward saves none (were the forward's options "
               "different?)")
    else:
        check_tensor("forward intermediates", fwd_intermediates, (s, len(rows), b, h), dtype,
                     f" ({', '.join(rows)} for this layer with recomputationMode {mode}: run "
                     "gru_fwd with save_intermediates=True and the same params and options)")
    check_weights(params, weights)
    check_tensor("forward input", fwd_input, (s, b, i), dtype)
    check_tensor("forward output", fwd_output,
                 (s, b, h) if params.output_full_sequence else (b, h), dtype,
                 "" if params.output_full_sequence
                 else " (output_full_sequence is off: the last state)")


def _common(fwd_output_init: Tensor, fwd_intermediates: Tensor, weights: GruWeights,
            fwd_input: Tensor, fwd_output: Tensor, real_time_steps: Tensor | None
            ) -> dict[str, Tensor | None]:
    """The tensors every backward and weight-update builder takes, by the names errors use."""
    return {"initial state": fwd_output_init, "forward intermediates": fwd_intermediates,
            **weights._asdict(), "forward input": fwd_input, "forward output": fwd_output,
            "real_time_steps": real_time_steps}


def _check_attention(params: GruParams, attentions: Tensor) -> None:
    check_tensor("attention scores", attentions, (params.batch_size, params.max_time_steps),
                 params.dtype)


def _code_reuse(options: GruOptions, shards: int) -> bool:
    return options.rnn_code_reuse if options.rnn_code_reuse is not None \
        else code_reuse_default(shards)


def _previous_outputs(graph: Graph, params: GruParams, options: GruOptions,
                      fwd_output_init: Tensor, fwd_intermediates: Tensor | None,
                      fwd_output: Tensor, shards: int, prog: Sequence, name: str) -> Tensor:
    """``h_{t-1}`` for every step: the output sequence (or, for a last-output layer, the saved
    per-step outputs) one step later, ``h0`` first."""
    rows = saved_intermediates(params, options.recomputation_mode)
    outputs = (fwd_output if params.output_full_sequence
               else fwd_intermediates[:, rows.index("h")])   # [S, B, H]
    return shift_rnn_tensor(graph, params.rnn, outputs, fwd_output_init, prog, shards,
                            f"{name}/prev_output")


def _input_copy(graph: Graph, params: GruParams, fwd_input: Tensor, shards: int, prog: Sequence,
                name: str) -> Tensor:
    """The layer input in the sharded sequence layout, so each step's slice is tile-local."""
    copy = create_input_tensor(graph, params.rnn, shards, f"{name}/input")
    prog.add(Copy(fwd_input, copy))
    return copy


def _sequence_result(graph: Graph, params: GruParams, tensor: Tensor, prog: Sequence,
                     name: str) -> None:
    """A sequence the loop writes row by row: zeroed when lengths may leave rows unwritten,
    else marked undefined so it is not live before the loop."""
    if params.var_time_steps is not None:
        zero(graph, tensor, prog, f"{name}/zero")
    else:
        prog.add(WriteUndef(tensor))


# ---- the builders behind the public functions ----------------------------------------------------
def _backward(graph: Graph, params: GruParams, prog: Sequence, fwd_output_init: Tensor,
              fwd_intermediates: Tensor, weights: GruWeights, fwd_input: Tensor,
              fwd_output: Tensor, grad_layer_next: Tensor, *, save_bwd_intermediates: bool,
              update_weights: bool, attentions: Tensor | None, real_time_steps: Tensor | None,
              name: str, options: GruOptions | dict | None) -> GruGradients:
    """poplibs ``gruBwdImpl``: the reverse loop; with ``update_weights`` it accumulates the
    weight gradients as it goes."""
    check_layer_args(graph, params, prog, name)
    opts = GruOptions.parse(options)
    params = _lengths_for(params, real_time_steps)
    _check_common(params, opts, fwd_output_init, fwd_intermediates, weights, fwd_input,
                  fwd_output)
    s, b, h = params.max_time_steps, params.batch_size, params.hidden_size
    full = params.output_full_sequence
    check_tensor("output gradient (grad_layer_next)", grad_layer_next,
                 (s, b, h) if full else (b, h), params.dtype,
                 "" if full else " (output_full_sequence is off: the last state's)")
    if attentions is not None:
        _check_attention(params, attentions)
    check_in_graph(graph, {**_common(fwd_output_init, fwd_intermediates, weights, fwd_input,
                                     fwd_output, real_time_steps),
                           "output gradient": grad_layer_next, "attention scores": attentions})
    shards = num_shards(graph, params, opts)
    rnn_params = params.rnn
    transposed = _pre_arrange(graph, params, weights,
                              opts.matmul_options("TRAINING_BWD"), prog, name)

    carried = create_rnn_state(graph, rnn_params, True, 1, shards,
                               f"{name}/last_out_grad").squeeze([0])
    inputs = []
    if full:
        grads = create_output_tensor(graph, rnn_params, shards, f"{name}/grad_layer_next")
        prog.add(Copy(grad_layer_next, grads))
        zero(graph, carried, prog, f"{name}/zero_last_out_grad")
        inputs.append(grads)
    else:
        prog.add(Copy(grad_layer_next, carried))
    inputs.append(_previous_outputs(graph, params, opts, fwd_output_init, fwd_intermediates,
                                    fwd_output, shards, prog, name))
    state = [carried]
    accumulators = None
    recompute = _recompute_cell(graph, params, weights, opts, attentions is not None, name)
    if update_weights or recompute is not None:
        inputs.append(_input_copy(graph, params, fwd_input, shards, prog, name))
    if update_weights:
        accumulators = _Accumulators(graph, params, weights, opts, prog, f"{name}/wu")
        state.append(accumulators.initial_bias_sums(shards, prog))
    created = []
    input_grad = None
    if params.calc_input_gradients:
        input_grad = create_input_tensor(graph, rnn_params, shards, f"{name}/input_grad")
        _sequence_result(graph, params, input_grad, prog, f"{name}/input_grad")
        created.append(input_grad)
    attentions_grad = None
    if attentions is not None:
        inputs.append(attentions.transpose().expand([2]))        # [S, B, 1]
        attentions_grad = create_attention(graph, params, f"{name}/attentions_grad", opts)
        _sequence_result(graph, params, attentions_grad, prog, f"{name}/attentions_grad")
        created.append(attentions_grad.transpose())               # [S, B]
    bwd_intermediates = None
    if save_bwd_intermediates:
        bwd_intermediates = create_output_tensor(graph, rnn_params, shards,
                                                 f"{name}/bwd_intermediates",
                                                 multiple=3).reshape((s, 3, b, h))
        _sequence_result(graph, params, bwd_intermediates, prog, f"{name}/bwd_intermediates")
    cell = _BackwardCell(graph, params, transposed, opts, accumulators, recompute,
                         attentions is not None, name)
    final = rnn(graph, rnn_params, reverse=True, init_state=state, inputs=inputs,
                interim_in=fwd_intermediates if recompute is None else None,
                interim_out=bwd_intermediates, created=created,
                prog=prog, loop_fn=cell, num_shards=shards, var_time_steps=params.var_time_steps,
                code_reuse=_code_reuse(opts, shards), name=name)
    weights_grad = accumulators.finish(final[1], prog) if accumulators is not None else None
    return GruGradients(final[0], input_grad, bwd_intermediates, weights_grad, attentions_grad)


def _weight_update(graph: Graph, params: GruParams, prog: Sequence, fwd_output_init: Tensor,
                   fwd_intermediates: Tensor, bwd_intermediates: Tensor, weights: GruWeights,
                   fwd_input: Tensor, fwd_output: Tensor, real_time_steps: Tensor | None,
                   name: str, options: GruOptions | dict | None) -> GruGradients:
    """poplibs ``gruWUImpl``: a reverse loop over the saved gate gradients."""
    check_layer_args(graph, params, prog, name)
    opts = GruOptions.parse(options)
    params = _lengths_for(params, real_time_steps)
    _check_common(params, opts, fwd_output_init, fwd_intermediates, weights, fwd_input,
                  fwd_output)
    s, b, h = params.max_time_steps, params.batch_size, params.hidden_size
    check_tensor("backward intermediates", bwd_intermediates, (s, 3, b, h), params.dtype,
                 " (dr, du, dc: gru_bwd with save_bwd_intermediates=True)")
    check_in_graph(graph, {**_common(fwd_output_init, fwd_intermediates, weights, fwd_input,
                                     fwd_output, real_time_steps),
                           "backward intermediates": bwd_intermediates})
    shards = num_shards(graph, params, opts)
    accumulators = _Accumulators(graph, params, weights, opts, prog, name)
    inputs = [_input_copy(graph, params, fwd_input, shards, prog, name),
              _previous_outputs(graph, params, opts, fwd_output_init, fwd_intermediates,
                                fwd_output, shards, prog, name),
              bwd_intermediates]
    recompute = _recompute_cell(graph, params, weights, opts, False, name)
    final = rnn(graph, params.rnn, reverse=True,
                init_state=[accumulators.initial_bias_sums(shards, prog)], inputs=inputs,
                interim_in=fwd_intermediates if recompute is None else None, prog=prog,
                loop_fn=_UpdateCell(accumulators, recompute),
                num_shards=shards, var_time_steps=params.var_time_steps,
                code_reuse=_code_reuse(opts, shards), name=name)
    return GruGradients(None, None, None, accumulators.finish(final[0], prog), None)


def _backward_with_update(graph: Graph, params: GruParams, prog: Sequence,
                          fwd_output_init: Tensor, fwd_intermediates: Tensor,
                          weights: GruWeights, fwd_input: Tensor, fwd_output: Tensor,
                          grad_layer_next: Tensor, attentions: Tensor | None,
                          real_time_steps: Tensor | None, name: str,
                          options: GruOptions | dict | None) -> GruGradients:
    """poplibs ``gruBwdWithWU``: the update inside the backward loop when that needs less memory,
    else a separate loop over the saved gate gradients."""
    interleave = interleaved_wu_is_beneficial(params)
    bwd = _backward(graph, params, prog, fwd_output_init, fwd_intermediates, weights, fwd_input,
                    fwd_output, grad_layer_next, save_bwd_intermediates=not interleave,
                    update_weights=interleave, attentions=attentions,
                    real_time_steps=real_time_steps, name=name, options=options)
    if interleave:
        return bwd
    wu = _weight_update(graph, params, prog, fwd_output_init, fwd_intermediates,
                        bwd.bwd_intermediates, weights, fwd_input, fwd_output, real_time_steps,
                        f"{name}/wu", options)
    return bwd._replace(bwd_intermediates=None, weights_grad=wu.weights_grad)


# ---- public API ----------------------------------------------------------------------------------
def gru_bwd(graph: Graph, params: GruParams, prog: Sequence, fwd_output_init: Tensor,
            fwd_intermediates: Tensor, weights: GruWeights, fwd_input: Tensor,
            fwd_output: Tensor, grad_layer_next: Tensor, *, save_bwd_intermediates: bool = False,
            real_time_steps: Tensor | None = None, name: str = "",
            options: GruOptions | dict | None = None) -> GruGradients:
    """The GRU backward pass (poplibs ``gruBwd``).

    ``fwd_output_init`` is the forward's initial state, ``fwd_intermediates`` what ``gru_fwd``
    saved, ``fwd_output`` its output and ``grad_layer_next`` the gradient of that output
    (``[S, B, H]``, or ``[B, H]`` for a last-output layer).  Returns the initial-state gradient,
    the input gradient (with ``params.calc_input_gradients``) and, with
    ``save_bwd_intermediates``, the gate gradients ``[S, 3, B, H]`` that :func:`gru_wu` takes.
    """
    return _backward(graph, params, prog, fwd_output_init, fwd_intermediates, weights, fwd_input,
                     fwd_output, grad_layer_next, save_bwd_intermediates=save_bwd_intermediates,
                     update_weights=False, attentions=None, real_time_steps=real_time_steps,
                     name=name or "gru_bwd", options=options)


def au_gru_bwd(graph: Graph, params: GruParams, prog: Sequence, fwd_output_init: Tensor,
               fwd_intermediates: Tensor, weights: GruWeights, fwd_input: Tensor,
               fwd_output: Tensor, grad_layer_next: Tensor, attentions: Tensor, *,
               save_bwd_intermediates: bool = False, real_time_steps: Tensor | None = None,
               name: str = "", options: GruOptions | dict | None = None) -> GruGradients:
    """The AUGRU backward pass (poplibs ``auGruBwd``): :func:`gru_bwd` plus the gradient of the
    attention scores ``[B, S]``."""
    require_attention("au_gru_bwd", attentions)
    return _backward(graph, params, prog, fwd_output_init, fwd_intermediates, weights, fwd_input,
                     fwd_output, grad_layer_next, save_bwd_intermediates=save_bwd_intermediates,
                     update_weights=False, attentions=attentions,
                     real_time_steps=real_time_steps, name=name or "augru_bwd", options=options)


def gru_wu(graph: Graph, params: GruParams, prog: Sequence, fwd_output_init: Tensor,
           fwd_intermediates: Tensor, bwd_intermediates: Tensor, weights: GruWeights,
           fwd_input: Tensor, fwd_output: Tensor, *, real_time_steps: Tensor | None = None,
           name: str = "", options: GruOptions | dict | None = None) -> GruGradients:
    """The weight update (poplibs ``gruWU``): weight and bias gradients, summed over steps and
    batch, from the gate gradients ``gru_bwd`` saved; only ``weights_grad`` is set."""
    return _weight_update(graph, params, prog, fwd_output_init, fwd_intermediates,
                          bwd_intermediates, weights, fwd_input, fwd_output, real_time_steps,
                          name or "gru_wu", options)


def au_gru_wu(graph: Graph, params: GruParams, prog: Sequence, fwd_output_init: Tensor,
              fwd_intermediates: Tensor, bwd_intermediates: Tensor, weights: GruWeights,
              fwd_input: Tensor, fwd_output: Tensor, *, real_time_steps: Tensor | None = None,
              name: str = "", options: GruOptions | dict | None = None) -> GruGradients:
    """The AUGRU weight update (poplibs declares ``auGruWU`` but never defines it).  The attention
    only changes the saved update gate, not how weight gradients are formed, so this is
    :func:`gru_wu`."""
    return _weight_update(graph, params, prog, fwd_output_init, fwd_intermediates,
                          bwd_intermediates, weights, fwd_input, fwd_output, real_time_steps,
                          name or "augru_wu", options)


def gru_bwd_with_wu(graph: Graph, params: GruParams, prog: Sequence, fwd_output_init: Tensor,
                    fwd_intermediates: Tensor, weights: GruWeights, fwd_input: Tensor,
                    fwd_output: Tensor, grad_layer_next: Tensor, *,
                    real_time_steps: Tensor | None = None, name: str = "",
                    options: GruOptions | dict | None = None) -> GruGradients:
    """Backward pass and weight update together (poplibs ``gruBwdWithWU``), interleaved iff
    :func:`interleaved_wu_is_beneficial`: the initial-state, input and weight gradients."""
    return _backward_with_update(graph, params, prog, fwd_output_init, fwd_intermediates,
                                 weights, fwd_input, fwd_output, grad_layer_next, None,
                                 real_time_steps, name or "gru_bwd_wu", options)


def au_gru_bwd_with_wu(graph: Graph, params: GruParams, prog: Sequence, fwd_output_init: Tensor,
                       fwd_intermediates: Tensor, weights: GruWeights, fwd_input: Tensor,
                       fwd_output: Tensor, grad_layer_next: Tensor, attentions: Tensor, *,
                       real_time_steps: Tensor | None = None, name: str = "",
                       options: GruOptions | dict | None = None) -> GruGradients:
    """:func:`gru_bwd_with_wu` for AUGRU (poplibs ``auGruBwdWithWU``), with the attention
    gradient."""
    require_attention("au_gru_bwd_with_wu", attentions)
    return _backward_with_update(graph, params, prog, fwd_output_init, fwd_intermediates,
                                 weights, fwd_input, fwd_output, grad_layer_next, attentions,
                                 real_time_steps, name or "augru_bwd_wu", options)


# The forward module re-exports this one's builders at its end, so the forward helpers are
# imported here, last: whichever of the two modules is imported first, each finds the other's
# names already defined.
from gruc.popnn.gru import (_Cell, _Gates, _internal_weights, _lengths_for,  # noqa: E402
                            _unflatten_units, create_attention, num_shards)
