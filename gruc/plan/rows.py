"""Sweep rows on disk: ``rows.json`` and ``rows.csv`` in the output directory, kept in step.

Why this shape: a sweep may run for hours and be interrupted at any moment, so finished rows are
written as they come, and both files are replaced atomically
(:func:`~gruc.files.write_text_atomically`): a reader — or a killed sweep's next run —
sees the previous complete set of rows or the new one, never a torn file.  Rewriting both files
costs time in the number of rows (0.1 s at 3,000), so a store rewrites them only once that much
time has passed again tenfold since the last rewrite (:data:`WRITE_SHARE`): writing then takes
at most a tenth of a sweep however many rows it has, and a killed sweep loses at most the rows
of that last stretch (its next run computes them again).  Closing the store writes what is left.
``rows.json`` is the record the next run resumes from: rows are keyed by their ``config`` column
(the canonical flags of the configuration), so a configuration already there is not computed again,
whatever the grid it came from (but for a row the host ran out of memory for:
:data:`HOST_MEMORY_ERROR`). One sweep at a time per directory: a store holds an exclusive lock on
``.gruc-plan.lock`` there while it is open (two sweeps rewriting the files from their own rows would
each drop the other's), which is also what lets a new run delete the temporary files a killed one
left.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from gruc.errors import GrucFileError, GrucValueError
from gruc.files import TEMPORARY_PREFIX, write_text_atomically

JSON_NAME = "rows.json"
CSV_NAME = "rows.csv"
LOCK_NAME = ".gruc-plan.lock"
WRITE_SHARE = 0.1
"""At most this share of a sweep's time goes to rewriting its row files."""

HOST_MEMORY_ERROR = "MemoryError"
"""How the ``error`` column of a row that ran out of the host's memory begins.  Such a row is the
machine's answer, not the configuration's, so a resumed sweep plans it again (on a bigger machine,
or with more memory free) rather than keeping it."""


def short_of_host_memory(row: dict[str, Any]) -> bool:
    """Whether ``row`` records that the host ran out of memory planning it."""
    return str(row.get("error") or "").startswith(HOST_MEMORY_ERROR)


def cell_text(value: Any) -> str:
    """A row value as a table cell and as one would type it to ``gruc plan``: lists comma-joined
    (the CSV quotes them), None empty."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


RowCheck = Callable[[dict[str, Any]], str | None]
"""Why a row read back cannot be used (None: it can): the sweep's own rules for its rows."""

RowUpgrade = Callable[[dict[str, Any]], dict[str, Any]]
"""A row read back in the form this gruc writes (an older gruc's key brought up to date)."""


def read_rows(path: Path, check_row: RowCheck | None = None,
              upgrade_row: RowUpgrade | None = None) -> list[dict[str, Any]]:
    """The rows of ``path``, each passed through ``upgrade_row`` (if given) once it is known to
    be an object with a ``config`` text.  Anything but a JSON list of such rows (each passing
    ``check_row``) is refused naming the file and the first bad row — before any planning: a
    row that failed only when the files were rewritten, after planning, lost the new rows, and
    a traceback left the user guessing which file to fix."""
    def refused(why: str) -> GrucValueError:
        return GrucValueError(f"{path} is not a rows file this gruc wrote: {why}; move it away "
                              "or choose another --out")

    try:
        loaded = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as error:
        raise GrucFileError.about(path, "read", error) from None
    except UnicodeDecodeError:
        raise refused("it is not UTF-8 text") from None
    except RecursionError:
        raise refused("it is nested too deeply") from None
    except ValueError as error:  # broken JSON, or an integer past Python's digit limit
        raise refused(str(error).split(";")[0]) from None
    if not isinstance(loaded, list):
        raise refused("it is not a JSON list of rows")
    first: dict[str, int] = {}
    for index, row in enumerate(loaded):
        if not isinstance(row, dict) or "config" not in row:
            raise refused(f"row {index} is not an object with a 'config' key")
        if not isinstance(row["config"], str):
            raise refused(f"row {index}'s 'config' is {short_text(row['config'])}, not text")
        if upgrade_row is not None:
            row = loaded[index] = upgrade_row(row)
        if row["config"] in first:
            raise refused(f"two rows for one configuration (rows {first[row['config']]} and "
                          f"{index})")
        first[row["config"]] = index
        problem = check_row(row) if check_row else None
        if problem:
            raise refused(f"row {index}: {problem}")
    return loaded


def short_text(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: a message names a bad value, however long."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class RowStore:
    """The rows of one output directory, loaded from ``rows.json`` if a previous run left one
    (each upgraded by ``upgrade_row`` and checked by ``check_row``, a sweep's rules for its rows:
    see :func:`read_rows`)."""

    def __init__(self, directory: str | os.PathLike, check_row: RowCheck | None = None,
                 upgrade_row: RowUpgrade | None = None) -> None:
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise GrucValueError(f"output directory {str(self.directory)!r} is a file")
        self._lock = _lock(self.directory)
        self._next_write = 0.0     # time.monotonic() after which a finished row rewrites the files
        self.rows: list[dict[str, Any]] = []
        self._parameters: dict[str, None] = {}  # the swept flags of every grid that wrote here
        self._by_key: dict[str, dict[str, Any]] = {}
        if self.json_path.exists():
            try:
                loaded = read_rows(self.json_path, check_row, upgrade_row)
            except BaseException:
                self._lock.close()  # refused: the directory is free for the next try
                raise
            for row in loaded:
                if not short_of_host_memory(row):
                    self._remember(row)
        for name in (JSON_NAME, CSV_NAME):  # what a killed run was writing: never a result
            for stale in self.directory.glob(f"{TEMPORARY_PREFIX}*-{name}"):
                stale.unlink(missing_ok=True)

    def close(self) -> None:
        """Write the files one last time (an interrupted sweep leaves them in step) and let
        another sweep use the directory."""
        if self._lock is not None:
            try:
                self.write()
            finally:
                self._lock.close()
                self._lock = None

    def __enter__(self) -> "RowStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def json_path(self) -> Path:
        return self.directory / JSON_NAME

    @property
    def csv_path(self) -> Path:
        return self.directory / CSV_NAME

    def _remember(self, row: dict[str, Any]) -> None:
        if row["config"] in self._by_key:
            raise GrucValueError(f"two rows for one configuration: {row['config']}")
        self.rows.append(row)
        self._by_key[row["config"]] = row
        keys = list(row)
        self.declare_parameters(keys[:keys.index("config")])  # a row leads with its parameters

    def declare_parameters(self, names: Sequence[str]) -> None:
        """Make ``names`` (a grid's swept flags) parameter columns of every row."""
        self._parameters.update(dict.fromkeys(names))

    def _align(self) -> None:
        """Lead every row with every parameter column, in first-declared order, filled from the
        row's own configuration where its grid did not sweep that flag: whichever grids made the
        rows, the CSV has one column per swept flag, filled on every row (rows are changed in
        place, so :meth:`get` gives them aligned too)."""
        names = list(self._parameters)
        for row in self.rows:
            if list(row)[:len(names)] == names:
                continue
            flags = json.loads(row["config"])
            aligned = {name: row[name] if name in row else flags.get(name) for name in names}
            aligned.update((k, v) for k, v in row.items() if k not in aligned)
            row.clear()
            row.update(aligned)

    def __contains__(self, key: str) -> bool:
        return key in self._by_key

    def __len__(self) -> int:
        return len(self.rows)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._by_key.get(key)

    def add(self, row: dict[str, Any]) -> None:
        """Keep ``row``; rewrite both files (atomically) if the last rewrite is long enough ago."""
        self._remember(row)
        if time.monotonic() >= self._next_write:
            self.write()

    def arrange(self, keys: list[str]) -> None:
        """Put the rows of ``keys`` last, in that order (a sweep's grid order: its workers finish
        out of order); rows of other grids keep their order before them."""
        wanted = dict.fromkeys(k for k in keys if k in self._by_key)
        self.rows = ([row for row in self.rows if row["config"] not in wanted]
                     + [self._by_key[k] for k in wanted])

    def columns(self) -> list[str]:
        """Every key of every row, in first-seen order (swept parameters lead each row)."""
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.update(dict.fromkeys(row))
        return list(seen)

    def write(self) -> None:
        """Rewrite both files with every row now."""
        started = time.monotonic()
        self._align()
        write_text_atomically(self.json_path, json.dumps(self.rows, indent=1))
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.columns(), lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({k: cell_text(v) for k, v in row.items()})
        write_text_atomically(self.csv_path, buffer.getvalue())
        finished = time.monotonic()
        self._next_write = finished + (finished - started) * (1 / WRITE_SHARE - 1)


def _lock(directory: Path):
    """An open lock file holding an exclusive lock on ``directory`` (made if need be); a
    GrucValueError if another process holds it.  Where ``fcntl`` is missing (Windows) nothing
    is locked."""
    directory.mkdir(parents=True, exist_ok=True)
    handle = open(directory / LOCK_NAME, "a")
    if sys.platform == "win32":
        return handle
    import fcntl

    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise GrucValueError(f"another gruc plan is writing rows in {str(directory)!r}; one "
                             "sweep at a time per --out (wait for it, or choose another "
                             "directory)") from None
    return handle
