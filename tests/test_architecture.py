"""The picture of docs/architecture.md, held against the code: every import runs down the layers,
the definition of a program imports neither the compiler's back end nor numba, and code names
vertex kinds by their objects."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gruc"

LAYERS = {
    # leaves: import nothing of gruc above them
    "errors": 0, "text": 0, "files": 0, "types": 0, "validated": 0, "target": 0,
    "rnn_geometry": 0, "data": 0, "status": 0,
    "ir": 1,                      # what a program is
    "ops": 2, "popnn": 2,         # builders: poplibs-style ops and layers
    "analysis": 3,                # step numbering, liveness, time loops
    "memory": 4,                  # the memory plan and its planner
    "passes": 5,                  # rewrites
    "runtime": 6,                 # running and costing a program
    "tools": 7,                   # layers built, run and checked from flags
    "plan": 8, "fidelity": 8,     # studies over tools' layers
    "cli": 9, "__main__": 10, "__init__": 10,
}
"""docs/architecture.md's layers, bottom (0) to top: a module may import from its own layer
and the ones below."""


def _imports(path: Path) -> list[str]:
    """The gruc modules ``path`` imports, at its top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [name for name in found if name.split(".")[0] == "gruc" and "." in name]


def test_every_import_runs_down_the_layers():
    assert {p.name.removesuffix(".py") for p in PACKAGE.iterdir()
            if p.suffix == ".py" or (p.is_dir() and not p.name.startswith("__"))} == set(LAYERS)
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        layer = LAYERS[path.relative_to(PACKAGE).parts[0].removesuffix(".py")]
        for name in _imports(path):
            if LAYERS[name.split(".")[1]] > layer:
                upward.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert upward == []


def _loaded_by(modules: str, prefixes: tuple[str, ...]) -> list[str]:
    """Which of the modules named by ``prefixes`` (packages, or gruc's subpackages) a fresh
    interpreter has loaded after importing ``modules`` (comma-separated)."""
    code = (f"import sys, {modules}; print(sorted({{m.split('.')[0] if not m.startswith('gruc.') "
            f"else '.'.join(m.split('.')[:2]) for m in sys.modules if m.startswith({prefixes!r})}}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    return ast.literal_eval(done.stdout.strip())


def test_building_a_program_needs_no_back_end():
    """Graph building, the text IR, the ops and the GRU builders load neither the passes, the
    runtime nor numba: a study that only builds pays for none of them."""
    assert _loaded_by("gruc.ir.parser, gruc.ir.printer, gruc.ir.verify, gruc.ops, gruc.popnn.gru",
                      ("numba", "llvmlite", "gruc.passes", "gruc.runtime")) == []


def test_compiling_a_program_needs_no_numba():
    """The analyses, the memory planner and the passes are numpy only: numba (and the runtime,
    which holds every compiled kernel) load only when a program is lowered or run."""
    assert _loaded_by("gruc.analysis.liveness, gruc.analysis.time_loops, gruc.memory.planner, "
                      "gruc.passes", ("numba", "llvmlite", "gruc.runtime")) == []


def _docstrings(tree: ast.Module) -> set[int]:
    """``id`` of every docstring node of ``tree``: the first statement's string of the module and
    of each class and function."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            found.add(id(node.body[0].value))
    return found


def _kind_definitions(tree: ast.Module) -> set[int]:
    """``id`` of the name argument of every ``VertexKind("Name", ...)`` in ``tree``."""
    return {id(node.args[0]) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "VertexKind" and node.args}


def test_code_names_vertex_kinds_by_their_objects():
    """A kind's name is its identity in text only (the text IR, JSON, ``add_vertex`` by name):
    code refers to a kind by the object its family declares, so a misspelt kind fails at import
    instead of silently matching nothing.  Only the kind's own definition holds its name; prose
    (docstrings, comments) may name it."""
    import gruc.ir.codelets  # noqa: F401 (registers every kind)
    from gruc.ir.vertices import VERTEX_KINDS

    defined, named = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        prose, definitions = _docstrings(tree), _kind_definitions(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value in VERTEX_KINDS) or id(node) in prose:
                continue
            if id(node) in definitions:
                defined.append(node.value)
            else:
                named.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    assert defined, "no VertexKind(...) definition found: the scan sees no kind names"
    assert named == []
