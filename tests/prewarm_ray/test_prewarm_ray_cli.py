"""``kbuild prewarm --ray``'s clean errors (exit status 2, one line naming what to do), no cluster needed: among them
(issue 32) an address where no cluster answers, which failed only after minutes, a malformed address, a non-finite
lease and a Ray that fails to import."""

from __future__ import annotations

import contextlib
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kbuild.extras
from kbuild.cli import main
from kbuild.prewarm.node import resource_name
from kbuild.prewarm.tasks import model_key
from kbuild.settings.variables import Override


def test_without_the_ray_extra_it_names_the_extra(example_project: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    real = kbuild.extras._importable
    monkeypatch.setattr(kbuild.extras, "_importable", lambda n: n != "ray" and real(n))
    assert main(["prewarm", "--config", str(example_project / "pyproject.toml"), "--ray"]) == 2
    err = capsys.readouterr().err
    assert "kbuild prewarm --ray" in err and "pip install 'kbuild[ray]'" in err and "Traceback" not in err


def test_engine_ray_in_pyproject_without_a_shared_tier(example_project: Path, capsys) -> None:
    pytest.importorskip("ray")
    cfg = example_project / "pyproject.toml"
    cfg.write_text(cfg.read_text().replace('tune = "auto"', 'tune = "auto"\nprewarm = { engine = "ray" }'))
    assert main(["prewarm", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "remotes" in err and "--remote URL" in err and str(cfg) in err


def test_backend_model_needs_ray(example_project: Path, capsys) -> None:
    assert main(["prewarm", "--config", str(example_project / "pyproject.toml"), "--backend", "model"]) == 2
    assert "--ray" in capsys.readouterr().err


def test_model_results_live_under_their_own_key() -> None:
    from kbuild.key import KernelKey

    tuned = KernelKey({"spec": "x", "tuner": {"version": 2, "budget": {"evaluations": 1}}})
    assert model_key(tuned).hex != tuned.hex and model_key(tuned).components["tuner"]["measure"] == "cost-model"
    assert resource_name(90) == "kbuild_sm_90"


def test_no_ship_needs_ray(example_project: Path, capsys) -> None:
    assert main(["prewarm", "--config", str(example_project / "pyproject.toml"), "--no-ship"]) == 2
    assert "--no-ship go with --ray" in capsys.readouterr().err


def test_the_shipped_kbuild_is_laid_out_as_a_wheel(tmp_path: Path) -> None:
    import kbuild.cache
    from kbuild.prewarm.ray_engine import MAPPED_SUBPACKAGES, stage_kbuild

    staged = stage_kbuild(tmp_path)
    assert staged == tmp_path / "kbuild" and (staged / "prewarm" / "ray_engine.py").is_file()
    for name in MAPPED_SUBPACKAGES:  # inside, not beside it, as a checkout keeps them
        assert (staged / name).is_dir() and not (staged / name).is_symlink()
    assert (staged / "cache" / "lease.py").read_bytes() == (Path(kbuild.cache.__file__).parent / "lease.py").read_bytes()
    assert (staged / "hooks" / "backend.py").is_file() and (staged / "build" / "pipeline.py").is_file()
    assert not list(staged.rglob("__pycache__")) and not list(staged.rglob("*.pyc"))


# --- issue 32: an address where no cluster answers, a bad address or lease, a broken Ray: one line, at once ------

def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prewarm(config: Path, *args: str, env: dict[str, str] | None = None, remote: str = "http://127.0.0.1:9/unused",
             timeout: float = 90) -> tuple[subprocess.CompletedProcess[str], float]:
    """``kbuild prewarm`` in its own process (a hang is a test failure, not a hung suite), and its seconds."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kbuild", "prewarm", "--config", str(config), "--backend", "model",
                           "--remote", remote, *args], capture_output=True, text=True,
                          timeout=timeout, check=False, env={**os.environ, **(env or {})})
    return proc, time.monotonic() - started


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error: ")]


@contextlib.contextmanager
def _http_server() -> Iterator[int]:
    """An HTTP/1 server on a loopback port: something listens there, but not Ray."""
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def _http2_not_grpc() -> Iterator[int]:
    """An HTTP/2 server that is not gRPC, as an egress proxy is: its SETTINGS, then ``:status: 404`` on stream 1."""
    listener = socket.create_server(("0.0.0.0", 0))
    answer = (b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # SETTINGS (empty)
              b"\x00\x00\x01\x01\x05\x00\x00\x00\x01\x8d")  # HEADERS, END_STREAM | END_HEADERS: :status 404

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(answer)
                    time.sleep(0.5)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()


@pytest.mark.nginx
@pytest.mark.hostile(fault="unreachable Ray address", outcome="clean error")
@pytest.mark.parametrize("where", ["closed port", "no such host", "not Ray", "HTTP/2 not gRPC"])
def test_an_address_where_no_cluster_answers_fails_within_seconds(example_project: Path, where: str,
                                                                  dav_server: Any) -> None:
    """``ray.init`` retried these for minutes (``127.0.0.1:1`` and ``no-such-host.invalid:6379`` ran past 180 s,
    with a shared tier that works, as here): kbuild checks the address first (name, TCP, a gRPC call) and stops
    with one line naming it, exit 2."""
    pytest.importorskip("ray")
    with contextlib.ExitStack() as stack:
        address = {"closed port": lambda: f"127.0.0.1:{closed_port()}",
                   "no such host": lambda: "no-such-host.invalid:6379",
                   "not Ray": lambda: f"127.0.0.1:{stack.enter_context(_http_server())}",
                   "HTTP/2 not gRPC": lambda: f"127.0.0.1:{stack.enter_context(_http2_not_grpc())}"}[where]()
        proc, seconds = _prewarm(example_project / "pyproject.toml", "--ray", address, "--json",
                                 remote=f"{dav_server.url}/t-{where.replace(' ', '-').replace('/', '')}")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    (line,) = _error_lines(proc.stderr)
    assert f"--ray {address}" in line and "connect_timeout" in line, line
    assert {"closed port": "connection refused", "no such host": "does not resolve", "not Ray": "not a Ray cluster",
            "HTTP/2 not gRPC": "not as gRPC does"}[where] in line
    assert seconds < 30, f"took {seconds:.1f} s"


@pytest.mark.hostile(fault="bad Ray address", outcome="clean error")
@pytest.mark.parametrize("address", ["garbage", "foo://x:1", "os://getcwd", "host:0", "host:99999", "ray://a b:1",
                                     ":6379", "1:2:3"])
def test_a_malformed_ray_address_is_one_line_naming_the_flag(example_project: Path, address: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Ray took these to ``ray.init``: a ValueError, or an import of the module the scheme names (``os://``)."""
    assert main(["prewarm", "--config", str(example_project / "pyproject.toml"), "--ray", address]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(_error_lines(err)) == 1 and err.count("\n") == 1, err
    assert "--ray" in err and repr(address) in err


@pytest.mark.hostile(fault="bad Ray address", outcome="clean error")
def test_a_malformed_ray_address_in_the_settings_names_its_key(example_project: Path,
                                                               capsys: pytest.CaptureFixture[str],
                                                               kbuild_env: Override) -> None:
    cfg = example_project / "pyproject.toml"
    cfg.write_text(cfg.read_text().replace('tune = "auto"', 'tune = "auto"\nprewarm = { address = "no port" }'))
    assert main(["prewarm", "--config", str(cfg), "--ray"]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "prewarm.address" in err and "'no port'" in err and "Traceback" not in err
    kbuild_env.set({"prewarm.address": "nowhere"})
    cfg.write_text(cfg.read_text().replace('prewarm = { address = "no port" }', ""))
    assert main(["prewarm", "--config", str(cfg), "--ray"]) == 2
    err = capsys.readouterr().err
    assert "KBUILD_PREWARM_ADDRESS" in err and "'nowhere'" in err and "Traceback" not in err


@pytest.mark.hostile(fault="Ray Client without ray[client]", outcome="clean error")
def test_a_ray_client_address_without_ray_client_names_the_package(example_project: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    ray = pytest.importorskip("ray")
    from ray._private.utils import get_ray_client_dependency_error

    if get_ray_client_dependency_error() is None:
        pytest.skip("ray[client] is installed here")
    assert main(["prewarm", "--config", str(example_project / "pyproject.toml"), "--ray", "ray://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(_error_lines(err)) == 1, err
    assert "ray://127.0.0.1:1" in err and "pip install 'ray[client]'" in err
    assert not ray.is_initialized()


@pytest.mark.hostile(fault="bad lease seconds", outcome="clean error")
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_lease_seconds_must_be_finite_and_positive(example_project: Path, value: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``nan`` and ``inf`` were taken, and every entry then failed after 45 s."""
    assert main(["prewarm", "--config", str(example_project / "pyproject.toml"), "--ray", "127.0.0.1:1",
                 f"--lease-seconds={value}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(_error_lines(err)) == 1, err
    assert "--lease-seconds" in err and value.lstrip("-") in err


FAKE_RAY = {"ImportError": "raise ImportError('libcore_worker.so: cannot open shared object file')",
            "ModuleNotFoundError": "raise ModuleNotFoundError(\"No module named 'ray._raylet'\", name='ray._raylet')",
            "RuntimeError": "raise RuntimeError('this Ray was built for another Python')"}


@pytest.mark.hostile(fault="broken Ray install", outcome="clean error")
@pytest.mark.parametrize("failure", sorted(FAKE_RAY))
def test_a_ray_that_fails_to_import_is_one_line(example_project: Path, tmp_path: Path, failure: str) -> None:
    """A Ray package that is there but fails at import (a partial or broken install) gave a traceback."""
    fake = tmp_path / "fake-site" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_RAY[failure] + "\n")
    path = os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])
    proc, _ = _prewarm(example_project / "pyproject.toml", "--ray", "127.0.0.1:1", env={"PYTHONPATH": path})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(_error_lines(proc.stderr)) == 1, proc.stderr
    assert "kbuild prewarm --ray" in proc.stderr and failure in proc.stderr
    assert "pip install --force-reinstall 'kbuild[ray]'" in proc.stderr


def test_stdout_to_stderr_moves_python_and_file_descriptor_writes(capfd: pytest.CaptureFixture[str]) -> None:
    from kbuild.console import stdout_to_stderr

    with stdout_to_stderr():
        print("from print")
        os.write(1, b"from fd 1\n")
        subprocess.run([sys.executable, "-c", "print('from a child')"], check=True)
    print("after")
    out, err = capfd.readouterr()
    assert out == "after\n"
    assert "from print" in err and "from fd 1" in err and "from a child" in err
