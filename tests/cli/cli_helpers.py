"""What the CLI tests share: a small layer's flags, an in-process ``gruc`` runner and the command
that runs ``gruc`` in a process of its own."""

import sys
from pathlib import Path

from gruc.cli import main

SIZES = ["--sequence-size", "3", "--input-size", "8", "--output-size", "8", "--batch-size", "2"]
BUILT = [*SIZES, "--tiles-per-ipu", "16"]
"""A small layer as ``gruc dump`` takes it: it builds and runs nothing, so no ``--backend``."""
SMALL = [*BUILT, "--backend", "numpy"]


def gruc(argv, capsys) -> tuple[int, str, str]:
    """Run ``gruc argv`` in process: exit code (argparse's SystemExit included), stdout, stderr."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


_SCRIPT = Path(sys.executable).with_name("gruc")
GRUC = [str(_SCRIPT)] if _SCRIPT.exists() else \
    [sys.executable, "-c", "import sys; from gruc.cli import main; sys.exit(main())"]
"""The console script installed beside the interpreter running the tests (not whichever ``gruc``
comes first on PATH: another environment's would test another checkout), or the same entry point
run by that interpreter."""
