"""Level-1 compile shards: in ``kbuild prewarm --ray``, the candidate configurations of a kernel × target are
compiled by Ray CPU tasks on the cluster's nodes, a few per task, while its one GPU task measures.

**What runs where.** For a kernel that declares a configuration space (``space`` or ``configs`` in
``[tool.kbuild.kernels]``, :mod:`kbuild.declarations.space`), the tune of a kernel × target (on a tune worker holding one GPU of the target, :mod:`kbuild.prewarm.workers`) runs the two-level search as a single machine does
(:func:`kbuild.build.tuning.tune_build`; the cost model's :func:`~kbuild.prewarm.tasks.model_tuner`), with
one change: level 1's measurer gets a :class:`ShardPool` instead of the local process pool
(:class:`kbuild.tune.level1.compile.CompilePool`). When the racing search proposes a batch of configurations
(``prefetch``), the pool cuts the new ones into shards and submits each as a Ray task asking for one CPU and
no GPU (:func:`compile_shard`); when the search needs one (``prepare``), the pool waits for its shard's result.
The shard compiles exactly as the local pool's children do (:func:`kbuild.tune.level1.compile.compile_configs`:
the bench spec loaded once per compile process, line info off, a private Triton cache, each configuration stopped
past the tuning request's ``compile_timeout``, :class:`kbuild.settings.model.TuneRequest`), so the measurer sees the
same cubins and metadata, the search the same verdicts, and a run on the cost model chooses the same
configuration with the same seed as the single-process prewarm (tests/prewarm_ray/test_shards.py checks it).

**Why only the compiles are spread, and the racing stays inside one GPU task.** Level 1 decides by comparing
times, and those comparisons are only meaningful within one GPU run: on the H200 a compute-bound matmul's
back-to-back ``do_bench`` medians spread by 44 %, drifting with clocks and power (why
:func:`kbuild.device.timing.time_interleaved` interleaves the variants it compares), while the interleaved A/A
spread inside one batch was 0.11–0.98 % (``benchmarks/results/h200/issue15/README.md``), and the level-1 gains being decided are 1.004× to
1.25× (same table). So every configuration's score is its time relative to a reference timed in the same batch
(:mod:`kbuild.tune.level1.search`), and the final rung times the finalists and the autotune best side by side.
Timings of shards measured on other GPUs, or in other processes on the same GPU, would be compared across runs:
noise larger than the answer. Compiling, in contrast, is deterministic and needs no GPU; it is what keeps a GPU
idle on a single machine (1–2 s per matmul configuration on one core), so it is what moves to CPU tasks.

**Where the results go: Ray's object store, not the shared tier.** A shard's results (cubin + Triton metadata
per configuration, :class:`~kbuild.tune.level1.compile.CompiledConfig`, or its compile error) are read once, by
the one GPU task that asked for them, within the run. The object store hands them over without a round trip
through HTTP or Redis and without signing; the pool releases them as soon as they are consumed; and when a node
holding them dies, Ray's lineage re-runs the shard (its ``max_retries``). The shared tier is for what builds
look up: results under the pipeline's keys. Level-1 candidates are compiled through the bench spec
(:func:`kbuild.bench.spec.compile_spec`), not through a declaration, so the pipeline's content keys do not
describe them, and storing dozens of never-shipped candidates per kernel × target there would need a second key
scheme in the store that no build reads. What a driver restart keeps is what the shared tier already holds: the
baselines and every accepted result; an interrupted entry is tuned again, and must be: its level-1 times cannot
be reused by a new GPU run (above), and recompiling its candidates costs CPU time on the cluster, not GPU time.

**Shard size** (:func:`shard_size`): the new configurations of one batch divided by the cluster's CPUs, rounded
up, at most :data:`MAX_SHARD_CONFIGS` (4). A batch of 16 proposals (level 1's batch,
:data:`kbuild.tune.two_level.LEVEL1_BATCH`) thus becomes 16 one-configuration tasks on a cluster with 16 or more
CPUs, and 4 tasks of 4 on a small one. One configuration takes 0.2–2 s to compile on a CPU core (measured here:
softmax 0.2–0.4 s, the example's matmul 0.7–1.8 s), against a few milliseconds of Ray's task overhead once a
worker process has imported Triton and loaded the spec (the first shard on a worker pays that once, about a
second), so a shard never needs to be larger to pay for itself; capping it at 4 bounds what a killed worker
loses and how long one slow shard keeps the GPU task waiting.

**Failures.** A configuration that does not compile is a result with its error (the shard goes on), reported
as ``compile-error`` and never chosen, as on a single machine. A shard whose worker or node dies is retried by
Ray (``max_retries``, system failures only: a shard raises nothing of its own); a shard whose retries are used
up turns its configurations into ``compile-error`` results naming the shard and Ray's error, and the search
goes on without them. Nothing in a shard ends the entry.

**Reports.** Each shard reports its start (node, host, pid) and its end (seconds, configurations compiled and
failed) to the driver's board actor; the driver shows per target shards done, running and failed, and
``--json`` gives each entry's ``shards``: id, configurations, node, host, pid, state, attempts (one per start:
a retried shard has two) and seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kbuild.settings.model import Settings

from .node import on_node, ray_error, where

if TYPE_CHECKING:  # kbuild.tune.level1 needs the [tune] extra: imported where a shard compiles
    from kbuild.bench.spec import BenchSpec, Config
    from kbuild.tune.level1.compile import CompiledConfig

#: Most configurations one compile shard holds.
MAX_SHARD_CONFIGS = 4


def shard_size(n: int, cpus: float) -> int:
    """Configurations per shard for ``n`` new configurations on a cluster of ``cpus`` CPUs: ``ceil(n / cpus)``,
    so that one batch can keep every CPU busy, between 1 and :data:`MAX_SHARD_CONFIGS`."""
    return max(1, min(MAX_SHARD_CONFIGS, math.ceil(n / max(1.0, cpus))))


def compile_shard(settings: Settings, shipped: bool, ref: str, small: bool, configs: Sequence[dict[str, Any]],
                  arch: int, *, timeout: float, shard: dict[str, Any], board: Any) -> dict[str, Any]:
    """The Ray task: compile ``configs`` (``Config.as_dict()`` each) of the bench spec ``ref`` for ``sm_<arch>`` on
    this node, each stopped past ``timeout`` seconds; ``{"compiled": [CompiledConfig, ...] in order, "task": what
    this task did}``. ``shard``: its id and owner (``index``, ``kernel``, ``target``); ``board``: the driver's board,
    told of the start and the end."""
    from kbuild.tune.level1.compile import compile_configs

    here = where()
    started = time.time()
    if board is not None:
        board.shard.remote(shard["id"], "start", {**shard, **here, "started": started})
    node_settings = on_node(settings, shipped)
    python_path = tuple(str(node_settings.project_dir / p) for p in node_settings.python_path)
    compiled = compile_configs(ref, small, python_path, configs, arch, timeout=timeout)
    finished = time.time()
    record = {**shard, **here, "started": started, "finished": finished, "seconds": round(finished - started, 3),
              "compiled": sum(c.payload is not None for c in compiled),
              "errors": sum(c.payload is None for c in compiled)}
    if board is not None:
        board.shard.remote(shard["id"], "done", record)
    return {"compiled": compiled, "task": record}


class ShardPool:
    """A :class:`kbuild.tune.level1.compile.Compiler` whose compiles run as Ray CPU tasks (see the module
    docstring); made inside a tune (on a tune worker), where Ray is initialised. ``timeout``: the seconds one
    configuration's compile may take (None: the ``compile_timeout`` of ``settings``, the tuning request's when a
    measurer makes the pool); ``owner``: ``index``, ``kernel`` and ``target`` of the entry (copied into every shard's
    report), ``prefix``: what makes its shard ids unique in the run."""

    def __init__(self, spec: BenchSpec, arch: int, *, settings: Settings, shipped: bool, owner: dict[str, Any],
                 prefix: str, timeout: float | None = None, board: Any = None, max_retries: int = 3,
                 small: bool = False, cpus: float | None = None) -> None:
        import ray

        self.ray: Any = ray  # Ray's typing knows remote functions of no arguments only
        self.spec, self.arch, self.settings, self.shipped, self.small = spec, arch, settings, shipped, small
        self.timeout = settings.compile_timeout if timeout is None else timeout
        self.owner, self.prefix, self.board = dict(owner), prefix, board
        self.cpus = cpus if cpus is not None else float(ray.cluster_resources().get("CPU", 1.0))
        self._task = self.ray.remote(num_cpus=1, num_gpus=0, max_retries=max_retries,
                                retry_exceptions=False)(compile_shard)
        self._shard_of: dict[str, str] = {}
        self._members: dict[str, list[str]] = {}
        self._refs: dict[str, Any] = {}
        self._done: dict[str, CompiledConfig] = {}
        self.records: dict[str, dict[str, Any]] = {}
        """The shards as this pool saw them, by id: configurations, state, and the task's report once read."""

    def submit(self, configs: Iterable[Config]) -> None:
        """Cut the configurations not compiled or submitted yet into shards and submit each (returns at once)."""
        if not self.spec.ref:
            return  # a spec that cannot be imported by reference compiles here, on demand
        new: dict[str, Config] = {}
        for c in configs:
            label = c.label()
            if label not in self._done and label not in self._shard_of:
                new.setdefault(label, c)
        if not new:
            return
        items = list(new.items())
        size = shard_size(len(items), self.cpus)
        for i in range(0, len(items), size):
            chunk = items[i:i + size]
            sid = f"{self.prefix}/{len(self.records)}"
            shard = {**self.owner, "id": sid, "configs": [label for label, _ in chunk]}
            self._refs[sid] = self._task.remote(self.settings, self.shipped, self.spec.ref, self.small,
                                                [c.as_dict() for _, c in chunk], self.arch, timeout=self.timeout,
                                                shard=shard, board=self.board)
            self._members[sid] = [label for label, _ in chunk]
            self.records[sid] = {**shard, "state": "submitted"}
            for label, _ in chunk:
                self._shard_of[label] = sid

    def result(self, config: Config) -> CompiledConfig:
        """The compile of ``config`` (submitted now, as a shard of one, if it was not); waits for its shard."""
        label = config.label()
        if label in self._done:
            return self._done[label]
        if not self.spec.ref:
            from kbuild.tune.level1.compile import compile_one

            self._done[label] = compile_one(self.spec, config, self.arch)
            return self._done[label]
        if label not in self._shard_of:
            self.submit([config])
        self._collect(self._shard_of[label])
        return self._done[label]

    def _collect(self, sid: str) -> None:
        from kbuild.tune.level1.compile import CompiledConfig

        ref, labels = self._refs.pop(sid), self._members.pop(sid)
        try:
            out = self.ray.get(ref)
        except Exception as exc:  # its retries are used up (its workers or nodes kept dying), or Ray failed it
            error = f"compile shard {sid} failed: {ray_error(exc)}"
            for label in labels:
                self._done[label] = CompiledConfig(label, None, 0.0, error)
            self.records[sid].update(state="failed", error=error)
            if self.board is not None:
                self.board.shard.remote(sid, "failed", {**self.records[sid]})
        else:
            for label, compiled in zip(labels, out["compiled"]):
                self._done[label] = compiled
            self.records[sid].update({**out["task"], "state": "done"})
        for label in labels:
            self._shard_of.pop(label, None)

    def close(self) -> None:
        """Cancel the shards submitted but never read (the search stopped before it needed them)."""
        for sid, ref in list(self._refs.items()):
            try:
                self.ray.cancel(ref)
            except Exception:  # already finished, or its owner is going away: nothing to cancel
                pass
            self.records[sid]["state"] = "cancelled"
            if self.board is not None:
                self.board.shard.remote(sid, "cancelled", {**self.records[sid]})
        self._refs.clear()
        self._members.clear()
        self._shard_of.clear()
