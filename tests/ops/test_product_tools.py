"""poplibs' product tools (``gruc fc``, ``gruc gemm``): their numbers against float64 references,
the joint planning of a training layer's three products, and their command lines."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gruc.cli import main
from gruc.tools.products import (FcConfig, GemmConfig, build_fc, build_gemm, host_inputs,
                                 run_product_layer)

SMALL_IPU1 = {"device_type": "ipu1", "tiles_per_ipu": 16, "backend": "numpy"}


@pytest.mark.parametrize("data_type, batch, inputs, outputs", [
    ("float", 4, 64, 128), ("half", 8, 256, 128), ("float", 16, 128, 256)])
def test_training_layer_is_planned_jointly_and_its_update_is_local(data_type, batch, inputs,
                                                                   outputs):
    """A training layer's forward plan is poplin's joint one; the backward and weight-update
    plans follow from it on the same tiles, so the update's scaled add finds each weight's
    gradient where the weight is: it exchanges nothing."""
    config = FcConfig(batch_size=batch, input_size=inputs, output_size=outputs,
                      data_type=data_type, bias=False, **SMALL_IPU1)
    layer = build_fc(config)
    fwd, bwd, wu = (layer.plans[name] for name in ("fwd", "bwd", "wu"))
    assert fwd.joint and bwd.joint and wu.joint
    assert fwd.num_tiles == bwd.num_tiles == wu.num_tiles
    assert (bwd.tile_order, wu.tile_order) == ("fc-bwd", "fc-wu")
    run = run_product_layer(layer)
    assert run.checked and run.passed, run.mismatches
    engine = run.engine
    update = [cost for step, cost in zip(engine.plan.liveness.steps, engine.costs)
              if getattr(step.node, "compute_set", None) is not None
              and step.node.compute_set.name == "wu"]
    assert len(update) == 1 and not update[0].bytes_in_by_tile.any()


def test_half_weight_update_of_one_input_group_keeps_half_partials_on_ipu1():
    """ipu1's AMP has as many units for half partials as for float: a batch that is one AMP
    input group is summed in one pass, so poplin's weight update keeps half partials."""
    config = FcConfig(batch_size=8, input_size=256, output_size=128, data_type="half",
                      **SMALL_IPU1)
    plans = build_fc(config).plans
    assert plans["wu"].partials_type.name == "half"
    assert plans["fwd"].partials_type.name == "float"
    ipu2 = build_fc(config.model_copy(update={"device_type": "ipu2"})).plans
    assert ipu2["wu"].partials_type.name == "float"


@pytest.mark.parametrize("pass_", ["fwd", "bwd", "wu", "all"])
def test_fully_connected_passes_with_bias_match_float64(pass_):
    config = FcConfig(batch_size=5, input_size=24, output_size=40, num_groups=2,
                      data_type="float", pass_=pass_, **SMALL_IPU1)
    run = run_product_layer(build_fc(config))
    assert run.checked and run.passed, run.mismatches
    expected = {"fwd": {"nextAct"}, "bwd": {"prevDeltas"}, "wu": {"weights", "biases"},
                "all": {"nextAct", "prevDeltas", "weights", "biases"}}[pass_]
    assert set(run.layer.reads) == expected


def test_weight_update_steps_by_the_gradient():
    """The updated weights are ``W - actᵀ · deltas`` (learning rate 1), checked by hand."""
    config = FcConfig(batch_size=3, input_size=4, output_size=5, data_type="float", pass_="wu",
                      bias=False, **SMALL_IPU1)
    layer = build_fc(config)
    values = host_inputs(layer)
    run = run_product_layer(layer)
    updated = run.engine.read_tensor("weights_out")
    act, deltas = values["prevAct"][0].astype(np.float64), values["zDeltas"][0].astype(np.float64)
    np.testing.assert_allclose(updated[0], values["weights"][0] - act.T @ deltas, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("transpose_a, transpose_b, alpha, beta", [
    (False, False, 1.0, 1.0), (True, False, 0.5, 1.0), (False, True, 2.0, -1.0),
    (True, True, 1.0, 0.0)])
def test_gemm_matches_float64(transpose_a, transpose_b, alpha, beta):
    config = GemmConfig(m=12, k=40, n=24, g=2, alpha=alpha, beta=beta, transpose_a=transpose_a,
                        transpose_b=transpose_b, data_type="float", **SMALL_IPU1)
    run = run_product_layer(build_gemm(config))
    assert run.checked and run.passed, run.mismatches


def test_ignore_data_streams_nothing_and_checks_nothing():
    config = GemmConfig(m=8, k=64, n=16, ignore_data=True, **SMALL_IPU1)
    run = run_product_layer(build_gemm(config))
    assert not run.checked and run.passed
    assert not run.layer.graph.host_reads


# ---- command lines ----------------------------------------------------------------------------
def test_fc_compile_only_prints_each_plan_and_the_memory_categories(capsys):
    argv = ["fc", "--input-size", "64", "--output-size", "32", "--batch-size", "4",
            "--device-type", "ipu1", "--tiles-per-ipu", "16", "--compile-only"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for word in ["plan fwd", "plan bwd", "plan wu", "custom ipu1: 1 x 16 tiles", "vertexCode",
                 "internalExchangeCode", "message", "cycles", "FLOPs"]:
        assert word in out, word
    assert "PASSED" not in out
    assert "transpose" not in out          # the backward plan keeps the weights as its weights


def test_fc_prints_the_backward_weights_transposition(capsys):
    """The issue's layer: both plans make the weights their field, so poplin transposes them
    in blocks of gcd(16, 100) = 4 by gcd(16, 1324) = 4 before the backward product; and the
    weight update regroups ``prevActᵀ`` (grouped along its 1324 rows, 16 channels a group),
    which the same line reports by its own source."""
    argv = ["fc", "--batch-size", "16", "--input-size", "1324", "--output-size", "100",
            "--compile-only"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "transpose         weights_bwd.transpose: 4 x 4 blocks on " in out
    assert "(poplin's fullyConnectedWeightTranspose)" in out
    regroup = [line for line in out.splitlines() if "wu.product.mk.regroup" in line]
    assert len(regroup) == 1 and "regroupIfBeneficialForPlan" in regroup[0], out


def test_gemm_runs_and_checks(capsys):
    argv = ["gemm", "--m", "6", "--k", "30", "--n", "10", "--data-type", "float",
            "--tiles-per-ipu", "8", "--backend", "numpy", "--alpha", "0.5",
            "--matmul-options", '{"availableMemoryProportion": 0.3}']
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "plan gemm" in out and "PASSED" in out


def test_gemm_profile_writes_the_report_page_and_the_trace(tmp_path, capsys):
    """``--profile``: what ``gruc viz`` and ``gruc trace`` give a GRU layer, for a product."""
    argv = ["gemm", "--m", "4", "--k", "20", "--n", "6", "--data-type", "float",
            "--tiles-per-ipu", "4", "--backend", "numpy", "--profile", str(tmp_path)]
    assert main(argv) == 0
    assert "report.json, report.html, trace.json" in capsys.readouterr().out
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["traceEvents"] and trace["otherData"]["cycles"] > 0
    assert json.loads((tmp_path / "report.json").read_text())["cycles"]["total"] > 0
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("compile_only", [True, False])
def test_strict_memory_refuses_a_product_that_does_not_fit(compile_only, capsys):
    argv = ["fc", "--input-size", "512", "--output-size", "512", "--batch-size", "64",
            "--tiles-per-ipu", "1", "--backend", "numpy", "--strict-memory"]
    assert main(argv + ["--compile-only"] * compile_only) == 3
    out, err = capsys.readouterr()
    assert "over capacity: tile 0 needs" in out and "PASSED" not in out
    assert err.count("\n") == 1 and err.startswith("gruc fc: error: out of memory: tile 0 needs")


@pytest.mark.parametrize("argv, words", [
    (["fc", "--input-size", "4"], ["--output-size"]),
    (["fc", "--input-size", "4", "--output-size", "4", "--device-type", "ipu3"],
     ["--device-type 'ipu3'", "'ipu1' or 'ipu2'"]),
    (["fc", "--input-size", "4", "--output-size", "4", "--pass", "sideways"], ["--pass 'sideways'"]),
    (["gemm", "--m", "2", "--k", "2", "--n", "2", "--matmul-options", '{"foo": 1}'],
     ["unknown matmul option(s) foo", "availableMemoryProportion"]),
    (["gemm", "--m", "2", "--k", "2", "--n", "2", "--matmul-options", "notjson"],
     ["'notjson' is not JSON"]),
    (["gemm", "--m", "2", "--k", "2", "--n", "2", "--matmul-options", '{"partialsType": "int"}'],
     ["--matmul-options partialsType = 'int'", "half, float"]),
    (["gemm", "--m", "0", "--k", "2", "--n", "2"], ["--m 0"]),
])
def test_bad_flags_exit_2_with_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)
