"""Compiling level-1 configurations ahead of the GPU, in a pool of CPU processes.

:func:`kbuild.bench.spec.compile_spec` holds a process-wide lock (``hermetic_compile``), so
parallel compiles need processes. :class:`CompilePool` keeps ``jobs`` spawned processes
(:class:`kbuild.compile.workers.DeadlinePool`, the build's compile processes), each compile under a deadline
(``timeout``: the tuning request's ``compile_timeout``, :class:`kbuild.settings.model.TuneRequest`, or the setting's
default when none is given; Triton's passes have none of their own, and a configuration whose compile runs past
it is a failed configuration, its process stopped); each
loads the bench spec by its reference once, compiles a configuration exactly as ``kbuild compile``
does (line info off, private Triton cache) and sends back a
:class:`~kbuild.runtime.handover.KernelPayload` (cubin + metadata). ``submit`` returns at once,
so the searcher can ask for the next configurations while the GPU measures the current ones;
``result`` waits for one. ``jobs=0`` compiles in this process, on demand (specs without a
reference, tests).

The measurers take any :class:`Compiler` (``submit``, ``result``, ``close``) through a
:data:`CompilerFactory`, which they hand the request's ``compile_timeout``; :class:`CompilePool` is the one for a
single machine, and ``kbuild prewarm --ray`` hands them :class:`kbuild.prewarm.shards.ShardPool`, which compiles
the same way (:func:`compile_configs`, under the same deadline) in Ray CPU tasks on the cluster's nodes.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from kbuild.bench.spec import BenchSpec, Config, compile_spec, load_spec
from kbuild.compile.workers import CompileProcess, Deadline, DeadlinePool, WorkerDied
from kbuild.errors import KBuildError
from kbuild.runtime.handover import KernelPayload, kernel_payload
from kbuild.settings.model import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompiledConfig:
    """One configuration's compile: the payload, or the error (first lines of it)."""

    label: str
    payload: KernelPayload | None
    compile_s: float
    error: str | None = None
    shared: int = 0
    """Shared memory per CTA in bytes (Triton's metadata)."""
    hazards: tuple[str, ...] = ()
    """The cubin's wgmma register races (:mod:`kbuild.sass.hazards`, triton-lang/triton#9433), as text; a
    configuration with any is never chosen (its outputs depend on timing, so its check can pass by luck)."""
    hazard_check: str | None = None
    """Why the hazard check could not run (no nvdisasm, ...); None when it ran or was not needed."""


@functools.cache
def _spec(ref: str, small: bool, python_path: tuple[str, ...]) -> BenchSpec:
    return load_spec(ref, small=small, python_path=python_path)


def compile_one(spec: BenchSpec, config: Config, arch: int) -> CompiledConfig:
    """Compile ``config`` for ``sm_<arch>``; a failure is a result with ``error``, never an exception."""
    started = time.perf_counter()
    try:
        compiled = compile_spec(spec, config, arch)
    except KBuildError as exc:
        return CompiledConfig(config.label(), None, time.perf_counter() - started, _first_lines(str(exc)))
    except Exception as exc:  # Triton raises many kinds; any of them means this configuration does not build
        return CompiledConfig(config.label(), None, time.perf_counter() - started,
                              _first_lines(f"{type(exc).__name__}: {exc}"))
    hazards, skipped = wgmma_races(compiled.asm["cubin"], str(compiled.metadata.name), compiled.asm.get("ptx"))
    seconds = time.perf_counter() - started
    return CompiledConfig(config.label(), kernel_payload(compiled), seconds, None, int(compiled.metadata.shared),
                          hazards, skipped)


def wgmma_races(cubin: bytes, kernel: str, ptx: str | None = None) -> tuple[tuple[str, ...], str | None]:
    """(the wgmma register races of one compiled configuration as text, why the check could not run). Only a kernel
    whose PTX has a wgmma with a register A operand is disassembled (:func:`kbuild.sass.hazards.
    register_wgmma_hazards`), as a compile checks; a check that cannot run here (no nvdisasm) is reported, with a
    warning, not a failure of the configuration, as under ``wgmma_hazards = "warn"``."""
    from kbuild.sass.hazards import recorded, register_wgmma_hazards

    try:
        return tuple(recorded(register_wgmma_hazards(cubin, kernel, ptx))), None
    except Exception as exc:  # nvdisasm missing or failing: the configuration is not known to be racy
        why = _first_lines(f"{type(exc).__name__}: {exc}")
        log.warning("wgmma hazard check of %s skipped: %s", kernel, why)
        return (), why


def _compile_in_child(ref: str, small: bool, python_path: tuple[str, ...], config: dict[str, Any],
                      arch: int) -> CompiledConfig:
    return compile_one(_spec(ref, small, python_path), Config.from_dict(config), arch)


def compile_configs(ref: str, small: bool, python_path: tuple[str, ...], configs: Sequence[dict[str, Any]],
                    arch: int, *, timeout: float | None = None) -> list[CompiledConfig]:
    """Several configurations (``Config.as_dict()`` each) of the spec ``ref``, in order, as the pool's children
    compile them (the spec loaded once per process); a failure is a result, never an exception. With ``timeout``
    (seconds per configuration) they compile one after another in a child process that is stopped past it (that
    configuration fails naming the limit, the next gets a fresh child); without it, in this process."""
    if timeout is None:
        return [_compile_in_child(ref, small, python_path, c, arch) for c in configs]
    out = []
    with CompileProcess() as process:
        for c in configs:
            try:
                out.append(process.call(timeout, _compile_in_child, ref, small, python_path, c, arch))
            except Deadline as exc:
                out.append(_past_deadline(Config.from_dict(c).label(), exc))
            except WorkerDied as exc:
                out.append(CompiledConfig(Config.from_dict(c).label(), None, 0.0,
                                          _first_lines(f"compile process failed: {exc}")))
    return out


def _past_deadline(label: str, exc: Deadline) -> CompiledConfig:
    return CompiledConfig(label, None, exc.seconds, f"compile ran past {exc.seconds:g} s (compile_timeout) and was "
                                                    "stopped")


def _first_lines(text: str, limit: int = 600) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[:4])[:limit]


def default_jobs() -> int:
    """One compile process per CPU core this process may use, leaving one for the GPU worker's host side."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


class Compiler(Protocol):
    """What a measurer needs of a compile pool: ``submit`` starts compiles and returns at once, ``result`` waits
    for one configuration's (a failure is a :class:`CompiledConfig` with ``error``, never an exception)."""

    def submit(self, configs: Iterable[Config]) -> None: ...

    def result(self, config: Config) -> CompiledConfig: ...

    def close(self) -> None: ...


#: ``(spec, arch, timeout) -> Compiler``: how a measurer gets its pool, each compile stopped past ``timeout`` seconds
#: (None: the ``compile_timeout`` setting's default); default, a :class:`CompilePool` of its ``jobs``.
CompilerFactory = Callable[[BenchSpec, int, "float | None"], Compiler]


#: Seconds one configuration's compile may take when the caller gives no ``timeout`` (``compile_timeout``'s default).
DEFAULT_TIMEOUT: float = Settings.__dataclass_fields__["compile_timeout"].default  # type: ignore[assignment]


class CompilePool:
    """Compiles configurations of one spec for one architecture, ``jobs`` at a time, each once, each stopped past
    ``timeout`` seconds (a failed configuration naming the limit)."""

    def __init__(self, spec: BenchSpec, arch: int, *, jobs: int | None = None, small: bool = False,
                 python_path: tuple[str, ...] = (), timeout: float | None = None) -> None:
        self.spec = spec
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        self.arch = arch
        self.small = small
        self.python_path = python_path
        self.jobs = default_jobs() if jobs is None else jobs
        if not spec.ref:
            self.jobs = 0  # a spec that cannot be imported by reference compiles here
        self._futures: dict[str, Future[CompiledConfig]] = {}
        self._done: dict[str, CompiledConfig] = {}
        self._executor: DeadlinePool | None = None
        self.submitted = 0

    def _pool(self) -> DeadlinePool:
        if self._executor is None:
            # kbuild's compile processes (kbuild.compile.workers): spawned, silent on stdout, gone with this one.
            self._executor = DeadlinePool(self.jobs)
        return self._executor

    def submit(self, configs: Iterable[Config]) -> None:
        """Start compiling every configuration not compiled or submitted yet (returns at once)."""
        if self.jobs == 0:
            return
        for config in configs:
            label = config.label()
            if label in self._futures or label in self._done:
                continue
            self.submitted += 1
            self._futures[label] = self._pool().submit(self.timeout, _compile_in_child, self.spec.ref, self.small,
                                                       self.python_path, config.as_dict(), self.arch)

    def result(self, config: Config) -> CompiledConfig:
        """The compile of ``config`` (submitted now if it was not); waits for it."""
        label = config.label()
        if label in self._done:
            return self._done[label]
        if self.jobs == 0:
            self.submitted += 1
            out = compile_one(self.spec, config, self.arch)
        else:
            self.submit([config])
            try:
                out = self._futures.pop(label).result()
            except Deadline as exc:
                out = _past_deadline(label, exc)
            except Exception as exc:  # the child died (killed, out of memory): this configuration failed
                out = CompiledConfig(label, None, 0.0, _first_lines(f"compile process failed: {type(exc).__name__}: "
                                                                    f"{exc}"))
        self._done[label] = out
        return out

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close(now=True)  # compiles still running are not wanted any more
            self._executor = None

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
