"""The compile phase: each build's baseline, from the store or compiled now, and any configuration compiled alone.

:func:`compile_baselines` gives each build that ships no tuning result its stored baseline, or compiles it (one
child processes, :class:`kbuild.compile.workers.CompileProcess`, ``jobs`` at once; nothing is written here: the pipeline
stores the new baselines once every compile succeeded and nothing was refused). :func:`compile_config` compiles one
point of a build's configuration space the same way, deterministic and without a GPU: what the two-level tuner
ships and what the package data ships for the default of a tuned configuration.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kbuild import __version__
from kbuild.compile import compile_kernel, load_jit_function, source_hash
from kbuild.compile.triton_aot import ast_source_args
from kbuild.declarations.kernel import KernelSettings
from kbuild.errors import UsageError
from kbuild.settings.model import Settings

from .kernel_build import KernelBuild
from .resolve import kernel_keys, resolve, source_distribution, toolchain_versions
from .tunable import untuned_reason

if TYPE_CHECKING:  # kbuild.cache is imported where an artefact is made
    from kbuild.cache import Artefact


def compile_baselines(settings: Settings, builds: Sequence[KernelBuild], store: Any,
                      on_step: Callable[[KernelBuild], None] | None = None) -> list[Artefact]:
    """Phases store (second half) and compile: each build without a tuned entry gets its stored baseline, or
    one compiled now; ``on_step`` hears of each build in turn. Returns the new artefacts, in the builds' order;
    nothing is written yet. The store is asked first, on this thread; the misses compile in ``compile_jobs``
    child processes at once (default: one per core, less one; a recording declares hundreds of specialisations),
    each a :class:`kbuild.compile.workers.CompileProcess` that keeps its imports between compiles, each compile
    stopped past ``compile_timeout``. The first failure (in the builds' order) stops the others and is raised."""
    from kbuild.compile.workers import CompileProcess

    todo = [b for b in builds if not b.tuned]
    missing = [b for b in todo if not _from_store(settings, b, store)]
    jobs = min(len(missing), settings.compile_jobs or max(1, (os.cpu_count() or 2) - 1))
    compiled: dict[int, Artefact] = {}
    if jobs <= 1:
        with CompileProcess() as process:
            for b in missing:
                compiled[id(b)] = _compile_baseline(settings, b, process)
    else:
        compiled = _compile_in_parallel(settings, missing, jobs)
    new: list[Artefact] = []
    for b in builds:
        if id(b) in compiled:
            b.artefact = compiled[id(b)]
            new.append(b.artefact)
        if not b.tuned:
            b.status = untuned_reason(settings, b.target)
        if on_step is not None:
            on_step(b)
    return new


def _compile_in_parallel(settings: Settings, builds: Sequence[KernelBuild], jobs: int) -> dict[int, Artefact]:
    """``builds`` compiled in ``jobs`` child processes (each compile in the next free one); ``id(build)`` → its
    artefact. A failure cancels what has not started, stops the running compiles and is raised."""
    import concurrent.futures
    import queue

    from kbuild.compile.workers import CompileProcess

    processes = [CompileProcess() for _ in range(jobs)]
    idle: queue.SimpleQueue[CompileProcess] = queue.SimpleQueue()
    for process in processes:
        idle.put(process)

    def one(b: KernelBuild) -> Artefact:
        process = idle.get()
        try:
            return _compile_baseline(settings, b, process)
        finally:
            idle.put(process)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="kbuild-baseline")
    failed = True
    try:
        futures = [(b, pool.submit(one, b)) for b in builds]
        out = {id(b): f.result() for b, f in futures}
        failed = False
        return out
    finally:
        pool.shutdown(wait=not failed, cancel_futures=failed)
        for process in processes:
            process.close(now=failed)


def _from_store(settings: Settings, b: KernelBuild, store: Any) -> bool:
    """Give ``b`` its stored baseline when the store has it (True); else False: it must be compiled."""
    found = store.get(b.baseline_key.hex)
    if found is None and b.fn is None:  # a memo build whose entry vanished since the check: import it now
        (fresh,) = resolve(settings, [settings.kernel(b.spec.name)], [b.target])
        b.fn, b.baseline_key, b.tuned_key = fresh.fn, fresh.baseline_key, fresh.tuned_key
        b.spec, b.space = fresh.spec, fresh.space
        found = store.get(b.baseline_key.hex)
    if found is None:
        return False
    b.artefact, b.hit = found, True
    return True


def _compile_baseline(settings: Settings, b: KernelBuild, process: Any = None) -> Artefact:
    from kbuild.cache import Artefact

    started = time.time()
    ck = compile_kernel(settings, b.spec, b.target, fn=b.fn, process=process, setup=b.import_setup)
    meta = dict(ck.metadata)
    meta.update({
        "key": b.baseline_key.hex,
        "key_components": b.baseline_key.components,
        "config": b.default_config,
        "tuned": False,
        "compile_seconds": round(ck.compile_seconds, 3),
        "kbuild_version": __version__,
        "created": round(started, 3),
    })
    return Artefact.create(key=b.baseline_key.hex, cubin=ck.cubin, meta=meta)


def config_spec(spec: KernelSettings, config: dict[str, Any]) -> KernelSettings:
    """``spec`` declared at the point ``config`` (its space left out): what compiles that configuration."""
    return dataclasses.replace(spec, constexprs=dict(config["constexprs"]), num_warps=config["num_warps"],
                               num_stages=config["num_stages"], maxnreg=config["maxnreg"],
                               num_ctas=config["num_ctas"], ptx_options=config.get("ptx_options") or "", space={},
                               configs=[], autotune=False)


def compile_config(settings: Settings, b: KernelBuild, config: dict[str, Any]) -> Artefact:
    """The untouched compile of ``b``'s kernel at the configuration ``config`` (a point of ``b.space``, or any
    dict :func:`kbuild.declarations.space.normalize_point` accepts), for ``b.target``, through the baseline compile path:
    deterministic, no GPU. Its key is the baseline key a declaration of that point would have (the default's
    compile has ``b.baseline_key``); its ``meta["config"]`` is the point. Not stored: the tuner decides.
    A config the kernel cannot take (an unknown constexpr, a bad value) is a :class:`UsageError`."""
    from kbuild.declarations.space import SpaceError, normalize_point

    try:
        point = normalize_point(config)
    except SpaceError as exc:
        raise UsageError(f"compile_config({b.spec.name}, {b.target.name}): {exc}") from None
    fn = b.fn if b.fn is not None else load_jit_function(settings, b.spec)
    spec = config_spec(b.spec, point)
    ast_source_args(settings, spec, fn)
    key, _ = kernel_keys(spec, b.target, source_hash(fn), toolchain_versions(), None, [point],
                         source_distribution(spec, fn))
    cb = KernelBuild(spec=spec, target=b.target, baseline_key=key, tuned_key=None, fn=fn, space=[point])
    return _compile_baseline(settings, cb)


__all__ = ["compile_baselines", "compile_config", "config_spec"]
