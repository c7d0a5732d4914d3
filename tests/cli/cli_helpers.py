"""What the CLI tests share: a small layer's flags, an in-process ``gruc`` runner and the command
that runs ``gruc`` in a process of its own."""

import sys
from pathlib import Path

from gruc.cli import main

SIZES = ["--sequence-size", "3", "--input-size", "8", "--output-size", "8", "--batch-size", "2"]
BUILT = [*SIZES, "--tiles-per-ipu", "16"]
"""A small layer as ``gruc dump`` takes it: it builds and runs nothing, so no ``--backend``."""
SMALL = [*BUILT, "--backend", "numpy"]


def batch_reports(directory: Path) -> tuple[str, str]:
    """The small layer's saved report (``gruc gru --compile-only --profile``) at batch 2 and at
    batch 4, in ``directory``: two reports whose comparison has known differences."""
    paths = []
    for batch in ("2", "4"):
        argv = list(SMALL)
        argv[argv.index("--batch-size") + 1] = batch
        assert main(["gru", *argv, "--compile-only", "--profile", str(directory / batch)]) == 0
        paths.append(str(directory / batch / "report.json"))
    return paths[0], paths[1]


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
