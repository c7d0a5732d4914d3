"""What the CLI tests share: a small layer's flags and an in-process ``gruc`` runner."""

from gruc.cli import main

SIZES = ["--sequence-size", "3", "--input-size", "8", "--output-size", "8", "--batch-size", "2"]
SMALL = [*SIZES, "--tiles-per-ipu", "16", "--backend", "numpy"]


def gruc(argv, capsys) -> tuple[int, str, str]:
    """Run ``gruc argv`` in process: exit code (argparse's SystemExit included), stdout, stderr."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err
