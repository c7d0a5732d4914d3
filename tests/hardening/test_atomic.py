"""Nothing lost: every file gruc writes is replaced atomically, so a process killed at any moment
leaves the old complete file or the new complete one — never a torn one.

A child process writes reports, traces and sweep rows (through the writers gruc itself uses) and
is SIGKILLed: once exactly between writing a new version and swapping it in (a hook on ``fsync``
stops it there), and at random moments while it rewrites large files in a loop.  The files left
must parse and be self-consistent; temporary files may be left behind, but never under a result's
name, and the sweep resumes from its rows.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from gruc.errors import GrucValueError
from gruc.plan.rows import LOCK_NAME, RowStore
from gruc.files import TEMPORARY_PREFIX, atomic_file, write_text_atomically

CHILD = textwrap.dedent(r'''
    import json, os, sys, time
    from gruc.plan.rows import LOCK_NAME, RowStore
    from gruc.files import write_text_atomically
    from gruc.runtime.trace import write_chrome_trace

    kind, directory, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    store = RowStore(directory) if kind == "rows" else None

    def write(version):
        """Version ``version`` of a large, self-checking file of the kind asked for."""
        filler = "x" * 4000
        if kind == "report":
            rows = [{"step": k, "version": version, "text": filler} for k in range(400)]
            write_text_atomically(os.path.join(directory, "report.json"),
                                  json.dumps({"version": version, "steps": rows}, indent=1))
        elif kind == "trace":
            events = [{"name": filler, "ts": k, "args": {"version": version}} for k in range(400)]
            write_chrome_trace(os.path.join(directory, "trace.json"),
                               {"traceEvents": events, "otherData": {"version": version}})
        else:
            store.add({"config": f"c{version}", "version": version, "payload": filler * 4})
            store.write()  # now, whatever the store's own rewrite schedule

    write(1)
    if mode == "midway":
        def stop(fd):  # the new version is in the temporary file, not yet swapped in
            print("MIDWAY", flush=True)
            time.sleep(600)
        os.fsync = stop
        print("READY", flush=True)
        write(2)
    else:
        print("READY", flush=True)
        version = 2
        while True:
            write(version)
            version += 1
''')


def start_child(kind: str, directory: Path, mode: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-c", CHILD, kind, str(directory), mode],
                            stdout=subprocess.PIPE, text=True, env=env)


def wait_for(child: subprocess.Popen, word: str) -> None:
    line = child.stdout.readline().strip()
    assert line == word, f"child said {line!r} instead of {word!r} (exit code {child.poll()})"


def kill(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    child.stdout.close()
    assert child.returncode == -signal.SIGKILL


def check_complete(kind: str, directory: Path) -> int:
    """Parse what the child left and check every part of it is one whole version; return it."""
    if kind == "report":
        data = json.loads((directory / "report.json").read_text())
        assert [s["step"] for s in data["steps"]] == list(range(400))
        assert {s["version"] for s in data["steps"]} == {data["version"]}
        return data["version"]
    if kind == "trace":
        data = json.loads((directory / "trace.json").read_text())
        assert [e["ts"] for e in data["traceEvents"]] == list(range(400))
        versions = {e["args"]["version"] for e in data["traceEvents"]}
        assert versions == {data["otherData"]["version"]}
        return data["otherData"]["version"]
    rows = json.loads((directory / "rows.json").read_text())
    count = len(rows)
    assert [r["config"] for r in rows] == [f"c{k}" for k in range(1, count + 1)]
    with open(directory / "rows.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    # the two files are replaced one after the other: the CSV may be one row behind the JSON
    assert len(table) in (count, count - 1)
    for k, row in enumerate(table, start=1):
        assert row == {"config": f"c{k}", "version": str(k), "payload": "x" * 16000}
    assert len(RowStore(directory)) == count  # the sweep resumes from the JSON rows
    return count


def results(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()
                  if not p.name.startswith(TEMPORARY_PREFIX) and p.name != LOCK_NAME)


@pytest.mark.parametrize("kind", ["report", "trace", "rows"])
def test_killed_between_write_and_swap_leaves_the_old_file(kind, tmp_path):
    child = start_child(kind, tmp_path, "midway")
    wait_for(child, "READY")
    wait_for(child, "MIDWAY")
    kill(child)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(TEMPORARY_PREFIX)]
    assert leftovers, "the killed write should have left its temporary file"
    assert check_complete(kind, tmp_path) == 1
    if kind == "rows":  # the next run of the sweep tidied what the killed one left
        assert all(p.name in ("rows.csv", "rows.json", LOCK_NAME) for p in tmp_path.iterdir())
    expected = {"report": ["report.json"], "trace": ["trace.json"],
                "rows": ["rows.csv", "rows.json"]}[kind]
    assert results(tmp_path) == expected


def test_killed_at_random_moments_leaves_whole_files(tmp_path):
    rng = np.random.default_rng(12)
    for round_, kind in enumerate(["report", "trace", "rows"]):
        directory = tmp_path / f"{round_}-{kind}"
        directory.mkdir()
        child = start_child(kind, directory, "loop")
        wait_for(child, "READY")
        time.sleep(float(rng.uniform(0.05, 0.4)))
        kill(child)
        assert check_complete(kind, directory) >= 1


def test_an_error_while_writing_keeps_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.json"
    write_text_atomically(path, '{"old": true}')
    with pytest.raises(RuntimeError, match="disk on fire"):
        with atomic_file(path) as handle:
            handle.write('{"new": ')
            raise RuntimeError("disk on fire")
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    (tmp_path / "sub").mkdir()
    with atomic_file(tmp_path / "sub" / "image.png", "wb") as handle:
        handle.write(b"\x89PNG")
    assert (tmp_path / "sub" / "image.png").read_bytes() == b"\x89PNG"
    with pytest.raises(GrucValueError, match="mode 'a' is not supported; allowed: 'w', 'wb'"):
        with atomic_file(path, "a"):
            pass


def test_files_get_the_permissions_open_would_give_them(tmp_path):
    """Not a temporary file's owner-only 0600: a new file follows the umask, a replaced one keeps
    its permissions."""
    old_mask = os.umask(0o027)
    try:
        with atomic_file(tmp_path / "new.json") as handle:
            handle.write("{}")
    finally:
        os.umask(old_mask)
    assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    kept.chmod(0o604)
    with atomic_file(kept) as handle:
        handle.write("[]")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o604 and kept.read_text() == "[]"


def test_a_lone_surrogate_in_a_name_is_written_escaped_not_a_crash(tmp_path):
    """Python strings may hold lone surrogates (a graph name built by a program); UTF-8 cannot."""
    from gruc import FLOAT, Graph, Module, Sequence, Target
    from gruc.cli.opt import format_module

    graph = Graph(Target.custom(tiles_per_ipu=4))
    x = graph.add_variable(FLOAT, (4,), "x\ud800")
    graph.set_tile_mapping(x, 0)
    graph.create_host_write("x", x)
    path = tmp_path / "m.dot"
    write_text_atomically(path, format_module(Module(graph, [Sequence()]), "dot"))
    assert "x\\ud800" in path.read_text(encoding="utf-8")
