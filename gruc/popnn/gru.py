"""The GRU layer (port of poplibs' ``popnn::gru``): tensor creators and the forward pass.

A GRU layer is a cell run at every step of a sequence by the generic RNN loop builder
(:func:`gruc.ops.rnn.rnn`): sharded sequence tensors, one ``Repeat`` per shard, a cell built
once.  The cell follows poplibs' device code:

* **reset-before** (default; arXiv 1406.1078v3): one matmul ``[x, h] · W_ru`` for the reset and
  update gates, the recurrent activation over both in one map, ``r ∘ h``, a second matmul
  ``[x, r ∘ h] · W_c`` and the activation for the candidate;
* **reset-after** (Keras ``reset_after``, PyTorch): ``x · W_i`` and ``h · W_h`` for all three gates,
  the recurrent-side candidate ``c_rec = h W_h[c] + rb[c]`` is kept, ``c = φ(x W_i[c] + b[c] + r ∘ c_rec)``;
* AUGRU: ``u ← (1 − a) u`` with one attention score per row and step;
* ``h_t = c + u ∘ (h − c)``; inference updates the state in place.

Training saves the intermediates ``[S, k, B, H]`` in the order r, u, c, (h_t), (c_rec), or under
the ``recomputationMode`` option ``full`` only (h_t): the backward pass then rebuilds each step's
gates with this module's cell (:meth:`_Cell.recomputed`).  With
per-row lengths, padded steps write zeros (gates, candidate, output) and the state is latched —
in inference too, where poplibs leaves the padded outputs unmasked (a documented deviation, see
``docs/gru-deviations.md``).

Weights are created the way the matmul plan wants them (``create_mat_mul_input_rhs``), so the
per-step matmuls need no rearrangement; the user-facing tensors are views with the gates on dim 0
in ``cell_order``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gruc.errors import GrucTypeError, GrucValueError, expect
from gruc.ir import expr as ex
from gruc.ir.graph import Graph
from gruc.ir.program import Copy, Sequence, WriteUndef
from gruc.ir.tensor import Tensor, concat
from gruc.ops.elementwise import map, map_in_place, map_with_output, zero
from gruc.ops.matmul import create_mat_mul_input_rhs, mat_mul
from gruc.ops.nonlinearity import NonLinearity, forward_expression, non_linearity_in_place
from gruc.ops.rnn import (RnnSlice, StateSequence, TimeStep, create_input_tensor,
                          create_output_tensor, create_recurrent_tensor, rnn)
from gruc.ops.rnn import create_initial_state as create_rnn_state
from gruc.rnn_geometry import (code_reuse_default, gru_flops_bwd, gru_flops_fwd,
                                   gru_flops_wu, gru_num_shards)
from gruc.popnn.gru_params import (GATES, Activation, GruOptions, GruParams, GruWeights,
                                   RecomputationMode, check_in_graph, check_layer_args,
                                   check_tensor, check_weights, from_internal_order,
                                   require_attention, saved_intermediates, weights_in_order)

OptionsLike = GruOptions | dict[str, Any] | None


class ForwardResult(NamedTuple):
    """``gru_fwd``'s result: the output and, when training, the saved intermediates."""

    output: Tensor
    intermediates: Tensor | None
    """``[S, k, B, H]``, the rows of :func:`~gruc.popnn.gru_params.saved_intermediates`; None
    without ``save_intermediates``, or when full recomputation of a full-sequence layer saves
    nothing."""


def _check_creator(graph: Graph, params: GruParams, what: str) -> None:
    """What every creator takes: a graph and the layer's parameters."""
    if not isinstance(graph, Graph):
        raise GrucTypeError(f"{what} needs a gruc Graph, got {type(graph).__name__}")
    _check_params(params, what)


def _check_params(params: GruParams, what: str) -> None:
    if not isinstance(params, GruParams):
        raise GrucTypeError(f"{what} needs GruParams, got {type(params).__name__}")


def num_shards(graph: Graph, params: GruParams, options: OptionsLike = None) -> int:
    """The layer's time shards: the ``numShards`` option, else poplibs' heuristic."""
    _check_creator(graph, params, "num_shards")
    opts = GruOptions.parse(options)
    return gru_num_shards(graph.target, params.rnn, output_full_sequence=params.output_full_sequence,
                          reset_after=params.reset_after, requested=opts.num_shards)


# ---- tensor creators --------------------------------------------------------------------------
def create_input(graph: Graph, params: GruParams, name: str = "input",
                 options: OptionsLike = None) -> Tensor:
    """``[S, B, I]`` sharded over time."""
    shards = num_shards(graph, params, options)
    return create_input_tensor(graph, params.rnn, shards, name)


def create_initial_state(graph: Graph, params: GruParams, name: str = "initState",
                         options: OptionsLike = None) -> Tensor:
    """``[B, H]`` on the first shard's tiles."""
    shards = num_shards(graph, params, options)
    return create_rnn_state(graph, params.rnn, True, 1, shards, name).squeeze([0])


def _unflatten_units(t: Tensor, units: int) -> Tensor:
    """``[R, U*C]`` viewed as ``[U, R, C]`` (poplibs ``unflattenUnits``)."""
    return t.reshape((t.dim(0), units, t.dim(1) // units)).dim_shuffle((1, 0, 2))


def _flatten_units(t: Tensor) -> Tensor:
    """``[U, R, C]`` viewed as ``[R, U*C]`` (poplibs ``flattenUnits``)."""
    return t.dim_shuffle((1, 0, 2)).reshape((t.dim(1), t.dim(0) * t.dim(2)))


def create_weights_kernel(graph: Graph, params: GruParams, name: str = "weights",
                          options: OptionsLike = None) -> tuple[Tensor, Tensor]:
    """``(input_weights [3,I,H], output_weights [3,H,H])`` in cell order, laid out for the matmuls."""
    _check_creator(graph, params, "create_weights_kernel")
    opts = GruOptions.parse(options)
    mm = opts.matmul_options("INFERENCE_FWD" if opts.inference_only else "TRAINING_FWD")
    i, h, b = params.input_size, params.hidden_size, params.batch_size
    if params.reset_after:
        w_in = create_mat_mul_input_rhs(graph, params.dtype, (b, i), (i, 3 * h), f"{name}/in", mm)
        w_out = create_mat_mul_input_rhs(graph, params.dtype, (b, h), (h, 3 * h), f"{name}/out", mm)
        inputs, outputs = _unflatten_units(w_in, 3), _unflatten_units(w_out, 3)
    else:
        w_ru = create_mat_mul_input_rhs(graph, params.dtype, (b, i + h), (i + h, 2 * h),
                                        f"{name}/ru", mm)
        w_c = create_mat_mul_input_rhs(graph, params.dtype, (b, i + h), (i + h, h), f"{name}/c", mm)
        inputs = concat([_unflatten_units(w_ru[:i], 2), _unflatten_units(w_c[:i], 1)])
        outputs = concat([_unflatten_units(w_ru[i:], 2), _unflatten_units(w_c[i:], 1)])
    return (from_internal_order(inputs, params.cell_order),
            from_internal_order(outputs, params.cell_order))


def create_weights_biases(graph: Graph, params: GruParams, name: str = "biases",
                          options: OptionsLike = None) -> Tensor:
    """``[3, H]`` (or ``[3, 2, H]`` with reset-after) in cell order, mapped linearly."""
    _check_creator(graph, params, "create_weights_biases")
    GruOptions.parse(options)
    shape = (3, 2, params.hidden_size) if params.reset_after else (3, params.hidden_size)
    biases = graph.add_variable(params.dtype, shape, name)
    graph.map_tensor_linearly(biases)
    return from_internal_order(biases, params.cell_order)


def create_weights(graph: Graph, params: GruParams, name: str = "weights",
                   options: OptionsLike = None) -> GruWeights:
    inputs, outputs = create_weights_kernel(graph, params, name, options)
    return GruWeights(inputs, outputs, create_weights_biases(graph, params, f"{name}/biases", options))


def create_attention(graph: Graph, params: GruParams, name: str = "attention",
                     options: OptionsLike = None) -> Tensor:
    """``[B, S]`` attention scores (a view of a sharded ``[S, B, 1]`` tensor)."""
    shards = num_shards(graph, params, options)
    return create_recurrent_tensor(graph, params.rnn, 1, shards, name).squeeze([2]).transpose()


def zero_initial_state(graph: Graph, init_state: Tensor, prog: Sequence, name: str = "") -> None:
    zero(graph, init_state, prog, name or "zeroInitialState")


# ---- the forward cell ---------------------------------------------------------------------------
def _applied(outer: ex.Expr, inner: ex.Expr) -> ex.Expr:
    """``outer`` with its operand ``_1`` replaced by the tree ``inner``."""
    if isinstance(outer, ex.PlaceHolder):
        return inner
    return ex.with_children(outer, [_applied(child, inner) for child in ex.children(outer)])


def _activate(graph: Graph, kind: Activation, expression: ex.Expr, operands: list[Tensor],
              hidden: int, body: Sequence, name: str) -> Tensor:
    """``kind(expression(operands))`` as a new ``[B, gates * H]`` tensor.

    Softmax normalises each gate's ``H`` values separately, as the reference applies the
    activation gate by gate.
    """
    nl = NonLinearity(kind.value)
    if nl.is_softmax:
        value = map(graph, expression, operands, body, name)
        rows, width = value.shape
        gates = value.reshape((rows, width // hidden, hidden))
        non_linearity_in_place(graph, nl, gates, body, name)
        return value
    dtype = operands[0].dtype
    return map(graph, _applied(forward_expression(nl, dtype), expression), operands, body, name)


class _Weights(NamedTuple):
    """The layer's weights as the cell's matmuls consume them (internal gate order)."""

    ru: Tensor | None       # [I+H, 2H], reset-before
    c: Tensor | None        # [I+H, H], reset-before
    inputs: Tensor | None   # [I, 3H], reset-after
    outputs: Tensor | None  # [H, 3H], reset-after
    bias: Tensor            # [3H] input-side (or only) biases
    recurrent_bias: Tensor | None  # [3H] reset-after recurrent-side biases


def _internal_weights(params: GruParams, weights: GruWeights) -> _Weights:
    """The user's weights as the cell's matmuls take them, in internal gate order.  Reset-before
    joins input and output weights row-wise, so ``[x, h]`` meets the reset and update gates in one
    matmul and ``[x, r ∘ h]`` the candidate in another; reset-after keeps the two sides apart."""
    internal = weights_in_order(weights, params.cell_order, to_internal=True)
    if params.reset_after:
        bias = internal.biases[:, 0].flatten()
        return _Weights(None, None, _flatten_units(internal.input_weights),
                        _flatten_units(internal.output_weights), bias,
                        internal.biases[:, 1].flatten())
    both = concat([internal.input_weights, internal.output_weights], 1)   # [3, I+H, H]
    return _Weights(_flatten_units(both[0:2]), both[2], None, None,
                    internal.biases.flatten(), None)


class _Gates(NamedTuple):
    """One step's gate outputs (``candidate`` is None when only the gates were asked for;
    ``candidate_recurrent`` is reset-after's ``c_rec``, else None)."""

    reset: Tensor
    update: Tensor
    candidate: Tensor | None
    candidate_recurrent: Tensor | None


class _Cell:
    """Builds one step of the forward pass into a loop body.  The backward pass builds the same
    step again with :meth:`recomputed` under full recomputation: the same builder, so the same
    vertices and matmul plans make the same bits."""

    def __init__(self, graph: Graph, params: GruParams, weights: _Weights, options: GruOptions,
                 training: bool, attention: bool, name: str) -> None:
        self.graph = graph
        self.params = params
        self.w = weights
        self.mm = options.matmul_options("TRAINING_FWD" if not options.inference_only or training
                                         else "INFERENCE_FWD")
        self.training = training
        self.saved = saved_intermediates(params, options.recomputation_mode)
        self.attention = attention
        self.name = name

    def __call__(self, graph: Graph, step: TimeStep, state: list[Tensor], slices: RnnSlice,
                 created: list, body: Sequence) -> None:
        h = state[0]
        score = slices.inputs[1] if self.attention else None
        gates = self.gates(h, slices.inputs[0], score, body)
        self._update(step, h, gates, slices, body)

    def gates(self, h: Tensor, x: Tensor, score: Tensor | None, body: Sequence,
              with_candidate: bool = True) -> _Gates:
        """The step's gates from the previous state ``h`` ``[B, H]``, the input ``x`` ``[B, I]``
        and (AUGRU) the attention ``score`` ``[B, 1]``; ``with_candidate`` False stops after
        the reset and update gates (the update then before attention)."""
        graph, h_size, n = self.graph, self.params.hidden_size, self.name
        act, rec_act = self.params.activation, self.params.recurrent_activation
        if self.params.reset_after:
            x_part = self._on_state(mat_mul(graph, x, self.w.inputs, body, options=self.mm,
                                            name=f"{n}/in"), h, body, f"{n}/in")
            h_part = self._on_state(mat_mul(graph, h, self.w.outputs, body, options=self.mm,
                                            name=f"{n}/rec"), h, body, f"{n}/rec")
            bias_ru = self.w.bias[:2 * h_size]
            rbias_ru = self.w.recurrent_bias[:2 * h_size]
            gates = _activate(graph, rec_act, ex._1 + ex._2 + ex._3 + ex._4,
                              [x_part[:, :2 * h_size], h_part[:, :2 * h_size], bias_ru, rbias_ru],
                              h_size, body, f"{n}/gates")
            reset, update = gates[:, :h_size], gates[:, h_size:]
            if not with_candidate:
                return _Gates(reset, update, None, None)
            candidate_recurrent = map(graph, ex._1 + ex._2,
                                      [h_part[:, 2 * h_size:], self.w.recurrent_bias[2 * h_size:]],
                                      body, f"{n}/c_rec")
            self._attend(score, update, body)
            candidate = _activate(graph, act, ex._1 + ex._2 + ex._3 * ex._4,
                                  [x_part[:, 2 * h_size:], self.w.bias[2 * h_size:], reset,
                                   candidate_recurrent], h_size, body, f"{n}/candidate")
            return _Gates(reset, update, candidate, candidate_recurrent)
        xh = concat([x, h], 1)
        ru = self._on_state(mat_mul(graph, xh, self.w.ru, body, options=self.mm,
                                    name=f"{n}/ru"), h, body, f"{n}/ru")
        gates = _activate(graph, rec_act, ex._1 + ex._2, [ru, self.w.bias[:2 * h_size]],
                          h_size, body, f"{n}/gates")
        reset, update = gates[:, :h_size], gates[:, h_size:]
        if not with_candidate:
            return _Gates(reset, update, None, None)
        self._attend(score, update, body)
        reset_state = map(graph, ex._1 * ex._2, [reset, h], body, f"{n}/rh")
        c_in = self._on_state(mat_mul(graph, concat([x, reset_state], 1), self.w.c, body,
                                      options=self.mm, name=f"{n}/c"), h, body, f"{n}/c")
        candidate = _activate(graph, act, ex._1 + ex._2, [c_in, self.w.bias[2 * h_size:]],
                              h_size, body, f"{n}/candidate")
        return _Gates(reset, update, candidate, None)

    def recomputed(self, step: TimeStep, h: Tensor, x: Tensor, score: Tensor | None,
                   body: Sequence, with_candidate: bool = True) -> _Gates:
        """:meth:`gates` for a backward step, each masked as a saving forward saves it (a
        padded row's gates are zero), so the backward reads what it would have read."""
        gates = self.gates(h, x, score, body, with_candidate)
        if step.mask is None:
            return gates
        mask = step.mask.expand([1])
        return _Gates(*(None if value is None else
                        map(self.graph, ex._1 * ex._2, [value, mask], body, f"{self.name}/mask{k}")
                        for k, value in enumerate(gates)))

    def _on_state(self, units: Tensor, h: Tensor, body: Sequence, name: str) -> Tensor:
        """A product's ``[B, k·H]`` result copied onto the state's tiles, each unit laid out as
        the state (poplibs' ``rearrangeUnitsOutputFwd``: the cell's elementwise work then runs
        where the state lives, and the product's output is free for the next step)."""
        count = units.shape[1] // self.params.hidden_size
        laid = self.graph.clone(concat([h] * count, 1), f"{name}_on_state")
        body.add(Copy(units, laid))
        return laid

    def _attend(self, score: Tensor | None, update: Tensor, body: Sequence) -> None:
        if score is not None:
            map_in_place(self.graph, ex._1 - ex._2 * ex._1, [update, score], body,
                         f"{self.name}/attention")

    def _update(self, step: TimeStep, h: Tensor, gates: _Gates, slices: RnnSlice,
                body: Sequence) -> None:
        """``h_t = c + u ∘ (h − c)`` into the state.  Inference with nothing to mask or output
        updates ``h`` in place; otherwise ``h_t`` is a temporary first, saved (masked) into the
        intermediates and outputs, then copied or latched into ``h`` (a padded row keeps its
        state)."""
        graph, n = self.graph, self.name
        update, candidate = gates.update, gates.candidate
        mask = None if step.mask is None else step.mask.expand([1])   # [B, 1]
        if not self.training and mask is None and not slices.outputs:
            map_in_place(graph, ex._3 + ex._2 * (ex._1 - ex._3), [h, update, candidate], body,
                         f"{n}/state")
            return
        new_h = map(graph, ex._1 + ex._2 * (ex._3 - ex._1), [candidate, update, h], body,
                    f"{n}/output")
        if slices.interim_out is not None:
            values = {"r": gates.reset, "u": update, "c": candidate, "h": new_h,
                      "c_rec": gates.candidate_recurrent}
            for k, row in enumerate(self.saved):
                if mask is None:
                    body.add(Copy(values[row], slices.interim_out[k]))
                else:
                    map_with_output(graph, ex._1 * ex._2, [values[row], mask],
                                    slices.interim_out[k], body, f"{n}/save{k}")
        if slices.outputs:
            map_with_output(graph, ex._1 * ex._2, [new_h, mask], slices.outputs[0], body,
                            f"{n}/masked_output")
        if mask is None:
            body.add(Copy(new_h, h))
        else:
            map_in_place(graph, ex._2 * ex._3 + ex._1 * (ex.Const(1.0) - ex._3), [h, new_h, mask],
                         body, f"{n}/latch")


# ---- forward entry points -----------------------------------------------------------------------
def _lengths_for(params: GruParams, real_time_steps: Tensor | None) -> GruParams:
    """``params`` with ``real_time_steps`` as its per-row lengths, refused where poplibs refuses
    ``realTimeSteps``: without outputFullSequence, or beside variable time steps."""
    if real_time_steps is None:
        return params
    expect(isinstance(real_time_steps, Tensor), GrucTypeError,
           f"real_time_steps must be a gruc Tensor of lengths, got {type(real_time_steps).__name__}")
    expect(params.output_full_sequence, GrucValueError,
           "The outputFullSequence should be true if realTimeSteps given")
    expect(params.var_time_steps is None, GrucValueError,
           "variable time steps is not supported when used with real time steps")
    return params.with_lengths(real_time_steps)


def _forward(graph: Graph, params: GruParams, init_state: Tensor, input: Tensor,
             weights: GruWeights, prog: Sequence, save_intermediates: bool,
             real_time_steps: Tensor | None, attention: Tensor | None, name: str,
             options: OptionsLike) -> ForwardResult:
    """The body of ``gru_fwd`` and ``au_gru_fwd``: check every argument, copy the input (and the
    attention scores) into sequence tensors laid out for the shards, then run the cell in the RNN
    loop.  Outputs and intermediates that padded steps would leave unwritten are zeroed first;
    without per-row lengths they are only declared undefined."""
    check_layer_args(graph, params, prog, name or "gru_fwd")
    expect(isinstance(save_intermediates, bool), GrucTypeError,
           f"save_intermediates must be True or False, got {save_intermediates!r}")
    expect(isinstance(name, str), GrucTypeError, f"GRU name must be a string, got {name!r}")
    opts = GruOptions.parse(options)
    params = _lengths_for(params, real_time_steps)
    s, b, i, h = params.max_time_steps, params.batch_size, params.input_size, params.hidden_size
    check_tensor("input", input, (s, b, i), params.dtype)
    check_tensor("initial state", init_state, (b, h), params.dtype)
    check_weights(params, weights)
    if attention is not None:
        check_tensor("AUGRU attention", attention, (b, s), params.dtype)
    check_in_graph(graph, {"input": input, "initial state": init_state, **weights._asdict(),
                           "AUGRU attention": attention, "real_time_steps": real_time_steps})
    shards = num_shards(graph, params, opts)
    rnn_params = params.rnn
    name = name or "gru"
    x = create_input_tensor(graph, rnn_params, shards, f"{name}/input")
    prog.add(Copy(input, x))
    inputs = [x]
    if attention is not None:
        scores = create_recurrent_tensor(graph, rnn_params, 1, shards, f"{name}/attention")
        prog.add(Copy(attention.transpose().expand([2]), scores))
        inputs.append(scores)
    masked = params.rnn.batch_variable_time_steps
    full = params.output_full_sequence
    output_seq = create_output_tensor(graph, rnn_params, shards, f"{name}/output") if full else None
    intermediates = None
    k = len(saved_intermediates(params, opts.recomputation_mode))
    if save_intermediates and k:
        intermediates = create_output_tensor(graph, rnn_params, shards, f"{name}/intermediates",
                                             multiple=k).reshape((s, k, b, h))
        if params.var_time_steps is not None:
            zero(graph, intermediates, prog, f"{name}/zero_intermediates")
        else:
            prog.add(WriteUndef(intermediates))
    state = create_rnn_state(graph, rnn_params, True, 1, shards, f"{name}/state").squeeze([0])
    prog.add(Copy(init_state, state))
    if output_seq is not None:
        if params.var_time_steps is not None:
            zero(graph, output_seq, prog, f"{name}/zero_output")
        else:
            prog.add(WriteUndef(output_seq))
    cell = _Cell(graph, params, _internal_weights(params, weights), opts, save_intermediates,
                 attention is not None, name)
    final = rnn(graph, rnn_params, init_state=[state], inputs=inputs,
                state_sequence=StateSequence(output_seq) if full and not masked else None,
                outputs=[output_seq] if full and masked else [],
                interim_out=intermediates, prog=prog, loop_fn=cell, num_shards=shards,
                var_time_steps=params.var_time_steps,
                code_reuse=opts.rnn_code_reuse if opts.rnn_code_reuse is not None
                else code_reuse_default(shards), name=name)
    return ForwardResult(output_seq if full else final[0], intermediates)


def gru_fwd(graph: Graph, params: GruParams, init_state: Tensor, input: Tensor,
            weights: GruWeights, prog: Sequence, *, save_intermediates: bool = False,
            real_time_steps: Tensor | None = None, name: str = "",
            options: OptionsLike = None) -> ForwardResult:
    """The GRU forward pass (poplibs ``gruFwd``): output ``[S,B,H]`` (or the last state
    ``[B,H]``) and, with ``save_intermediates``, ``[S,k,B,H]`` for the backward pass (what the
    ``recomputationMode`` option keeps: see :class:`~gruc.popnn.gru_params.RecomputationMode`;
    give the backward the same options)."""
    return _forward(graph, params, init_state, input, weights, prog, save_intermediates,
                    real_time_steps, None, name, options)


def au_gru_fwd(graph: Graph, params: GruParams, init_state: Tensor, input: Tensor,
               weights: GruWeights, prog: Sequence, att_scores: Tensor, *,
               save_intermediates: bool = False, real_time_steps: Tensor | None = None,
               name: str = "", options: OptionsLike = None) -> ForwardResult:
    """The AUGRU forward pass (poplibs ``auGruFwd``): ``u ← (1 − a) u`` with ``a`` ``[B, S]``."""
    require_attention("au_gru_fwd", att_scores)
    return _forward(graph, params, init_state, input, weights, prog, save_intermediates,
                    real_time_steps, att_scores, name or "augru", options)


def get_basic_gru_cell_fwd_flops(params: GruParams) -> int:
    _check_params(params, "get_basic_gru_cell_fwd_flops")
    return gru_flops_fwd(params.batch_size, params.max_time_steps, *params.layer_sizes)


def get_basic_gru_cell_bwd_flops(params: GruParams) -> int:
    _check_params(params, "get_basic_gru_cell_bwd_flops")
    return gru_flops_bwd(params.batch_size, params.max_time_steps, *params.layer_sizes,
                         calc_input_gradients=params.calc_input_gradients)


def get_basic_gru_cell_wu_flops(params: GruParams) -> int:
    _check_params(params, "get_basic_gru_cell_wu_flops")
    return gru_flops_wu(params.batch_size, params.max_time_steps, *params.layer_sizes)


__all__ = ["GATES", "Activation", "GruParams", "GruOptions", "GruWeights", "RecomputationMode",
           "ForwardResult", "num_shards", "create_input", "create_initial_state", "create_weights_kernel",
           "create_weights_biases", "create_weights", "create_attention", "zero_initial_state",
           "gru_fwd", "au_gru_fwd", "get_basic_gru_cell_fwd_flops",
           "get_basic_gru_cell_bwd_flops", "get_basic_gru_cell_wu_flops"]


# The backward pass and weight update live in their own module; they are part of this API.
from gruc.popnn.gru_bwd import (GruGradients, au_gru_bwd, au_gru_bwd_with_wu,  # noqa: E402
                                au_gru_wu, gru_bwd, gru_bwd_with_wu, gru_wu,
                                interleaved_wu_is_beneficial)

__all__ += ["GruGradients", "interleaved_wu_is_beneficial", "gru_bwd", "au_gru_bwd",
            "gru_wu", "au_gru_wu", "gru_bwd_with_wu", "au_gru_bwd_with_wu"]
