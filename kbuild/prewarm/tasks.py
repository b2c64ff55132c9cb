"""What the tasks of ``kbuild prewarm --ray`` do on the nodes: plain functions that the Ray tasks and the tune
workers wrap (tests may call them directly).

* :func:`compile_task` (any CPU worker): one kernel × target's baseline from the shared tier, or compiled here and
  put there (:func:`compile_baseline`);
* :func:`tune_task` (on a tune worker, :mod:`kbuild.prewarm.workers`): :func:`tune_entry` under a lease on the
  tuned key in the shared tier (:mod:`kbuild.cache.lease`, renewed while it works), level 1 compiling its
  candidates in Ray CPU tasks (:class:`kbuild.prewarm.shards.ShardPool`), the result stored the moment it exists;
* the tuners: a GPU of the target here (:func:`kbuild.build.tuning.tune_build`), or the CPU cost model
  (:func:`model_tuner`), whose results are stored under their own key (:func:`model_key`) and never ship.

Each computes its build's keys as a build does (:func:`build_for`) and reads and writes the shared tiers only
(:func:`shared_store`). See :mod:`kbuild.prewarm.ray_engine` for the run as a whole.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kbuild.errors import KBuildError, UsageError
from kbuild.settings.model import Settings
from kbuild.targets import Target

from .node import on_node, resource_name, where

if TYPE_CHECKING:
    from kbuild.build.kernel_build import KernelBuild
    from kbuild.cache import Artefact

log = logging.getLogger(__name__)

#: Label of the cost-model backend in keys and results.
MODEL_MEASURE = "cost-model"


def model_key(key: Any) -> Any:
    """The key a cost-model result is stored under: the tuned key with ``measure = "cost-model"`` in its tuner
    component, so that no build (which looks up the plain tuned key) ever ships it."""
    from kbuild.key import KernelKey

    comps = dict(key.components)
    comps["tuner"] = {**comps["tuner"], "measure": MODEL_MEASURE}
    return KernelKey(comps)


def shared_store(settings: Settings) -> Any:
    """The writable remote tiers of ``settings`` as one store (no local tier), strict: a shared tier that is down
    is an error, not a miss, since a distributed prewarm has nowhere else to put its results."""
    from kbuild.cache import Tier, TieredStore, backend_for_url
    from kbuild.cache.url import redact_url

    tiers = []
    for i, r in enumerate(settings.remotes):
        if r.writable:
            backend = backend_for_url(r.url, where=f"{settings.config_file}: remotes[{i}].url",
                                      deadline=settings.remote_deadline)
            tiers.append(Tier(backend, name=redact_url(r.url), writable=True, secret=settings.store_secret))
    if not tiers:
        raise UsageError(f"{settings.config_file}: remotes: kbuild prewarm --ray writes its results to a shared tier, "
                         "and none is writable; pass --remote URL (http(s):// or redis://) or set writable = true "
                         "on a remotes entry")
    return TieredStore(tiers, strict=True, local=False)


def leases_of(store: Any) -> Any:
    """The leases of the shared store's first tier (:func:`kbuild.cache.lease.leases_for`)."""
    from kbuild.cache.lease import leases_for

    return leases_for(store.tiers[0].backend)


def build_for(settings: Settings, kernel: str, target: Target, backend: str) -> KernelBuild:
    """``kernel`` × ``target`` resolved and keyed as a build does it; for the cost model (``backend="model"``) its
    tuned key is the model's own (:func:`model_key`)."""
    from kbuild.build.resolve import resolve

    if any(k.name == kernel for k in settings.kernels) or not settings.recordings:
        (b,) = resolve(settings, [settings.kernel(kernel)], [target])
    else:  # a kernel the recordings declare (named as the build names it)
        b = recorded_build(settings, kernel, target)
    if backend == "model" and b.tuned_key is not None:
        b.tuned_key = model_key(b.tuned_key)
    return b


#: The recorded builds a process resolved, per project, recordings and target: a node's tasks take them from here
#: instead of reading and keying every recording again for each entry.
_RECORDED: dict[tuple[str, tuple[str, ...], str], list[KernelBuild]] = {}


def recorded_build(settings: Settings, kernel: str, target: Target) -> KernelBuild:
    """The build of the recorded specialisation named ``kernel`` on ``target``, as the build resolves it
    (:func:`kbuild.build.recorded.recorded_builds`); a name no recording declares is a :class:`UsageError`."""
    import copy

    from kbuild.build.recorded import recorded_builds

    key = (str(settings.config_file), tuple(settings.recordings), target.name)
    if key not in _RECORDED:
        _RECORDED[key] = recorded_builds(settings, [target])[0]
    found = [b for b in _RECORDED[key] if b.spec.name == kernel]
    if not found:
        raise UsageError(f"{settings.config_file}: no kernel named {kernel!r} is declared or recorded for {target.name}")
    return copy.copy(found[0])


def compile_baseline(settings: Settings, kernel: str, target: Target) -> Any:
    """The baseline artefact of ``kernel`` × ``target``: from the shared tier, or compiled here and put there."""
    return _compile(settings, kernel, target)[0]


def _compile(settings: Settings, kernel: str, target: Target) -> tuple[Artefact, bool]:
    from kbuild.build.baselines import compile_baselines

    b = build_for(settings, kernel, target, "gpu")
    compiled = False
    with shared_store(settings) as store:
        for art in compile_baselines(settings, [b], store):
            store.put(art)
            compiled = True
    assert b.artefact is not None
    return b.artefact, compiled


def compile_task(settings: Settings, kernel: str, target: Target, *, shipped: bool = False) -> dict[str, Any]:
    """The Ray compile task: the baseline (``artefact``) and what this task did (``task``: where, when, whether it
    compiled or found the baseline)."""
    here = where()
    started = time.time()
    art, compiled = _compile(on_node(settings, shipped), kernel, target)
    finished = time.time()
    return {"artefact": art, "task": {**here, "state": "compiled" if compiled else "found", "started": started,
                                      "finished": finished, "seconds": round(finished - started, 3)}}


class _Renewer(threading.Thread):
    """Renews a lease every third of its time to live until stopped."""

    def __init__(self, leases: Any, lease: Any, seconds: float) -> None:
        super().__init__(daemon=True, name="kbuild-lease")
        self.leases, self.lease, self.seconds = leases, lease, seconds
        self.stop_event = threading.Event()
        self.lost = False

    def run(self) -> None:
        while not self.stop_event.wait(self.seconds / 3):
            try:
                renewed = self.leases.renew(self.lease, self.seconds)
            except KBuildError as exc:
                log.warning("renewing the lease on %s failed: %s", self.lease.key, exc)
                continue
            if renewed is None:
                self.lost = True
                log.warning("lost the lease on %s (expired and taken over)", self.lease.key)
                return
            self.lease = renewed

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=5)


def tune_entry(settings: Settings, kernel: str, target: Target, baseline: Any, *, run_id: str, expected_key: str,
               backend: str = "gpu", lease_seconds: float = 300.0, tuner: Callable[..., Any] | None = None,
               on_start: Callable[[dict[str, Any]], None] | None = None, pool: Any = None) -> dict[str, Any]:
    """Tune one kernel × target under a lease in the shared tier and store the result; a result record.

    ``state``: ``found`` (already stored), ``tuned`` (stored now), ``leased`` (another run holds the lease;
    ``holder`` and ``expires`` say whose and until when) or ``failed`` (``error``; nothing stored). ``pool``:
    where level 1 compiles (a :data:`kbuild.tune.level1.compile.CompilerFactory`; None: a process pool here),
    handed to the tuner as ``tuner(settings, build, pool=pool)``."""
    here = where()
    if on_start is not None:
        on_start(here)
    started = time.time()
    record: dict[str, Any] = {"kernel": kernel, "target": target.name, "key": expected_key, **here, "started": started}
    out = _tune_entry(settings, kernel, target, baseline, record, run_id=run_id, expected_key=expected_key,
                      backend=backend, lease_seconds=lease_seconds, tuner=tuner, pool=pool)
    finished = time.time()
    return {**out, "finished": finished, "seconds": round(finished - started, 3)}


def _tune_entry(settings: Settings, kernel: str, target: Target, baseline: Any, record: dict[str, Any], *, run_id: str,
                expected_key: str, backend: str, lease_seconds: float,
                tuner: Callable[..., Any] | None, pool: Any = None) -> dict[str, Any]:
    owner = {k: record.get(k) for k in ("host", "node", "pid", "gpu", "gpu_ids")}
    b = build_for(settings, kernel, target, backend)
    if b.tuned_key is None or b.tuned_key.hex != expected_key:
        got = b.tuned_key.hex if b.tuned_key is not None else None
        return {**record, "state": "failed", "error": f"this node computes the key {got} for {kernel} {target}, the "
                f"driver {expected_key}: its kbuild, Triton, ptxas or project differ from the driver's"}
    b.artefact = baseline
    with shared_store(settings) as store:
        if store.get(expected_key) is not None:
            return {**record, "state": "found"}
        leases = leases_of(store)
        claim = leases.acquire(expected_key, run_id, lease_seconds, owner=owner)
        if not claim.ok:
            held = claim.held
            return {**record, "state": "leased", "holder": held.holder if held else None,
                    "holder_owner": held.owner if held else None, "expires": held.expires if held else None}
        assert claim.held is not None
        renewer = _Renewer(leases, claim.held, lease_seconds)
        renewer.start()
        try:
            if store.get(expected_key) is not None:  # stored between the look-up and the lease
                return {**record, "state": "found"}
            run = tuner or (model_tuner if backend == "model" else _gpu_tuner)
            try:
                art = run(settings, b, pool=pool)
            except Exception as exc:
                log.warning("tuning %s for %s failed on %s: %s", kernel, target, owner["host"], exc)
                return {**record, "state": "failed", "error": f"{type(exc).__name__}: {exc}"}
            store.put(art)
            return {**record, "state": "tuned", "tuned": bool(art.meta.get("tuned")), "speedup": art.meta.get("speedup"),
                    "decision": art.meta.get("tune_decision"), "measure": art.meta.get("measure", "gpu"),
                    "lease_lost": renewer.lost}
        finally:
            renewer.stop()
            try:
                leases.release(renewer.lease)
            except KBuildError as exc:  # the lease expires by itself
                log.warning("releasing the lease on %s failed: %s", expected_key, exc)


def _gpu_tuner(settings: Settings, b: KernelBuild, *, pool: Any = None) -> Artefact:
    """:func:`kbuild.build.tuning.tune_build` on this node's GPU, which must be of the target's architecture."""
    from kbuild.build.tuning import tune_build
    from kbuild.device.probe import has_gpu, local_gpus
    from kbuild.errors import GPUUnavailableError

    if not has_gpu(b.target.cc):
        have = ", ".join(f"{g.name} (sm_{g.cc})" for g in local_gpus()) or "none"
        raise GPUUnavailableError(f"this node offers {resource_name(b.target.cc)} but its GPUs are: {have}")
    if not b.spec.bench:
        raise UsageError(f"kernel {b.spec.name!r} has no bench spec ([tool.kbuild.kernels] bench); it cannot be "
                         "measured")
    return tune_build(settings, b, pool=pool)


def model_tuner(settings: Settings, b: KernelBuild, *, pool: Any = None) -> Artefact:
    """The cost-model stand-in (CPU): :func:`kbuild.build.tuning.tune_build` with ``measure="model"``, its artefact
    labelled ``"measure": "cost-model"``.

    A kernel without a configuration space: the SASS search on the default configuration's baseline, judged by
    the cost model (by the acceptance rule, the artefact holds the baseline). One with a space: both levels on
    the cost model, level 1 compiling in ``pool`` (a :data:`kbuild.tune.level1.compile.CompilerFactory`; None: a
    process pool here, as the single-process prewarm does); the artefact holds the configuration the model ranked
    first."""
    from kbuild.build.tuning import tune_build
    from kbuild.cache import Artefact
    from kbuild.tune.measure.backend import MODEL_BACKEND

    art = tune_build(settings, b, measure="model", pool=pool)
    return Artefact.create(key=art.key, cubin=art.cubin, meta={**art.meta, "measure": MODEL_MEASURE,
                                                                "backend": MODEL_BACKEND})


def tune_task(settings: Settings, kernel: str, target: Target, compiled: dict[str, Any], *, run_id: str,
              expected_key: str, backend: str, lease_seconds: float, tuner: Callable[..., Any] | None, board: Any,
              index: int, shipped: bool = False, max_retries: int = 3) -> dict[str, Any]:
    """One entry's tune on a tune worker (:meth:`kbuild.prewarm.workers.TuneWorker.tune`) around :func:`tune_entry`
    (``compiled``: :func:`compile_task`'s result): reports its start to the driver's board; level 1 (a kernel with
    a configuration space) compiles its candidates in Ray CPU tasks (:class:`kbuild.prewarm.shards.ShardPool`),
    while the racing stays here, on the worker's one GPU; its record
    carries the compile task's as ``compile`` and the shards it read as ``shards``."""
    from kbuild.prewarm.shards import ShardPool

    pools: list[ShardPool] = []
    prefix = f"e{index}-{uuid.uuid4().hex[:6]}"  # a retried task's shards are new ones

    def started(here: dict[str, Any]) -> None:
        if board is not None:
            board.started.remote(index, here)

    def pool(spec: Any, arch: int, timeout: float | None) -> ShardPool:
        made = ShardPool(spec, arch, timeout=timeout, settings=settings, shipped=shipped, board=board,
                         max_retries=max_retries, owner={"index": index, "kernel": kernel, "target": target.name},
                         prefix=f"{prefix}.{len(pools)}" if pools else prefix)
        pools.append(made)
        return made

    out = tune_entry(on_node(settings, shipped), kernel, target, compiled["artefact"], run_id=run_id,
                     expected_key=expected_key, backend=backend, lease_seconds=lease_seconds, tuner=tuner,
                     on_start=started, pool=pool)
    return {**out, "compile": compiled["task"], "shards": [r for p in pools for r in p.records.values()]}


__all__ = ["MODEL_MEASURE", "build_for", "compile_baseline", "compile_task", "leases_of", "model_key", "model_tuner",
           "shared_store", "tune_entry", "tune_task"]
