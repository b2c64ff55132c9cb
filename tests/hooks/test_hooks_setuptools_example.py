"""examples/setuptools-extension end to end: the backend hook, the automatic setuptools plugin
(``setuptools.build_meta`` + the ``finalize_distribution_options`` entry point) and an explicit
torch ``BuildExtension`` cmdclass all put the launchers into the Extension and the manifest into
``.dist-info``; the wheel installs into a fresh venv and imports."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest
from hooks_helpers import (
    SETUPTOOLS_EXAMPLE,
    build_env,
    copy_project,
    fresh_venv,
    install,
    kbuild_cli,
    pip_wheel,
    set_backend,
)

from kbuild.hooks.setuptools_plugin import finalize_distribution_options, kbuild_build_ext

pytestmark = pytest.mark.slow


def build(project: Path, out: Path, store: Path) -> tuple[Path, str]:
    proc = pip_wheel(project, out, build_env(store))
    (wheel,) = out.glob("kbx_setup-*.whl")
    return wheel, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def backend_wheel(session_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("setuptools-backend")
    project = copy_project(SETUPTOOLS_EXAMPLE, base / "a" / "kbx_setup_project")
    wheel, out = build(project, base / "dist", session_store)
    assert "kbuild: add sm_90: untuned: no sm_90 GPU on this machine" in out
    return wheel


def test_backend_wheel_has_launchers_and_manifest_and_installs(backend_wheel: Path, session_store: Path,
                                                               tmp_path: Path):
    names = zipfile.ZipFile(backend_wheel).namelist()
    assert "kbx_setup-0.1.0.dist-info/kbuild.json" in names
    proc = kbuild_cli("inspect", str(backend_wheel), "--json", env=build_env(session_store))
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(proc.stdout)["kernels"]
    assert [(e["kernel"], e["target"], e["state"]) for e in entries] == [("add", "sm_80", "baseline"),
                                                                         ("add", "sm_90", "baseline")]
    python = fresh_venv(tmp_path / "venv")
    install(python, backend_wheel)
    code = ("import kbx_setup._kbx as k\n"
            "try:\n    k.add(0, 1, 1, 1, 0, 0, 0, 4)\nexcept RuntimeError as e:\n    print('error:', e)\n"
            "else:\n    print('launched')\n")
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(tmp_path / "none")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(("error: kbuild: cannot load the CUDA driver libcuda.so.1", "error: kbuild: add:"))


def test_second_directory_and_plain_setuptools_plugin_give_the_same_wheel(backend_wheel: Path, session_store: Path,
                                                                          tmp_path: Path):
    again, _ = build(copy_project(SETUPTOOLS_EXAMPLE, tmp_path / "x" / "y" / "again"), tmp_path / "d1", session_store)
    assert again.read_bytes() == backend_wheel.read_bytes()
    plain = copy_project(SETUPTOOLS_EXAMPLE, tmp_path / "plain")
    set_backend(plain, "setuptools.build_meta")  # adoption path 3: only the entry point plugin
    wheel, out = build(plain, tmp_path / "d2", session_store)
    assert "kbuild: add sm_80: untuned: no sm_80 GPU on this machine" in out
    assert wheel.read_bytes() == backend_wheel.read_bytes()


def test_torch_build_extension_gets_the_launchers(session_store: Path, tmp_path: Path):
    pytest.importorskip("torch.utils.cpp_extension")
    project = copy_project(SETUPTOOLS_EXAMPLE, tmp_path / "torchext")
    (project / "setup.py").write_text(
        "from setuptools import Extension, setup\n"
        "from torch.utils.cpp_extension import BuildExtension\n"
        "from kbuild.hooks.setuptools_plugin import kbuild_build_ext\n\n"
        "setup(ext_modules=[Extension('kbx_setup._kbx', ['src/_kbx.c'])],\n"
        "      cmdclass={'build_ext': kbuild_build_ext(BuildExtension, extensions=['kbx_setup._kbx'])})\n")
    wheel, _ = build(project, tmp_path / "dist", session_store)
    names = zipfile.ZipFile(wheel).namelist()
    assert "kbx_setup-0.1.0.dist-info/kbuild.json" in names
    assert any(n.startswith("kbx_setup/_kbx.") for n in names)


class _Dist:
    def __init__(self, cmdclass: dict, ext_modules: list) -> None:
        self.cmdclass = cmdclass
        self.ext_modules = ext_modules


def test_the_entry_point_wraps_build_ext_only_for_kbuild_projects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from setuptools.command.build_ext import build_ext

    class Custom(build_ext):
        pass

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    dist = _Dist({"build_ext": Custom}, ["ext"])
    finalize_distribution_options(dist)
    assert dist.cmdclass["build_ext"] is Custom  # no [tool.kbuild]: untouched
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n[tool.kbuild]\n")
    finalize_distribution_options(dist)
    wrapped = dist.cmdclass["build_ext"]
    assert issubclass(wrapped, Custom) and wrapped.__name__ == "KBuildCustom"
    finalize_distribution_options(dist)
    assert dist.cmdclass["build_ext"] is wrapped  # not wrapped twice
    no_ext = _Dist({}, [])
    finalize_distribution_options(no_ext)
    assert no_ext.cmdclass == {}
    assert issubclass(kbuild_build_ext(), build_ext)
