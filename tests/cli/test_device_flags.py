"""The flags that pick the device and how its memory is counted: ``--device-type``,
``--compile-ipu-code``, ``--memory-model`` and ``--ignore-data``, through ``gruc gru``."""

from __future__ import annotations

import re

import pytest

from cli_helpers import SMALL, gruc


def _category(out: str, name: str) -> int:
    """All tiles' bytes of a category in the summary."""
    found = re.search(rf"^    {re.escape(name)}\s+(\d+) B", out, re.MULTILINE)
    assert found, (name, out)
    return int(found.group(1))


@pytest.mark.parametrize("device, capacity, interleaved", [("ipu1", 262144, 131072),
                                                            ("ipu2", 638976, 212992)])
def test_device_type_sets_the_tiles_and_their_interleaved_region(device, capacity, interleaved,
                                                                  capsys):
    # products wide enough for the AMP, whose partial sums lie in the interleaved region (the
    # tiny layer's products are MACs, whose partials need no interleaved memory)
    layer = ["--sequence-size", "2", "--input-size", "64", "--output-size", "64",
             "--batch-size", "8", "--tiles-per-ipu", "16", "--backend", "numpy"]
    code, out, err = gruc(["gru", *layer, "--device-type", device], capsys)
    assert code == 0, err
    assert f"custom {device}: 1 x 16 tiles x {capacity} B" in out
    assert f"(from byte {interleaved})" in out
    assert "PASSED" in out


def test_an_uncompiled_program_holds_no_code(capsys):
    _, compiled, _ = gruc(["gru", *SMALL], capsys)
    _, uncompiled, _ = gruc(["gru", *SMALL, "--compile-ipu-code", "0"], capsys)
    for name in ("vertexCode", "controlCode", "internalExchangeCode"):
        assert _category(compiled, name) > 0 and _category(uncompiled, name) == 0
    for name in ("variable", "vertexInstanceState", "message"):
        assert _category(compiled, name) == _category(uncompiled, name)


def test_the_tensor_memory_model_counts_tensor_data_alone(capsys):
    _, poplar, _ = gruc(["gru", *SMALL], capsys)
    _, tensors, _ = gruc(["gru", *SMALL, "--memory-model", "tensors"], capsys)
    assert "by category     tensors only (--memory-model tensors)" in tensors
    assert "vertexInstanceState" not in tensors

    def total(out: str, line: str) -> int:
        return int(re.search(rf"^{line}\s+(\d+) B", out, re.MULTILINE).group(1))

    # always live: the variables and constants, without vertex state or code
    assert total(tensors, "always-live") == _category(poplar, "variable") \
        + _category(poplar, "constant")
    assert total(tensors, "total memory") < total(poplar, "total memory")


def test_ignore_data_runs_without_reading_back_or_checking(capsys):
    code, out, _ = gruc(["gru", *SMALL, "--ignore-data", "1"], capsys)
    assert code == 0
    assert "check             none: nothing read back (--ignore-data)" in out
    assert "PASSED" not in out


@pytest.mark.parametrize("flag, value, words", [
    ("--device-type", "ipu9", ["--device-type ipu9", "'ipu1' or 'ipu2'"]),
    ("--memory-model", "bytes", ["--memory-model bytes", "poplar", "tensors"]),
    ("--compile-ipu-code", "perhaps", ["perhaps", "not a boolean"]),
])
def test_bad_device_flags_are_one_line(flag, value, words, capsys):
    code, out, err = gruc(["gru", *SMALL, flag, value], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)
