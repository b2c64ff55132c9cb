"""A local store that cannot take a write now (issue 32, item 6): a full disk and a write lock held by another
process degrade a build the way a read-only store does (build from a fresh compile, one warning, nothing
stored), and cleanup works on a disk that other files filled, so the advice in the full-disk error helps.

Real parts: a tmpfs filled to the last block (skipped, with the reason, where mounting is not permitted), a
real Triton compile through ``kbuild compile``, a lock held by another process."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_helpers import make_artefact

from kbuild.cache.local import WRITE_LOCK_WAIT, LocalBackend
from kbuild.cache.tier import Tier

hostile = pytest.mark.hostile

KERNEL = """import triton
import triton.language as tl


@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=m) * 2.0, mask=m)
"""


def project(root: Path) -> Path:
    """A project with one small kernel for sm_90 (a real Triton compile of a second or two)."""
    (root / "tk").mkdir(parents=True)
    (root / "tk" / "__init__.py").write_text("")
    (root / "tk" / "k.py").write_text(KERNEL)
    (root / "pyproject.toml").write_text(
        "[project]\nname = 'p'\nversion = '0'\n[tool.kbuild]\ntargets = ['sm_90']\ntune = 'off'\n"
        "[[tool.kbuild.kernels]]\nname = 'double'\nsource = 'tk.k:double'\n"
        "signature = { x_ptr = '*fp32:16', n = 'i32' }\nconstexprs = { BLOCK = 128 }\n")
    return root


def kbuild(*args: str, cwd: Path, store: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ)  # no KBUILD_* setting but those a test sets (conftest.py)
    env["KBUILD_STORE"] = str(store)
    return subprocess.run([sys.executable, "-m", "kbuild", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def compile_cubin(proj: Path, store: Path, timeout: float = 120) -> tuple[subprocess.CompletedProcess, str | None]:
    """``kbuild compile --json`` of the project into ``store``: the process and the cubin's sha256."""
    proc = kbuild("compile", "--json", "--no-progress", cwd=proj, store=store, timeout=timeout)
    sha = json.loads(proc.stdout)[0]["cubin_sha256"] if proc.returncode == 0 else None
    return proc, sha


def keys(store: Path) -> list[str]:
    backend = LocalBackend(store)
    try:
        return sorted(backend.record_keys())
    finally:
        backend.close()


def fill_disk(disk: Path) -> None:
    """Another file takes every block left on ``disk``."""
    with contextlib.suppress(OSError), open(disk / "filler", "ab") as f:
        while True:
            f.write(os.urandom(4096))
            f.flush()
    assert os.statvfs(disk).f_bavail == 0


def free_bytes(disk: Path) -> int:
    st = os.statvfs(disk)
    return st.f_bavail * st.f_frsize


@hostile(fault="full disk", outcome="degraded with warning")
def test_compile_on_a_full_disk_builds_warns_and_stores_nothing(tmp_path, tmpfs):
    """It exited 2 ("the disk is full"); a read-only store already let the build go on. Now both do."""
    proj = project(tmp_path / "p")
    proc, reference = compile_cubin(proj, tmp_path / "reference-store")
    assert proc.returncode == 0, proc.stderr
    disk = tmpfs("disk", "8m")
    store = disk / "store"
    tier = Tier(LocalBackend(store))
    for i in range(3):
        tier.put(make_artefact(f"held-{i}", size=20_000))
    tier.close()
    before = keys(store)
    fill_disk(disk)

    proc, sha = compile_cubin(proj, store)
    assert proc.returncode == 0, proc.stderr
    assert sha == reference  # built from a fresh compile: the same bytes
    warnings = [line for line in proc.stderr.splitlines() if "not stored" in line]
    assert len(warnings) == 1 and "full" in warnings[0] and str(store) in warnings[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert keys(store) == before


@hostile(fault="full disk", outcome="degraded with warning")
def test_rm_and_gc_work_on_a_disk_other_files_filled(tmp_path, tmpfs):
    """``cache rm`` exited 2 and ``cache gc --max-bytes 0`` freed nothing (cubins under 32 KiB lived in SQLite,
    whose deletes need room to be written; no file to delete first). Now both work and gc frees the cubins."""
    disk = tmpfs("disk", "8m")
    store = disk / "store"
    tier = Tier(LocalBackend(store))
    arts = [make_artefact(f"small-{i}", size=8_000) for i in range(30)]
    for a in arts:
        tier.put(a)
    tier.close()
    fill_disk(disk)

    proc = kbuild("cache", "rm", arts[0].key, "--json", cwd=tmp_path, store=store)
    assert proc.returncode == 0 and json.loads(proc.stdout)["removed"] == [arts[0].key], proc.stderr
    assert arts[0].key not in keys(store)
    free = free_bytes(disk)
    proc = kbuild("cache", "gc", "--max-bytes", "0", "--json", cwd=tmp_path, store=store)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["entries"] == 0 and keys(store) == []
    freed = free_bytes(disk) - free
    assert freed >= sum(a.size for a in arts[1:]), f"gc freed {freed} bytes"
    new = make_artefact("after-gc", size=8_000)
    (tmp_path / "c").write_bytes(new.cubin)
    proc = kbuild("cache", "put", "--key", new.key, "--cubin", str(tmp_path / "c"), cwd=tmp_path, store=store)
    assert proc.returncode == 0, proc.stderr


@contextlib.contextmanager
def lock_held_elsewhere(store: Path) -> Iterator[None]:
    """Another process holds the store's write lock (as a long ``kbuild cache gc`` or ``import`` does)."""
    LocalBackend(store).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom filelock import FileLock\nlock = FileLock(sys.argv[1])\nlock.acquire()\n"
         "print('held', flush=True)\ntime.sleep(300)", str(store / "write.lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.kill()
        holder.wait(10)


@hostile(fault="write lock held", outcome="degraded with warning")
def test_compile_while_another_process_holds_the_write_lock_builds_without_storing(tmp_path):
    """It waited 60 s and exited 4; now it waits WRITE_LOCK_WAIT seconds, warns once and ships its compile."""
    proj = project(tmp_path / "p")
    proc, reference = compile_cubin(proj, tmp_path / "reference-store")
    assert proc.returncode == 0, proc.stderr
    store = tmp_path / "store"
    with lock_held_elsewhere(store):
        start = time.monotonic()
        proc, sha = compile_cubin(proj, store, timeout=45)
        elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert sha == reference
    warnings = [line for line in proc.stderr.splitlines() if "not stored" in line]
    assert len(warnings) == 1 and "write lock" in warnings[0], proc.stderr
    assert elapsed < WRITE_LOCK_WAIT + 25, f"took {elapsed:.1f} s"
    assert keys(store) == []


@hostile(fault="write lock held", outcome="degraded with warning")
def test_a_busy_local_tier_costs_one_bounded_wait_per_store(tmp_path, caplog):
    """Puts skip a busy local tier after the first wait (a build of many kernels waits once), reads go on, and
    ``put(required=True)`` (``kbuild cache put``) is an error naming the lock (exit 4)."""
    import logging

    from kbuild.cache.tiered import TieredStore
    from kbuild.errors import StoreBusyError

    store = tmp_path / "store"
    held = make_artefact("stored-before")
    Tier(LocalBackend(store)).put(held)
    backend = LocalBackend(store, lock_wait=0.5)
    tiered = TieredStore([Tier(backend, name="local")])
    with lock_held_elsewhere(store):
        with pytest.raises(StoreBusyError, match="write lock") as info:
            tiered.put(make_artefact("required"), required=True)
        assert info.value.exit_code == 4
        start = time.monotonic()
        with caplog.at_level(logging.WARNING):
            for i in range(5):
                tiered.put(make_artefact(f"busy-{i}"))
        assert time.monotonic() - start < 1.5  # one wait of 0.5 s, not five
        assert tiered.get(held.key) == held
    assert caplog.text.count("not stored") == 1, caplog.text
    assert keys(store) == [held.key]
    tiered.close()
