"""torch's BuildExtension through kbuild_build_ext: ``PYTORCH_NVCC`` names kbuild-nvcc and the real nvcc while it
runs, so the ninja file torch writes (its own ``_write_ninja_file``, CPU torch) compiles ``.cu`` sources through the
launcher; the compile command torch would run is then run here with ninja, for real, on nvcc 13.5.

Not tested here: a whole CUDAExtension build and import (the CPU torch of CI has no CUDA headers or libraries)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from nvcc_helpers import KERNEL

from kbuild.hooks.setuptools_plugin import pytorch_nvcc

cpp_extension = pytest.importorskip("torch.utils.cpp_extension")


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
