"""Fixtures for the distributed prewarm tests: a real nginx WebDAV tier (with MOVE, which leases need), a real
redis-server, and a real local Ray cluster (a head and two worker nodes, each offering the custom resources
``kbuild_sm_80`` and ``kbuild_sm_90``: labelled stand-ins for one GPU of each, as the cost-model backend needs
no GPU). Each server (tests/server_helpers.py) is started once per session and skipped, with the reason, when its
binary is absent."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from server_helpers import Server, start_nginx, start_redis, stop

from kbuild.settings.variables import Override


def _nginx(tmp_path_factory: pytest.TempPathFactory, name: str, methods: str) -> Iterator[Server]:
    proc, server = start_nginx(tmp_path_factory.mktemp(name), methods=methods, workers=2)
    try:
        yield server
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def dav_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """nginx with WebDAV PUT, DELETE and MOVE (two workers, so that requests really run side by side)."""
    yield from _nginx(tmp_path_factory, "nginx-dav", "PUT DELETE MOVE")


@pytest.fixture(scope="session")
def plain_dav_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """nginx without MOVE (as the store tests configure it): no leases."""
    yield from _nginx(tmp_path_factory, "nginx-plain", "PUT DELETE")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    proc, server = start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        stop(proc)


#: Ray starts its worker processes at niceness 15 unless told otherwise. Next to other tests (pytest-xdist runs a
#: second worker beside this one) each nice-0 process then took nearly all of a core from the tasks: with two busy
#: processes beside it the node-kill test took 546 s instead of 39. Ray's own job submission sets 0 too.
RAY_WORKER_NICENESS = "RAY_worker_niceness"


@dataclass
class RayCluster:
    cluster: object
    address: str
    workers: list[object]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """A local Ray cluster: the head (no kbuild resources) and two worker nodes, each one CPU and one unit of
    ``kbuild_sm_80`` and ``kbuild_sm_90`` (stand-ins for a GPU of each: the cost model measures nothing)."""
    ray = pytest.importorskip("ray", reason="kbuild[ray] is not installed")
    from ray.cluster_utils import Cluster

    stand_in = {"kbuild_sm_80": 1, "kbuild_sm_90": 1}
    home = tmp_path_factory.mktemp("ray-cache-home")
    with pytest.MonkeyPatch.context() as env:  # the nodes' workers inherit it: no developer cache is touched
        env.setenv("XDG_CACHE_HOME", str(home))
        env.setenv("TRITON_CACHE_DIR", str(home / "triton"))
        env.setenv(RAY_WORKER_NICENESS, "0")
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        workers = [cluster.add_node(num_cpus=1, resources=stand_in) for _ in range(2)]
        cluster.wait_for_nodes()
    try:
        yield RayCluster(cluster, cluster.address, workers)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def entry_settings(example_project: Path, kbuild_env: Override, tmp_path: Path) -> Any:
    """The example project's settings for the runs about kernels × targets, nodes, workers and leases: an
    evaluation budget (the cost model spends it in full, a few seconds per tune, so a node can be killed in the
    middle of one) and no level-1 space (level 1 and its compile shards are test_shards.py's); the stand-in
    tuners pickled by value (Ray's workers cannot import the tests folder).

    A count of evaluations, not seconds: a 2 s budget got fewer evaluations on a loaded machine (tests run side
    by side under pytest-xdist), and matmul_leaky_relu/sm_90's first improvement comes at evaluation 61 (about
    130 in 2 s on an idle core), so under load its search found none and its decision did not name the cost
    model. A count makes every search, and so every decision, the same however busy the machine is."""
    ray = pytest.importorskip("ray", reason="kbuild[ray] is not installed")
    import stand_in

    from kbuild.settings.sources import load_settings

    kbuild_env.set({"budget.evaluations": 100}, store=tmp_path / "local-store")
    ray.cloudpickle.register_pickle_by_value(stand_in)  # Ray's own copy of cloudpickle
    cfg = example_project / "pyproject.toml"
    text = cfg.read_text()
    space = next(line for line in text.splitlines() if line.startswith("space = "))
    cfg.write_text(text.replace(space + "\n", ""))
    return load_settings(cfg)
