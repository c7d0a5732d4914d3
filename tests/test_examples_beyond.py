"""Short versions of the "beyond poplibs" examples (SPEC J3) run and show what they claim."""

from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def example_main(name: str):
    """The ``main`` of ``examples/<name>.py`` (run as a plain file, so its ``__main__`` block
    stays idle)."""
    return runpy.run_path(str(EXAMPLES / f"{name}.py"))["main"]


def test_gru_inference_matches_the_reference_with_and_without_shards():
    result = example_main("gru_inference")(sequence=6, batch=2, input_size=8, hidden=8, tiles=16,
                                           backend="numpy")
    assert result["error"] < 1e-5 and result["sharded_error"] < 1e-5
    assert result["shards"] > 1
    assert result["sharded_busiest_tile_bytes"] < result["busiest_tile_bytes"]


def test_augru_forward_and_every_gradient_match_the_reference():
    errors = example_main("augru")(sequence=3, batch=2, input_size=6, hidden=5, tiles=16,
                                   backend="numpy")
    assert set(errors) == {"output", "input_grad", "h0_grad", "attention_grad",
                           "input_weights_grad", "output_weights_grad", "biases_grad"}
    assert max(errors.values()) < 1e-4, errors


def test_load_torch_weights_runs_a_stacked_bidirectional_gru_like_torch():
    errors = example_main("load_torch_weights")(sequence=3, batch=2, input_size=5, hidden=4,
                                                num_layers=2, tiles=16, backend="numpy")
    assert errors["output"] < 1e-5 and errors["final_state"] < 1e-5
    assert errors["round_trip"] == 0.0


def test_planning_study_finds_the_shards_a_long_sequence_needs(tmp_path, capsys):
    """On 16 tiles 6000 steps of the small layer overflow one shard's tiles and fit in four."""
    main = example_main("planning_study")
    rows = main(out=tmp_path, tiles=16, sequences=(6000,), shards=(1, 4), jobs=1)
    fits = {row["shards"]: row["fits"] for row in rows}
    assert fits == {1: False, 4: True}
    assert "6000 steps: fits from 4 shard(s)" in capsys.readouterr().out
    assert (tmp_path / "rows.csv").exists() and (tmp_path / "metrics-shards.png").exists()
    main(out=tmp_path, tiles=16, sequences=(6000,), shards=(1, 4), jobs=1, plots=False)
    assert "(0 computed, 2 resumed)" in capsys.readouterr().out
