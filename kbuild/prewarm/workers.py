"""Tune workers: the long-lived Ray actors that run ``kbuild prewarm --ray``'s tune work, one per GPU it uses.

**Why actors, not a task per entry.** On the H200 (``benchmarks/results/h200/issue18/README.md``) the first tune
*task* started 2.8 s after the last compile task had ended: Ray gives a GPU task a new worker process rather than
one that ran CPU tasks (the GPU-shaped CPU dry run shows the same: the tune ran in a process of its own), and that
process then imported kbuild's pipeline, Triton and, through the project's bench module, torch before it could
tune; the two tune tasks together took 3.5 s longer than the single-process tunes. A :class:`TuneWorker` is
started once per GPU as the run starts and does that work while the compile tasks run (:data:`WARM_MODULES`,
then the run's kernels resolved), and then tunes one entry after another in the same process. Whether this
removes those seconds on the H200 has not been measured yet; on 2 CPU cores it changed nothing measurable
(``benchmarks/results/prewarm_ray_workers_cpu/README.md``).

Kernels still run only in the measurement process each tune starts
(:class:`kbuild.tune.measure.client.WorkerClient`, which isolates faults), so nothing a kernel does to its CUDA
context outlives its entry: the actor itself only initialises the driver to list its GPUs
(:func:`kbuild.device.probe.local_gpus`), creates no context and holds no GPU memory.

**Resources.** A worker asks for what a tune task asked for: one unit of the target's ``kbuild_sm_<cc>``
(:func:`kbuild.prewarm.node.resource_name`) and, on the GPU backend, one GPU; it keeps them until the run
has no more work for that target (:meth:`WorkerPool.retire`), then is killed, giving them back. It asks for no
CPU (Ray's default for a running actor): a worker holding a CPU for the whole run would take it from the compile
tasks and level-1 compile shards (:mod:`kbuild.prewarm.shards`) on its node (a tune task used to give its CPU back while it
waited on them). How many: one per unit of the resource the cluster offers, at most one per entry of the target.

**Failures.** A worker has no restarts of its own (``max_restarts=0``): when its node dies or its process is
killed, the call in flight raises Ray's actor error, the driver gives the entry to another worker of the target
(counted against the entry's ``max_retries``, as Ray counted a task's retries) and asks for a replacement
worker, which Ray starts wherever the resource is free again. Replacements are bounded (:meth:`WorkerPool.lost`):
a target whose workers keep dying, or cannot start (a node without the tune extra: the import fails), ends with
its remaining entries failed, naming the error, and the rest of the run goes on.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .node import on_node, ray_error, resource_name, where
from .tasks import tune_task

#: What a worker imports when it starts, before its first entry (the tune's pipeline, the SASS search and its
#: measurement client, level 1's shard pool, Triton's compiler): what the first tune task paid for before it could start.
WARM_MODULES = ("kbuild.build.pipeline", "kbuild.tune.api", "kbuild.tune.measure.client", "kbuild.tune.two_level",
                "kbuild.prewarm.shards", "triton.compiler")


class TuneWorker:
    """The Ray actor (see the module docstring): warms up when created, then runs
    :func:`kbuild.prewarm.tasks.tune_task` for one entry per call.

    The warm-up imports ``modules``, then resolves the run's ``kernels`` of the project (``settings`` as the
    driver has them, ``shipped``: see :func:`kbuild.prewarm.node.on_node`) as a tune's first step does:
    their modules imported (with what they import, torch for a bench spec), declarations checked, sources hashed,
    the toolchain's versions read. A kernel that fails to resolve is not the worker's failure: the warm-up
    records the error (``warm_error``) and the entry's own tune reports it."""

    def __init__(self, modules: Sequence[str] = WARM_MODULES, settings: Any = None, kernels: Sequence[str] = (),
                 shipped: bool = False) -> None:
        started = time.time()
        for name in modules:
            importlib.import_module(name)
        warm_error = None
        if settings is not None and kernels:
            from kbuild.build.resolve import resolve

            here = on_node(settings, shipped)
            try:
                resolve(here, [here.kernel(k) for k in kernels], [])
            except Exception as exc:  # the entry's tune reports it, with the key it names
                warm_error = f"{type(exc).__name__}: {exc}"
        self.record = {**where(), "started": started, "warm_seconds": round(time.time() - started, 3),
                       "warm_error": warm_error}

    def ready(self) -> dict[str, Any]:
        """Where this worker runs (host, node, pid, GPUs), when it started and how long its imports took."""
        return self.record

    def tune(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return tune_task(*args, **kwargs)


@dataclass
class Worker:
    """One worker as the driver tracks it."""

    cc: int
    handle: Any
    ready_ref: Any
    spawned: float
    state: str = "starting"
    """starting → idle ⇄ busy; ``dead`` (lost or never started; ``error`` says why), ``retired`` (killed when its
    target had no more work)."""
    record: dict[str, Any] = field(default_factory=dict)
    entries: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def live(self) -> bool:
        return self.state in ("starting", "idle", "busy")


class WorkerPool:
    """The driver's workers per compute capability: started (:meth:`ensure`), handed entries (:meth:`idle`),
    replaced when lost (:meth:`lost`), killed when their target is done (:meth:`retire`)."""

    def __init__(self, ray: Any, *, backend: str, max_retries: int, units: dict[int, int],
                 warm_modules: Sequence[str] = WARM_MODULES, settings: Any = None, kernels: Sequence[str] = (),
                 shipped: bool = False) -> None:
        self.ray, self.backend, self.max_retries = ray, backend, max_retries
        self.units = units
        self.warm_modules = tuple(warm_modules)
        self.warm_args = (settings, tuple(kernels), shipped)
        self.workers: list[Worker] = []
        self.replacements: dict[int, int] = {}
        self._actor = ray.remote(num_cpus=0, max_restarts=0)(TuneWorker)

    def _spawn(self, cc: int) -> Worker:
        opts: dict[str, Any] = {"resources": {resource_name(cc): 1}}
        if self.backend == "gpu":
            opts["num_gpus"] = 1
        handle = self._actor.options(**opts).remote(self.warm_modules, *self.warm_args)
        w = Worker(cc=cc, handle=handle, ready_ref=handle.ready.remote(), spawned=time.time())
        self.workers.append(w)
        return w

    def of(self, cc: int) -> list[Worker]:
        return [w for w in self.workers if w.cc == cc and w.live]

    def ensure(self, cc: int, wanted: int) -> None:
        """Start workers for ``cc`` until ``wanted`` (at most one per unit of its resource) are live or starting."""
        for _ in range(min(wanted, self.units.get(cc, 0)) - len(self.of(cc))):
            self._spawn(cc)

    def starting_refs(self) -> list[Any]:
        return [w.ready_ref for w in self.workers if w.state == "starting"]

    def by_ready_ref(self, ref: Any) -> Worker | None:
        return next((w for w in self.workers if w.state == "starting" and w.ready_ref == ref), None)

    def started(self, w: Worker) -> None:
        """``w``'s ready call returned: idle with its record, or dead with the error it failed to start with."""
        try:
            w.record = self.ray.get(w.ready_ref)
            w.state = "idle"
        except Exception as exc:
            w.state, w.error = "dead", ray_error(exc)
            self._replace(w.cc)

    def idle(self, cc: int) -> Worker | None:
        return next((w for w in self.workers if w.cc == cc and w.state == "idle"), None)

    def lost(self, w: Worker, error: str) -> None:
        """``w`` died (its node or process): dead, and a replacement asked for while the target's budget lasts."""
        w.state, w.error = "dead", error
        self._replace(w.cc)

    def _replace(self, cc: int) -> None:
        """A replacement for a dead worker of ``cc``: at most ``max_retries`` per unit of the resource over the run
        (a target whose workers keep dying or cannot start then has none, and :meth:`exhausted` says so)."""
        used = self.replacements.get(cc, 0)
        if used < self.max_retries * max(1, self.units.get(cc, 0)):
            self.replacements[cc] = used + 1
            self._spawn(cc)

    def exhausted(self, cc: int) -> str | None:
        """Why ``cc`` can have no more workers (none live or starting, no replacement left), else None."""
        if self.of(cc):
            return None
        dead = [w for w in self.workers if w.cc == cc and w.state == "dead"]
        last = dead[-1].error if dead else "no worker could be started"
        return f"every tune worker for {resource_name(cc)} died or failed to start ({len(dead)}); the last: {last}"

    def retire(self, cc: int) -> None:
        """Kill ``cc``'s workers (its target has no more work), giving their GPUs back."""
        for w in self.of(cc):
            self._kill(w)
            w.state = "retired"

    def shutdown(self) -> None:
        for w in self.workers:
            if w.live:
                self._kill(w)
                w.state = "retired"

    def _kill(self, w: Worker) -> None:
        try:
            self.ray.kill(w.handle, no_restart=True)
        except Exception:  # already gone
            pass

    def summary(self) -> list[dict[str, Any]]:
        """Per worker: its target's resource, where it ran, when it was asked for and was ready, how long its
        warm-up imports took, the entries it was given and how it ended."""
        rows = []
        for w in self.workers:
            rec = w.record
            ready = rec.get("started", 0.0) + rec.get("warm_seconds", 0.0) if rec else None
            rows.append({"resource": resource_name(w.cc), "state": w.state, "error": w.error,
                         **{k: rec.get(k) for k in ("host", "node", "pid", "gpu", "gpu_ids", "warm_seconds",
                                                    "warm_error")},
                         "spawned": round(w.spawned, 3), "ready": round(ready, 3) if ready else None,
                         "entries": list(w.entries)})
        return rows


def wanted_per_cc(entries: Sequence[Any]) -> dict[int, int]:
    """Entries that still need a tune, per compute capability."""
    out: dict[int, int] = {}
    for e in entries:
        if not e.finished:
            out[e.cc] = out.get(e.cc, 0) + 1
    return out
