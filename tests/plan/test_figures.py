"""Row figures a paper can use: the AMP peak, utilisation and shares by phase, host costs."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from gruc.ir.codelets.conv_costs import ConvMethod, amp_partials_cycles
from gruc.plan import plan_row
from gruc.plan.figures import (MACS_PER_CONV_UNIT_PER_CYCLE, PHASES, amp_peak_flops_per_cycle,
                               amp_units, measured)
from gruc.plan import figures
from gruc.plan.layers import upgrade_row
from gruc.plan.planned import ROW_COLUMNS
from gruc.tools.gru_layer import GruLayerConfig
from gruc.target import Target
from gruc.tools.products import FcConfig


@pytest.mark.parametrize("device, data_type, partials, tflops", [
    ("ipu2", "float", None, 62.5), ("ipu2", "half", "half", 250.0),
    ("ipu1", "float", None, 31.1), ("ipu1", "half", "half", 124.5),
])
def test_the_amp_peak_is_graphcores_published_one(device, data_type, partials, tflops):
    target = Target.of(device)
    peak = amp_peak_flops_per_cycle(target, data_type, partials) * target.clock_hz / 1e12
    assert peak == pytest.approx(tflops, rel=0.01)


@pytest.mark.parametrize("data_type, partials", [("float", "float"), ("half", "half"),
                                                 ("half", "float")])
def test_macs_per_unit_are_the_amp_vertexs_own_rate(data_type, partials):
    """A long field through the AMP vertex's cycle estimate, over many input channel groups
    (the first one zeroes the partials), runs at the peak's MACs a cycle."""
    target = Target.of("ipu2")
    units = amp_units(target, data_type, partials)
    load = target.data_path_width_bits // (32 if data_type == "float" else 16)
    weights = target.conv_unit_pipeline_depth * load
    method = ConvMethod("AMP", weights, units, units, weights)
    field, in_groups = 60_000, 64
    cycles = int(amp_partials_cycles(np.array([field]), in_groups, 1, 1, method,
                                     data_type == "float", partials == "float", 8)[0])
    rate = field * in_groups * weights * units / cycles
    assert rate == pytest.approx(units * MACS_PER_CONV_UNIT_PER_CYCLE[data_type], rel=0.02)


LAYER = dict(tiles_per_ipu=4, batch_size=2, input_size=8, output_size=8, sequence_size=3)


@pytest.mark.parametrize("phase", ["fwd", "bwd", "all"])
def test_a_gru_rows_phases_add_up_to_its_cycles(phase):
    row = plan_row(GruLayerConfig(phase=phase, **LAYER))
    ran = {"fwd": ("fwd",), "bwd": ("fwd", "bwd"), "all": PHASES}[phase]
    assert sum(row[f"cycles_{p}"] for p in ran) == row["cycles_total"]
    assert all(row[f"cycles_{p}"] > 0 for p in ran)
    assert all(row[f"{name}_{p}"] is None for p in PHASES if p not in ran
               for name in ("cycles", "utilisation", "exchange_share", "sync_share"))
    peak = row["amp_peak_flops_per_cycle"]
    assert peak == 4 * 16 * 1 * 2   # 4 tiles of 16 float units, 1 MAC each
    assert row["utilisation"] == pytest.approx(row["flops"] / (row["cycles_total"] * peak),
                                               rel=1e-4)
    assert row["exchange_share"] == pytest.approx(row["cycles_exchange"] / row["cycles_total"],
                                                  rel=1e-4)
    assert row["sync_share"] == pytest.approx(row["cycles_sync"] / row["cycles_total"], rel=1e-4)
    assert row["cpu_seconds"] > 0 and row["peak_rss_bytes"] > 10 * 2 ** 20
    assert row["peak_rss_scope"] in ("plan", "worker")


def test_product_rows_have_whole_layer_figures_only():
    row = plan_row(FcConfig(batch_size=2, input_size=8, output_size=8, tiles_per_ipu=4,
                            data_type="half", partials_type="half"))
    assert row["amp_peak_flops_per_cycle"] == 4 * 16 * 4 * 2
    assert 0 < row["utilisation"] < 1
    assert all(row[f"cycles_{p}"] is None for p in PHASES)


def test_the_peak_resident_memory_is_the_plans_own(tmp_path):
    """A block's peak is the memory it touches on top of what the process held.  The block maps
    fresh pages itself: an array could be served from free space the allocator still holds
    resident from earlier tests (a long test session leaves such space), adding nothing."""
    with measured() as big:
        block = mmap.mmap(-1, 64 * 2 ** 20)
        np.frombuffer(block, dtype=np.uint8)[:] = 1  # 64 MiB, touched
    block.close()
    with measured() as small:
        pass
    if big.peak_rss_scope != "plan":
        pytest.fail("this Linux host should reset the high-water mark")
    assert big.peak_rss_bytes - small.peak_rss_bytes > 48 * 2 ** 20


def test_without_a_reset_the_peak_is_the_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "CLEAR_REFS", tmp_path / "absent" / "clear_refs")
    with measured() as usage:
        pass
    assert usage.peak_rss_scope == "worker" and usage.peak_rss_bytes > 0


def test_rows_of_an_older_gruc_get_the_new_columns_empty():
    row = plan_row(GruLayerConfig(**LAYER))
    old = {k: v for k, v in row.items()
           if k not in ("utilisation", "cycles_fwd", "cpu_seconds", "peak_rss_scope")}
    upgraded = upgrade_row(old)
    assert all(column in upgraded for column in ROW_COLUMNS)
    assert upgraded["utilisation"] is None and upgraded["cycles_total"] == row["cycles_total"]


def test_rows_from_before_a_flag_was_added_resume_with_its_default():
    """A study written before ``recomputation_mode`` existed keys its rows without it; they are
    the default's rows (what that gruc built), so a sweep resumes from them, not refuses them."""
    import json

    from gruc.plan.layers import config_key, row_problem

    config = GruLayerConfig(**LAYER)
    row = plan_row(config)
    flags = json.loads(row["config"])
    del flags["recomputation_mode"]
    old = {**row, "config": json.dumps(flags, sort_keys=True, separators=(",", ":"))}
    assert row_problem(old) is not None  # as it was written: not this gruc's key
    upgraded = upgrade_row(old)
    assert row_problem(upgraded) is None and upgraded["config"] == config_key(config)
