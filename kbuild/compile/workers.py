"""Compile processes: kbuild's one way to run a Triton compile in another process, and to stop it.

Triton's compile runs its passes in C++ with no deadline of its own (a kernel declared with ``BLOCK = 1048576``
ran 351 s), and a Python thread cannot be stopped; a process can. :class:`SpawnPool` is a
``ProcessPoolExecutor`` over ``spawn`` (children import Triton afresh: no forked locks, CUDA or MLIR state) whose
workers

* write nothing to stdout (their file descriptor 1 is their stderr: stdout may carry ``--json``),
* ignore SIGINT (Ctrl-C reaches the whole process group; the parent stops its workers itself),
* end when the process that started them ends (they look every half second: ``PR_SET_PDEATHSIG`` would fire
  when the *thread* that started one ends, and a pool starts workers from whichever thread submits),
* never run the parent's ``__main__`` again (spawn re-imports it, and a ``setup.py`` without a ``__name__``
  guard would build again in the child).

:meth:`SpawnPool.stop` ends the workers: SIGTERM first (a compile unwinds, removes its temporary directory and
ptxas dies with its guard, :mod:`kbuild.compile.ptxas_guard`), SIGKILL after :data:`STOP_GRACE` seconds
(Triton inside a C++ pass runs no Python signal handler until the pass returns).

:class:`CompileProcess` runs one call at a time in a pool of one worker under a wall-clock deadline
(:class:`Deadline` past it; :class:`WorkerDied` when the worker died, e.g. killed for memory) and keeps the
worker for the next call; :func:`kbuild.compile.triton_aot.compile_kernel` compiles in one (``compile_timeout``).
:class:`DeadlinePool` runs calls in several such processes at once, each call under its own deadline: level 1's
:class:`kbuild.tune.level1.compile.CompilePool` compiles configurations in one.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

T = TypeVar("T")

#: Seconds a worker has, after SIGTERM, to unwind before it is killed.
STOP_GRACE = 2.0
#: Seconds between a worker's looks at whether the process that started it still runs.
PARENT_POLL = 0.5

_MAIN_LOCK = threading.Lock()


class Deadline(Exception):
    """A call ran past its deadline; its worker was stopped."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds

    def __str__(self) -> str:
        return f"ran past {self.seconds:g} s and was stopped"


class WorkerDied(Exception):
    """The worker running a call died (a signal, the kernel's out-of-memory killer, a crash in Triton)."""


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_POLL)
        if os.getppid() != parent:  # the parent died: unwind if we can, then die
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(STOP_GRACE)
            os.kill(os.getpid(), signal.SIGKILL)


def _worker_started(parent: int) -> None:
    """Each worker's initializer: stdout to stderr, SIGINT ignored, an end when ``parent`` ends."""
    sys.stdout.flush()
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="kbuild-parent-watch", daemon=True).start()


@contextlib.contextmanager
def _main_not_rerun() -> Iterator[None]:
    """While workers start: a bare ``__main__`` (no ``__file__``, no ``__spec__``), so that spawn has no main
    module to run again in the child."""
    with _MAIN_LOCK:
        main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if main is not None:
                sys.modules["__main__"] = main


class SpawnPool(ProcessPoolExecutor):
    """A pool of ``jobs`` spawned compile processes (see the module docstring); :meth:`stop` ends them now."""

    def __init__(self, jobs: int) -> None:
        super().__init__(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                         initializer=_worker_started, initargs=(os.getpid(),))

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        with _main_not_rerun():  # the pool starts its workers here, in the caller's thread
            return super().submit(fn, *args, **kwargs)

    def stop(self, grace: float = STOP_GRACE) -> None:
        """End every worker now: SIGTERM, SIGKILL after ``grace`` seconds; pending calls are cancelled."""
        procs = list((getattr(self, "_processes", None) or {}).values())
        for p in procs:
            with contextlib.suppress(OSError, ValueError):
                p.terminate()
        deadline = time.monotonic() + grace
        for p in procs:
            with contextlib.suppress(OSError, ValueError, AssertionError):
                p.join(max(0.0, deadline - time.monotonic()))
        for p in procs:
            with contextlib.suppress(OSError, ValueError, AssertionError):
                if p.is_alive():
                    p.kill()
                    p.join(5)
        self.shutdown(wait=False, cancel_futures=True)


class CompileProcess:
    """Calls run one at a time in one spawned worker, each under a deadline; the worker is kept between calls
    (within one build: its imports stay as the build's own do) and started afresh after one it had to stop."""

    def __init__(self) -> None:
        self._pool: SpawnPool | None = None

    def call(self, seconds: float | None, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the worker; its result, or its exception. :class:`Deadline` when it ran past
        ``seconds`` (None: no deadline), :class:`WorkerDied` when the worker died; either way, and on
        KeyboardInterrupt or any other exception while waiting, the worker is stopped first."""
        if self._pool is None:
            self._pool = SpawnPool(1)
        try:
            future = self._pool.submit(fn, *args)
            concurrent.futures.wait([future], timeout=seconds)
        except BaseException:
            self.close(now=True)
            raise
        if not future.done():
            self.close(now=True)
            raise Deadline(seconds or 0.0)
        exc = future.exception()
        if isinstance(exc, BrokenProcessPool):
            self.close(now=True)
            raise WorkerDied(str(exc)) from None
        return future.result()

    def close(self, *, now: bool = False) -> None:
        """End the worker: at once (:meth:`SpawnPool.stop`) with ``now``, else once it is idle."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if now:
            pool.stop()
        else:
            pool.shutdown(wait=True)

    def __enter__(self) -> CompileProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(now=exc[0] is not None)


class DeadlinePool:
    """``jobs`` :class:`CompileProcess` workers, each running one call at a time under its own deadline.

    :meth:`submit` returns a future at once; a thread per worker takes the next call, runs it in a free
    :class:`CompileProcess` and sets the future's result or exception (:class:`Deadline` past ``seconds``, after
    which only that worker is stopped, and started afresh for its next call; the others go on)."""

    def __init__(self, jobs: int) -> None:
        self.jobs = max(1, jobs)
        self._processes = [CompileProcess() for _ in range(self.jobs)]
        self._idle: queue.SimpleQueue[CompileProcess] = queue.SimpleQueue()
        for process in self._processes:
            self._idle.put(process)
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs,
                                                              thread_name_prefix="kbuild-compile")

    def _run(self, seconds: float | None, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        process = self._idle.get()
        try:
            return process.call(seconds, fn, *args)
        finally:
            self._idle.put(process)

    def submit(self, seconds: float | None, fn: Callable[..., T], /, *args: Any) -> concurrent.futures.Future[T]:
        """Run ``fn(*args)`` in the next free worker, stopped past ``seconds`` (None: no deadline)."""
        return self._threads.submit(self._run, seconds, fn, args)

    def close(self, *, now: bool = False) -> None:
        """End the workers: with ``now``, calls not started are cancelled and running ones stopped (their futures
        get :class:`WorkerDied`); else once the running calls return."""
        if now:
            self._threads.shutdown(wait=False, cancel_futures=True)
            for process in self._processes:
                process.close(now=True)
        self._threads.shutdown(wait=True, cancel_futures=now)
        for process in self._processes:
            process.close(now=now)
