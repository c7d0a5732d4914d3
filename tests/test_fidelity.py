"""The fidelity harness (``gruc.fidelity``): Poplar's published rows become the right gruc layers,
a row is measured as poplibs' bench read Poplar's profile, and the summary's arithmetic."""

from __future__ import annotations

import pytest

from gruc.errors import GrucValueError
from gruc.fidelity import (FIGURES, PoplarRow, figures, layer_config, load_rows, measure,
                           parse_tool_flags, percent, plan_figures, summarise)
from gruc.tools.gru_layer import GruLayerConfig
from gruc.tools.products import FcConfig, GemmConfig


def test_every_published_row_becomes_a_gruc_layer_on_its_device():
    rows = load_rows()
    assert len(rows) > 100
    kinds = {"gru_layer": GruLayerConfig, "fully_connected_layer": FcConfig,
             "general_matrix_multiply": GemmConfig}
    for row in rows:
        config = layer_config(row)
        assert isinstance(config, kinds[row.tool.split()[0]]), row.name
        assert config.device_type == {"IpuModel1": "ipu1", "IpuModel2": "ipu2"}[row.target]
        assert config.ignore_data and not config.compile_ipu_code  # poplibs' test IPUModel


def test_gru_row_flags_reach_the_layer():
    row = next(r for r in load_rows() if r.name == "gru_8_25_1024_1024_float_shuffled_cell_order")
    config = layer_config(row)
    assert (config.batch_size, config.sequence_size, config.input_size, config.output_size) == \
        (8, 25, 1024, 1024)
    assert config.data_type == "float" and config.phase == "fwd"
    assert tuple(config.cell_order) == ("update", "cell", "reset")


def test_fc_row_flags_reach_the_layer():
    row = next(r for r in load_rows() if r.name == "fc_layer_4_1000_5_half")
    config = layer_config(row)
    assert (config.batch_size, config.input_size, config.output_size) == (4, 1000, 5)
    assert config.data_type == "half" and not config.bias and config.pass_ == "all"


@pytest.mark.parametrize("text, flags", [
    ("--batch-size 4 --input-size=1000", {"batch-size": "4", "input-size": "1000"}),
    ('--cell-order "{update,cell,reset}"', {"cell-order": "{update,cell,reset}"}),
])
def test_tool_flags_are_parsed_with_or_without_equals(text, flags):
    assert parse_tool_flags(text) == flags


@pytest.mark.parametrize("text, words", [("--batch-size", "has no value"),
                                         ("4 --batch-size 2", "is not a --flag")])
def test_malformed_tool_flags_are_named(text, words):
    with pytest.raises(GrucValueError, match=words):
        parse_tool_flags(text)


def test_a_row_gruc_cannot_build_gives_its_reason():
    row = PoplarRow("IpuModel2", "conv", "single_conv_layer", "--field {14,14}", 1, 1, 1)
    result = measure(row)
    assert "ratio" not in result and "no single_conv_layer tool" in result["reason"]
    unknown = PoplarRow("IpuModel2", "fc", "fully_connected_layer", "--shards 2", 1, 1, 1)
    assert "--shards is not supported" in measure(unknown)["reason"]


def test_a_measured_row_has_ratios_and_categories_that_add_up():
    row = next(r for r in load_rows() if r.name == "fc_layer_4_1000_5_float")
    result = measure(row)
    for figure in FIGURES:
        assert result["gruc"][figure] > 0
        assert result["ratio"][figure] == result["gruc"][figure] / result["poplar"][figure]
    # every byte of the total is in exactly one category
    assert sum(result["memory_by_category"].values()) == result["gruc"]["total_memory"]
    # an uncompiled program holds no code
    for code in ("vertexCode", "controlCode", "internalExchangeCode"):
        assert result["memory_by_category"][code] == 0


def test_cell_order_does_not_change_the_figures():
    """Poplar's shuffled-cell-order rows equal their twins: the order only permutes the gates."""
    base = dict(batch_size=2, sequence_size=3, input_size=16, output_size=24, tiles_per_ipu=16,
                device_type="ipu1", ignore_data=True, compile_ipu_code=False)
    plain = figures(plan_figures(GruLayerConfig(**base))[0])
    shuffled = figures(plan_figures(GruLayerConfig(**base, cell_order=("update", "cell",
                                                                       "reset")))[0])
    assert plain == shuffled


def test_summary_arithmetic():
    def result(name, cycles):
        return {"target": "IpuModel1", "name": name,
                "ratio": {"cycles": cycles, "total_memory": 1.0, "max_tile_memory": 1.0}}

    summary = summarise([result("a", 1.05), result("b", 0.8), result("c", 1.1),
                         {"target": "IpuModel1", "name": "d", "reason": "cannot build"}])
    cycles = summary["IpuModel1"]["cycles"]
    assert cycles["rows"] == 3
    assert cycles["mape"] == pytest.approx((5 + 20 + 10) / 3)
    assert cycles["within_10"] == 2
    assert cycles["worst_row"] == "b" and cycles["worst_error"] == pytest.approx(-20.0)
    assert percent(1.034) == "+3.4 %" and percent(float("nan")) == "n/a"
