"""kbuild.prewarm: prewarming a fleet — ``kbuild prewarm --ray``, one Ray task per kernel × target.

This package owns the distributed prewarm; the single-machine one is :mod:`kbuild.build.prewarm`, and both run
the same phases of the build core (:mod:`kbuild.build`: resolve and key, compile, tune, store).

* :mod:`kbuild.prewarm.ray_engine` — the driver (:func:`~kbuild.prewarm.ray_engine.prewarm_ray`): the keys, the
  cluster, the compile tasks and the tune workers it starts, the board and the summary.
* :mod:`kbuild.prewarm.tasks` — what runs on the nodes: the compile task (any CPU worker; stores the baseline in
  the shared tier) and the tune (one GPU of the target's compute capability: a lease on the tuned key in the
  shared tier, :mod:`kbuild.cache.lease`, the tuner, the result stored the moment it is accepted), and the
  cost-model tuner. A tuner that fails reports its node, GPU and error and the run goes on.
* :mod:`kbuild.prewarm.workers` — the tune workers: one long-lived Ray actor per GPU the run uses, started as
  the run starts and warmed up while the baselines compile, each tuning entry after entry; a worker whose node
  or process dies is replaced and its entry given to another (``max_retries``).
* :mod:`kbuild.prewarm.shards` — level 1 of a kernel with a configuration space: its candidate compiles as Ray
  CPU tasks, a few configurations each, read by the one GPU task that races them.
* :mod:`kbuild.prewarm.node` — what they all share about where a task runs: the custom resource ``kbuild_sm_<cc>``
  that stands for one GPU (:func:`~kbuild.prewarm.node.resource_name`), the task's host, node and GPUs, the
  project as the node sees it, Ray's errors in one line.
* :mod:`kbuild.prewarm.address` — the cluster's address: its form, and whether a Ray cluster answers there
  within ``connect_timeout``, checked before ``ray.init`` (which retries an address nobody answers at for
  minutes).

The live bar per target (done, running, failed, compile shards, ETA) is :func:`kbuild.console.target_bars`.

Ray is the optional extra ``kbuild[ray]``; nothing here imports it until a distributed prewarm starts.
"""

from __future__ import annotations

__all__: list[str] = []
