"""Where sweep rows are computed: in this process, in a local process pool, or on a Dask cluster.

Every executor has one method, ``map_unordered(fn, items)``, yielding ``(index, fn(item))`` as
results arrive (any order), so the sweep can store each row the moment it exists.  ``fn`` must be
a picklable top-level function (or a ``functools.partial`` of one) and ``items`` plain data.

* :class:`SerialExecutor` (``--jobs 1``): in process, in order; the reference the others match.
* :class:`ProcessExecutor` (the default): a ``ProcessPoolExecutor`` over the *spawn* context
  (forking a process that holds numba's state or threads is unsafe).
* :class:`DaskExecutor` (``--scheduler ADDRESS``, the ``dist`` extra): ``client.map`` on a running
  Dask distributed scheduler.

Worker processes call :func:`worker_environment` before any work: one numba thread (a pool of N
processes each starting a thread per core oversubscribes the machine; Dask does not limit numba's
threads) and their own ``GRUC_CACHE_DIR`` / ``NUMBA_CACHE_DIR`` (private directories under the
user's gruc cache, :data:`WORKERS_DIRECTORY`), since numba's on-disk cache is not safe to write
from several processes at once.  Plan-only work compiles no kernels at all, so this only guards
whatever a task might compile.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from gruc.errors import GrucValueError
from gruc.runtime.caches import cache_root, private_directory

Result = tuple[int, Any]

WORKERS_DIRECTORY = "plan-workers"
"""The directory of the gruc cache that holds each worker's own caches (``worker-<pid>``)."""


def worker_environment() -> None:
    """Give this worker process one numba thread and caches of its own (idempotent): private
    directories under the user's gruc cache (:func:`~gruc.runtime.caches.private_directory`),
    since kernels are imported from them."""
    name = f"worker-{os.getpid()}"
    current = cache_root()
    if current.name == name and current.parent.name == WORKERS_DIRECTORY:
        return
    own = private_directory(private_directory(current / WORKERS_DIRECTORY) / name)
    os.environ.update(NUMBA_NUM_THREADS="1", GRUC_CACHE_DIR=str(own),
                      NUMBA_CACHE_DIR=str(own / "numba"))
    from numba.core import config  # numba re-reads its environment before each compilation

    config.reload_config()


def _pool_worker(parent: int) -> None:
    """Initializer of pool workers: :func:`worker_environment`; Ctrl-C is the parent's to handle
    (it cancels what is queued and keeps every finished row); and a worker whose sweep was killed
    exits instead of computing rows nobody will store."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker_environment()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


@contextmanager
def _workers_start_deaf_to_ctrl_c() -> Iterator[None]:
    """Ignore SIGINT while a worker process may be started, so it starts ignoring it too.

    Why: a terminal's Ctrl-C goes to the whole process group, and a spawned worker spends its
    first second importing gruc, before :func:`_pool_worker` can ignore SIGINT: each worker then
    printed a KeyboardInterrupt traceback under the parent's one line.  An ignored signal stays
    ignored across ``exec`` and Python leaves it so, whereas a blocked one does not survive
    the spawn.  The parent ignores Ctrl-C only while it starts its workers (milliseconds, once
    per pool: a Ctrl-C in them is lost, and a second one stops the sweep); only the main thread
    may change signal handlers, and elsewhere nothing is changed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def in_worker(fn: Callable[[Any], Any], item: Any) -> Any:
    """``fn(item)`` after :func:`worker_environment`: what a Dask task runs."""
    worker_environment()
    return fn(item)


class SerialExecutor:
    """Compute every item in this process, in order."""

    def map_unordered(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Result]:
        for index, item in enumerate(items):
            yield index, fn(item)

    def close(self) -> None:
        """Nothing to release."""


class ProcessExecutor:
    """A local pool of ``jobs`` spawned worker processes."""

    def __init__(self, jobs: int) -> None:
        self.jobs = _checked_jobs(jobs)
        self._pool: ProcessPoolExecutor | None = None

    def map_unordered(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Result]:
        """``(index, fn(item))`` as workers finish.  The pool starts on first use (no more workers
        than items) and serves later calls too; tasks still queued when the caller stops are
        cancelled."""
        if not items:
            return
        pending: dict = {}
        todo = iter(enumerate(items))
        try:
            if self._pool is None:
                private_directory(cache_root() / WORKERS_DIRECTORY)  # refused here, in one line
                self._pool = ProcessPoolExecutor(
                    max_workers=min(self.jobs, len(items)),
                    mp_context=multiprocessing.get_context("spawn"), initializer=_pool_worker,
                    initargs=(os.getpid(),))
                # the pool starts a worker on each submit while none is idle: these first
                # submits, made before any worker has even started, start them all
                with _workers_start_deaf_to_ctrl_c():
                    self._fill(fn, pending, todo)
            while True:
                self._fill(fn, pending, todo)
                if not pending:
                    return
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield pending.pop(future), future.result()
        finally:
            for future in pending:
                future.cancel()

    def _fill(self, fn: Callable[[Any], Any], pending: dict, todo: Iterator) -> None:
        """Submit tasks until two per worker are in flight (an interrupted sweep then leaves
        little queued) or none is left; ``pending`` maps each future to its item's index."""
        while len(pending) < 2 * self.jobs:
            nxt = next(todo, None)
            if nxt is None:
                return
            pending[self._pool.submit(fn, nxt[1])] = nxt[0]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class DaskExecutor:
    """Tasks on a Dask distributed cluster: ``address`` of its scheduler, or a ``Client``."""

    def __init__(self, address_or_client: Any) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise GrucValueError("--scheduler needs Dask distributed: pip install 'gruc[dist]'") \
                from None
        if isinstance(address_or_client, Client):
            self.client, self._own = address_or_client, False
        else:
            try:
                self.client = Client(address_or_client, timeout=10)
            except (OSError, ValueError, TypeError) as error:  # ValueError: an unknown scheme
                raise GrucValueError(f"cannot reach the Dask scheduler at "
                                     f"{address_or_client!r}: {error}") from None
            self._own = True

    def map_unordered(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Result]:
        """``(index, fn(item))`` as tasks finish, each run through :func:`in_worker`.
        ``pure=False`` makes equal items separate tasks with keys of their own, which the index
        lookup needs; unfinished tasks are cancelled when the caller stops."""
        from distributed import as_completed

        if not items:
            return
        futures = self.client.map(in_worker, [fn] * len(items), list(items), pure=False)
        index = {future.key: k for k, future in enumerate(futures)}
        try:
            for future in as_completed(futures):
                yield index[future.key], future.result()
        finally:
            self.client.cancel(futures)

    def close(self) -> None:
        if self._own:
            self.client.close()


def make_executor(jobs: int | None = None, scheduler: Any = None):
    """The executor for ``--jobs`` / ``--scheduler``: Dask if a scheduler is given, serial for one
    job, else a process pool of ``jobs`` (default: the CPU count) workers.  Both at once is
    refused: a Dask cluster's workers are its own, so a local count would be silently ignored."""
    if scheduler is not None:
        if jobs is not None:
            raise GrucValueError(f"jobs={jobs!r} and a scheduler ({scheduler!r}) cannot both be "
                                 "given: the Dask cluster's workers run the tasks; drop one")
        return DaskExecutor(scheduler)
    jobs = _checked_jobs((os.cpu_count() or 1) if jobs is None else jobs)
    return SerialExecutor() if jobs == 1 else ProcessExecutor(jobs)


def _checked_jobs(jobs: Any) -> int:
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise GrucValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    return jobs
