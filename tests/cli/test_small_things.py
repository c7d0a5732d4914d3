"""Issue 42, item 12: the small things a tester met — flags accepted and ignored, help that says
what is not so, a table dropped without a word, "1 tiles", raw markup in help, range sizes in
floating point, and an input read whatever its size."""

from __future__ import annotations

import pytest

from gruc.cli import COMMANDS, build_parser, main
from gruc.cli import opt as opt_command
from gruc.cli import plan as plan_command
from gruc.cli.gru import FLAGS
from gruc.ir.module import Module
from gruc.ir.printer import print_module
from gruc.text import plain, plural
from cli_helpers import SIZES, gruc


# ---- gruc dump refuses the flags that only change a run ----------------------------------------------
@pytest.mark.parametrize("flag, value", [("--backend", "numpy"), ("--seed", "3"),
                                         ("--weights-range", "0.5"), ("--rel-tolerance", "0.1"),
                                         ("--abs-tolerance", "0.1")])
def test_dump_refuses_the_flags_that_only_change_a_run(flag, value, capsys):
    code, out, err = gruc(["dump", *SIZES, flag, value], capsys)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"gruc dump: error: {flag} only changes how the layer runs or is "
                          "checked; gruc dump builds its IR and runs nothing: drop it")
    dump_help = build_parser(["dump"])._subparsers._group_actions[0].choices["dump"].format_help()
    assert flag not in dump_help


# ---- gruc viz --help says which flags go with --input ------------------------------------------------
def test_viz_help_names_every_flag_that_goes_with_input(tmp_path, capsys):
    """The help said only --backend may go with --input; --compile-only, --pipeline and the
    output flags do too, and only the layer flags but --backend are refused."""
    viz = build_parser(["viz"])._subparsers._group_actions[0].choices["viz"]
    viz = viz._subparsers._group_actions[0].choices["gru"]  # --input replaces the GRU layer
    (described,) = [a.help for a in viz._actions if "--input" in a.option_strings]
    graph_module = tmp_path / "m.gruc"
    from gruc.tools.gru_layer import GruLayerConfig, build_layer

    layer = build_layer(GruLayerConfig(sequence_size=2, input_size=4, output_size=4,
                                       batch_size=2, tiles_per_ipu=4))
    graph_module.write_text(print_module(Module(layer.graph, layer.programs)))
    layer_flags = {flag for flag, *_ in FLAGS}
    assert "of the layer flags only --backend" in described
    for action in viz._actions:
        if set(action.option_strings) & ({"-h", "--input", "--compare"} | layer_flags):
            continue  # --compare is a mode of its own: it refuses --input (test_viz_trace.py)
        assert any(flag in described for flag in action.option_strings), \
            f"{action.option_strings} goes with --input, but its help does not say so: {described}"
    code, _, err = gruc(["viz", "--input", str(graph_module), "--compile-only", "--pipeline", "",
                         "--strict-memory", "-o", str(tmp_path / "r.html")], capsys)
    assert code == 0, err


# ---- gruc plan says when it leaves its table out -----------------------------------------------------
def test_plan_says_when_the_table_is_left_out(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(plan_command, "TABLE_ROWS", 2)
    argv = ["plan", "--input-size", "4", "--output-size", "4", "--sequence-size", "2",
            "--tiles-per-ipu", "4", "--jobs", "1", "--batch-size", "1:3", "--out",
            str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "shards_chosen" not in out
    assert (f"table             not printed for 3 rows (more than 2): see {tmp_path}/rows.csv"
            in out)


# ---- counts with their nouns ---------------------------------------------------------------------------
def test_plural():
    assert [plural(n, "tile") for n in (0, 1, 2)] == ["0 tiles", "1 tile", "2 tiles"]
    assert plural(1, "configuration") == "1 configuration"


def test_one_tile_is_one_tile(tmp_path, capsys):
    """"1 tiles" in the summary, the out-of-memory line and the trace."""
    one = ["--tiles-per-ipu", "1", "--batch-size", "16", "--input-size", "256", "--output-size",
           "256", "--sequence-size", "2", "--backend", "numpy"]
    code, out, err = gruc(["gru", *one, "--compile-only", "--strict-memory"], capsys)
    assert code == 3
    assert "custom ipu2: 1 x 1 tile x " in out and "fits              NO (1 tile over capacity)" in out
    assert err.rstrip().endswith("; 1 tile over capacity in all")
    code, out, _ = gruc(["trace", *SIZES, "--tiles-per-ipu", "4", "--backend", "numpy", "-o",
                         str(tmp_path / "t.json")], capsys)
    assert code == 0 and "1 tile per track" in out


# ---- help is plain text -------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_has_no_markup(command, capsys):
    argv = [command, "--help"] if command else ["--help"]
    with pytest.raises(SystemExit):
        main(argv)
    text = capsys.readouterr().out
    assert "`" not in text and ":func:" not in text, text
    if command == "gru":  # the description is the docstring's whole first sentence
        assert "build, compile, run and check a GRU layer (poplibs' gru_layer tool)" in text


def test_passes_listing_has_no_markup(capsys):
    assert main(["passes"]) == 0
    text = capsys.readouterr().out
    assert "`" not in text and "dce: Remove Execute and Copy steps" in text


def test_plain():
    assert plain("``gruc gru`` runs :func:`~gruc.run_layer` as `gruc opt -p` does") == \
        "gruc gru runs run_layer as gruc opt -p does"


# ---- range sizes in integers ---------------------------------------------------------------------------
def test_an_integer_range_is_counted_exactly(capsys):
    code, _, err = gruc(["plan", "--batch-size", "1:" + "1" + "0" * 30], capsys)
    assert code == 2
    assert "has 1000000000000000000000000000000 values" in err, err


# ---- gruc opt reads at most so much ------------------------------------------------------------------
@pytest.mark.parametrize("command", [["opt", "/dev/zero"], ["viz", "--input", "/dev/zero"]])
def test_an_endless_input_is_refused_at_the_size_limit(command, monkeypatch, capsys):
    """``/dev/zero`` ran to an 8 GB memory cap; the limit (512 MiB) is lowered here so the test
    reads 1 MiB."""
    monkeypatch.setattr(opt_command, "MOST_MODULE_BYTES", 1 << 20)
    code, out, err = gruc(command, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "/dev/zero is larger than 1 MiB, the most gruc reads as a module" in err
