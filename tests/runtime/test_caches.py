"""Where compiled code is kept (issue 42, item 7): planning workers' caches in private directories
under the user's gruc cache, never in a shared temporary directory another user could have
filled with kernels for gruc to import; and numba's cache of gruc's own modules under
``GRUC_CACHE_DIR`` like the generated kernels, not in the installed package's ``__pycache__``."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gruc.errors import GrucFileError
from gruc.runtime.caches import private_directory


def _in_a_process(code: str, cache: Path) -> dict:
    """Run ``code`` (which prints one JSON value last) in a fresh interpreter whose gruc cache
    is ``cache`` and which has no numba settings of its own."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("NUMBA_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, "GRUC_CACHE_DIR": str(cache)}, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _private(path: Path) -> bool:
    info = path.lstat()
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and stat.S_IMODE(info.st_mode) == 0o700)


def test_a_planning_worker_caches_in_a_private_directory_under_the_users_cache(tmp_path):
    seen = _in_a_process(
        "import json, os; from gruc.plan.executors import worker_environment; "
        "worker_environment(); first = os.environ['GRUC_CACHE_DIR']; worker_environment(); "
        "print(json.dumps([os.getpid(), first, os.environ['GRUC_CACHE_DIR'], "
        "os.environ['NUMBA_CACHE_DIR']]))", tmp_path)
    pid, first, again, numba_cache = seen
    own = tmp_path / "plan-workers" / f"worker-{pid}"
    assert first == again == str(own)  # a second call changes nothing
    assert numba_cache == str(own / "numba")
    assert _private(tmp_path / "plan-workers") and _private(own)


@pytest.mark.parametrize("spoil, words", [
    (lambda path: (path.mkdir(), path.chmod(0o777)), "is writable by other users (mode 0777)"),
    (lambda path: path.symlink_to(path.parent), "is not a directory of its own"),
])
def test_a_cache_directory_others_could_have_written_is_refused(spoil, words, tmp_path):
    place = tmp_path / "plan-workers"
    spoil(place)
    with pytest.raises(GrucFileError, match=re.escape(f"cache directory {place} {words}")):
        private_directory(place)


def test_a_cache_directory_of_another_user_is_refused(tmp_path, monkeypatch):
    place = tmp_path / "plan-workers"
    place.mkdir(mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: place.stat().st_uid + 1)
    with pytest.raises(GrucFileError, match=rf"cache directory {place} belongs to user "):
        private_directory(place)


def test_a_readable_cache_directory_of_ones_own_is_made_private(tmp_path):
    place = tmp_path / "plan-workers"
    place.mkdir(mode=0o755)
    place.chmod(0o755)
    assert private_directory(place) == place and _private(place)


def test_numba_caches_grucs_own_modules_under_the_gruc_cache(tmp_path):
    """The jitted functions of gruc's modules (here the copy kernel of ``gruc.runtime.transfer``)
    keep their compiled code under ``GRUC_CACHE_DIR/numba``: an installed package's directory
    may not be writable, and the cache is the user's, like the generated kernels."""
    path, files = _in_a_process(
        "import json, pathlib, numpy as np; from gruc.runtime import transfer; "
        "kernel = transfer._move_runs; "
        "runs = np.zeros(1, np.uint64); "
        "kernel(np.zeros(8, np.uint8), runs, np.zeros(8, np.uint8), runs, runs + 1); "
        "where = pathlib.Path(kernel._cache._cache_path); "
        "print(json.dumps([str(where), sorted(p.suffix for p in where.iterdir())]))", tmp_path)
    assert Path(path).is_relative_to(tmp_path / "numba"), path
    assert ".nbi" in files and ".nbc" in files
