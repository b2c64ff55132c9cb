"""Level-1 compile shards of ``kbuild prewarm --ray`` on a real local Ray cluster (a head and two worker nodes, each
one CPU) into a real nginx WebDAV tier, on the cost-model backend.

The example's matmul declares a 96-point configuration space. Prewarmed through Ray, its candidate compiles run as
Ray CPU tasks (shards of a few configurations) in worker processes other than the tune task's, one of them is
killed in the middle of its shard and retried, and the stored result equals the single-process search's: the same
key, the same configurations tried with the same verdicts and model times, the same chosen configuration and
cubin (the same seed). A shard whose retries are used up, and a configuration Triton refuses, become
``compile-error`` results: the search goes on."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kbuild.build.prewarm import with_remote
from kbuild.prewarm.ray_engine import prewarm_ray
from kbuild.prewarm.shards import MAX_SHARD_CONFIGS, shard_size
from kbuild.prewarm.tasks import shared_store
from kbuild.settings.sources import load_settings
from kbuild.settings.variables import Override
from kbuild.targets import parse_target

pytestmark = [pytest.mark.nginx, pytest.mark.slow]
ray = pytest.importorskip("ray", reason="kbuild[ray] is not installed")

KERNEL, TARGET = "matmul_leaky_relu", "sm_90"


@pytest.fixture
def settings(example_project: Path, kbuild_env: Override, tmp_path: Path) -> Any:
    # 150 evaluations: level 1 gets 45 and screens 6 of the 64 configurations in one batch, then halves and runs
    # the final rung; the evaluations bound level 1, not the seconds (screening has no second batch to cut), so
    # both runs search the same configurations. The 4 seconds bound level 2's SASS search, whose cost-model
    # result never replaces the cubin: it changes no figure compared here.
    kbuild_env.set({"budget.evaluations": 150, "budget.seconds": 4}, store=tmp_path / "local-store")
    return load_settings(example_project / "pyproject.toml")


def _single_process(settings: Any) -> Any:
    """The entry as one process tunes it: the baseline compiled here, level 1 compiling in the local process pool
    (:class:`kbuild.tune.level1.compile.CompilePool`), the cost model judging both levels."""
    from kbuild.build.baselines import compile_baselines
    from kbuild.prewarm.tasks import build_for, model_tuner

    b = build_for(settings, KERNEL, parse_target(TARGET), "model")
    assert len(b.space) == 96

    class Empty:
        def get(self, key: str) -> None:
            return None

        def contains(self, key: str) -> bool:
            return False

    compile_baselines(settings, [b], Empty())
    return model_tuner(settings, b)


def _level1(art: Any) -> dict[str, Any]:
    l1 = art.meta["tune_report"]["level1"]
    return {"trials": [(t["label"], t["status"], t["median_ms"], t["score"]) for t in l1["trials"]],
            "best": l1["best_label"], "top": l1["top_labels"], "evaluations": l1["evaluations"]}


def test_compile_shards_run_on_cpu_workers_survive_a_kill_and_give_the_single_process_result(
        settings, dav_server, ray_cluster, tmp_path: Path) -> None:
    remote = f"{dav_server.url}/t-{uuid.uuid4().hex[:8]}"
    killed: dict[str, Any] = {}

    def kill_a_shard_mid_compile(entries: Any) -> None:
        if killed:
            return
        for e in entries:
            for sh in e.shards:
                if sh["state"] == "running" and time.time() - sh["started"] > 0.5:
                    os.kill(sh["pid"], signal.SIGKILL)  # a worker process of this test's cluster, mid-shard
                    killed.update(id=sh["id"], pid=sh["pid"], node=sh["node"])
                    return

    t0 = time.time()
    result = prewarm_ray(settings, address=ray_cluster.address, remote=remote, backend="model", targets=[TARGET],
                         kernels=[KERNEL], on_update=kill_a_shard_mid_compile, ship=False)
    ray_seconds = time.time() - t0
    assert killed, "no shard was caught running: nothing was killed"
    (entry,) = result["entries"]
    assert result["failures"] == [] and entry["state"] == "tuned", entry

    # The shards: Ray CPU tasks (no GPU ids) in processes other than the tune task's, on the cluster's nodes.
    shards = entry["shards"]
    nodes = {n.node_id for n in ray_cluster.cluster.list_all_nodes()}
    assert shards and {sh["state"] for sh in shards} == {"done"}, shards
    for sh in shards:
        assert sh["node"] in nodes and sh["pid"] != entry["pid"] and sh["pid"] != os.getpid(), sh
        assert sh["gpu_ids"] == [] and 1 <= len(sh["configs"]) <= MAX_SHARD_CONFIGS
        assert sh["compiled"] + sh["errors"] == len(sh["configs"]) and sh["seconds"] > 0
    assert len({sh["node"] for sh in shards}) >= 2, shards  # spread over the cluster, not one node's cores
    # The killed one was retried in another worker process and finished there.
    (hit,) = [sh for sh in shards if sh["id"] == killed["id"]]
    assert len(hit["attempts"]) == 2 and hit["attempts"][0]["pid"] == killed["pid"] != hit["pid"], hit
    # Reported per target, and per node.
    counts = result["counts"][TARGET]
    assert (counts["shards_done"], counts["shards_running"], counts["shards_failed"]) == (len(shards), 0, 0)
    assert sum(row["shard_tasks"] for row in result["nodes"]) == len(shards)

    # The stored result is the single-process search's.
    with shared_store(with_remote(settings, remote)) as store:
        there = store.get(entry["key"])
    assert there is not None and there.meta["measure"] == "cost-model"
    t1 = time.time()
    here = _single_process(settings)
    single_seconds = time.time() - t1
    assert here.key == there.key == entry["key"]
    assert _level1(here) == _level1(there)
    assert here.meta["config"] == there.meta["config"]
    assert here.meta["tune_report"]["config_label"] == there.meta["tune_report"]["config_label"]
    assert here.cubin_sha256 == there.cubin_sha256
    compiled = {label for sh in shards for label in sh["configs"]}
    assert compiled == {t[0] for t in _level1(here)["trials"]}  # every level-1 compile went through a shard
    print(f"ray: {ray_seconds:.1f} s, {len(shards)} shards on {len({sh['node'] for sh in shards})} nodes; "
          f"single process: {single_seconds:.1f} s; chosen {here.meta['tune_report']['config_label']}")


def test_a_compile_error_and_a_shard_out_of_retries_are_results_not_failures(ray_cluster, settings) -> None:
    from kbuild.bench.spec import Config, load_spec
    from kbuild.prewarm.ray_engine import _board, _board_snapshot
    from kbuild.prewarm.shards import ShardPool

    spec = load_spec("kbuild.bench.kernels.matmul:matmul_512x512x2048", small=True)
    good = spec.configs[0]
    refused = Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 8, "GROUP_M": 8}, num_warps=2, num_stages=2)
    doomed = Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=2)
    ray.init(address=ray_cluster.address, log_to_driver=False)
    try:
        board = _board(ray)
        pool = ShardPool(spec, 90, settings=settings, shipped=False, board=board, max_retries=0,
                         owner={"index": 0, "kernel": "matmul", "target": "sm_90"}, prefix="t")
        pool.submit([good, refused])
        assert len(pool.records) == 2  # two configurations on three CPUs: one per shard
        assert pool.result(good).payload is not None
        bad = pool.result(refused)
        assert bad.payload is None and bad.error and "compile shard" not in bad.error, bad  # Triton's own error
        pool.submit([doomed])
        deadline = time.monotonic() + 60
        while True:  # kill its worker as soon as it runs: no retry is left
            running = [r for r in _board_snapshot(ray, board)["shards"].values()
                       if r["state"] == "running" and doomed.label() in r["configs"]]
            if running:
                os.kill(running[0]["pid"], signal.SIGKILL)
                break
            assert time.monotonic() < deadline, "the shard never started"
            time.sleep(0.05)
        lost = pool.result(doomed)
        assert lost.payload is None and "compile shard t/2 failed" in (lost.error or ""), lost.error
        assert [r["state"] for r in pool.records.values()] == ["done", "done", "failed"]
        pool.close()
    finally:
        ray.shutdown()


def test_shard_size() -> None:
    assert shard_size(16, 64) == 1  # a big cluster: one configuration per task
    assert shard_size(16, 3) == MAX_SHARD_CONFIGS == 4  # a small one: at most four per task
    assert shard_size(6, 3) == 2 and shard_size(1, 3) == 1 and shard_size(5, 0) == 4
