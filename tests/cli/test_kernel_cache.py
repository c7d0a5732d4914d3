"""Compiled kernels outlive the process: the first ``gruc gru`` on a machine compiles numba kernels
and saves them on disk, and the next process loads every kernel it runs from there."""

import os
import re
import subprocess

from cli_helpers import GRUC


def _gru_process(caches, env):
    """``gruc gru`` (the defaults) in a process of its own, with numba telling each cache event."""
    return subprocess.run([*GRUC, "gru"], capture_output=True, text=True, timeout=300,
                          env={**env, "GRUC_CACHE_DIR": str(caches / "gruc"),
                               "NUMBA_CACHE_DIR": str(caches / "numba"),
                               "NUMBA_DEBUG_CACHE": "1"})


def test_a_second_process_loads_the_kernels_the_first_compiled(tmp_path):
    env = {name: value for name, value in os.environ.items() if not name.startswith("NUMBA_")}
    first = _gru_process(tmp_path, env)
    assert first.returncode == 0, first.stderr
    assert "data loaded" not in first.stdout
    assert any((tmp_path / "gruc" / "kernels").glob("kernel_*.py"))  # the generated sources
    second = _gru_process(tmp_path, env)
    assert second.returncode == 0, second.stderr
    assert "data saved" not in second.stdout and "PASSED" in second.stdout
    # both the package's kernels and the ones generated per expression were saved, then loaded
    for kernel in (r"transfer\._move_\w+", r"kernel_\w+\.kernel"):
        assert re.search(rf"data saved to .*{kernel}", first.stdout), kernel
        assert re.search(rf"data loaded from .*{kernel}", second.stdout), kernel
