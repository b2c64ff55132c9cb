"""Which commands of nvcc's plan may run at once, and running them so, at most N at a time (nvcc's ``--threads N``).

nvcc's ``--threads`` runs the per-architecture work of one compile in parallel: each architecture's
preprocessing, ``cicc`` and ``ptxas`` are independent of the other architectures'. :func:`dependencies` reads the
same out of the plain plan, conservatively: those tools and ``cudafe++`` may overlap; any other command (
``fatbinary``, the host compile, the dependency file, anything unknown) is a barrier that waits for every earlier
command and that every later one waits for (the host compile reads files no argument names: the stub includes the
fatbinary's output). Two overlapping commands are ordered as in the plan when they name a common file of the keep
directory (an argument, or a ``--flag=`` / ``key=`` / comma-separated part of one), unless both only read it:
``ptxas`` after the ``cicc`` that writes its PTX, each ``cicc`` after ``cudafe++`` (which writes the module id file
they all read), and ``cicc`` steps that write the same side files (older nvcc) one after the other. :func:`run` executes the graph with a thread pool.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path


def mentioned(argv: Sequence[str], keep_dir: Path, cwd: Path) -> tuple[set[str], set[str]]:
    """The files of ``keep_dir`` that ``argv`` names, as normalised absolute paths, and the subset it is known to
    only read: its positional ``*.ii``/``*.ptx`` input, and the module id file of a command not asked to generate
    it (every ``cicc`` reads the one ``cudafe++`` wrote)."""
    root = os.path.normpath(cwd / keep_dir)
    out: set[str] = set()
    reads: set[str] = set()

    def inside(p: str) -> str | None:
        full = os.path.normpath(cwd / p)
        return full if full.startswith(root + os.sep) else None

    for i, arg in enumerate(argv[1:], 1):
        pieces = {arg}
        for part in arg.split(","):
            pieces.add(part)
            pieces.update(part.split("=")[1:])
        for p in pieces:
            full = inside(p) if p and not p.startswith("-") else None
            if full is not None:
                out.add(full)
        prev = argv[i - 1]
        read = (not arg.startswith("-") and arg.endswith((".ii", ".ptx")) and not prev.startswith("-")) or \
            (prev == "--module_id_file_name" and "--gen_module_id_file" not in argv)
        full = inside(arg) if read else None
        if full is not None:
            reads.add(full)
    return out, reads


def dependencies(commands: Sequence[Sequence[str]], overlaps: Sequence[bool], keep_dir: Path,
                 cwd: Path) -> list[set[int]]:
    """For each command, the earlier ones it must wait for. ``overlaps[i]``: command ``i`` may run beside others
    (see the module's docstring for which)."""
    files = [mentioned(argv, keep_dir, cwd) for argv in commands]
    deps: list[set[int]] = []
    for i in range(len(commands)):
        if not overlaps[i]:
            deps.append(set(range(i)))
            continue
        last_barrier = max((j for j in range(i) if not overlaps[j]), default=None)
        (mine_all, mine_read) = files[i]
        mine = {j for j in range(i) if (mine_all & files[j][0]) - (mine_read & files[j][1])}
        if last_barrier is not None:
            mine.add(last_barrier)
        deps.append(mine)
    return deps


def run(deps: Sequence[set[int]], job: Callable[[int], int], jobs: int) -> int:
    """Run ``job(i)`` for every command once its dependencies have returned 0, at most ``jobs`` at once, and return
    0, or the status of the first command (in plan order) that failed; after a failure nothing new starts."""
    if jobs <= 1:
        for i in range(len(deps)):
            rc = job(i)
            if rc != 0:
                return rc
        return 0
    done: dict[int, int] = {}
    running: dict[Future[int], int] = {}
    failed = False
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="kbuild-nvcc") as pool:
        while True:
            if not failed:
                started = set(running.values()) | set(done)
                for i in range(len(deps)):
                    if len(running) >= jobs:
                        break
                    if i not in started and all(done.get(d) == 0 for d in deps[i]):
                        running[pool.submit(job, i)] = i
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                i = running.pop(fut)
                done[i] = fut.result()
                failed = failed or done[i] != 0
    bad = [rc for _, rc in sorted(done.items()) if rc != 0]
    return bad[0] if bad else 0


__all__ = ["dependencies", "mentioned", "run"]
