"""``gruc plan fc`` / ``gruc plan gemm`` / ``gruc plan gru``: choosing the layer, sweeping and
searching the product tools, their matmul options, and one-line refusals."""

from __future__ import annotations

import csv
import json

import pytest

from gruc.cli import main
from gruc.cli.plan import MATMUL_OPTIONS_JSON, PLAN_FLAGS
from gruc.plan import PLANNED_LAYERS

FC = ["fc", "--input-size", "8", "--output-size", "8", "--tiles-per-ipu", "16", "--jobs", "1"]
GEMM = ["gemm", "--m", "8", "--k", "4", "--n", "6", "--tiles-per-ipu", "16", "--jobs", "1"]
GRU = ["--input-size", "4", "--output-size", "8", "--sequence-size", "3", "--tiles-per-ipu", "16",
       "--jobs", "1", "--pipeline", ""]


def rows_of(directory) -> list[dict]:
    return json.loads((directory / "rows.json").read_text())


def test_every_plan_flag_is_a_field_of_its_layer_and_every_field_has_a_flag():
    assert set(PLAN_FLAGS) == set(PLANNED_LAYERS)
    for name, kind in PLANNED_LAYERS.items():
        assert sorted(field for _, field, _, _ in PLAN_FLAGS[name]) == sorted(kind.flags)


def test_an_fc_sweep_prints_its_table_and_resumes(tmp_path, capsys):
    argv = ["plan", *FC, "--batch-size", "1:3:2", "--partials-type", "half,float",
            "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header == ["batch_size", "partials_type", "fits", "max_tile_bytes", "cycles_total",
                      "utilisation", "error"]      # no shards column: fc has none
    assert "4 planned now, 0 already" in out
    rows = rows_of(tmp_path)
    assert [(r["batch_size"], r["partials_type"]) for r in rows] == [
        (1, "half"), (1, "float"), (3, "half"), (3, "float")]
    assert all(json.loads(r["config"])["layer"] == "fc" and r["fits"] for r in rows)
    assert main(argv) == 0
    assert "0 planned now, 4 already" in capsys.readouterr().out


def test_a_gemm_sweep_over_transposes_with_plots(tmp_path, capsys):
    argv = ["plan", *GEMM, "--transpose-a", "0,1", "--transpose-b", "0,1", "--out",
            str(tmp_path), "--plots"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "4 planned now" in out and "tile-heatmap.png" in out
    with open(tmp_path / "rows.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [(r["transpose_a"], r["transpose_b"]) for r in table] == [
        ("False", "False"), ("False", "True"), ("True", "False"), ("True", "True")]
    assert all(r["shards_chosen"] == "" for r in table)
    plots = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert plots == ["memory-by-role.png", "metrics-transpose_a.png", "metrics-transpose_b.png",
                     "roofline.png", "tile-heatmap.png"]


def test_fc_find_max_of_the_batch(tmp_path, capsys):
    argv = ["plan", "fc", "--find-max", "batch-size", "--input-size", "64", "--output-size", "64",
            "--tiles-per-ipu", "1", "--device-type", "ipu1", "--jobs", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "batch_size: largest that fits = " in out and "1 tile over capacity" in out
    value = int(out.split("largest that fits = ")[1].split()[0])
    by_batch = {r["batch_size"]: r for r in rows_of(tmp_path)}
    assert by_batch[value]["fits"] is True and by_batch[value + 1]["fits"] is False


def test_the_layer_word_is_optional_for_gru(tmp_path, capsys):
    assert main(["plan", *GRU, "--batch-size", "1,2", "--out", str(tmp_path / "bare")]) == 0
    assert main(["plan", "gru", *GRU, "--batch-size", "1,2", "--out", str(tmp_path / "gru")]) == 0
    out = capsys.readouterr().out
    assert "shards_chosen" in out.splitlines()[0]
    bare, named = rows_of(tmp_path / "bare"), rows_of(tmp_path / "gru")
    assert [r["config"] for r in bare] == [r["config"] for r in named]
    assert json.loads(bare[0]["config"])["layer"] == "gru"


def test_matmul_options_json_gives_one_value_each(tmp_path):
    argv = ["plan", *FC, "--matmul-options",
            '{"availableMemoryProportion": 0.3, "partialsType": "half"}', "--out", str(tmp_path)]
    assert main(argv) == 0
    (row,) = rows_of(tmp_path)
    key = json.loads(row["config"])
    assert key["available_memory_proportion"] == 0.3 and key["partials_type"] == "half"


def test_help_says_how_to_pick_the_layer(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = capsys.readouterr().out
    assert "LAYER" in text and all(name in text for name in PLANNED_LAYERS)
    assert "gruc plan --batch-size 4 is gruc plan gru --batch-size 4" in " ".join(text.split())
    for name in MATMUL_OPTIONS_JSON:
        with pytest.raises(SystemExit):
            main(["plan", name, "--help"])
        text = capsys.readouterr().out
        assert "--matmul-options" in text and "--available-memory-proportion" in text
        assert "--seed" not in text and "--ignore-data" not in text and "--backend" not in text


@pytest.mark.parametrize("argv, words", [
    (["plan", *FC, "--phase", "fwd"], ["unrecognized arguments", "--phase"]),
    (["plan", *FC, "--seed", "1,2"], ["unrecognized arguments", "--seed"]),
    (["plan", *FC, "--ignore-data", "1"], ["unrecognized arguments", "--ignore-data"]),
    (["plan", *GEMM, "--backend", "numpy"], ["unrecognized arguments", "--backend"]),
    (["plan", "conv", "--m", "4"], ["invalid choice: 'conv'", "'gru', 'fc', 'gemm'"]),
    (["plan", "fc", "--output-size", "8"], ["fc plans need input_size", "--input-size"]),
    (["plan", *FC, "--num-groups", "0,1"], ["num_groups=0", "greater than or equal to 1"]),
    (["plan", *FC, "--pass", "fwd,up"], ["pass_=up", "'fwd', 'bwd', 'wu' or 'all'"]),
    (["plan", *GEMM, "--transpose-a", "0,maybe"], ["--transpose-a", "'maybe'"]),
    (["plan", *FC, "--find-max", "m"], ["--find-max 'm'", "searchable flags of fc plans",
                                        "--batch-size"]),
    (["plan", *GEMM, "--find-max", "batch-size"], ["searchable flags of gemm plans", "--m"]),
    (["plan", *FC, "--batch-size", "1,2", "--find-max", "batch-size"],
     ["'batch_size' is both searched and swept"]),
    (["plan", *FC, "--heatmap", "0"], ["--heatmap 0", "add --plots"]),
    (["plan", *FC, "--matmul-options", '{"partialsType": "half"}', "--partials-type", "half,float"],
     ["--matmul-options partialsType and --partials-type both set partials_type"]),
    (["plan", *FC, "--matmul-options", '{"availableMemoryProportion": [0.1, 0.3]}'],
     ["availableMemoryProportion [0.1, 0.3] is not one value",
      "--available-memory-proportion a,b,c"]),
    (["plan", *FC, "--matmul-options", '{"numThreads": 2}'], ["numThreads", "allowed"]),
])
def test_bad_input_is_one_line_and_exit_code_2(argv, words, capsys, tmp_path):
    line = refusal(argv, capsys, tmp_path)
    assert all(word in line for word in words), line


def refusal(argv, capsys, tmp_path) -> str:
    """The one error line of ``gruc argv --out tmp_path``, checked to exit 2 before writing."""
    try:
        code = main([*argv, "--out", str(tmp_path)])
    except SystemExit as exit_:                 # argparse's own refusals
        code = exit_.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert not list(tmp_path.iterdir()), "refused before anything is planned or written"
    return lines[0]
