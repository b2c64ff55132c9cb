"""Fixtures for the distributed prewarm tests: a real nginx WebDAV tier (with MOVE, which leases need), a real
redis-server, and a real local Ray cluster (a head and two worker nodes, each offering the custom resources
``kbuild_sm_80`` and ``kbuild_sm_90``: labelled stand-ins for one GPU of each, as the cost-model backend needs
no GPU). Each server is started once per session and skipped, with the reason, when its binary is absent."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}: "
                               f"{log.read_text(errors='replace') if log.exists() else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"{what} did not listen on port {port}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


NGINX_CONF = """
{user}
worker_processes 2;
daemon off;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    client_max_body_size 0;
    server {{
        listen 127.0.0.1:{port};
        root {work}/root;
        location / {{
            dav_methods {methods};
            create_full_put_path on;
            autoindex on;
            autoindex_format json;
        }}
    }}
}}
"""


@dataclass
class Server:
    url: str
    root: Path | None = None


def _nginx(work: Path, methods: str) -> Iterator[Server]:
    exe = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if exe is None:
        pytest.skip("nginx is not installed (apt-get install nginx); CI installs it")
    (work / "root").mkdir(parents=True, exist_ok=True)
    port = free_port()
    user = "user root;" if os.geteuid() == 0 else ""  # root's workers would be `nobody`, locked out of tmp dirs
    (work / "nginx.conf").write_text(NGINX_CONF.format(work=work, port=port, user=user, methods=methods))
    proc = subprocess.Popen([exe, "-e", str(work / "error.log"), "-p", str(work), "-c", str(work / "nginx.conf")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        _wait_port(port, proc, "nginx", work / "error.log")
        yield Server(url=f"http://127.0.0.1:{port}", root=work / "root")
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def dav_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """nginx with WebDAV PUT, DELETE and MOVE (two workers, so that requests really run side by side)."""
    yield from _nginx(tmp_path_factory.mktemp("nginx-dav"), "PUT DELETE MOVE")


@pytest.fixture(scope="session")
def plain_dav_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """nginx without MOVE (as the store tests configure it): no leases."""
    yield from _nginx(tmp_path_factory.mktemp("nginx-plain"), "PUT DELETE")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server); CI installs it")
    work = tmp_path_factory.mktemp("redis")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(work), "--logfile", str(work / "redis.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        _wait_port(port, proc, "redis-server", work / "redis.log")
        yield Server(url=f"redis://127.0.0.1:{port}/0")
    finally:
        _stop(proc)


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
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        workers = [cluster.add_node(num_cpus=1, resources=stand_in) for _ in range(2)]
        cluster.wait_for_nodes()
    try:
        yield RayCluster(cluster, cluster.address, workers)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
