"""Pass golden files: ``tests/passes/<pass_name>/*.gruc``, run with verify-each (SPEC G1, G4, G5).

A golden file is text IR with a header of ``#`` lines::

    # RUN: -p <pipeline>
    # what the case shows (any number of comment lines)
    # EXPECT-ERROR: <text the pipeline's GrucError must contain>     (negative cases only)
    module target(...)          <- the input module
    ...
    # ----- expected
    module target(...)          <- the module the pipeline must print (positive cases only)
    ...

Every input and expected module must print back to exactly its text (the round trip).  With
``GRUC_UPDATE_GOLDEN=1`` the expected parts are rewritten from what the passes print now; review
the diff before committing it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from gruc import FLOAT, Copy, Graph, Module, Sequence, Target
from gruc.errors import GrucError, GrucOptionError, GrucVerifyError
from gruc.ir.parser import parse_module
from gruc.ir.printer import print_module
from gruc.passes.pipeline import parse_pipeline, run_pipeline

HERE = Path(__file__).parent
PASSES = ["canonicalize", "inplace-fusion", "copy-elim", "dce", "exchange", "shard"]
SEPARATOR = "# ----- expected\n"
FILES = sorted(HERE.glob("*/*.gruc"))


@dataclass
class Golden:
    path: Path
    header: str
    pipeline: str
    error: str | None
    input: str
    expected: str | None

    @classmethod
    def read(cls, path: Path) -> "Golden":
        text = path.read_text()
        lines = text.splitlines(keepends=True)
        count = next(k for k, line in enumerate(lines) if not line.startswith("#"))
        header, body = "".join(lines[:count]), "".join(lines[count:])
        run = lines[0].removeprefix("# RUN: -p ").strip()
        assert lines[0].startswith("# RUN: -p "), f"{path.name}: first line must be '# RUN: -p ...'"
        errors = [line.removeprefix("# EXPECT-ERROR:").strip() for line in lines[:count]
                  if line.startswith("# EXPECT-ERROR:")]
        source, _, expected = body.partition(SEPARATOR)
        return cls(path, header, run, errors[0] if errors else None, source,
                   expected if SEPARATOR in body else None)

    def write(self, expected: str) -> None:
        self.path.write_text(self.header + self.input + SEPARATOR + expected)


def test_golden_files_exist_for_every_pass_tested_here():
    assert {path.parent.name for path in FILES} >= {name.replace("-", "_") for name in PASSES}


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_golden(path: Path):
    golden = Golden.read(path)
    assert print_module(parse_module(golden.input)) == golden.input, "input does not round-trip"
    module = parse_module(golden.input)
    if golden.error is not None:
        assert golden.expected is None, "a negative case has no expected module"
        with pytest.raises(GrucError) as info:
            run_pipeline(module, golden.pipeline, verify_each=True)
        assert golden.error in str(info.value)
        return
    printed = print_module(run_pipeline(module, golden.pipeline, verify_each=True).module)
    if os.environ.get("GRUC_UPDATE_GOLDEN") == "1":
        golden.write(printed)
        golden = Golden.read(path)
    assert golden.expected is not None, f"no '{SEPARATOR.strip()}' section"
    assert print_module(parse_module(golden.expected)) == golden.expected, \
        "expected module does not round-trip"
    assert printed == golden.expected


@pytest.mark.parametrize("name", PASSES)
def test_invalid_input_fails_as_the_input_naming_the_problem(name):
    g = Graph(Target.custom(tiles_per_ipu=4))
    ghost = g.add_variable(FLOAT, (4,), "ghost")
    g.set_tile_mapping(ghost, 0)
    out = g.add_variable(FLOAT, (4,), "out")
    g.set_tile_mapping(out, 1)
    g.create_host_read("out", out)
    module = Module(g, [Sequence(Copy(ghost, out))])
    problem = "variable 'ghost' is read but nothing writes it"
    with pytest.raises(GrucError, match=f"^the input module is not valid: {problem}"):
        run_pipeline(module, name)
    (alone,) = parse_pipeline(name)
    with pytest.raises(GrucVerifyError, match=f"^{problem}"):  # a pass run alone checks it too
        alone.apply(module)


@pytest.mark.parametrize("name", PASSES)
def test_an_unknown_option_fails_naming_the_pass_and_the_option(name):
    with pytest.raises(GrucOptionError, match=f"pass '{name}' has no option 'colour'"):
        parse_pipeline(name + "{colour=red}")
