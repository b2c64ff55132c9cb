"""``kbuild prewarm --ray`` ships the project and kbuild through Ray's ``runtime_env`` (working_dir, py_modules).

The worker node here runs a Python that has neither kbuild nor the project: a virtual environment that sees the
test environment's site-packages through a path file, which Python does not read further, so kbuild's editable
install (a finder that a ``.pth`` file in that site-packages installs) is not there, and ``import kbuild.settings``
fails in it. The head offers no CPU, so every task runs on that node, from the copies Ray unpacked in its session
folder: the node computes the driver's keys, and the driver then finds what it stored (baselines and results)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stand_in

from kbuild.build.prewarm import with_remote
from kbuild.build.resolve import select_kernels, select_targets, specs_and_keys
from kbuild.prewarm.ray_engine import prewarm_ray
from kbuild.prewarm.tasks import shared_store
from kbuild.settings.sources import load_settings
from kbuild.settings.variables import Override

pytestmark = [pytest.mark.nginx, pytest.mark.slow]
ray = pytest.importorskip("ray", reason="kbuild[ray] is not installed")

ROOT = Path(__file__).resolve().parents[2]
RAY_WORKER_NICENESS = "RAY_worker_niceness"  # set to 0, not Ray's 15: conftest.py says why
KERNELS = ["softmax", "layernorm"]


def _alive_nodes() -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n["Alive"]]


@pytest.fixture(scope="module")
def elsewhere_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A head (no CPU, no kbuild resource) and one worker node (one CPU, ``kbuild_sm_90``) started with ``ray start``
    from a virtual environment without kbuild; (the cluster's address, the worker's node id)."""
    from ray.cluster_utils import Cluster

    work = tmp_path_factory.mktemp("elsewhere")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"]
    Path(purelib, "test-site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = str(venv / "bin" / "python")
    probe = "import importlib.util as u, ray; print(u.find_spec('kbuild.settings') is None)"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True, cwd=work)
    assert out.stdout.strip() == "True", ("the worker's Python must not see kbuild", out.stdout, out.stderr)

    env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache"), "TRITON_CACHE_DIR": str(work / "cache" / "triton"),
           "RAY_USAGE_STATS_ENABLED": "0", RAY_WORKER_NICENESS: "0"}
    env.pop("PYTHONPATH", None)
    with pytest.MonkeyPatch.context() as head_env:  # the head's workers (the board actor) as the node's
        head_env.setenv(RAY_WORKER_NICENESS, "0")
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    node = subprocess.Popen([python, "-m", "ray.scripts.scripts", "start", "--address", cluster.address,
                             "--num-cpus", "1", "--num-gpus", "0", "--resources", json.dumps({"kbuild_sm_90": 1}),
                             "--block", "--disable-usage-stats"], cwd=work, env=env,
                            stdout=open(work / "ray-start.log", "w"), stderr=subprocess.STDOUT)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        deadline = time.monotonic() + 60
        while len(_alive_nodes()) < 2:
            assert node.poll() is None, (work / "ray-start.log").read_text()
            assert time.monotonic() < deadline, "the worker node did not join"
            time.sleep(0.2)
        (worker,) = [n["NodeID"] for n in _alive_nodes() if n["Resources"].get("kbuild_sm_90")]
        ray.shutdown()
        yield cluster.address, worker
    finally:
        if ray.is_initialized():
            ray.shutdown()
        node.terminate()
        try:
            node.wait(30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait(10)
        cluster.shutdown()


def test_a_node_whose_copy_lives_elsewhere_computes_the_drivers_keys(elsewhere_cluster, example_project: Path,
                                                                       dav_server, kbuild_env: Override,
                                                                       tmp_path: Path) -> None:
    address, worker = elsewhere_cluster
    kbuild_env.set({"budget.evaluations": 30}, store=tmp_path / "local-store")
    ray.cloudpickle.register_pickle_by_value(stand_in)
    settings = load_settings(example_project / "pyproject.toml")
    remote = f"{dav_server.url}/t-{uuid.uuid4().hex[:8]}"
    log = str(tmp_path / "tune-events.jsonl")

    result = prewarm_ray(settings, address=address, remote=remote, backend="model", targets=["sm_90"],
                         kernels=KERNELS, tuner=stand_in.RecordingModelTuner(log))
    assert result["shipped"] is True and result["failures"] == [], result["failures"]
    assert {e["kernel"]: e["state"] for e in result["entries"]} == {k: "tuned" for k in KERNELS}

    # Every task ran on the node without kbuild, from Ray's copies: kbuild, the project and its kernels' module.
    starts = [x for x in stand_in.events(log) if x["event"] == "start"]
    assert sorted(x["kernel"] for x in starts) == sorted(KERNELS)
    for x in starts:
        assert x["node"] == worker
        assert not x["kbuild"].startswith(str(ROOT)), x  # not the checkout's kbuild
        assert "runtime_resources" in x["kbuild"] and "runtime_resources" in x["project"], x  # Ray's copies
        assert Path(x["project"]) != example_project and x["module"].startswith(x["project"]), x
    for e in result["entries"]:
        assert e["node"] == worker and e["compile"]["node"] == worker and e["compile"]["state"] == "compiled"
        for task in (e, e["compile"]):
            assert task["finished"] >= task["started"] and task["seconds"] >= 0 and task["gpu_ids"] == []
    (row,) = result["nodes"]  # what each node (and GPU) did
    assert row["node"] == worker and row["tune_tasks"] == 2 and row["compile_tasks"] == 2
    assert {x["kernel"] for x in row["entries"]} == set(KERNELS) and row["busy_seconds"] > 0

    # The driver finds what the node stored under the keys it computes itself: the baselines and the results.
    shipped_settings = with_remote(settings, remote)
    builds, _ = specs_and_keys(shipped_settings, select_kernels(shipped_settings, KERNELS),
                               select_targets(shipped_settings, ["sm_90"]), memo=False)
    with shared_store(shipped_settings) as store:
        for b in builds:
            assert store.get(b.baseline_key.hex) is not None, b.spec.name
    again = prewarm_ray(settings, address=address, remote=remote, backend="model", targets=["sm_90"],
                        kernels=KERNELS, tuner=stand_in.RecordingModelTuner(log))
    assert {e["kernel"]: (e["state"], e.get("host")) for e in again["entries"]} == {
        k: ("found", "(driver)") for k in KERNELS}
