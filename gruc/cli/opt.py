"""``gruc opt IN -p PIPELINE``: read a module, run a pass pipeline, write the result (xdsl-opt).

``IN`` is a text IR file, a JSON module (``module_to_json``; recognised because it parses as JSON)
or ``-`` for stdin, so ``gruc dump ... | gruc opt - -p plan-memory`` works through a pipe.  The
result goes to ``-o OUT`` (written atomically) or stdout, as text IR, JSON or a DOT dataflow graph.

The reading, writing and pipeline helpers here are shared by ``gruc dump`` and ``gruc viz``: they
are the command line's file handling; the work itself is the library's (``parse_module``,
``module_from_json``, ``run_pipeline``, ``print_module``, ``module_to_json``, ``dataflow_dot``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from gruc.errors import GrucError, GrucFileError, GrucParseError, GrucValueError
from gruc.ir.module import Module
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from gruc.ir.serialize import module_from_json, module_to_json
from gruc.passes.pipeline import run_pipeline
from gruc.files import TEMPORARY_PREFIX, output_destination, write_text_atomically
from gruc.runtime.viz import dataflow_dot
from gruc.status import StatusLine
from gruc.text import first_paragraph

FORMATS = ("text", "json", "dot")
STDIO = "-"

MOST_MODULE_BYTES = 512 << 20
"""The largest input read as a module: 2.4 times the largest gruc writes for a layer of a 4-IPU
machine; ``gruc opt /dev/zero`` read on until an 8 GB memory limit stopped it."""


def read_module(path: str) -> Module:
    """The module in file ``path`` (``-``: stdin): JSON if the text parses as JSON (or starts as
    an object does: a truncated file is broken JSON, not bad text IR), else text IR.  Parse
    errors name the file and the line and column."""
    name = "<stdin>" if path == STDIO else path
    text = _read_text(path, name)
    try:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            if text.lstrip().startswith("{"):  # meant as JSON (text IR starts with `module`)
                raise GrucParseError(f"broken JSON module: {error.msg} at line {error.lineno}, "
                                     f"column {error.colno}") from None
            return parse_module(text)
        except RecursionError:
            raise GrucParseError("JSON module nested too deeply to read") from None
        except ValueError as error:  # an integer past Python's digit limit
            raise GrucParseError(f"JSON module not read: {str(error).split(';')[0]}") from None
        return module_from_json(data)
    except GrucParseError as error:
        raise GrucParseError(f"{name}: {error}") from None


def _read_text(path: str, name: str) -> str:
    """The text of file ``path`` (``-``: stdin), at most :data:`MOST_MODULE_BYTES` of it: more is
    refused after reading that much, not read on until memory runs out."""
    try:
        if path == STDIO:
            data = getattr(sys.stdin, "buffer", sys.stdin).read(MOST_MODULE_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MOST_MODULE_BYTES + 1)
    except OSError as error:
        raise GrucFileError.about(name, "read", error) from None
    if len(data) > MOST_MODULE_BYTES:
        raise GrucValueError(f"{name} is larger than {MOST_MODULE_BYTES >> 20} MiB, the most gruc "
                             "reads as a module (the JSON of a 4-IPU training layer, S=2000 and "
                             "I=H=512, is 210 MB): is it the right file?")
    try:
        return data if isinstance(data, str) else data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise GrucValueError(f"cannot read {name}: {error}") from None


def format_module(module: Module, fmt: str) -> str:
    """``module`` as text IR, JSON (deterministic: sorted keys) or a DOT dataflow graph."""
    if fmt == "json":
        return json.dumps(module_to_json(module), indent=1, sort_keys=True) + "\n"
    if fmt == "dot":
        return dataflow_dot(module)
    return print_module(module)


def output_file(path: str) -> str:
    """argparse ``type`` of an output file flag (``-``: stdout): a path that cannot be written is
    refused before any work, not after a layer has been built and run."""
    if path == STDIO:
        return path
    if not path:
        raise argparse.ArgumentTypeError("needs a file name (or - for stdout), got ''")
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path!r} names a directory, not a file")
    try:
        target, in_place = output_destination(path)
    except GrucError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if in_place:  # a device or a FIFO, written as it is
        if not os.access(target, os.W_OK):
            raise argparse.ArgumentTypeError(f"cannot write {path!r}: permission denied")
        return path
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        reason = "is not a directory" if os.path.exists(parent) else "does not exist"
        raise argparse.ArgumentTypeError(f"cannot write {path!r}: {parent!r} {reason}")
    _require_writable_directory(parent, path)
    return path


def _require_writable_directory(directory: str, path: str) -> None:
    """Try what writing under ``directory`` needs (making an entry there), leaving nothing: a
    read-only place fails now, not after the work (permission bits do not tell, for root)."""
    try:
        os.rmdir(tempfile.mkdtemp(dir=directory, prefix=TEMPORARY_PREFIX))
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot write {path!r}: {error.strerror} in "
                                         f"{directory!r}") from None


def output_directory(path: str) -> str:
    """argparse ``type`` of an output directory flag: refused if it is a file or lies under one
    (a directory that does not exist yet is made when something is written to it)."""
    if not path:
        raise argparse.ArgumentTypeError("needs a directory, got ''")
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if existing == os.path.abspath(path) and not os.path.isdir(existing):
        raise argparse.ArgumentTypeError(f"{path!r} is a file, not a directory")
    if not os.path.isdir(existing):
        raise argparse.ArgumentTypeError(f"{path!r} cannot be a directory: {existing!r} is a "
                                         "file")
    _require_writable_directory(existing, path)
    return path


def write_output(text: str, path: str | None) -> None:
    """``text`` to stdout (``path`` None or ``-``) or atomically to the file ``path``; a reader
    that closes the pipe early is not an error."""
    if path in (None, STDIO):
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            # the reader stopped early (`gruc dump | head`), which is not an error; point stdout
            # at /dev/null so Python's final flush does not fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    write_text_atomically(path, text)


def add_pipeline_flags(parser: argparse.ArgumentParser) -> None:
    """``-p PIPELINE`` and the switches of :func:`gruc.passes.pipeline.run_pipeline`."""
    parser.add_argument("-p", "--passes", dest="pipeline", metavar="PIPELINE",
                        help="passes to run, e.g. plan-memory{strict=true} (see `gruc passes`)")
    parser.add_argument("--print-between-passes", action="store_true",
                        help="print the IR after each pass to stderr")
    parser.add_argument("--verify-each", action="store_true",
                        help="run the verifier on the input and after each pass (alone: "
                             "check a module)")
    parser.add_argument("--time-passes", action="store_true",
                        help="print each pass's wall time to stderr")


def _print_between(name: str, module: Module) -> None:
    print(f"# ----- IR after {name} -----", file=sys.stderr)
    sys.stderr.write(print_module(module))
    sys.stderr.flush()


def apply_pipeline(module: Module, args: argparse.Namespace) -> Module:
    """Run ``args.pipeline`` (if any) on ``module`` with the switches of
    :func:`add_pipeline_flags`; timings go to stderr."""
    if not args.pipeline and not args.verify_each:
        return module
    with StatusLine() as status:
        status.show(f"running {args.pipeline or 'the verifier'} ...")
        run = run_pipeline(module, args.pipeline or "", verify_each=args.verify_each,
                           print_between=_print_between if args.print_between_passes else None,
                           time_passes=args.time_passes)
    if args.time_passes:
        total = sum(seconds for _, seconds in run.timings)
        print("pass timings (wall):", file=sys.stderr)
        for name, seconds in run.timings:
            print(f"  {seconds:9.4f} s  {name}", file=sys.stderr)
        print(f"  {total:9.4f} s  total", file=sys.stderr)
    return run.module


def register(parser: argparse.ArgumentParser) -> None:
    """``gruc opt``'s flags, on the parser :func:`gruc.cli.build_parser` made for it."""
    parser.description = first_paragraph(__doc__)
    parser.add_argument("input", metavar="IN", nargs="?", default=STDIO,
                        help="text IR or JSON module; - for stdin (the default)")
    add_pipeline_flags(parser)
    parser.add_argument("-o", "--output", metavar="OUT", type=output_file,
                        help="output file (default: stdout)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="output format (default: text)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    module = apply_pipeline(read_module(args.input), args)
    write_output(format_module(module, args.format), args.output)
    return 0
