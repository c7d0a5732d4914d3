"""Stacked and bidirectional GRUs composed from the layer API (what PopTorch and PopART refuse).

:class:`GruStack` is ``torch.nn.GRU(input_size, hidden_size, num_layers, bidirectional=...)`` on
the simulated IPU, built only from :func:`gruc.popnn.gru.gru_fwd` and
:func:`gruc.popnn.gru.gru_bwd_with_wu`: every layer and direction is an ordinary poplibs GRU layer
with its own weights, run one after another.  Shapes follow PyTorch (time-major): input
``[S, B, I]``, output ``[S, B, D·H]`` with the directions side by side on the feature axis
(forward first), initial and final states ``[L·D, B, H]`` indexed ``layer·D + direction``.
Layer ``l > 0`` takes the previous layer's ``[S, B, D·H]`` output as its input.

**The reverse direction is a view, not a second cell.**  It runs the ordinary forward layer on
``input.reverse(0)`` and reads its output back through ``output.reverse(0)``.  ``gru_fwd`` copies
whatever input it is given into its own sharded sequence tensor anyway, so the reversal costs
nothing extra: the same copy moves the same bytes, only in the opposite step order, and the output
side is a pure view.  The backward pass then needs nothing new either: for ``gru_bwd_with_wu`` the
reverse direction *is* a forward layer over a reversed sequence, so its gradients come from the
same builder with the output gradient reversed by a view, and its input gradient is reversed back
the same way.  The RNN builder's ``reverse=True`` mode would instead need a reverse-time entry
point to the forward pass and a forward-time loop for its backward (whose own loop already runs in
reverse) — a second version of both passes — for no gain in memory or cycles.  (PopART's
"reverse" GRU is the same ``reverse(0)`` trick.)

Each direction's final state is its output at its own last processed step: ``output[S-1]`` forward,
``output[0]`` reverse — which is why the stack needs ``output_full_sequence`` and why per-row
sequence lengths are not offered (a padded reverse sequence would have to start at each row's own
last step, which a whole-sequence view cannot express).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np
from pydantic import Field, field_validator

from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError, expect
from gruc.ir import expr as ex
from gruc.ir.graph import Graph
from gruc.ir.program import Copy
from gruc.ir.program import Sequence as Program
from gruc.ir.tensor import Tensor, concat
from gruc.ops.elementwise import map, map_in_place
from gruc.popnn import gru
from gruc.popnn.gru_io import GruHostWeights
from gruc.popnn.gru_params import GATES, FloatDType, GruOptions, GruParams, GruWeights
from gruc.popnn.gru_reference import normalize_cell_order
from gruc.validated import GrucModel

DIRECTION_SUFFIXES = ("", "_reverse")
"""PyTorch's suffix for each direction's parameter names (``weight_ih_l0_reverse``)."""


class GruStackParams(GrucModel):
    """The shape and variant of a stack of GRU layers (PyTorch ``nn.GRU``'s constructor)."""

    dtype: FloatDType = Field(
        description="Element type of activations and weights (HALF or FLOAT).")
    batch_size: int = Field(ge=1, description="Batch rows B.")
    max_time_steps: int = Field(ge=1, description="Sequence length S.")
    input_size: int = Field(ge=1, description="Features I of the stack's input.")
    hidden_size: int = Field(ge=1, description="Hidden units H of every layer and direction.")
    num_layers: int = Field(1, ge=1, description="Layers L; layer l > 0 reads layer l-1's output.")
    bidirectional: bool = Field(False, description="A second, time-reversed direction per layer.")
    reset_after: bool = Field(False, description="Reset gate after the matmul (PyTorch: True).")
    cell_order: tuple[str, str, str] = Field(GATES, description="Gate order of dim 0 of weights.")
    calc_input_gradients: bool = Field(
        True, description="Backward computes the stack input's gradient (inner layers always do).")

    @field_validator("cell_order", mode="before")
    @classmethod
    def _cell_order(cls, value: Any) -> tuple[str, str, str]:
        return normalize_cell_order(value)

    @classmethod
    def for_weights(cls, weights: Sequence[Sequence[GruHostWeights]], *, dtype: Any,
                    batch_size: int, max_time_steps: int, **settings: Any) -> "GruStackParams":
        """The stack that ``weights[layer][direction]`` (e.g. from
        :func:`~gruc.popnn.gru_io.from_torch_stack`) fits: sizes, depth, directions, reset
        placement and cell order from the weights."""
        expect(len(weights) > 0 and all(len(layer) in (1, 2) for layer in weights),
               GrucValueError, "weights must be a non-empty list of layers, each 1 or 2 "
               f"directions; got {[len(layer) for layer in weights]} directions per layer")
        first = weights[0][0]
        return cls(dtype=dtype, batch_size=batch_size, max_time_steps=max_time_steps,
                   input_size=first.input_size, hidden_size=first.hidden_size,
                   num_layers=len(weights), bidirectional=len(weights[0]) == 2,
                   reset_after=first.reset_after, cell_order=first.cell_order, **settings)

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def num_states(self) -> int:
        """Rows of the initial and final state tensors: ``L·D``."""
        return self.num_layers * self.num_directions

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.num_directions * self.hidden_size

    def layer_params(self, layer: int) -> GruParams:
        """The :class:`GruParams` of every direction of ``layer``."""
        expect(0 <= layer < self.num_layers, GrucValueError,
               f"layer {layer} is not in 0..{self.num_layers - 1}")
        return GruParams(dtype=self.dtype, batch_size=self.batch_size,
                         max_time_steps=self.max_time_steps,
                         layer_sizes=(self.layer_input_size(layer), self.hidden_size),
                         reset_after=self.reset_after, cell_order=self.cell_order,
                         calc_input_gradients=layer > 0 or self.calc_input_gradients)


def weight_key(layer: int, direction: int, field: str) -> str:
    """The host-stream key of one weight tensor, PyTorch-style: ``l1_reverse/biases``."""
    return f"l{layer}{DIRECTION_SUFFIXES[direction]}/{field}"


class DirectionRun(NamedTuple):
    """One direction of one layer as its forward ran: what its backward pass needs."""

    init_state: Tensor
    input: Tensor          # in the direction's processing order
    output: Tensor         # [S, B, H] in processing order
    intermediates: Tensor | None


class StackForward(NamedTuple):
    """:meth:`GruStack.forward`'s result."""

    output: Tensor         # [S, B, D·H] (a view over the last layer's direction outputs)
    final_state: Tensor    # [L·D, B, H] (a view: each direction's last processed step)
    runs: tuple[tuple[DirectionRun, ...], ...]   # [layer][direction], for the backward pass
    training: bool = False  # saved what the backward needs (save_intermediates)


class StackGradients(NamedTuple):
    """:meth:`GruStack.backward`'s result; weight gradients in the stack's cell order."""

    input_grad: Tensor | None                          # [S, B, I] if calc_input_gradients
    init_state_grad: Tensor                            # [L·D, B, H]
    weights_grad: tuple[tuple[GruWeights, ...], ...]   # [layer][direction]


class GruStack:
    """Builds a stack of GRU layers: its weights at construction, then its forward and backward.

    ``options`` are poplibs' GRU options, used for every layer (give a stack that will be
    trained ``{"inferenceOnly": False}`` as poplibs asks; gruc's layouts do not depend on it, see
    ``docs/gru-deviations.md``).
    """

    def __init__(self, graph: Graph, params: GruStackParams, *, name: str = "gru_stack",
                 options: gru.OptionsLike = None) -> None:
        expect(isinstance(params, GruStackParams), GrucTypeError,
               f"GruStack needs GruStackParams, got {type(params).__name__}")
        self.graph = graph
        self.params = params
        self.name = name
        self.options = GruOptions.parse(options)
        self.weights: tuple[tuple[GruWeights, ...], ...] = tuple(
            tuple(gru.create_weights(graph, params.layer_params(layer),
                                     f"{name}/l{layer}{DIRECTION_SUFFIXES[d]}", self.options)
                  for d in range(params.num_directions))
            for layer in range(params.num_layers))

    # ---- tensors the caller feeds ----------------------------------------------------------------
    def create_input(self, name: str = "input") -> Tensor:
        """``[S, B, I]``, laid out like the first layer's input sequence."""
        return gru.create_input(self.graph, self.params.layer_params(0), f"{self.name}/{name}",
                                self.options)

    def create_initial_state(self, name: str = "init_state") -> Tensor:
        """``[L·D, B, H]``; each row is copied into its layer's own state tensor, so a linear
        mapping serves."""
        p = self.params
        state = self.graph.add_variable(p.dtype, (p.num_states, p.batch_size, p.hidden_size),
                                        f"{self.name}/{name}")
        self.graph.map_tensor_linearly(state)
        return state

    def weight_tensors(self) -> dict[str, Tensor]:
        """Every weight tensor by :func:`weight_key` (for ``graph.create_host_write``)."""
        return {weight_key(layer, d, field): tensor
                for layer, directions in enumerate(self.weights)
                for d, weights in enumerate(directions)
                for field, tensor in weights._asdict().items()}

    def weight_values(self, host: Sequence[Sequence[GruHostWeights]]) -> dict[str, np.ndarray]:
        """``host[layer][direction]`` as arrays by :func:`weight_key`, permuted to the stack's
        cell order; refuses weights that do not fit the stack."""
        p = self.params
        expect(len(host) == p.num_layers
               and all(len(layer) == p.num_directions for layer in host), GrucShapeError,
               f"the stack has {p.num_layers} layers of {p.num_directions} directions; the host "
               f"weights have {[len(layer) for layer in host]} directions per layer")
        values = {}
        for layer, directions in enumerate(host):
            for d, weights in enumerate(directions):
                expected = (p.layer_input_size(layer), p.hidden_size, p.reset_after)
                got = (weights.input_size, weights.hidden_size, weights.reset_after)
                expect(got == expected, GrucShapeError,
                       f"layer {layer} direction {d}: host weights have (I, H, reset_after) = "
                       f"{got}, the stack needs {expected}")
                for field, array in weights.in_order(p.cell_order).arrays().items():
                    values[weight_key(layer, d, field)] = array
        return values

    # ---- forward ---------------------------------------------------------------------------------
    def forward(self, prog: Program, input: Tensor, init_state: Tensor, *,
                save_intermediates: bool = False) -> StackForward:
        """Run every layer and direction; ``save_intermediates`` keeps what :meth:`backward`
        needs (a training forward)."""
        p = self.params
        s, b, h, d_count = p.max_time_steps, p.batch_size, p.hidden_size, p.num_directions
        expect(input.shape == (s, b, p.input_size), GrucShapeError,
               f"stack input has shape {list(input.shape)}, the stack needs "
               f"{[s, b, p.input_size]}")
        expect(init_state.shape == (p.num_states, b, h), GrucShapeError,
               f"stack initial state has shape {list(init_state.shape)}, the stack needs "
               f"{[p.num_states, b, h]} (layers × directions, batch, hidden)")
        layer_input = input
        runs, finals = [], []
        for layer in range(p.num_layers):
            params = p.layer_params(layer)
            layer_runs, outputs = [], []
            for d in range(d_count):
                x = layer_input if d == 0 else layer_input.reverse(0)
                h0 = init_state[layer * d_count + d]
                out, intermediates = gru.gru_fwd(
                    self.graph, params, h0, x, self.weights[layer][d], prog,
                    save_intermediates=save_intermediates,
                    name=f"{self.name}/l{layer}{DIRECTION_SUFFIXES[d]}", options=self.options)
                layer_runs.append(DirectionRun(h0, x, out, intermediates))
                outputs.append(out if d == 0 else out.reverse(0))
                finals.append(out[s - 1].expand([0]))
            runs.append(tuple(layer_runs))
            layer_input = outputs[0] if d_count == 1 else concat(outputs, 2)
        return StackForward(layer_input, concat(finals, 0), tuple(runs), save_intermediates)

    # ---- backward --------------------------------------------------------------------------------
    def backward(self, prog: Program, fwd: StackForward, grad_output: Tensor,
                 grad_final_state: Tensor | None = None) -> StackGradients:
        """Gradients of the input, the initial states and every weight, given the gradients of
        the output ``[S, B, D·H]`` and (optionally) of the final states ``[L·D, B, H]``.

        Layers run last to first; a layer's input gradient (both directions summed, the reverse
        one un-reversed) is the gradient of the previous layer's output.  A final state is its
        direction's output at its last processed step, so its gradient is added there.
        """
        p = self.params
        s, b, h, d_count = p.max_time_steps, p.batch_size, p.hidden_size, p.num_directions
        expect(fwd.training, GrucValueError, "the stack's backward needs a training forward: call forward() "
               "with save_intermediates=True")
        expect(grad_output.shape == (s, b, d_count * h), GrucShapeError,
               f"output gradient has shape {list(grad_output.shape)}, the stack's output is "
               f"{[s, b, d_count * h]}")
        if grad_final_state is not None:
            expect(grad_final_state.shape == (p.num_states, b, h), GrucShapeError,
                   f"final-state gradient has shape {list(grad_final_state.shape)}, the stack's "
                   f"final state is {[p.num_states, b, h]}")
        init_grads: list[Tensor | None] = [None] * p.num_states
        weights_grads: list[tuple[GruWeights, ...]] = [()] * p.num_layers
        grad_seq = grad_output
        for layer in reversed(range(p.num_layers)):
            params = p.layer_params(layer)
            input_grads, layer_weight_grads = [], []
            for d in range(d_count):
                run, index = fwd.runs[layer][d], layer * d_count + d
                grad = grad_seq[:, :, d * h:(d + 1) * h]
                if d == 1:
                    grad = grad.reverse(0)
                if grad_final_state is not None:
                    grad = self._with_final_state_grad(grad, run.output,
                                                       grad_final_state[index], prog, index)
                grads = gru.gru_bwd_with_wu(
                    self.graph, params, prog, run.init_state, run.intermediates,
                    self.weights[layer][d], run.input, run.output, grad,
                    name=f"{self.name}/l{layer}{DIRECTION_SUFFIXES[d]}/bwd", options=self.options)
                init_grads[index] = grads.init_state_grad.expand([0])
                layer_weight_grads.append(grads.weights_grad)
                if grads.input_grad is not None:
                    input_grads.append(grads.input_grad if d == 0 else grads.input_grad.reverse(0))
            weights_grads[layer] = tuple(layer_weight_grads)
            if not input_grads:
                grad_seq = None
            elif len(input_grads) == 1:
                grad_seq = input_grads[0]
            else:
                grad_seq = map(self.graph, ex._1 + ex._2, input_grads, prog,
                               f"{self.name}/l{layer}/input_grad")
        return StackGradients(grad_seq, concat(init_grads, 0), tuple(weights_grads))

    def _with_final_state_grad(self, grad: Tensor, output: Tensor, final_grad: Tensor,
                               prog: Program, index: int) -> Tensor:
        """``grad`` with ``final_grad`` added at the last processed step, in a tensor laid out
        like the layer's output (the layout its backward reads the gradient in)."""
        total = self.graph.clone(output, f"{self.name}/state{index}/grad_output")
        prog.add(Copy(grad, total))
        map_in_place(self.graph, ex._1 + ex._2, [total[self.params.max_time_steps - 1],
                                                 final_grad], prog,
                     f"{self.name}/state{index}/final_grad")
        return total


__all__ = ["DIRECTION_SUFFIXES", "GruStackParams", "GruStack", "DirectionRun", "StackForward",
           "StackGradients", "weight_key"]
