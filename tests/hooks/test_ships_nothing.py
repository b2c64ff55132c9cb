"""Adoption without surprises (issue 34, part 4): a build that declares Triton kernels and would ship none stops or
warns loudly, naming the setting.

A tiny flat-layout setuptools project (one ``@triton.jit`` kernel, declared in ``[tool.kbuild]``), built through
kbuild's PEP 517 backend with ``pip wheel --no-build-isolation`` (real Triton compile, real setuptools):

* ``ship`` left at its default ``"extension"`` and no extension module: the build fails with one ``error:`` line
  naming ``ship`` and ``"package-data"``, and no wheel is written (before the fix it exited 0 with a wheel holding no
  kernel, no manifest and no warning);
* ``ship = "package-data"``: the wheel carries ``lk/_kbuild/`` with the kernel's cubin, no warning; without the
  one line in ``lk/__init__.py`` that enables it (``from . import _kbuild``), a warning that names the line;
* ``ship = "package-data"`` with ``package_data = "tuned"`` and nothing tuned (no GPU here): the wheel is built but the
  build says loudly that no kernel ships, naming ``package_data``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from hooks_helpers import build_env, pip_wheel

KERNEL = """import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)
"""


#: The one line a package adds to enable the package data it ships (kbuild/build/package_data.py).
OPT_IN = "try:\n    from . import _kbuild  # noqa: F401\nexcept ImportError:\n    pass\n"


def _project(root: Path, kbuild_lines: str, init: str = OPT_IN) -> Path:
    (root / "lk").mkdir(parents=True)
    (root / "lk" / "__init__.py").write_text(init)
    (root / "lk" / "k.py").write_text(KERNEL)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["kbuild", "setuptools>=64"]\nbuild-backend = "kbuild.hooks.backend"\n'
        "[project]\nname = 'lk'\nversion = '0'\n"
        f"[tool.kbuild]\ntargets = ['sm_90']\ntune = 'off'\n{kbuild_lines}"
        "[[tool.kbuild.kernels]]\nname = 'scale'\nsource = 'lk.k:scale'\n"
        "signature = { x_ptr = '*fp32:16', n = 'i32' }\nconstexprs = { BLOCK = 128 }\n")
    return root


def _build(tmp_path: Path, kbuild_lines: str, init: str = OPT_IN) -> tuple[int, str, list[Path]]:
    project = _project(tmp_path / "lk-project", kbuild_lines, init)
    out = tmp_path / "dist"
    env = build_env(tmp_path / "store", XDG_CACHE_HOME=str(tmp_path / "xdg"), TRITON_CACHE_DIR=str(tmp_path / "tc"))
    proc = pip_wheel(project, out, env, check=False)
    return proc.returncode, proc.stdout + proc.stderr, sorted(out.glob("*.whl")) if out.is_dir() else []


@pytest.mark.slow
def test_default_ship_without_an_extension_fails_naming_the_setting(tmp_path: Path) -> None:
    rc, log, wheels = _build(tmp_path, "")
    assert rc != 0 and wheels == [], log[-3000:]
    errors = [line.strip() for line in log.splitlines() if line.strip().startswith("error: ") and "[tool.kbuild]" in line]
    assert len(errors) == 1, log[-3000:]
    assert 'ship = "extension" (the default)' in errors[0] and 'ship = "package-data"' in errors[0], errors[0]
    assert "1 declared Triton kernel would ship" in errors[0] and "pyproject.toml" in errors[0], errors[0]


@pytest.mark.slow
def test_package_data_ships_the_kernel_quietly(tmp_path: Path) -> None:
    rc, log, wheels = _build(tmp_path, 'ship = "package-data"\n')
    assert rc == 0 and len(wheels) == 1, log[-3000:]
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "lk/_kbuild/index.json" in names and any(n.endswith(".cubin") for n in names), names
    assert "none of the" not in log and "does not import" not in log, log[-3000:]


@pytest.mark.slow
def test_a_package_that_never_enables_its_package_data_warns(tmp_path: Path) -> None:
    """An ``__init__.py`` without ``from . import _kbuild``: the cubins ship, but importing the package would leave
    kbuild's runtime off (every call compiles; a strict run checks nothing), so the build says so, with the line."""
    rc, log, wheels = _build(tmp_path, 'ship = "package-data"\n', init='"""lk: no opt-in."""\n')
    assert rc == 0 and len(wheels) == 1, log[-3000:]
    warnings = [line for line in log.splitlines() if "warning:" in line and "lk/__init__.py does not import" in line]
    assert len(warnings) == 1, log[-3000:]
    assert "every kernel compiles just in time" in warnings[0] and "from . import _kbuild" in warnings[0]


@pytest.mark.slow
def test_tuned_only_package_data_with_nothing_tuned_warns_naming_the_setting(tmp_path: Path) -> None:
    rc, log, wheels = _build(tmp_path, 'ship = "package-data"\npackage_data = "tuned"\n')
    assert rc == 0 and len(wheels) == 1, log[-3000:]
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert not any(n.endswith(".cubin") for n in names), names
    warnings = [line for line in log.splitlines() if "warning:" in line and "none of the 1 kernel × target ships" in line]
    assert len(warnings) == 1, log[-3000:]
    assert "package_data = 'tuned'" in warnings[0] and 'package_data = "all" (the default)' in warnings[0], warnings[0]


@pytest.mark.parametrize("init, opts_in", [
    (OPT_IN, True),
    ("import lk._kbuild\n", True),
    ("from lk import _kbuild\n", True),
    ("import kbuild.runtime\nkbuild.runtime.enable(__name__)\n", True),
    ("from kbuild import runtime\nruntime.enable('lk')\n", True),
    ('"""Mentions _kbuild only in words."""\n', False),
    ("import logging\nlogging.getLogger().manager.enable(0)\n", False),
    ("", False),
])
def test_what_counts_as_enabling_the_package_data(tmp_path: Path, init: str, opts_in: bool) -> None:
    from kbuild.build.package_data import opt_in_missing

    (tmp_path / "lk").mkdir()
    (tmp_path / "lk" / "__init__.py").write_text(init)
    said = opt_in_missing(tmp_path / "lk", "lk")
    assert (said is None) == opts_in, said
