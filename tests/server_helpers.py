"""Real servers for the tests that talk to remote tiers: nginx (WebDAV) and redis-server on free loopback ports.

Shared by tests/cache (the store tests) and tests/prewarm_ray (leases and the distributed prewarm); imported as a
plain module (tests/ is on ``sys.path``, as for gpu_marks). Each starter skips the test, with the reason, when its
binary is absent, and waits until the server listens; :func:`stop` ends it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen, what: str, log: Path | None = None, timeout: float = 10.0) -> None:
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


def stop(proc: subprocess.Popen) -> None:
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


NGINX_CONF = """
{user}
worker_processes {workers};
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
            dav_methods {methods};
            create_full_put_path on;
            dav_access user:rw group:r all:r;
            autoindex on;
            autoindex_format json;
        }}
    }}
}}
"""


def start_nginx(work: Path, *, methods: str = "PUT DELETE", workers: int = 1) -> tuple[subprocess.Popen, Server]:
    """nginx serving ``work/root`` over WebDAV (``methods``: its ``dav_methods``; leases need ``MOVE``) with
    ``workers`` worker processes."""
    exe = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if exe is None:
        pytest.skip("nginx is not installed (apt-get install nginx, which has the WebDAV module); CI installs it")
    (work / "root").mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = work / "nginx.conf"
    # As root, nginx's workers would switch to `nobody`, which cannot enter pytest's 0700 temp dirs.
    user = "user root;" if os.geteuid() == 0 else ""
    conf.write_text(NGINX_CONF.format(work=work, port=port, user=user, methods=methods, workers=workers))
    proc = subprocess.Popen([exe, "-e", str(work / "error.log"), "-p", str(work), "-c", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    wait_port(port, proc, "nginx", work / "error.log")
    return proc, Server(url=f"http://127.0.0.1:{port}", port=port, root=work / "root")


def start_redis(work: Path) -> tuple[subprocess.Popen, Server]:
    """redis-server without persistence, its log in ``work``."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server); CI installs it")
    port = free_port()
    log = work / "redis.log"
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(work), "--logfile", str(log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    wait_port(port, proc, "redis-server", log)
    return proc, Server(url=f"redis://127.0.0.1:{port}/0", port=port)
