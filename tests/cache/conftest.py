"""Fixtures for the store tests: real redis-server and nginx (WebDAV) on free loopback ports
(tests/server_helpers.py starts them), and real tmpfs mounts (a full disk, a read-only store).

Each server is started once per session in a temporary directory and stopped at the end.
Tests get their own namespace (an HTTP path prefix, a Redis key prefix), so they never see each
other's entries. A server test is skipped, with the reason, only when the binary is absent.
"""

from __future__ import annotations

import http.client
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from server_helpers import Server, start_nginx, start_redis, stop
from store_helpers import unique

from kbuild.cache.http import HttpBackend
from kbuild.cache.local import LocalBackend
from kbuild.cache.store import Backend
from kbuild.cache.tier import Tier


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    proc, server = start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def nginx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    proc, server = start_nginx(tmp_path_factory.mktemp("nginx"))
    try:
        yield server
    finally:
        stop(proc)


@dataclass
class BackendCase:
    """A backend under test plus raw access for damaging or planting entries behind the tier's back."""

    kind: str
    backend: Backend
    url: str | None
    corrupt_blob: Callable[[str, bytes], object]
    plant_record: Callable[[str, bytes], object]
    plant_no_value: Callable[[str, str], None]
    """``plant_no_value("ac" | "cas", name)``: put something no kbuild writes where a record or cubin belongs,
    as an attacker or a careless script would: a Redis list (``LPUSH``), a WebDAV collection (``PUT <path>/x``),
    a local row holding a pickled list."""

    def tier(self, **kwargs: object) -> Tier:
        return Tier(self.backend, **kwargs)  # type: ignore[arg-type]


def _http_case(server: Server) -> BackendCase:
    url = f"{server.url}/t-{unique()}"
    backend = HttpBackend(url)

    def raw(method: str, path: str, data: bytes | None = None) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request(method, backend.prefix + path, body=data)
        resp = conn.getresponse()
        resp.read()
        conn.close()
        return resp.status

    def raw_put(path: str, data: bytes) -> None:
        assert raw("PUT", path, data) in (200, 201, 204)

    def collection(where: str, name: str) -> None:
        raw("DELETE", f"/{where}/{name}")
        raw_put(f"/{where}/{name}/x", b"x")  # nginx's create_full_put_path makes /<where>/<name>/ a directory

    return BackendCase("http", backend, url, lambda d, data: raw_put(f"/cas/{d}", data),
                       lambda k, data: raw_put(f"/ac/{k}", data), collection)


def _redis_case(server: Server) -> BackendCase:
    from kbuild.cache.redis_tier import RedisBackend

    url = f"{server.url}?prefix=t{unique()}"
    backend = RedisBackend(url)

    def lpush(where: str, name: str) -> None:
        full = f"{backend.prefix}:{where}:{name}"
        backend.client.delete(full)
        backend.client.lpush(full, "x")

    return BackendCase("redis", backend, url, lambda d, data: backend.client.set(backend._cas(d), data),
                       lambda k, data: backend.client.set(backend._ac(k), data), lpush)


def _local_case(path: Path) -> BackendCase:
    backend = LocalBackend(path, max_bytes=1 << 30)

    def pickled(where: str, name: str) -> None:
        (backend._records if where == "ac" else backend._blobs).set(name, ["x"])  # diskcache pickles a list

    return BackendCase("local", backend, None, lambda d, data: backend._blobs.set(d, data),
                       lambda k, data: backend._records.set(k, data), pickled)


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


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """``mount(name, size)``: a tmpfs of ``size`` at ``tmp_path/name`` (a real full disk, a real read-only
    mount), unmounted afterwards; the test is skipped, with the reason, where mounting is not permitted."""
    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root and mount(8); CI runs these tests as root")
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"mounting a tmpfs is not permitted here: {proc.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)
