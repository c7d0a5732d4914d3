"""The newcomer's install (issue 42, item 11): the README's first command is one line that makes
a virtual environment (a stock Debian Python refuses ``pip install`` outside one), Intel MKL is
an extra rather than ~970 MB every install brings, and ``gruc --version`` and ``python -m gruc``
work."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import gruc

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _readme_commands() -> list[str]:
    """The commands of the README's "Two commands" section, in order."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL)]


def test_the_first_command_is_one_line_from_clone_to_run_in_a_virtual_environment():
    first, second = _readme_commands()
    assert "\n" not in first
    steps = [step.strip() for step in first.split("&&")]
    assert steps[0].startswith("git clone ") and steps[1] == "cd gruc"
    assert steps[2:] == ["python3 -m venv .venv", ". .venv/bin/activate", "pip install -e .",
                         "gruc gru"]
    assert second == "pip install -e '.[test]' && python -m pytest"


def test_mkl_is_an_extra_not_a_dependency():
    project = _project()
    assert not any(r.startswith("mkl") for r in project["dependencies"])
    extras = project["optional-dependencies"]
    assert [r.split(";")[0] for r in extras["mkl"]] == ["mkl>=2024.2"]
    assert "platform_machine == 'x86_64'" in extras["mkl"][0]  # the wheel's only platform
    assert any(r.startswith("mkl") for r in extras["test"])  # CI still tests the MKL products


def test_version_and_python_dash_m():
    for command in (["gruc", "--version"], ["-m", "gruc", "--version"]):
        argv = [sys.executable, "-c", "import sys; from gruc.cli import main; sys.exit(main())",
                *command[1:]] if command[0] == "gruc" else [sys.executable, *command]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout, done.stderr) == (0, f"gruc {gruc.__version__}\n",
                                                               ""), command
    assert gruc.__version__ == _project()["version"]
    done = subprocess.run([sys.executable, "-m", "gruc", "passes"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "shard:" in done.stdout
