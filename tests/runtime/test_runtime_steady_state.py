"""Issue 34, item 0: after a specialisation's first call, kbuild is not on the call's path.

Real Triton (binder, ``kernel_cache``, ``_do_compile``, hooks), real index and cubins. Stand-ins (labelled):
torch's CUDA queries and libcuda (``runtime_helpers.direct_stand_ins``: FakeCuda records the load and decodes each
launch), or Triton's driver (``runtime_helpers.FakeDriver``: Triton's launcher and load step record instead of
calling CUDA). Nothing runs on a GPU.

What is checked: the shipped kernel sits in Triton's own ``kernel_cache`` (as a ``CompiledKernel`` whose launcher is
kbuild's), ``JITFunction.run`` is Triton's again, a later call enters no kbuild function but that launcher
(``sys.setprofile``), a miss Triton compiled and an answered autotuner are not looked up again.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import JIT_EXAMPLE, FakeCuda, direct_stand_ins

import kbuild.runtime
from kbuild.build.package_data import write_package_data
from kbuild.runtime import hook, loader
from kbuild.runtime.state import STATE

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

#: The kbuild functions a steady-state launch of a shipped kernel may enter: its generated launcher and, for a
#: pointer that is not a CUDA tensor (the CPU tensors here), the driver's pointer check Triton's launcher makes too.
LAUNCH_PATH = {"kbuild.runtime.direct:direct_launch", "kbuild.runtime.direct:_pointer",
               "kbuild.device.cuda:device_pointer"}


@pytest.fixture
def shipped(jit_settings: Any, tuned_builds: list[Any], tmp_path: Path) -> Any:
    return write_package_data(jit_settings, tuned_builds, tmp_path / "kbx_jit")


@pytest.fixture
def direct_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCuda]:
    monkeypatch.delenv("KBUILD_RUNTIME_LAUNCH", raising=False)
    with direct_stand_ins() as fake:
        yield fake


def kbuild_frames(call: Callable[[], Any]) -> list[str]:
    """``module:function`` of every kbuild function ``call`` enters."""
    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            module = str(frame.f_globals.get("__name__", ""))
            if module == "kbuild" or module.startswith("kbuild."):
                seen.append(f"{module}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


def softmax(kernels: Any, rows: int = 64, cols: int = 1024) -> Any:
    import torch

    x = torch.empty(rows * cols, dtype=torch.float16).view(rows, cols)
    out = torch.empty_like(x)
    return kernels.softmax[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=1024, num_warps=4, num_stages=3)


def counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls: list[int] = []
    original = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def test_a_shipped_specialisation_is_tritons_own_after_its_first_call(shipped: Any, kernels: Any,
                                                                      direct_cpu: FakeCuda,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction

    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    first = softmax(kernels)
    assert JITFunction.run.__module__ == "triton.runtime.jit"  # kbuild's first-call wrapper is gone
    ((_key, cached),) = kernels.softmax.device_caches[0][0].items()
    assert cached is first and type(cached) is CompiledKernel and cached.kbuild_entry
    assert cached._run.__name__ == "direct_launch"  # kbuild's launcher, no C module
    lookups = counting(monkeypatch, loader, "before_compile")
    frames = kbuild_frames(lambda: softmax(kernels))
    assert set(frames) <= LAUNCH_PATH and frames[0] == "kbuild.runtime.direct:direct_launch", frames
    assert lookups == [] and len(direct_cpu.launches) == 2 and len(direct_cpu.loaded) == 1
    second = direct_cpu.launches[1]
    assert second["stream"] == 77 and second["grid"] == (64, 1, 1)  # torch's current stream, as Triton passes it


def test_a_miss_is_tritons_own_after_triton_compiled_it(shipped: Any, kernels: Any, fake_gpu: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    before = counting(monkeypatch, loader, "before_compile")
    after = counting(monkeypatch, hook, "after_compile")
    softmax(kernels, cols=1000)  # n_cols not divisible by 16: no shipped entry, Triton compiles
    assert (before, after) == ([1], [1])
    assert kbuild_frames(lambda: softmax(kernels, cols=1000)) == []
    assert (before, after) == ([1], [1]) and len(fake.launches) == 2


def _autotuned(kernels: Any) -> Any:
    import triton

    return triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=8, num_stages=3),
                                    triton.Config({"BLOCK": 1024}, num_warps=4, num_stages=3)],
                           key=["n_cols"])(kernels.softmax)


def ship_autotune_key(shipped: Any, key: list[Any]) -> None:
    path = shipped.data_dir / "index.json"
    doc = json.loads(path.read_text())
    for entry in doc["entries"].values():
        entry["autotune"] = {"key": key}
    path.write_text(json.dumps(doc))


def test_an_answered_autotuner_runs_tritons_run_after_its_first_call(shipped: Any, kernels: Any, fake_gpu: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    ship_autotune_key(shipped, [1024, "torch.float16", "torch.float16"])
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    tuner = _autotuned(kernels)
    answers = counting(monkeypatch, loader, "answer_autotuner")
    x = torch.empty(64 * 1024, dtype=torch.float16).view(64, 1024)
    out = torch.empty_like(x)
    tuner[(64,)](out, x, x.stride(0), out.stride(0), 1024)
    assert answers == [1] and tuner.best_config.num_warps == 4  # the shipped choice
    assert tuner.__dict__["run"].__func__ is STATE.original_autotuner_run  # Triton's own, on the instance
    assert kbuild_frames(lambda: tuner[(64,)](out, x, x.stride(0), out.stride(0), 1024)) == []
    assert answers == [1] and len(fake.launches) == 2
    kbuild.runtime.disable()
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)  # the indexes changed: asked again
    assert "run" not in tuner.__dict__


def test_tritons_driver_is_created_without_building_cuda_utils(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-ins: torch says CUDA is there; Triton's cuda_utils (a C module built with gcc) is replaced by a
    counter, so that building it shows."""
    import torch
    from triton.backends.nvidia import driver as nvidia
    from triton.runtime.driver import driver as config

    from kbuild.runtime.direct import install_lazy_driver

    built: list[int] = []

    class CountingUtils:
        def __init__(self) -> None:
            built.append(1)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(nvidia, "CudaUtils", CountingUtils)
    monkeypatch.setattr(config, "_active", None)
    monkeypatch.setattr(config, "_default", None)
    assert install_lazy_driver()
    active = config.active
    assert isinstance(active, nvidia.CudaDriver) and active.launcher_cls is nvidia.CudaLauncher
    assert active.get_current_device() == 0 and built == []
    assert isinstance(active.utils, CountingUtils) and active.utils is active.utils and built == [1]
    assert not install_lazy_driver()  # a driver exists: left alone


@pytest.mark.slow
def test_the_launcher_is_tritons_own_where_tritons_cache_has_it(shipped: Any, tmp_path: Path) -> None:
    """Fresh processes against a libcuda stand-in (``benchmarks/standin``, built with cc; labelled): with an empty
    Triton cache a shipped kernel is launched by kbuild's launcher and nothing is built; once a Triton process
    (``KBUILD_RUNTIME=off``) has built Triton's launcher for the signature (gcc, against the stand-in), a kbuild
    process launches the shipped kernel's later calls with that launcher, found in Triton's cache off the first
    call's path: nothing built, the same object Triton's constructor makes, no kbuild frame on a later call."""
    import subprocess

    standin = tmp_path / "libcuda"
    standin.mkdir()
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(standin / "libcuda.so.1"),
                    str(ROOT / "benchmarks" / "standin" / "libcuda_standin.c")], check=True)
    cache = tmp_path / "triton-cache"

    def probe(runtime: str, **extra: str) -> dict[str, Any]:
        env = {**os.environ, **extra, "LD_LIBRARY_PATH": str(standin), "TRITON_LIBCUDA_PATH": str(standin),
               "TRITON_CACHE_DIR": str(cache), "KBUILD_RUNTIME": runtime,
               "PYTHONPATH": os.pathsep.join([str(HERE), str(JIT_EXAMPLE)])}
        done = subprocess.run([sys.executable, str(HERE / "launcher_handover_probe.py"), str(shipped.data_dir)],
                              env=env, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    fresh = probe("on")
    assert fresh["launcher"] == "kbuild.runtime.direct.direct_launch" and fresh["kbuild_entry"]
    assert (fresh["built"], fresh["asked"], fresh["launches"]) == ([], [], 3)
    assert set(fresh["frames"]) <= LAUNCH_PATH and fresh["stages"] == ["zero-jit", "direct-launch"]
    triton = probe("off")  # Triton's own run: builds cuda_utils and the launcher, compiles the kernel
    assert triton["launcher"] == "triton.backends.nvidia.driver.CudaLauncher" and not triton["kbuild_entry"]
    assert sorted(triton["built"]) == ["__triton_launcher", "cuda_utils"]
    warm = probe("on")
    assert warm["launcher"] == "triton.backends.nvidia.driver.CudaLauncher" and warm["kbuild_entry"]
    assert warm["built"] == [] and warm["asked"] == ["__triton_launcher"]  # only the equality check asks Triton
    assert warm["same_as_tritons"] and warm["frames"] == [] and warm["launches"] == 3
    # the first call is kbuild's launcher (no ``file`` subprocess for Triton's cache key on its path); Triton's, found
    # in its cache by a background thread, runs the later ones
    assert warm["stages"] == ["zero-jit", "direct-launch", "hand-over"]
    never = probe("on", KBUILD_RUNTIME_HANDOVER="0")  # 0: never hand over, not even to a cached launcher
    assert never["launcher"] == "kbuild.runtime.direct.direct_launch" and never["built"] == []
    assert never["stages"] == ["zero-jit", "direct-launch"]


@pytest.mark.slow
def test_a_hot_kernel_hands_over_to_tritons_launcher_built_in_the_background(shipped: Any, tmp_path: Path) -> None:
    """A fresh machine (empty Triton cache, the libcuda stand-in; labelled): kbuild's launcher runs the first calls
    and builds nothing; after ``KBUILD_RUNTIME_HANDOVER`` calls Triton's launcher is built in a background thread
    (gcc, against the stand-in) and runs the later calls, with no kbuild frame; ``KBUILD_RUNTIME_HANDOVER=0`` never
    hands over."""
    import subprocess

    standin = tmp_path / "libcuda"
    standin.mkdir()
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(standin / "libcuda.so.1"),
                    str(ROOT / "benchmarks" / "standin" / "libcuda_standin.c")], check=True)

    def probe(cache: Path, handover: str) -> dict[str, Any]:
        env = {**os.environ, "LD_LIBRARY_PATH": str(standin), "TRITON_LIBCUDA_PATH": str(standin),
               "TRITON_CACHE_DIR": str(cache), "KBUILD_RUNTIME": "on", "KBUILD_RUNTIME_HANDOVER": handover,
               "PYTHONPATH": os.pathsep.join([str(HERE), str(JIT_EXAMPLE)])}
        done = subprocess.run([sys.executable, str(HERE / "launcher_handover_probe.py"), str(shipped.data_dir)],
                              env=env, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    hot = probe(tmp_path / "cache-hot", "2")
    assert hot["launcher"] in ("kbuild.runtime.direct.direct_launch", "triton.backends.nvidia.driver.CudaLauncher")
    later = hot["after_hand_over"]
    assert later["launcher"] == "triton.backends.nvidia.driver.CudaLauncher", later
    assert later["frames"] == [] and later["launches"] == 4, later
    assert later["built"] == ["__triton_launcher"], later  # the launcher only; nothing compiled on the first call
    assert later["stages"] == ["zero-jit", "direct-launch", "hand-over"], later
    assert "after 2 calls" in later["reasons"][0]

    never = probe(tmp_path / "cache-never", "0")
    assert never["after_hand_over"]["launcher"] == "kbuild.runtime.direct.direct_launch"
    assert never["after_hand_over"]["built"] == [] and never["after_hand_over"]["stages"] == ["zero-jit",
                                                                                              "direct-launch"]
