"""Fixtures for the store tests: real redis-server and nginx (WebDAV) on free loopback ports.

Each server is started once per session in a temporary directory and stopped at the end.
Tests get their own namespace (an HTTP path prefix, a Redis key prefix), so they never see each
other's entries. A server test is skipped, with the reason, only when the binary is absent.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from store_helpers import free_port, unique

from kbuild.cache.http import HttpBackend
from kbuild.cache.local import LocalBackend
from kbuild.cache.store import Backend
from kbuild.cache.tier import Tier


def _wait_port(port: int, proc: subprocess.Popen, what: str, log: Path | None = None, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            detail = log.read_text(errors="replace") if log and log.exists() else ""
            raise RuntimeError(f"{what} exited with status {proc.returncode}: {detail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class Server:
    url: str
    port: int
    root: Path | None = None


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server); CI installs it")
    work = tmp_path_factory.mktemp("redis")
    port = free_port()
    log = work / "redis.log"
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(work), "--logfile", str(log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        _wait_port(port, proc, "redis-server", log)
        yield Server(url=f"redis://127.0.0.1:{port}/0", port=port)
    finally:
        _stop(proc)


NGINX_CONF = """
{user}
worker_processes 1;
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
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port};
        root {work}/root;
        location / {{
            dav_methods PUT DELETE;
            create_full_put_path on;
            dav_access user:rw group:r all:r;
            autoindex on;
            autoindex_format json;
        }}
    }}
}}
"""


def start_nginx(work: Path) -> tuple[subprocess.Popen, Server]:
    exe = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if exe is None:
        pytest.skip("nginx is not installed (apt-get install nginx, which has the WebDAV module); CI installs it")
    (work / "root").mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = work / "nginx.conf"
    # As root, nginx's workers would switch to `nobody`, which cannot enter pytest's 0700 temp dirs.
    user = "user root;" if os.geteuid() == 0 else ""
    conf.write_text(NGINX_CONF.format(work=work, port=port, user=user))
    proc = subprocess.Popen([exe, "-e", str(work / "error.log"), "-p", str(work), "-c", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    _wait_port(port, proc, "nginx", work / "error.log")
    return proc, Server(url=f"http://127.0.0.1:{port}", port=port, root=work / "root")


@pytest.fixture(scope="session")
def nginx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    proc, server = start_nginx(tmp_path_factory.mktemp("nginx"))
    try:
        yield server
    finally:
        _stop(proc)


@dataclass
class BackendCase:
    """A backend under test plus raw access for damaging or planting entries behind the tier's back."""

    kind: str
    backend: Backend
    url: str | None
    corrupt_blob: Callable[[str, bytes], None]
    plant_record: Callable[[str, bytes], None]

    def tier(self, **kwargs: object) -> Tier:
        return Tier(self.backend, **kwargs)  # type: ignore[arg-type]


def _http_case(server: Server) -> BackendCase:
    url = f"{server.url}/t-{unique()}"
    backend = HttpBackend(url)

    def raw_put(path: str, data: bytes) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("PUT", backend.prefix + path, body=data)
        resp = conn.getresponse()
        resp.read()
        conn.close()
        assert resp.status in (200, 201, 204), resp.status

    return BackendCase("http", backend, url, lambda d, data: raw_put(f"/cas/{d}", data),
                       lambda k, data: raw_put(f"/ac/{k}", data))


def _redis_case(server: Server) -> BackendCase:
    from kbuild.cache.redis_tier import RedisBackend

    url = f"{server.url}?prefix=t{unique()}"
    backend = RedisBackend(url)
    return BackendCase("redis", backend, url, lambda d, data: backend.client.set(backend._cas(d), data),
                       lambda k, data: backend.client.set(backend._ac(k), data))


def _local_case(path: Path) -> BackendCase:
    backend = LocalBackend(path, max_bytes=1 << 30)
    return BackendCase("local", backend, None, lambda d, data: backend._blobs.set(d, data),
                       lambda k, data: backend._records.set(k, data))


@pytest.fixture(params=["local", pytest.param("http", marks=pytest.mark.nginx),
                        pytest.param("redis", marks=pytest.mark.redis)])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendCase]:
    if request.param == "local":
        c = _local_case(tmp_path / "store")
    elif request.param == "http":
        c = _http_case(request.getfixturevalue("nginx_server"))
    else:
        c = _redis_case(request.getfixturevalue("redis_server"))
    yield c
    c.backend.close()


@pytest.fixture
def http_url(nginx_server: Server) -> str:
    return f"{nginx_server.url}/t-{unique()}"


@pytest.fixture
def redis_url(redis_server: Server) -> str:
    return f"{redis_server.url}?prefix=t{unique()}"
