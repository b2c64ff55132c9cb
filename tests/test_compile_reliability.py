"""``kbuild compile`` under hostile conditions (issue 13): a ptxas that runs too long is stopped by
``compile_timeout``, with no ptxas left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_helpers import assert_clean_error

#: ptxas takes ~8 s on this kernel for sm_90 (Triton's passes before it ~3 s): long enough to stop.
SLOW_KERNEL = """import triton
import triton.language as tl


@triton.jit
def big(x_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    m = o < n
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=m) * 2.0, mask=m)
"""


def slow_project(root: Path, extra: str = "") -> Path:
    (root / "bigk").mkdir(parents=True)
    (root / "bigk" / "__init__.py").write_text("")
    (root / "bigk" / "k.py").write_text(SLOW_KERNEL)
    (root / "pyproject.toml").write_text(
        f"[project]\nname = 'p'\nversion = '0'\n[tool.kbuild]\ntargets = ['sm_90']\ntune = 'off'\n{extra}"
        "[[tool.kbuild.kernels]]\nname = 'big'\nsource = 'bigk.k:big'\n"
        "signature = { x_ptr = '*fp32:16', n = 'i32' }\nconstexprs = { BLOCK = 131072 }\n")
    return root / "pyproject.toml"


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``kbuild`` subprocess: its own store, and TMPDIR in a directory the test watches."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBUILD_")}
    env.update({"KBUILD_STORE": str(tmp_path / "store"), "TMPDIR": str(tmp)}, **extra)
    return env


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (a ptxas working in our TMPDIR)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def assert_no_orphans(tmpdir: Path, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while processes_mentioning(str(tmpdir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_mentioning(str(tmpdir)), processes_mentioning(str(tmpdir))


@pytest.mark.hostile(fault="slow ptxas", outcome="clean error")
def test_ptxas_past_compile_timeout_is_stopped_with_a_clean_error(tmp_path: Path):
    config = slow_project(tmp_path / "p", "compile_timeout = 1\n")
    env = cli_env(tmp_path)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kbuild", "compile", "--config", str(config), "--no-progress",
                           "--json"], env=env, capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.monotonic() - started
    assert_clean_error(proc.returncode, proc.stderr, names=["'big'", "sm_90", "compile_timeout", "1 s",
                                                            str(config), "KBUILD_COMPILE_TIMEOUT"], exit_code=3)
    assert proc.stdout == ""  # Triton's dump of the PTX stays off stdout (it carries --json)
    assert elapsed < 30, f"took {elapsed:.1f} s"
    assert_no_orphans(Path(env["TMPDIR"]))
    listed = subprocess.run([sys.executable, "-m", "kbuild", "cache", "ls", "--json"], env=env, capture_output=True,
                            text=True, check=True)
    assert json.loads(listed.stdout)["count"] == 0  # nothing stored
