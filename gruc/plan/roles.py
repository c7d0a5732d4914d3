"""Memory by role: what a planned layer's bytes are *for*, over the chip and on its fullest tile.

Poplar's categories (variables, vertex state, code, ...) say what kind of bytes a tile holds; a
planner choosing between recomputation, a memory budget or a shard count asks what they are for:
the weights, their gradients, the transposed copies the backward pass reads, the intermediates
saved for it, the activation sequences, the products' partial sums, the exchange's landing
buffers, vertex state and code.  Each tensor's role is read off the compiled module, not its
names where the structure says it:

* **weights**: the variables of host-written tensors the tool calls weights or biases
  (``input_weights``, ``weights``, ``biases``, ...);
* **weight gradients**: the variables of host-read gradients of those (``..._weights_grad``,
  ``biases_grad``) and the accumulators a weight update sums into (``..._acc``);
* **transposed weights**: a variable a ``Copy`` or a ``Transpose`` vertex fills from the weights
  alone — poplin's pre-arranged (transposed) weights for the backward products;
* **saved intermediates**: the gates a training forward saves for its backward pass (and the
  backward's for a separate weight update): the variables named ``...intermediates``;
* **activations**: the sequences the time loops slice and update, and the other host-visible
  tensors (a layer's inputs, outputs and their gradients);
* **matmul partials**: the partial sums a product's ``MatMulPartials`` vertices write;
* **other tensors**: everything else (state, per-step temporaries, counters, constants);
* **exchange buffers**, **vertex state** and **code**: Poplar's ``message``, vertex instance
  state and field data, and vertex, control and exchange code categories.

The figures decompose Poplar's total exactly: a tile's bytes are its always-live ones plus the
not-always-live ones live at its peak step (the step :class:`~gruc.runtime.footprint.Footprint`
found), so the roles over the chip add up to the row's ``total_memory``, and those of the
fullest tile (the one with the highest address in use, the ``max_tile_bytes`` tile) to that
tile's always-live bytes and not-always-live peak.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gruc.ir.codelets.dynamic import DYNAMIC_SLICE, DYNAMIC_UPDATE
from gruc.ir.codelets.matmul import MATMUL_PARTIALS
from gruc.ir.codelets.transpose import TRANSPOSE
from gruc.ir.module import Module
from gruc.ir.program import Copy, Execute
from gruc.ir.tensor import Tensor
from gruc.runtime.report import Report

TENSOR_ROLES = ("weights", "weight_gradients", "transposed_weights", "saved_intermediates",
                "activations", "matmul_partials", "other_tensors")
"""Roles of tensor data (see the module docstring), in the order a variable is given the first
that applies."""

CATEGORY_ROLES = {"exchange_buffers": ("message",),
                  "vertex_state": ("vertexInstanceState", "vertexFieldData"),
                  "code": ("vertexCode", "controlCode", "internalExchangeCode")}
"""Roles that are Poplar categories besides tensor data."""

ROLES = TENSOR_ROLES + tuple(CATEGORY_ROLES)

ROLE_COLUMNS = (*(f"role_{role}" for role in ROLES),
                *(f"fullest_tile_role_{role}" for role in ROLES),
                "fullest_tile", "fullest_tile_peak_step")
"""Row columns: bytes by role over the chip, then on the fullest tile, which tile that is and the
step of its not-always-live peak (None: none)."""


def _host_variables(tensors: dict, keep) -> set[int]:
    return {v.index for name, tensor in tensors.items() if keep(name)
            for v in tensor.variables()}


def _is_weight(name: str) -> bool:
    return name.endswith(("weights", "biases"))


def _is_weight_gradient(name: str) -> bool:
    return name.endswith("_grad") and _is_weight(name.removesuffix("_grad"))


def variable_roles(module: Module) -> np.ndarray:
    """The role of every variable of ``module``'s graph: an index into :data:`TENSOR_ROLES`."""
    graph = module.graph
    role = np.full(len(graph.variables), TENSOR_ROLES.index("other_tensors"), dtype=np.int64)
    weights = _host_variables(graph.host_writes, _is_weight)
    gradients = _host_variables(graph.host_reads, _is_weight_gradient) | {
        v.index for v in graph.variables if v.name.endswith("_acc")}
    transposed, partials, sliced = set(), set(), set()

    def from_weights(source: Tensor, target: Tensor) -> None:
        """A variable filled from the weights alone holds them rearranged for a product."""
        sources = {v.index for v in source.variables()}
        targets = target.variables()
        if sources and sources <= weights and len(targets) == 1 \
                and targets[0].index not in weights:
            transposed.add(targets[0].index)

    for node in module.walk():
        if isinstance(node, Copy):
            from_weights(node.src, node.dst)
        elif isinstance(node, Execute):
            for vertex in node.compute_set.vertices:
                if vertex.kind is TRANSPOSE:
                    from_weights(vertex.fields["in"], vertex.fields["out"])
                elif vertex.kind is MATMUL_PARTIALS:
                    partials.update(v.index for v in vertex.fields["partials"].variables())
                elif vertex.kind in (DYNAMIC_SLICE, DYNAMIC_UPDATE):
                    sliced.update(v.index for v in vertex.fields["base"].variables())
    saved = {v.index for v in graph.variables if v.name.endswith("intermediates")}
    host = {v.index for table in (graph.host_writes, graph.host_reads)
            for tensor in table.values() for v in tensor.variables()}
    # the first role that applies wins: assigned in reverse order of precedence
    for name, members in reversed((("weights", weights), ("weight_gradients", gradients),
                                   ("transposed_weights", transposed),
                                   ("saved_intermediates", saved),
                                   ("activations", sliced | host),
                                   ("matmul_partials", partials))):
        if members:
            role[sorted(members)] = TENSOR_ROLES.index(name)
    return role


def memory_by_role(report: Report) -> dict[str, Any]:
    """The :data:`ROLE_COLUMNS` of a plan's report (which must carry its module and plan)."""
    module, plan = report.details.module, report.details.plan
    footprint = report.footprint
    roles = variable_roles(module)
    peak_step = footprint.peak_step
    always = np.zeros(len(module.graph.variables), dtype=bool)
    always[list(plan.liveness.always_live)] = True
    block_always = always[plan.block_variable]
    in_peak = block_always.copy()
    nal = np.flatnonzero(~block_always & (peak_step[plan.block_tile] >= 0))
    if len(nal):
        variables = np.unique(plan.block_variable[nal])
        live = plan.liveness.step_matrix(variables)
        rows = np.searchsorted(variables, plan.block_variable[nal])
        in_peak[nal] = live[rows, peak_step[plan.block_tile[nal]]]
    counted = np.where(in_peak, plan.block_size, 0)
    block_role = roles[plan.block_variable]
    fullest = int(np.argmax(footprint.total_including_gaps))
    on_fullest = plan.block_tile == fullest
    values: dict[str, Any] = {}
    for scope, blocks, tiles in (("role_", np.ones(len(counted), dtype=bool), slice(None)),
                                 ("fullest_tile_role_", on_fullest, fullest)):
        sums = np.bincount(block_role[blocks], weights=counted[blocks],
                           minlength=len(TENSOR_ROLES))
        values.update({f"{scope}{role}": int(sums[k]) for k, role in enumerate(TENSOR_ROLES)})
        for role, categories in CATEGORY_ROLES.items():
            values[f"{scope}{role}"] = int(sum(
                np.sum((footprint.always_live.get(c, footprint.not_always_live.get(c)))[tiles])
                for c in categories))
    step = int(peak_step[fullest])
    values.update(fullest_tile=fullest, fullest_tile_peak_step=None if step < 0 else step)
    return values
