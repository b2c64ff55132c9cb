"""The external tools kbuild runs (ptxas, nvdisasm, cuobjdump) and the Triton/ptxas versions.

Triton's wheel bundles the CUDA binaries under ``triton/backends/nvidia/bin``; that is where
kbuild looks, unless ``KBUILD_<TOOL>`` (e.g. ``KBUILD_NVDISASM``; the settings' ``ptxas``, ``nvdisasm`` and
``cuobjdump``) names another binary. Every
call goes through :func:`run_tool`, which turns a failure into :class:`kbuild.errors.ToolError`
with the command, its output and a repro line.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from kbuild.errors import MissingDependencyError, ToolError
from kbuild.settings.variables import env_setting


@functools.cache
def triton_dir() -> Path:
    try:
        import triton
    except ImportError as exc:
        raise MissingDependencyError(
            f"Triton is not installed ({exc}); install kbuild's dependencies: pip install 'triton>=3.6,<3.7'"
        ) from None
    return Path(triton.__file__).parent


@functools.cache
def triton_version() -> str:
    triton_dir()  # a clear MissingDependencyError when Triton is absent
    import triton

    return str(triton.__version__)


def tool_path(name: str) -> Path:
    """Absolute path of ``ptxas``, ``nvdisasm`` or ``cuobjdump``."""
    override = env_setting(name)  # the setting of the same name (KBUILD_PTXAS, ...), a Path or None
    if override is not None:
        if not override.exists():
            raise MissingDependencyError(f"KBUILD_{name.upper()}={override}: no such file")
        return Path(override)
    bundled = triton_dir() / "backends" / "nvidia" / "bin" / name
    if bundled.exists():
        return bundled
    found = shutil.which(name)
    if found:
        return Path(found)
    raise MissingDependencyError(
        f"{name} not found: neither bundled with Triton ({bundled}) nor on PATH; set KBUILD_{name.upper()}"
    )


def run_tool(name: str, args: Sequence[str], *, what: str | None = None, timeout: float = 300.0) -> str:
    """Run a bundled tool and return its stdout; raise ToolError on failure."""
    cmd = [str(tool_path(name)), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise ToolError(what or name, cmd, -1, f"timed out after {timeout:.0f} s\n{stderr}") from None
    except OSError as exc:
        raise ToolError(what or name, cmd, -1, str(exc)) from None
    if proc.returncode != 0:
        raise ToolError(what or name, cmd, proc.returncode, (proc.stderr or "") + (proc.stdout or ""))
    return proc.stdout


@functools.cache
def ptxas_version() -> str:
    """``ptxas --version``'s release and build, e.g. ``12.8.93 (cuda_12.8.r12.8/compiler.35583870_0)``."""
    out = run_tool("ptxas", ["--version"])
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    build = re.search(r"Build (\S+)", out)
    if not m:
        raise ToolError("ptxas --version", [str(tool_path("ptxas")), "--version"], 0, out)
    return f"{m.group(1)} ({build.group(1) if build else 'unknown build'})"
