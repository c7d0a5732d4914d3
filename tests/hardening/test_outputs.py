"""Where gruc writes: device nodes, FIFOs and symlinks given as outputs keep what they are, and a
write that cannot be made is a gruc error naming the path, leaving nothing behind (issue 42,
items 1 and 6).

Regular files (and new paths) are replaced through a temporary file and a rename, so a reader
never sees half a file (``test_atomic.py``); a FIFO or a device is opened and written in place,
as a shell's ``>`` does — replacing it would turn ``-o /dev/null`` into a regular file and
nothing would reach the device or the reader — and a symlink is followed, so its target gets the
content and the link stays a link.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from gruc import FLOAT, Engine, Graph, Sequence, Target
from gruc.errors import GrucError, GrucFileError
from gruc.ir.expr import _1, Const
from gruc.ir.module import Module
from gruc.ir.printer import print_module
from gruc.ops import map
from gruc.runtime import report as report_module
from gruc.files import TEMPORARY_PREFIX, write_text_atomically
from gruc.cli import main

READ_ONLY_DIRECTORY = "/sys"
"""A directory nobody may create files in, root included (sysfs), where permission bits would
not stop root."""


def gruc(argv, capsys) -> tuple[int, str, str]:
    """``gruc argv`` in process: exit code, stdout, stderr."""
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def small_engine() -> Engine:
    """A two-step program, run once, so it has a report and a trace."""
    graph = Graph(Target.custom(tiles_per_ipu=4))
    x = graph.add_variable(FLOAT, (8,), "x")
    graph.map_tensor_linearly(x)
    prog = Sequence()
    y = map(graph, _1 * Const(2.0), [x], prog)
    graph.create_host_write("x", x)
    graph.create_host_read("y", y)
    engine = Engine(graph, prog, backend="numpy")
    engine.write_tensor("x", np.arange(8.0))
    engine.run()
    return engine


def read_fifo_in_background(fifo: Path) -> tuple[threading.Thread, list[bytes]]:
    """A reader of ``fifo`` in a thread (a writer's ``open`` waits for one); what it read lands
    in the list."""
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as handle:
            received.append(handle.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader, received


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(TEMPORARY_PREFIX)]


# ---- item 1: special files and symlinks -----------------------------------------------------------
def test_opt_into_a_fifo_writes_through_it_and_leaves_it_a_fifo(tmp_path, capsys):
    module = tmp_path / "in.gruc"
    graph = Graph(Target.custom(tiles_per_ipu=4))
    graph.map_tensor_linearly(graph.add_variable(FLOAT, (8,), "x"))
    module.write_text(print_module(Module(graph, [Sequence()])))
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader, received = read_fifo_in_background(fifo)
    code, _, err = gruc(["opt", str(module), "-o", str(fifo)], capsys)
    reader.join(timeout=60)
    assert (code, err) == (0, "")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert received == [module.read_bytes()]
    assert leftovers(tmp_path) == []


@pytest.fixture
def devices_kept(monkeypatch):
    """``os.replace`` refusing to replace a device: what the old behaviour did to the machine's
    ``/dev/null`` and ``/dev/full`` as root fails the test instead."""
    replace = os.replace

    def guarded(src, dst, *args, **kwargs):
        assert not os.path.realpath(dst).startswith("/dev/"), f"{src} would replace {dst}"
        return replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", guarded)


def test_dev_stdout_reaches_the_pipe_it_links_to(tmp_path):
    """``/dev/stdout`` links through ``/proc`` to ``pipe:[...]``, which is no path: the kernel,
    not the link's text, says it is a FIFO."""
    module = tmp_path / "in.gruc"
    module.write_text(print_module(Module(Graph(Target.custom(tiles_per_ipu=4)), [Sequence()])))
    done = subprocess.run([sys.executable, "-c", "import sys; from gruc.cli import main; "
                           "sys.exit(main())", "opt", str(module), "-o", "/dev/stdout"],
                          capture_output=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout == module.read_bytes()


def test_a_device_is_written_in_place_not_replaced(devices_kept):
    write_text_atomically(os.devnull, "nothing to see\n")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_report_and_trace_through_a_symlink_reach_its_target_and_keep_the_link(tmp_path):
    engine = small_engine()
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "report.json"
    target.write_text("{}")
    link = tmp_path / "report.json"
    link.symlink_to(target)
    engine.report.to_json(link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["memory"]["fits"] is True
    dangling = tmp_path / "trace.json"
    dangling.symlink_to(tmp_path / "real" / "trace.json")  # not there yet: the write makes it
    engine.write_trace(dangling)
    assert dangling.is_symlink() and "traceEvents" in json.loads(dangling.read_text())
    assert leftovers(tmp_path) == leftovers(tmp_path / "real") == []


def test_a_trace_into_a_fifo_is_read_whole(tmp_path):
    engine = small_engine()
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    reader, received = read_fifo_in_background(fifo)
    engine.write_trace(fifo)
    reader.join(timeout=60)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert json.loads(received[0])["traceEvents"]


def test_a_profile_directory_whose_report_is_a_symlink_keeps_it(tmp_path, capsys):
    profile, real = tmp_path / "profile", tmp_path / "elsewhere.json"
    profile.mkdir()
    (profile / "report.json").symlink_to(real)
    code, _, err = gruc(["gru", "--sequence-size", "2", "--input-size", "4", "--output-size",
                         "4", "--batch-size", "2", "--tiles-per-ipu", "4", "--backend", "numpy",
                         "--compile-only", "--profile", str(profile)], capsys)
    assert (code, err) == (0, "")
    assert (profile / "report.json").is_symlink() and json.loads(real.read_text())["memory"]


def test_a_socket_is_refused_by_name(tmp_path):
    import socket

    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(GrucFileError, match=rf"cannot write {path}: it is a socket"):
            write_text_atomically(path, "x")


# ---- item 6: writes that cannot be made ---------------------------------------------------------------
def test_a_read_only_directory_is_a_gruc_error_naming_the_path():
    engine = small_engine()
    for write, name in ((engine.report.to_json, "report.json"),
                        (engine.write_trace, "trace.json")):
        path = os.path.join(READ_ONLY_DIRECTORY, name)
        with pytest.raises(GrucFileError, match=rf"^cannot write {path}: ") as info:
            write(path)
        assert isinstance(info.value, OSError) and isinstance(info.value, GrucError)
        assert info.value.filename == path and not os.path.exists(path)


def test_missing_parent_directories_are_not_made(tmp_path):
    engine = small_engine()
    path = tmp_path / "not" / "there" / "report.json"
    with pytest.raises(GrucFileError, match=rf"cannot write {path}: No such file or directory"):
        engine.report.to_json(path)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_names_the_path_and_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    write_text_atomically(path, '{"old": true}')

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(report_module.os, "fsync", full)
    with pytest.raises(GrucFileError, match=rf"cannot write {path}: No space left on device"):
        small_engine().report.to_json(path)
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_full_device_names_the_path(devices_kept):
    with pytest.raises(GrucFileError, match="cannot write /dev/full: No space left on device"):
        write_text_atomically("/dev/full", "x" * 100_000)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
