"""Memory by role (:mod:`gruc.plan.roles`): what the bytes of a plan are for, adding up to
Poplar's total over the chip and to the fullest tile's, and the plots a paper draws from it."""

from __future__ import annotations

import pytest

from gruc.plan import plan_row
from gruc.plan.layers import plan_config
from gruc.plan.plots import plot_roles, plot_roofline
from gruc.plan.roles import ROLE_COLUMNS, ROLES, TENSOR_ROLES, memory_by_role, variable_roles
from gruc.tools.gru_layer import GruLayerConfig
from gruc.tools.products import FcConfig

TRAINING = GruLayerConfig(phase="all", batch_size=4, sequence_size=6, input_size=32,
                          output_size=48, tiles_per_ipu=16)


def _roles_of(plan) -> dict[str, str]:
    """Role by variable name, and by host tensor name for the host-visible ones (``host:x``)."""
    module = plan.report.details.module
    roles = variable_roles(module)
    found = {v.name: TENSOR_ROLES[roles[v.index]] for v in module.graph.variables
             if v.index in plan.report.details.plan.allocated}
    for table in (module.graph.host_writes, module.graph.host_reads):
        for name, tensor in table.items():
            found[f"host:{name}"] = TENSOR_ROLES[roles[tensor.variables()[0].index]]
    return found


@pytest.mark.parametrize("config", [TRAINING, TRAINING.model_copy(update={"phase": "fwd"}),
                                    FcConfig(batch_size=16, input_size=64, output_size=32,
                                             tiles_per_ipu=16)],
                         ids=["gru training", "gru forward", "fc"])
def test_roles_add_up_to_poplars_total_and_to_the_fullest_tile(config):
    plan = plan_config(config, None)
    report = plan.report
    values = memory_by_role(report)
    assert sum(values[f"role_{role}"] for role in ROLES) == report.total_memory
    tile = values["fullest_tile"]
    assert report.total_bytes[tile] == report.max_tile_bytes  # the highest address in use
    footprint = report.footprint
    assert sum(values[f"fullest_tile_role_{role}"] for role in ROLES) == \
        footprint.always_live_bytes[tile] + footprint.not_always_live_peak[tile]
    assert all(values[f"role_{role}"] >= values[f"fullest_tile_role_{role}"] >= 0
               for role in ROLES)


def test_a_training_gru_layers_tensors_get_their_roles():
    roles = _roles_of(plan_config(TRAINING, None))
    assert roles["weights/ru"] == roles["weights/biases"] == "weights"
    assert roles["gru_bwd_wu/wu/ru_acc"] == roles["gru_bwd_wu/wu/bias_acc"] == "weight_gradients"
    assert roles["gru/intermediates"] == "saved_intermediates"
    assert roles["host:input"] == roles["host:output"] == roles["host:grad_output"] \
        == roles["host:input_grad"] == "activations"
    assert roles["gru/ru.partials"] == "matmul_partials"


def test_the_fc_layers_backward_weights_are_the_transposed_weights():
    roles = _roles_of(plan_config(FcConfig(batch_size=16, input_size=64, output_size=32,
                                           tiles_per_ipu=16), None))
    assert roles["weights_bwd"] == "transposed_weights"
    assert roles["weights"] == "weights" and roles["prevAct"] == "activations"


def test_recomputation_shows_in_the_intermediates_role():
    """Full recomputation saves no forward gates: what is left of the role is the backward's
    own, saved for the separate weight-update loop."""
    saving, recomputing = (plan_row(TRAINING.model_copy(update={"recomputation_mode": mode}))
                           for mode in ("none", "full"))
    assert saving["role_saved_intermediates"] > recomputing["role_saved_intermediates"]
    assert all(column in saving for column in ROLE_COLUMNS)
    roles = _roles_of(plan_config(TRAINING.model_copy(update={"recomputation_mode": "full"}),
                                  None))
    assert "gru/intermediates" not in roles
    assert roles["gru_bwd_wu/bwd_intermediates"] == "saved_intermediates"


def test_role_and_roofline_plots_are_drawn_from_rows_and_skip_rows_without_figures(tmp_path):
    rows = [plan_row(TRAINING.model_copy(update={"batch_size": b}), ("batch_size",))
            for b in (2, 4)]
    for plot, name in ((plot_roles, "roles.png"), (plot_roofline, "roofline.png")):
        path = plot(rows, ["batch_size"], tmp_path / name)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        old = [{**row, **{c: None for c in ROLE_COLUMNS}, "exchange_peak_bytes_per_cycle": None}
               for row in rows]  # rows an older gruc wrote
        assert plot(old, ["batch_size"], tmp_path / f"old-{name}") is None
