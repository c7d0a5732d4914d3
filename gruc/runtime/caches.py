"""Where gruc keeps what it compiles: one cache directory per user, ``GRUC_CACHE_DIR`` or
``~/.cache/gruc``.

* ``kernels/``: generated kernel sources, imported from there, with numba's compiled code beside
  them (:func:`gruc.runtime.kernels.load_kernel`);
* ``numba/``: numba's compiled code of the jitted functions in gruc's own modules
  (:class:`GrucModulesLocator`), which numba would otherwise write into the installed package's
  ``__pycache__`` — a directory that may not be writable, and is not the user's;
* ``plan-workers/worker-<pid>/``: a planning worker's own caches (:mod:`gruc.plan.executors`).

Code is imported from these directories, so a directory gruc makes for itself is private (mode
0700): one another user could have written (a world-writable one, a symlink to elsewhere, one
owned by someone else) is refused rather than used (:func:`private_directory`).  The planning
workers' caches used to live in a predictable directory of the system's shared temporary
directory, which anyone could have made first and filled.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from numba.core import caching, config

import gruc
from gruc.errors import GrucFileError

_PACKAGE = os.path.dirname(os.path.abspath(gruc.__file__))


def cache_root() -> Path:
    """The user's gruc cache directory: ``GRUC_CACHE_DIR``, else ``~/.cache/gruc``."""
    return Path(os.environ.get("GRUC_CACHE_DIR") or Path.home() / ".cache" / "gruc")


def private_directory(path: Path) -> Path:
    """``path``, a directory only this user can write, made (mode 0700, with its parents) if
    missing.  One of this user's that others may only read is made private; one others could
    have written into is refused with :class:`~gruc.errors.GrucFileError` naming it."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        pass  # a symlink or a file: refused below
    except OSError as error:
        raise GrucFileError.about(path, "make", error) from None
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise GrucFileError(f"cache directory {path} is not a directory of its own (a symlink or "
                            "a file); remove it, or set GRUC_CACHE_DIR elsewhere")
    if info.st_uid != os.getuid():
        raise GrucFileError(f"cache directory {path} belongs to user {info.st_uid}, not to you "
                            f"({os.getuid()}); remove it, or set GRUC_CACHE_DIR elsewhere")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        raise GrucFileError(f"cache directory {path} is writable by other users (mode "
                            f"{mode:04o}); what is in it may not be gruc's: remove it")
    if mode != 0o700:
        os.chmod(path, 0o700)
    return path


class GrucModulesLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """numba's cache locator for the jitted functions of gruc's own modules: their compiled code
    goes to ``numba/`` in the gruc cache (:func:`cache_root` when the module is imported), laid
    out as numba lays out ``NUMBA_CACHE_DIR``.  Functions elsewhere, and any function when
    ``NUMBA_CACHE_DIR`` is set (the user's choice for all of numba), are left to numba's own
    locators."""

    def __init__(self, py_func, py_file) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(cache_root() / "numba" / self.get_suitable_cache_subpath(py_file))

    def get_cache_path(self) -> str:
        return self._cache_path

    @classmethod
    def from_function(cls, py_func, py_file):
        if config.CACHE_DIR or not os.path.abspath(py_file).startswith(_PACKAGE + os.sep):
            return None
        return super().from_function(py_func, py_file)


def use_gruc_cache_for_gruc_modules() -> None:
    """Put :class:`GrucModulesLocator` first among numba's cache locators (once).  It must run
    before gruc's jitted functions are defined: numba picks a function's cache directory when
    ``njit(cache=True)`` decorates it."""
    implementation = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # numba < 0.61
    if GrucModulesLocator not in implementation._locator_classes:
        implementation._locator_classes.insert(0, GrucModulesLocator)
