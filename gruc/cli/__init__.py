"""The ``gruc`` command line: one console script, one module per subcommand.

Every subcommand only parses flags and calls the library; errors a user can cause come out as one
line on stderr and exit code 2 (argparse's convention), never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from gruc import __version__
from gruc.errors import GrucError, GrucOutOfMemory
from gruc.text import plain


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors (``gruc gru: error: ...``) and exit code 2, and help in
    plain text: descriptions and option help come from docstrings, whose reStructuredText
    markup (````gruc gru````, ``:func:``) a terminal would show as it is."""

    default_command: str | None = None
    """The subcommand of words that start with a flag or with nothing (``gruc plan --batch-size
    4`` is ``gruc plan gru --batch-size 4``); ``-h`` stays this parser's own, and a first word
    that is no flag must name a subcommand."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        if self.default_command is not None:
            args = list(sys.argv[1:] if args is None else args)
            if not args or (args[0].startswith("-") and args[0] not in ("-h", "--help")):
                args.insert(0, self.default_command)
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        return plain(super().format_help())


OUT_OF_MEMORY = 3
"""Exit code of a program refused because it does not fit (``--strict-memory``); 1 is a failed
check against the reference, 2 bad input."""

COMMANDS = {
    "gru": "build, run and check a GRU layer",
    "fc": "build, run and check a fully connected layer",
    "gemm": "build, run and check a general matrix multiply",
    "passes": "list passes and their options",
    "dump": "print the GRU layer's IR (text, json, dot)",
    "opt": "run a pass pipeline on a saved module",
    "viz": "HTML report of a GRU, fc or gemm layer or a module",
    "trace": "run a GRU, fc or gemm layer, write a Chrome trace",
    "plan": "plan-only sweeps of GRU, fc or gemm layer flags",
}
"""Each subcommand (the module ``gruc.cli.<name>``) and its line in ``gruc --help``, in that
order."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``gruc`` parser.  Only the subcommand ``argv`` names gets its flags (every one does
    when ``argv`` is None): a subcommand module imports the compiler, numba and all, which takes
    a second, and ``gruc --help`` or ``gruc passes`` should not wait for the others'."""
    chosen = next((word for word in argv if not word.startswith("-")), None) if argv else None
    parser = OneLineParser(prog="gruc", description="Poplar-style graph compiler and simulated IPU.")
    parser.add_argument("--version", action="version", version=f"gruc {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name, summary in COMMANDS.items():
        command = commands.add_parser(name, help=summary)
        if argv is None or name == chosen:
            importlib.import_module(f"gruc.cli.{name}").register(command)
    return parser


class _QuietWhenTheReaderLeaves:
    """stdout that, once its reader has gone (``gruc plan --plots | head -1``), sends the rest
    to /dev/null and lets the command finish: the files it writes (rows, plots, profiles) and
    its exit code must not depend on whether anyone still reads the summary."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # not a file descriptor (a test's capture): drop it
            self._stream = open(os.devnull, "w", encoding="utf-8")

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``gruc`` with ``argv`` (default: the process arguments); return the exit code."""
    try:
        words = list(sys.argv[1:] if argv is None else argv)
        args = build_parser(words).parse_args(words)
    except KeyboardInterrupt:
        return _interrupted("gruc")
    stdout, sys.stdout = sys.stdout, _QuietWhenTheReaderLeaves(sys.stdout)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return _interrupted(f"gruc {args.command}")
    except MemoryError as error:
        # the configuration is too big for this machine: the user's to change, like bad input
        print(f"gruc {args.command}: error: the host ran out of memory "
              f"({str(error) or 'an allocation failed'}); choose a smaller configuration or a "
              "machine with more memory", file=sys.stderr)
        return 2
    except GrucOutOfMemory as error:
        # the layer does not fit and --strict-memory was asked: the memory report, then why
        if error.details:
            print("\n".join(error.details), flush=True)
        print(f"gruc {args.command}: error: {_first_line(error)}", file=sys.stderr)
        return OUT_OF_MEMORY
    except GrucError as error:
        print(f"gruc {args.command}: error: {_first_line(error)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader (``| head``) left early: stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as error:
        # a path the user gave (--out, --profile, -o) that cannot be made or written: the
        # user's to fix, so one line naming the path, like a GrucError
        where = f" {error.filename}" if error.filename else ""
        print(f"gruc {args.command}: error: cannot use{where}: {error.strerror or error}",
              file=sys.stderr)
        return 2
    finally:
        sys.stdout = stdout


def _first_line(error: GrucError) -> str:
    """What the one error line says: the message's first line, or the class's name."""
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _interrupted(who: str) -> int:
    """Ctrl-C: the user's own stop, so one line and the shell's code for SIGINT (130), not a
    traceback from whatever numba or numpy was doing.  Nothing is left half-written: every file
    gruc writes is written whole or not at all."""
    print(f"{who}: interrupted", file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
