"""torch's BuildExtension through kbuild_build_ext: ``PYTORCH_NVCC`` names kbuild-nvcc and the real nvcc while it
runs, so the ninja file torch writes (its own ``_write_ninja_file``, CPU torch) compiles ``.cu`` sources through the
launcher; the compile command torch would run is then run here with ninja, for real, on nvcc 13.5.

A setuptools wheel through kbuild's backend lists the CUDA kernels kbuild-nvcc compiled (its build_ext a stand-in
for BuildExtension). Not tested here: a whole CUDAExtension build and import (the CPU torch of CI has no CUDA headers
or libraries; benchmarks/nvcc_real_extension.py builds a real one with torch 2.14.1+cu130)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from nvcc_helpers import KERNEL

from kbuild.build.manifest import wheel_manifest
from kbuild.cache import open_store
from kbuild.hooks.setuptools_plugin import pytorch_nvcc
from kbuild.settings.sources import settings_from_table

cpp_extension = pytest.importorskip("torch.utils.cpp_extension")


def store_of(path: Path):
    return open_store(settings_from_table({"store": str(path)}, where="test"))


class _Ext:
    def __init__(self, sources: list[str]) -> None:
        self.sources = sources


def test_build_ext_sets_pytorch_nvcc_and_torch_ninja_compiles_through_the_launcher(nvcc, launcher, tmp_path):
    ninja = shutil.which("ninja")
    if ninja is None:
        pytest.skip("ninja not installed")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\nversion = '0'\n[tool.kbuild]\n"
                                             "[[tool.kbuild.cuda.kernels]]\nname = 'scale'\nfunction = 'scale'\n"
                                             "source = 'k.cu'\n")
    (tmp_path / "k.cu").write_text(KERNEL)
    before = os.environ.get("PYTORCH_NVCC")
    with pytorch_nvcc([_Ext(["k.cu"])], config=tmp_path / "pyproject.toml"):
        value = os.environ["PYTORCH_NVCC"]
        cpp_extension._write_ninja_file(
            str(tmp_path / "build.ninja"), cflags=[], post_cflags=[],
            cuda_cflags=["-O3", "-gencode", "arch=compute_90,code=sm_90"], cuda_post_cflags=[],
            cuda_dlink_post_cflags=[], sycl_cflags=[], sycl_post_cflags=[], sycl_dlink_post_cflags=[],
            sources=[str(tmp_path / "k.cu")], objects=[str(tmp_path / "k.o")], ldflags=[], library_target=None,
            with_cuda=True, with_sycl=False)
    assert os.environ.get("PYTORCH_NVCC") == before  # restored
    kbuild_nvcc, real = value.split()
    assert Path(kbuild_nvcc).name == "kbuild-nvcc" and real == nvcc
    text = (tmp_path / "build.ninja").read_text()
    assert f"nvcc = {value}" in text.splitlines()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBUILD_")}
    env.update({"KBUILD_STORE": str(launcher.store), "KBUILD_NVCC_LOG": str(launcher.log),
                "KBUILD_NVCC_PROJECT": str(tmp_path / "pyproject.toml")})
    proc = subprocess.run([ninja, "-f", "build.ninja"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = [json.loads(ln) for ln in launcher.log.read_text().splitlines()]
    assert any(e["tool"] == "ptxas" and e["action"] == "stored" for e in events)
    assert any(e["tool"] == "tune" and e["action"] == "untuned" for e in events)  # the declared kernel was seen
    assert not any(e["action"] == "plain" for e in events)
    assert (tmp_path / "k.o").stat().st_size > 0


def test_no_cuda_sources_and_a_user_pytorch_nvcc_are_left_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("PYTORCH_NVCC", raising=False)
    with pytorch_nvcc([_Ext(["a.cpp"])], config=tmp_path / "pyproject.toml"):
        assert "PYTORCH_NVCC" not in os.environ
    monkeypatch.setenv("PYTORCH_NVCC", "ccache nvcc")
    with pytorch_nvcc([_Ext(["a.cu"])], config=tmp_path / "pyproject.toml"):
        assert os.environ["PYTORCH_NVCC"] == "ccache nvcc"
    assert "PYTORCH_NVCC is set" in capsys.readouterr().err


SETUP_PY = '''
import os, shlex, subprocess
from pathlib import Path
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class CudaBuildExt(build_ext):
    """STANDS IN for torch's BuildExtension, which CPU torch cannot run on .cu sources (no CUDA_HOME): each .cu
    compiles with $PYTORCH_NVCC as the ninja file torch writes does (an object newer than its source is up to date,
    as for ninja), then the objects link into the extension."""

    def build_extension(self, ext):
        objects = []
        for src in ext.sources:
            obj = Path(self.build_temp) / (src + ".o")
            if not obj.exists() or obj.stat().st_mtime < Path(src).stat().st_mtime:
                obj.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run([*shlex.split(os.environ["PYTORCH_NVCC"]), "-c", src, "-o", str(obj), "-O3",
                                "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                                "-gencode", "arch=compute_90,code=sm_90"], check=True)
            objects.append(str(obj))
        self.compiler.link_shared_object(objects, self.get_ext_fullpath(ext.name), target_lang="c++")


setup(packages=["p"], ext_modules=[Extension("p._k", sources=["p/k.cu"])], cmdclass={"build_ext": CudaBuildExt})
'''

PYPROJECT = '''
[build-system]
requires = ["kbuild", "setuptools"]
build-backend = "kbuild.hooks.backend"
[project]
name = "p"
version = "0.1"
[tool.kbuild]
[[tool.kbuild.cuda.kernels]]
name = "scale"
function = "scale"
source = "p/k.cu"
'''


def test_a_setuptools_wheel_lists_the_cuda_kernels_its_build_ext_compiled_through_kbuild_nvcc(nvcc, launcher, tmp_path):
    """A setuptools project with CUDA C++ kernels only, through kbuild's backend: the plugin wraps its build_ext
    (no Triton kernels to emit), sets PYTORCH_NVCC, and lists kbuild-nvcc's records in the wheel's manifest; a
    rebuild from a fresh build directory (all from the store) and one in the kept build directory (nothing compiles;
    the records kept in build_temp) give the same bytes. (A real BuildExtension: benchmarks/nvcc_real_extension.py,
    which needs a CUDA torch.)"""
    proj = tmp_path / "proj"
    (proj / "p").mkdir(parents=True)
    (proj / "p" / "__init__.py").write_text("")
    (proj / "p" / "k.cu").write_text(KERNEL)
    (proj / "setup.py").write_text(SETUP_PY)
    (proj / "pyproject.toml").write_text(PYPROJECT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBUILD_") and k != "PYTORCH_NVCC"}
    env.update({"KBUILD_STORE": str(launcher.store), "KBUILD_NVCC_LOG": str(launcher.log),
                "SOURCE_DATE_EPOCH": "1700000000", "PIP_NO_INDEX": "1"})

    def build(name: str) -> tuple[Path, list[dict]]:
        launcher.log.unlink(missing_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                               str(tmp_path / name), str(proj)], env=env, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        events = [json.loads(ln) for ln in launcher.log.read_text().splitlines()] if launcher.log.exists() else []
        return next((tmp_path / name).glob("*.whl")), events

    first, events = build("first")
    assert any(e["tool"] == "ptxas" and e["action"] == "stored" for e in events)
    cuda = wheel_manifest(first)["cuda_kernels"]
    assert [(e["kernel"], e["target"], e["state"]) for e in cuda] == [("scale", "sm_80", "baseline"),
                                                                       ("scale", "sm_90", "baseline")]
    with zipfile.ZipFile(first) as zf:
        (so,) = [n for n in zf.namelist() if n.startswith("p/_k") and n.endswith(".so")]
        ext = zf.read(so)
    with store_of(launcher.store) as store:  # each listed cubin is the one ptxas wrote, and the extension has it
        for e in cuda:
            step = next(ev for ev in events if ev["tool"] == "ptxas" and ev["arch"] == e["target"])
            cubin = store.get(step["key"]).cubin
            assert hashlib.sha256(cubin).hexdigest() == e["cubin_sha256"] and cubin in ext

    shutil.rmtree(proj / "build")
    second, events = build("second")
    assert {(e["tool"], e["action"]) for e in events} == {("nvcc", "direct-hit"), ("nvcc", "total")}
    third, events = build("third")  # build/ kept: the object is up to date, no kbuild-nvcc runs
    assert events == []
    assert first.read_bytes() == second.read_bytes() == third.read_bytes()
