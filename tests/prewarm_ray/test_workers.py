"""The tune workers of ``kbuild prewarm --ray`` (:mod:`kbuild.prewarm.workers`) on a real local Ray cluster (a head
and two worker nodes, each one unit of ``kbuild_sm_80`` and ``kbuild_sm_90``) into a real nginx WebDAV tier, on
the cost-model backend.

One worker per unit of a target's resource tunes entry after entry in one process (no new process per entry);
a worker whose process is killed in the middle of a tune is replaced and its entry is tuned to the end by
another, once; a worker that cannot start (a node without what a tune imports) ends its target's entries as
failures naming the error, after a bounded number of replacements, without hanging the run."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import stand_in

from kbuild.prewarm.ray_engine import prewarm_ray
from kbuild.prewarm.workers import WARM_MODULES, WorkerPool

pytestmark = [pytest.mark.nginx, pytest.mark.slow]
ray = pytest.importorskip("ray", reason="kbuild[ray] is not installed")


@pytest.fixture
def settings(entry_settings: Any) -> Any:
    return entry_settings


def test_workers_tune_entry_after_entry_and_a_killed_one_is_replaced(settings, dav_server, ray_cluster,
                                                                      tmp_path: Path) -> None:
    remote = f"{dav_server.url}/w-{uuid.uuid4().hex[:8]}"
    log = str(tmp_path / "tune-events.jsonl")
    killed: dict[str, Any] = {}

    def kill_a_worker_process_mid_tune(entries: Any) -> None:
        if killed:
            return
        ev = stand_in.events(log)
        done = {x["key"] for x in ev if x["event"] == "finish"}
        busy = [x for x in ev if x["event"] == "start" and x["key"] not in done and time.time() - x["time"] > 0.5]
        if busy:
            os.kill(busy[0]["pid"], signal.SIGKILL)  # the worker's own process (a tune runs inside the actor)
            killed.update(pid=busy[0]["pid"], key=busy[0]["key"])

    result = prewarm_ray(settings, address=ray_cluster.address, remote=remote, backend="model", lease_seconds=20,
                         tuner=stand_in.RecordingModelTuner(log), on_update=kill_a_worker_process_mid_tune,
                         ship=False)
    assert killed, "the run ended before a worker could be killed mid-tune"
    assert result["failures"] == [] and {e["state"] for e in result["entries"]} == {"tuned"}, result["entries"]
    ev = stand_in.events(log)
    for e in result["entries"]:  # each entry tuned to the end exactly once
        assert len([x for x in ev if x["event"] == "finish" and x["key"] == e["key"]]) == 1, e
    starts = [x for x in ev if x["event"] == "start" and x["key"] == killed["key"]]
    assert len(starts) == 2 and starts[0]["pid"] == killed["pid"] != starts[1]["pid"], starts

    workers = result["workers"]
    # At most one worker per unit of each target's resource at a time: two per target here, plus the replacement.
    for res in ("kbuild_sm_80", "kbuild_sm_90"):
        mine = [w for w in workers if w["resource"] == res]
        assert 2 <= len(mine) <= 3, workers
    (dead,) = [w for w in workers if w["state"] == "dead"]
    assert dead["pid"] == killed["pid"] and dead["error"], dead
    assert all(w["state"] == "retired" for w in workers if w is not dead)  # killed at the end: GPUs given back
    # The tunes ran in the workers' own processes, and some worker tuned more than one entry in the same process.
    tune_pids = {x["pid"] for x in ev if x["event"] == "start"}
    assert tune_pids <= {w["pid"] for w in workers}, (tune_pids, workers)
    assert sum(len(w["entries"]) for w in workers) == 7  # six entries, the killed one twice
    assert max(len(w["entries"]) for w in workers) >= 2, workers
    assert all(w["warm_seconds"] is not None for w in workers if w["pid"] is not None)


def test_a_worker_that_cannot_start_fails_its_target_after_bounded_replacements(ray_cluster) -> None:
    ray.init(address=ray_cluster.address, log_to_driver=False)
    try:
        pool = WorkerPool(ray, backend="model", max_retries=2, units={90: 2},
                          warm_modules=(*WARM_MODULES, "kbuild_no_such_module"))
        pool.ensure(90, 5)
        assert len(pool.of(90)) == 2  # one per unit of the resource, not one per entry
        deadline = time.time() + 120
        while pool.exhausted(90) is None:
            assert time.time() < deadline, pool.summary()
            for ref in ray.wait(pool.starting_refs(), num_returns=1, timeout=1.0)[0]:
                w = pool.by_ready_ref(ref)
                assert w is not None
                pool.started(w)
        why = pool.exhausted(90)
        assert why is not None and "kbuild_sm_90" in why and "kbuild_no_such_module" in why, why
        # The two workers, then max_retries replacements per unit of the resource: 2 + 2 * 2, all dead.
        assert len(pool.workers) == 6 and {w.state for w in pool.workers} == {"dead"}
    finally:
        pool.shutdown()
        ray.shutdown()
