"""Fuzzing the GRU layer (issue #12, item 2): random small configurations through forward,
backward and weight update agree with the float64 reference (``gruc.popnn.gru_reference``).

Why random configurations: the layer's variants multiply — reset-after, cell order, AUGRU, per-row
lengths (fixed or random), last-step-only output, ignored input gradient, saved intermediates,
activations, shards, the tile count that decides every mapping — and a bug hides in a corner the
poplibs test matrix does not visit (a 1-unit layer on 3 tiles, a 1-row batch, a length-1
sequence).  Sizes stay within B, I, H <= 6 and S <= 4 so an example runs in a fraction of a
second.

The check: every tensor the layer reads back is within ``1e-4`` (float) of the reference, relative
to the larger of 1 and the reference's largest magnitude, and passes poplibs' ``checkIsClose``
with the layer's tolerances (``half`` runs use only the latter).
"""

from __future__ import annotations

import numpy as np
from hypothesis import assume, event, given
from hypothesis import strategies as st

from gruc.errors import GrucOptionError
from gruc.tools.gru_layer import GruLayerConfig, run_layer
from hardening_fuzz import fuzz_settings

GATES = ("reset", "update", "candidate")
ACTIVATIONS = ["tanh", "tanh", "sigmoid", "relu", "hard_sigmoid"]
RECURRENT = ["sigmoid", "sigmoid", "tanh", "hard_sigmoid"]


@st.composite
def configs(draw) -> GruLayerConfig:
    """A valid small layer configuration (the exclusive options are drawn consistently)."""
    batch, steps = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    lengths = draw(st.sampled_from(["none", "none", "one", "per_row", "random"]))
    variable = None
    if lengths == "one":
        variable = (draw(st.integers(1, steps)),)
    elif lengths == "per_row":
        variable = tuple(draw(st.integers(1, steps)) for _ in range(batch))
    return GruLayerConfig(
        sequence_size=steps, input_size=draw(st.integers(1, 6)),
        output_size=draw(st.integers(1, 6)), batch_size=batch,
        data_type=draw(st.sampled_from(["float", "float", "float", "half"])),
        phase=draw(st.sampled_from(["fwd", "bwd", "wu", "all"])),
        reset_after=draw(st.booleans()), cell_order=draw(st.permutations(GATES)),
        activation=draw(st.sampled_from(ACTIVATIONS)),
        recurrent_activation=draw(st.sampled_from(RECURRENT)),
        shards=draw(st.none() | st.integers(1, steps)),
        with_attention=draw(st.booleans()), variable_time_steps=variable,
        with_real_time_steps=lengths == "random",
        output_all_sequence=lengths == "random" or draw(st.booleans()),
        ignore_input_gradient=draw(st.booleans()), save_intermediates=draw(st.booleans()),
        tiles_per_ipu=draw(st.integers(1, 8)), seed=draw(st.integers(0, 2 ** 16)),
        backend=draw(st.sampled_from(["numpy", "numba"])))


@fuzz_settings(ci=30)
@given(configs())
def test_random_gru_configurations_match_the_float64_reference(config):
    try:
        run = run_layer(config)
    except GrucOptionError as error:  # more shards than the layer can take: refused, by name
        assert config.shards is not None and "numShards" in str(error), error
        event("numShards refused")
        assume(False)
    event(f"phase {config.phase}")
    event(f"{config.data_type}, {config.backend}")
    for name, value in run.outputs.items():
        expected = run.expected[name]
        assert value.shape == expected.shape, name
        if config.data_type == "float":
            scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
            error = float(np.abs(value.astype(np.float64) - expected).max(initial=0.0))
            assert error <= 1e-4 * scale, f"{name}: max abs error {error:.3g} (scale {scale:.3g})"
    assert run.passed, run.mismatches
    wanted = {"output"} | ({"init_state_grad"} if config.phase != "fwd" else set())
    assert wanted <= set(run.outputs)


@fuzz_settings(ci=12)
@given(configs(), st.integers(1, 128), st.sampled_from(["half", "half", "float"]))
def test_random_training_layers_agree_across_engines(config, tiles, data_type):
    """The numba engine against the numpy interpreter (the definition of every vertex) on the same
    training layer, half data included, over more tiles than above.  The reference check alone
    is loose for half data (rel 0.3, abs 0.07): a stale operand once passed it in some
    configurations and failed it in others (the weight update reading the forward's input slice,
    both planned on the same bytes).  The engines differ only in how products order their sums."""
    assume(config.phase != "fwd")
    settings = {**config.model_dump(), "tiles_per_ipu": tiles, "data_type": data_type}
    try:
        runs = [run_layer(GruLayerConfig(**{**settings, "backend": backend}))
                for backend in ("numpy", "numba")]
    except GrucOptionError:
        assume(False)
    event(f"{data_type}, phase {config.phase}")
    reference, fast = (run.outputs for run in runs)
    assert set(reference) == set(fast)
    for name, value in reference.items():
        scale = max(1.0, float(np.abs(value.astype(np.float64)).max(initial=0.0)))
        error = float(np.abs(fast[name].astype(np.float64) - value).max(initial=0.0))
        tolerance = 2e-2 if config.data_type == "half" else 1e-4
        assert error <= tolerance * scale, f"{name}: engines differ by {error:.3g} ({scale:.3g})"
