"""The GRU's ``recomputationMode``: a training layer that saves no gates and recomputes them in
the backward pass gives the saving layer's outputs and gradients bit for bit, plans less memory
and more cycles, and refuses what cannot mean anything."""

from __future__ import annotations

import numpy as np
import pytest

from gruc import FLOAT, Engine, Graph, GrucError, Sequence, Target
from gruc.cli import main as gruc_main
from gruc.errors import GrucOptionError
from gruc.plan.layer import plan_layer
from gruc.popnn import gru
from gruc.tools.gru_layer import GruLayerConfig, build_layer, run_layer
from gruc.popnn.gru_stack import GruStack, GruStackParams

ORDER = ("update", "candidate", "reset")


def small(**overrides) -> GruLayerConfig:
    """A small training layer on 16 tiles (S=4, B=3, I=5, H=6: I + H <= B * S, so the weight
    update is interleaved in the backward loop)."""
    settings = dict(sequence_size=4, batch_size=3, input_size=5, output_size=6,
                    tiles_per_ipu=16, phase="all", backend="numba")
    settings.update(overrides)
    return GruLayerConfig(**settings)


CASES = {
    "float": {},
    "half": {"data_type": "half"},
    "reset-after, cell order": {"reset_after": True, "cell_order": ORDER},
    "AUGRU reset-after": {"with_attention": True, "reset_after": True},
    "last output only": {"output_all_sequence": False},
    "last output only, reset-after, half": {"output_all_sequence": False, "reset_after": True,
                                            "data_type": "half"},
    "per-row lengths": {"variable_time_steps": (4, 2, 3)},
    "one length, AUGRU": {"variable_time_steps": (3,), "with_attention": True},
    "real time steps, no input gradient": {"with_real_time_steps": True,
                                           "ignore_input_gradient": True},
    "3 shards with code reuse": {"sequence_size": 9, "batch_size": 2, "input_size": 16,
                                 "output_size": 8, "tiles_per_ipu": 20, "shards": 3,
                                 "code_reuse": True, "reset_after": True},
    "separate weight-update loop": {"sequence_size": 2, "batch_size": 1, "input_size": 20,
                                    "with_attention": True},
    "backward only": {"phase": "bwd", "reset_after": True},
}


@pytest.mark.parametrize("overrides", CASES.values(), ids=CASES.keys())
def test_recomputation_is_bit_identical_to_saving(overrides):
    saving = run_layer(small(**overrides))
    recomputing = run_layer(small(**overrides, recomputation_mode="full"))
    assert recomputing.passed, recomputing.mismatches
    assert saving.outputs.keys() == recomputing.outputs.keys()
    assert "init_state_grad" in recomputing.outputs
    for name, value in saving.outputs.items():
        assert np.array_equal(value, recomputing.outputs[name]), name


def test_the_separate_weight_update_loop_is_the_one_tested():
    """The case above meant to cover the separate weight-update loop does."""
    params = build_layer(small(**CASES["separate weight-update loop"])).params
    assert not gru.interleaved_wu_is_beneficial(params)
    assert gru.interleaved_wu_is_beneficial(build_layer(small()).params)


def test_full_recomputation_saves_only_the_state_it_lacks():
    """No gate is saved; a last-output layer keeps h alone, a full-sequence one nothing."""
    for full_sequence, expected in ((True, None), (False, (4, 1, 3, 6))):
        graph = Graph(Target.custom(tiles_per_ipu=16))
        params = gru.GruParams(dtype=FLOAT, batch_size=3, max_time_steps=4, layer_sizes=(5, 6),
                               output_full_sequence=full_sequence, reset_after=True)
        options = {"inferenceOnly": False, "recomputationMode": "full"}
        result = gru.gru_fwd(graph, params, gru.create_initial_state(graph, params),
                             gru.create_input(graph, params), gru.create_weights(graph, params),
                             Sequence(), save_intermediates=True, options=options)
        shape = None if result.intermediates is None else result.intermediates.shape
        assert shape == expected


def test_plan_shows_the_memory_saved_and_the_cycles_spent():
    saving = plan_layer(small(sequence_size=40, batch_size=8, input_size=32, output_size=32))
    recomputing = plan_layer(small(sequence_size=40, batch_size=8, input_size=32,
                                   output_size=32, recomputation_mode="full"))
    assert recomputing.report.total_memory < saving.report.total_memory
    assert (recomputing.report.not_always_live_max_bytes.max()
            < saving.report.not_always_live_max_bytes.max())
    assert recomputing.report.cycles.total > saving.report.cycles.total
    names = {variable.name for variable in saving.layer.graph.variables}
    assert "gru/intermediates" in names
    assert "gru/intermediates" not in {v.name for v in recomputing.layer.graph.variables}


def test_a_recomputing_layer_is_planned_as_it_runs():
    """Its loops are counted like a saving layer's: per-row lengths in 3 shards, training."""
    config = small(**CASES["3 shards with code reuse"], variable_time_steps=(9, 4),
                   recomputation_mode="full")
    run = run_layer(config)
    assert run.passed, run.mismatches
    plan = plan_layer(config)
    assert plan.report.cycles == run.engine.report.cycles
    assert plan.report.total_memory == run.engine.report.total_memory


def test_compile_only_report_differs_by_the_flag(capsys):
    """``gruc gru --compile-only`` plans both modes; the recomputing one has more cycles."""
    totals = []
    for mode in ("none", "full"):
        code = gruc_main(["gru", "--phase", "all", "--sequence-size", "6", "--batch-size", "2",
                          "--input-size", "4", "--output-size", "4", "--tiles-per-ipu", "8",
                          "--recomputation-mode", mode, "--compile-only"])
        assert code == 0
        line = next(line for line in capsys.readouterr().out.splitlines()
                    if line.startswith("cycles"))
        totals.append(int(line.split()[1]))
    assert totals[1] > totals[0]


def stack_gradients(options: dict) -> dict[str, np.ndarray]:
    """A two-layer bidirectional stack trained once with ``options``; every gradient read."""
    graph = Graph(Target.custom(tiles_per_ipu=16))
    params = GruStackParams(dtype=FLOAT, max_time_steps=3, batch_size=2, input_size=5,
                            hidden_size=4, num_layers=2, bidirectional=True, cell_order=ORDER)
    stack = GruStack(graph, params, options={"inferenceOnly": False, **options})
    x, h0 = stack.create_input(), stack.create_initial_state()
    prog = Sequence()
    fwd = stack.forward(prog, x, h0, save_intermediates=True)
    grad_out = graph.add_variable(FLOAT, fwd.output.shape, "grad_out")
    graph.map_tensor_linearly(grad_out)
    grads = stack.backward(prog, fwd, grad_out)
    reads = {"x_grad": grads.input_grad, "h0_grad": grads.init_state_grad}
    for layer, directions in enumerate(grads.weights_grad):
        for d, weights in enumerate(directions):
            reads.update({f"{layer}/{d}/{k}": t for k, t in weights._asdict().items()})
    writes = {"x": x, "h0": h0, "grad_out": grad_out, **stack.weight_tensors()}
    for name, tensor in writes.items():
        graph.create_host_write(name, tensor)
    for name, tensor in reads.items():
        graph.create_host_read(name, tensor)
    engine = Engine(graph, [prog], backend="numba")
    rng = np.random.default_rng(7)
    for name, tensor in writes.items():
        engine.write_tensor(name, rng.uniform(-1, 1, tensor.shape).astype(np.float32))
    engine.run(0)
    return {name: engine.read_tensor(name) for name in reads}


def test_stack_with_recomputation_is_bit_identical():
    saving, recomputing = stack_gradients({}), stack_gradients({"recomputationMode": "full"})
    for name, value in saving.items():
        assert np.array_equal(value, recomputing[name]), name


# ---- refusals --------------------------------------------------------------------------------
def test_bad_option_values_are_refused():
    with pytest.raises(GrucOptionError, match="recomputationMode 'cellAndTanh' is not one of: "
                                              "none, full"):
        gru.GruOptions.parse({"recomputationMode": "cellAndTanh"})
    assert gru.GruOptions.parse({"recomputationMode": "FULL"}).recomputation_mode \
        is gru.RecomputationMode.FULL


@pytest.mark.parametrize("flags, message", [
    ({"recomputation_mode": "some"}, "recomputation_mode"),
    ({"recomputation_mode": "full", "save_intermediates": True}, "saves none: drop one"),
    ({"recomputation_mode": "full", "phase": "fwd"}, "only changes training"),
])
def test_layer_config_refusals(flags, message):
    with pytest.raises(GrucError, match=message):
        small(**flags)


@pytest.mark.parametrize("argv, message", [
    (["--recomputation-mode", "partial", "--phase", "all"],
     "--recomputation-mode partial: Input should be 'none' or 'full'"),
    (["--recomputation-mode", "full", "--phase", "all", "--save-intermediates", "1"],
     "saves none: drop one"),
])
def test_cli_refusals_exit_2_with_one_line(argv, message, capsys):
    assert gruc_main(["gru", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_backward_refuses_intermediates_of_another_mode():
    """The forward and the backward must be given the same recomputationMode: either way round
    the backward names what it expected."""
    graph = Graph(Target.custom(tiles_per_ipu=16))
    params = gru.GruParams(dtype=FLOAT, batch_size=3, max_time_steps=4, layer_sizes=(5, 6))
    x, h0 = gru.create_input(graph, params), gru.create_initial_state(graph, params)
    weights = gru.create_weights(graph, params)
    prog = Sequence()
    saving = gru.gru_fwd(graph, params, h0, x, weights, prog, save_intermediates=True)
    grad = graph.add_variable(FLOAT, (4, 3, 6), "grad")
    full = {"recomputationMode": "full"}
    with pytest.raises(GrucError, match="must be None with recomputationMode full"):
        gru.gru_bwd_with_wu(graph, params, prog, h0, saving.intermediates, weights, x,
                            saving.output, grad, options=full)
    last_only = params.model_copy(update={"output_full_sequence": False})
    recomputing = gru.gru_fwd(graph, last_only, h0, x, weights, prog, save_intermediates=True,
                              options=full)
    with pytest.raises(GrucError, match=r"has shape \[4, 1, 3, 6\], the layer needs "
                                        r"\[4, 4, 3, 6\] \(r, u, c, h for this layer with "
                                        r"recomputationMode none"):
        gru.gru_bwd(graph, last_only, prog, h0, recomputing.intermediates, weights, x,
                    recomputing.output, grad[0])
