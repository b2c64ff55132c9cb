"""Helpers of the build-hook tests: private copies of the examples, and wheels built with pip in
this environment (no isolation, no downloads)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CMAKE_EXAMPLE = ROOT / "examples" / "cmake-extension"
SETUPTOOLS_EXAMPLE = ROOT / "examples" / "setuptools-extension"
EPOCH = "1700000000"
_IGNORE = shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info", "_skbuild")


def copy_project(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, ignore=_IGNORE)
    return dest


def build_env(store: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)  # no KBUILD_* setting but those a test sets (conftest.py)
    env.update({"KBUILD_STORE": str(store), "SOURCE_DATE_EPOCH": EPOCH, "PIP_NO_INDEX": "1",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    env.update(extra)
    return env


def pip_wheel(project: Path, out: Path, env: Mapping[str, str], *, check: bool = True,
              config: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v", "-w", str(out), str(project)]
    for k, v in (config or {}).items():
        cmd += ["-C", f"{k}={v}"]
    proc = subprocess.run(cmd, env=dict(env), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"pip wheel failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}")
    return proc


def set_backend(project: Path, backend: str) -> None:
    p = project / "pyproject.toml"
    p.write_text(p.read_text().replace('build-backend = "kbuild.hooks.backend"', f'build-backend = "{backend}"'))


def kbuild_cli(*args: str, env: Mapping[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kbuild", *args], env=dict(env), cwd=cwd, capture_output=True,
                          text=True, check=False)


def fresh_venv(path: Path) -> Path:
    """A new venv without pip (fast); wheels go in with this environment's pip ``--python``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def install(python: Path, wheel: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})


def forget_example_modules() -> None:
    """Drop the examples' packages from sys.modules, so the next resolve imports the copy under test."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("kbx_demo", "kbx_setup")]:
        del sys.modules[name]
