"""Pipeline modes and bad input, through ``kbuild emit`` / ``kbuild lock`` as the build runs them:
tune = off / auto / require, --locked against a current or stale kbuild.lock, a missing kernel
source, an unsupported target, a remote store that is down (warning; failure under --strict).
Every failure names the file and the entry, and leaves nothing in the store."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
from hooks_helpers import CMAKE_EXAMPLE, build_env, copy_project, kbuild_cli


def store_keys(store: Path) -> set[str]:
    from kbuild.cache import open_store
    from kbuild.settings.sources import settings_from_table

    if not store.exists():
        return set()
    with open_store(settings_from_table({"store": str(store)})) as s:
        return set(s.keys())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project(CMAKE_EXAMPLE, tmp_path / "project")


def emit(project: Path, store: Path, *args: str, **env: str):
    return kbuild_cli("emit", "--config", str(project / "pyproject.toml"), "--out-dir", str(project / "out"), *args,
                      env=build_env(store, **env))


def edit(project: Path, old: str, new: str) -> None:
    p = project / "pyproject.toml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))


def test_auto_prints_one_untuned_line_per_kernel_and_target(project: Path, store: Path):
    proc = emit(project, store)
    assert proc.returncode == 0, proc.stderr
    for k in ("matmul_leaky_relu", "softmax", "layernorm"):
        for t in ("sm_80", "sm_90"):
            assert f"kbuild: {k} {t}: untuned: no {t} GPU on this machine" in proc.stderr
    proc = emit(project, store, KBUILD_TUNE="off")
    assert proc.returncode == 0 and 'untuned: tune = "off"' in proc.stderr


def test_require_fails_listing_every_untuned_kernel_and_writes_nothing(project: Path, tmp_path: Path):
    empty = tmp_path / "empty-store"
    proc = emit(project, empty, KBUILD_TUNE="require")
    assert proc.returncode == 5, proc.stderr
    assert 'tune = "require": 6 kernel × target would ship untuned' in proc.stderr
    assert "  - softmax / sm_90: untuned: no sm_90 GPU on this machine" in proc.stderr
    assert not (project / "out").exists()
    assert store_keys(empty) == set()


def test_locked_uses_the_pins_and_fails_on_a_stale_lock_with_the_list(project: Path, store: Path):
    proc = kbuild_cli("lock", "--config", str(project / "pyproject.toml"), "--json", env=build_env(store))
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["entries"]) == 6
    lock = (project / "kbuild.lock").read_text()
    proc = emit(project, store, "--locked")
    assert proc.returncode == 0, proc.stderr
    assert "locked: baseline" in proc.stderr
    manifest = json.loads((project / "out" / "kbuild.json").read_text())
    pinned = {(line.split(".")[1], line.split(".")[2].rstrip("]")) for line in lock.splitlines()
              if line.startswith("[kernels.")}
    assert {(e["kernel"], e["target"]) for e in manifest["kernels"]} == pinned
    for e in manifest["kernels"]:
        assert f'key = "{e["key"]}"' in lock and f'cubin_sha256 = "{e["cubin_sha256"]}"' in lock

    # The source changes (a constexpr of softmax), and a pin of layernorm is lost: every problem is listed.
    edit(project, "constexprs = { BLOCK = 1024 }\nnum_warps = 4\n\n[[tool.kbuild.kernels]]\nname = \"layernorm\"",
         "constexprs = { BLOCK = 512 }\nnum_warps = 4\n\n[[tool.kbuild.kernels]]\nname = \"layernorm\"")
    (project / "kbuild.lock").write_text(lock.replace(lock[lock.index("[kernels.layernorm.sm_80]"):
                                                           lock.index("[kernels.layernorm.sm_90]")], ""))
    before = store_keys(store)
    shutil.rmtree(project / "out")
    proc = emit(project, store, KBUILD_LOCKED="1")
    assert proc.returncode == 2, proc.stderr
    assert f"{project / 'kbuild.lock'}: 3 entries missing or stale:" in proc.stderr
    assert "layernorm / sm_80: missing from the lock file" in proc.stderr
    assert "softmax / sm_80: stale: the lock pins key" in proc.stderr
    assert "softmax / sm_90: stale: the lock pins key" in proc.stderr
    assert "run `kbuild lock`" in proc.stderr
    assert not (project / "out").exists()
    assert store_keys(store) == before  # nothing compiled or stored under --locked


def test_a_missing_kernel_source_is_named_and_nothing_is_stored(project: Path, tmp_path: Path):
    kernels = project / "kbx_demo" / "kernels.py"
    kernels.write_text(kernels.read_text().replace("def layernorm(", "def layernorm_renamed("))
    empty = tmp_path / "empty-store"
    proc = emit(project, empty)
    assert proc.returncode == 2
    assert f"{project / 'pyproject.toml'}: [tool.kbuild.kernels][2].source: module 'kbx_demo.kernels' has no " \
           "attribute 'layernorm'" in proc.stderr
    assert store_keys(empty) == set()
    kernels.unlink()
    proc = emit(project, empty)
    assert proc.returncode == 2 and "[tool.kbuild.kernels][0].source: cannot import module 'kbx_demo.kernels'" \
        in proc.stderr


def test_an_unsupported_target_is_named(project: Path, store: Path):
    proc = emit(project, store, "--targets", "sm_70")
    assert proc.returncode == 2 and "--targets: unsupported target 'sm_70'" in proc.stderr
    edit(project, 'targets = ["sm_80", "sm_90"]', 'targets = ["sm_80", "sm_61"]')
    proc = emit(project, store)
    assert proc.returncode == 2
    assert f"{project / 'pyproject.toml'}: targets[1]: unsupported target 'sm_61'" in proc.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_remote_store_that_is_down_warns_or_fails_under_strict(project: Path, store: Path):
    url = f"http://127.0.0.1:{_free_port()}/kbuild"
    edit(project, "budget = {", f'remotes = [{{ url = "{url}" }}]\nbudget = {{')
    proc = emit(project, store)
    assert proc.returncode == 0, proc.stderr
    assert "unavailable" in proc.stderr and "127.0.0.1" in proc.stderr
    shutil.rmtree(project / "out")
    before = store_keys(store)
    proc = emit(project, store, "--strict")
    assert proc.returncode == 4, proc.stderr
    assert f"{project / 'pyproject.toml'}: remotes[0] ({url}): store tier unavailable and --strict is set" \
        in proc.stderr
    assert not (project / "out").exists()
    assert store_keys(store) == before
