"""Writing files whole or not at all: the one way gruc writes a file (reports, traces, HTML,
DOT, sweep rows, plots, ``gruc opt`` output, the kernel cache).

Its own module because every layer writes files (the runtime its reports and kernel cache, the
planner its rows and plots, the command line its outputs) and none of them owns the idea; it
imports nothing of gruc but its errors, so any layer may use it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from contextlib import contextmanager
from typing import IO, Iterator

from gruc.errors import GrucError, GrucFileError, GrucValueError


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """A file handle whose content replaces ``path`` only once complete: the one way gruc writes
    a file (reports, traces, HTML, DOT, sweep rows, plots, ``gruc opt`` output).

    Why: a sweep runs for hours and a user may kill it, or the machine may die, at any moment; a
    reader — or the sweep's next run, resuming from its rows — must then find the old complete
    file or the new complete one, never a torn one.  So the content goes to a temporary file in
    the same directory (named ``.tmp-...``, so nothing takes it for a result), which is flushed
    and fsynced before ``os.replace`` swaps it in — atomic on POSIX and Windows within one file
    system — and the directory is fsynced after, so the rename itself survives a crash.  On any
    error the temporary file is removed and ``path`` is left as it was.  The file gets the
    permissions ``open`` would have given it (those of the file it replaces, else the umask's),
    not the owner-only ones of a temporary file.

    What ``path`` names decides how (:func:`output_destination`): a symlink is followed, so its
    target gets the content and the link stays; a device or a FIFO is opened and written in
    place, as a shell's ``>`` does (replacing ``/dev/null`` or a pipe a reader waits on by a
    regular file would send nothing where the user pointed).  The directory must exist: none is
    made that the caller did not ask for.  A write that cannot be made (a read-only directory, a
    full disk) raises :class:`~gruc.errors.GrucFileError` naming ``path``.
    """
    if mode not in ("w", "wb"):
        raise GrucValueError(f"atomic_file mode {mode!r} is not supported; allowed: 'w', 'wb'")
    # text is UTF-8, a lone surrogate (a name a program built) written escaped
    text_mode = {"encoding": "utf-8", "errors": "backslashreplace"} if mode == "w" else {}
    try:
        target, in_place = output_destination(path)
        if in_place:
            with open(target, mode, **text_mode) as handle:
                yield handle
            return
        directory = os.path.dirname(target)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=TEMPORARY_PREFIX,
                                   suffix="-" + os.path.basename(target))
        try:
            with os.fdopen(fd, mode, **text_mode) as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, _permissions(target))
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        _fsync_directory(directory)
    except GrucError:
        raise
    except OSError as error:
        raise GrucFileError.about(path, "write", error) from None


def output_destination(path: str | os.PathLike) -> tuple[str, bool]:
    """Where writing ``path`` puts the bytes, and whether in place: ``(file, False)`` for a
    regular file or a new one (replaced atomically: ``file`` is ``path`` with symlinks
    resolved, so a link keeps pointing where it did), ``(file, True)`` for a character or
    block device or a FIFO (opened and written as it is).  A directory or a socket is refused,
    naming ``path``."""
    if os.path.isdir(path) or str(path).endswith(("/", os.sep)):
        raise GrucValueError(f"cannot write {str(path)!r}: it names a directory, not a file")
    try:  # the kernel follows the links, /proc's (``/dev/stdout``, ``>(...)``) included
        kind = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # a new file (or a bad directory: the
        return os.path.realpath(path), False            # write names it)
    if stat.S_ISSOCK(kind):
        raise GrucFileError(f"cannot write {os.fspath(path)}: it is a socket; gruc writes "
                            "regular files, devices and FIFOs")
    if stat.S_ISREG(kind):
        return os.path.realpath(path), False
    return os.fspath(path), True


TEMPORARY_PREFIX = ".tmp-"
"""Start of the name of every temporary file :func:`atomic_file` creates."""


def _permissions(path: str | os.PathLike) -> int:
    """The permission bits a file written at ``path`` keeps: the replaced file's, else what
    ``open`` gives a new file under this process's umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """This process's umask, read without changing it where Linux says it (``os.umask`` can only
    be read by setting it, which other threads would see for a moment)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_directory(directory: str) -> None:
    """Persist a rename in ``directory`` (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` so a reader sees the old file or the new one, never a torn one."""
    with atomic_file(path, "w") as handle:
        handle.write(text)
