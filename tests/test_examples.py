"""The examples run, short versions of them, and show what they claim."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str):
    """An example script as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gru_training_step_loss_falls():
    """12 of the example's 50 SGD steps: the loss (noisy, a new batch every step) falls by a
    third, comparing the mean of the last three steps with the first three."""
    losses = load("gru_training_step").main(steps=12, backend="numpy")
    assert len(losses) == 12
    assert sum(losses[-3:]) < 0.75 * sum(losses[:3])
