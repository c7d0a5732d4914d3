"""The GRU forward pass against the float64 reference, over poplibs' forward test matrix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gruc import FLOAT, Engine, Graph, GrucError, Sequence, Target
from gruc.ir.module import Module
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from gruc.rnn_geometry import get_max_shards
from gruc.popnn import gru, gru_reference
from gruc.tools.gru_layer import GruLayerConfig, build_layer, host_data, run_layer

ORDERS = [("reset", "update", "candidate"), ("update", "candidate", "reset")]
ACTIVATIONS = ["tanh", "sigmoid", "hard_sigmoid", "relu", "softmax"]
RECURRENT = ["tanh", "sigmoid", "hard_sigmoid", "softmax"]


def basic(**overrides) -> GruLayerConfig:
    """poplibs' basic_gru_40x4x38_seq_2 layer on 16 tiles."""
    settings = dict(sequence_size=2, input_size=40, output_size=38, batch_size=4,
                    tiles_per_ipu=16, backend="numpy")
    settings.update(overrides)
    return GruLayerConfig(**settings)


def assert_matches(run, tolerance=1e-4):
    """Max abs error within ``tolerance`` of the largest reference magnitude (values are O(1))."""
    for name, value in run.outputs.items():
        expected = run.expected[name]
        scale = max(1.0, float(np.abs(expected).max()))
        error = float(np.abs(value.astype(np.float64) - expected).max())
        assert error <= tolerance * scale, f"{name}: max abs error {error:.3g}"
    assert run.passed, run.mismatches


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("reset_after", [False, True])
@pytest.mark.parametrize("attention", [False, True])
def test_basic_layer_matrix(order, reset_after, attention):
    assert_matches(run_layer(basic(cell_order=order, reset_after=reset_after,
                                   with_attention=attention)))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("reset_after", [False, True])
@pytest.mark.parametrize("attention", [False, True])
@pytest.mark.parametrize("full", [True, False])
def test_training_forward_saves_every_intermediate(order, reset_after, attention, full):
    run = run_layer(basic(cell_order=order, reset_after=reset_after, with_attention=attention,
                          output_all_sequence=full, save_intermediates=True))
    k = 3 + (not full) + reset_after
    assert run.outputs["intermediates"].shape == (2, k, 4, 38)
    assert_matches(run)


@pytest.mark.parametrize("lengths", [(97, 67, 87), (31,)])
def test_training_forward_intermediates_with_lengths(lengths):
    config = GruLayerConfig(sequence_size=99, input_size=16, output_size=8, batch_size=3,
                            tiles_per_ipu=20, shards=3, variable_time_steps=lengths,
                            reset_after=True, save_intermediates=True, backend="numba")
    run = run_layer(config)
    # c_rec is not needed (and not zeroed by poplibs) at padded steps: compare valid steps only
    limit = np.asarray(lengths if len(lengths) == 3 else lengths * 3)
    valid = np.arange(99)[:, None] < limit[None, :]
    got, want = run.outputs["intermediates"], run.expected["intermediates"]
    np.testing.assert_allclose(got[:, 3][valid], want[:, 3][valid], atol=1e-4)  # c_rec
    np.testing.assert_allclose(got[:, :3], want[:, :3], atol=1e-4)  # r, u, c
    np.testing.assert_allclose(run.outputs["output"], run.expected["output"], atol=1e-4)


@pytest.mark.parametrize("full", [True, False])
def test_last_output_only(full):
    assert_matches(run_layer(basic(output_all_sequence=full)))


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("recurrent", RECURRENT)
def test_activation_combinations(activation, recurrent):
    assert_matches(run_layer(basic(batch_size=1, shards=1, activation=activation,
                                   recurrent_activation=recurrent)))


def test_half_data_within_poplibs_tolerances():
    run = run_layer(basic(data_type="half"))
    assert run.passed, run.mismatches


@pytest.mark.parametrize("shards", [3, 5])
def test_long_sequence_sharded(shards):
    config = GruLayerConfig(sequence_size=200, input_size=16, output_size=8, batch_size=2,
                            tiles_per_ipu=20, shards=shards, backend="numba")
    run = run_layer(config)
    assert run.layer.num_shards == shards
    assert_matches(run)


@pytest.mark.parametrize("reuse", [False, True])
def test_augru_1000_steps_auto_shards_with_and_without_code_reuse(reuse):
    config = GruLayerConfig(sequence_size=1000, input_size=16, output_size=16, batch_size=1,
                            tiles_per_ipu=20, with_attention=True, with_real_time_steps=True,
                            code_reuse=reuse, backend="numba")
    run = run_layer(config)
    assert run.layer.num_shards == 6
    assert_matches(run)


@pytest.mark.parametrize("full", [True, False])
def test_per_row_lengths_zero_padded_steps_and_latch_the_state(full):
    config = GruLayerConfig(sequence_size=99, input_size=16, output_size=8, batch_size=3,
                            tiles_per_ipu=20, shards=3, variable_time_steps=(97, 67, 87),
                            output_all_sequence=full, backend="numba")
    run = run_layer(config)
    assert_matches(run)
    if full:
        assert np.all(run.outputs["output"][67:, 1] == 0)


@pytest.mark.parametrize("full", [True, False])
def test_scalar_length(full):
    config = GruLayerConfig(sequence_size=99, input_size=16, output_size=8, batch_size=2,
                            tiles_per_ipu=20, shards=3, variable_time_steps=(31,),
                            output_all_sequence=full, backend="numba")
    assert_matches(run_layer(config))


def test_results_identical_for_every_shard_count():
    base = dict(sequence_size=30, input_size=16, output_size=8, batch_size=2, tiles_per_ipu=20,
                backend="numba")
    first = None
    layer = build_layer(GruLayerConfig(**base))
    most = get_max_shards(layer.graph.target, layer.params.rnn)
    assert most == 10
    for shards in range(1, most + 1):
        out = run_layer(GruLayerConfig(**base, shards=shards)).outputs["output"]
        if first is None:
            first = out
        np.testing.assert_array_equal(out, first)


def test_reset_after_forward_equals_torch():
    torch.manual_seed(0)
    for s, b, i, h in [(3, 2, 5, 4), (7, 3, 8, 6), (2, 5, 3, 9)]:
        model = torch.nn.GRU(i, h).double()
        x = torch.randn(s, b, i, dtype=torch.float64)
        h0 = torch.randn(1, b, h, dtype=torch.float64)
        expected, last = model(x, h0)
        # torch rows are (r, z, n); gruc's weights are [3, I, H] with gates on dim 0
        wi = model.weight_ih_l0.detach().numpy().reshape(3, h, i).transpose(0, 2, 1)
        wh = model.weight_hh_l0.detach().numpy().reshape(3, h, h).transpose(0, 2, 1)
        biases = np.stack([model.bias_ih_l0.detach().numpy().reshape(3, h),
                           model.bias_hh_l0.detach().numpy().reshape(3, h)], axis=1)
        graph = Graph(Target.custom(tiles_per_ipu=16))
        params = gru.GruParams(dtype=FLOAT, batch_size=b, max_time_steps=s, layer_sizes=(i, h),
                               reset_after=True)
        xt, state = gru.create_input(graph, params), gru.create_initial_state(graph, params)
        weights = gru.create_weights(graph, params)
        prog = Sequence()
        out, _ = gru.gru_fwd(graph, params, state, xt, weights, prog)
        for name, t in {"x": xt, "h0": state, "wi": weights.input_weights,
                        "wh": weights.output_weights, "b": weights.biases}.items():
            graph.create_host_write(name, t)
        graph.create_host_read("out", out)
        engine = Engine(graph, prog, backend="numpy")
        for name, value in {"x": x.numpy(), "h0": h0[0].numpy(), "wi": wi, "wh": wh,
                            "b": biases}.items():
            engine.write_tensor(name, value)
        engine.run()
        got = engine.read_tensor("out").astype(np.float64)
        np.testing.assert_allclose(got, expected.detach().numpy(), atol=1e-5)
        np.testing.assert_allclose(got[-1], last[0].detach().numpy(), atol=1e-5)


def test_shard_heuristic_worked_example_and_range():
    graph = Graph(Target.custom(tiles_per_ipu=20))
    params = gru.GruParams(dtype=FLOAT, batch_size=1, max_time_steps=1000, layer_sizes=(16, 16))
    assert gru.num_shards(graph, params) == 6
    assert gru.num_shards(graph, params, {"numShards": 20}) == 20
    with pytest.raises(GrucError, match=r"interval \[1,20\]"):
        gru.num_shards(graph, params, {"numShards": 21})
    with pytest.raises(GrucError, match=r"interval \[1,20\]"):
        gru.create_input(graph, params, options={"numShards": 0})


def test_poplibs_error_cases():
    graph = Graph(Target.custom(tiles_per_ipu=16))
    with pytest.raises(GrucError, match="layerSize != 2"):
        gru.GruParams(dtype=FLOAT, batch_size=1, max_time_steps=2, layer_sizes=(4, 4, 4))
    lengths = graph.add_variable("unsigned_int", (3,), "len")
    with pytest.raises(GrucError, match="size != batchSize"):
        gru.GruParams(dtype=FLOAT, batch_size=2, max_time_steps=2, layer_sizes=(4, 4),
                      var_time_steps=lengths)
    with pytest.raises(GrucError, match="rank != 1"):
        gru.GruParams(dtype=FLOAT, batch_size=2, max_time_steps=2, layer_sizes=(4, 4),
                      var_time_steps=lengths.reshape((3, 1)))
    params = gru.GruParams(dtype=FLOAT, batch_size=3, max_time_steps=2, layer_sizes=(4, 4),
                           output_full_sequence=False)
    x, h0 = gru.create_input(graph, params), gru.create_initial_state(graph, params)
    weights = gru.create_weights(graph, params)
    with pytest.raises(GrucError, match="outputFullSequence should be true"):
        gru.gru_fwd(graph, params, h0, x, weights, Sequence(), real_time_steps=lengths)
    with_lengths = params.model_copy(update={"output_full_sequence": True,
                                             "var_time_steps": lengths})
    with pytest.raises(GrucError, match="not supported when used with real time steps"):
        gru.gru_fwd(graph, with_lengths, h0, x, weights, Sequence(), real_time_steps=lengths)
    with pytest.raises(GrucError, match="Unrecognised GRU option 'numshards'"):
        gru.create_input(graph, params, options={"numshards": 2})
    with pytest.raises(GrucError, match=r"input has shape \[2, 3, 5\]"):
        gru.gru_fwd(graph, params, h0, graph.add_variable(FLOAT, (2, 3, 5)), weights, Sequence())


def test_ir_size_does_not_grow_with_the_sequence_and_round_trips():
    sizes = []
    for steps in (10, 10_000):
        layer = build_layer(GruLayerConfig(sequence_size=steps, input_size=16, output_size=16,
                                           batch_size=2, tiles_per_ipu=16, shards=1))
        text = print_module(Module(layer.graph, layer.programs))
        sizes.append(len(text.splitlines()))
        if steps == 10:
            assert print_module(parse_module(text)) == text
    assert sizes[0] == sizes[1]


def test_flop_estimators_follow_poplibs_formulas():
    params = gru.GruParams(dtype=FLOAT, batch_size=2, max_time_steps=3, layer_sizes=(4, 5))
    assert gru.get_basic_gru_cell_fwd_flops(params) == 1770
    assert gru.get_basic_gru_cell_bwd_flops(params) == 2760
    assert gru.get_basic_gru_cell_wu_flops(params) == 1800


def test_host_data_uses_poplibs_distributions():
    data, lengths = host_data(basic(with_real_time_steps=True))
    assert data.x.min() >= -4 and data.x.max() <= 4 and np.abs(data.h0).max() <= 3
    assert lengths is not None and lengths.min() >= 1 and lengths.max() <= 2
    assert gru_reference.default_tolerances("half") == (0.3, 7e-2)


def test_zero_initial_state_zeroes_a_state_the_host_wrote():
    graph = Graph(Target.custom(tiles_per_ipu=16))
    params = gru.GruParams(dtype=FLOAT, batch_size=2, max_time_steps=3, layer_sizes=(4, 5))
    state = gru.create_initial_state(graph, params)
    graph.create_host_write("h", state)
    graph.create_host_read("h", state)
    prog = Sequence()
    gru.zero_initial_state(graph, state, prog)
    engine = Engine(graph, prog, backend="numpy")
    engine.write_tensor("h", np.ones(state.shape))
    engine.run()
    assert not engine.read_tensor("h").any()
