"""Zero-JIT loading (issue 16) through Triton's real JIT path on a CPU.

The call goes through ``JITFunction.run`` (binder, specialisation, ``_do_compile``, ``jit_cache_hook``,
``CompiledKernel``, ``_init_handles``, launch). Only the driver's load and launch steps are
stand-ins (``runtime_helpers.FakeDriver``: they record the cubin and the launch arguments; no kernel
runs). Triton's compiler is made to raise, so a test that compiled would fail.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import MARKER

import kbuild.runtime
from kbuild.build.package_data import write_package_data
from kbuild.runtime.index import IndexFormatError, load_index
from kbuild.settings.variables import Override


class CompilerCalled(AssertionError):
    pass


@pytest.fixture
def shipped(jit_settings: Any, tuned_builds: list[Any], tmp_path: Path) -> Any:
    return write_package_data(jit_settings, tuned_builds, tmp_path / "kbx_jit")


@pytest.fixture
def no_compiler(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every way into Triton's compiler raises (and is counted): triton.compile, its cache key, the IR build."""
    import triton.compiler
    import triton.compiler.compiler as cc

    calls: list[str] = []

    def refuse(what: str) -> Any:
        def raiser(*args: Any, **kwargs: Any) -> Any:
            calls.append(what)
            raise CompilerCalled(f"Triton's {what} was called")
        return raiser

    monkeypatch.setattr(triton.compiler, "compile", refuse("triton.compile"))
    monkeypatch.setattr(cc, "compile", refuse("compiler.compile"))
    monkeypatch.setattr(cc, "get_cache_key", refuse("get_cache_key (triton_key hashing)"))
    monkeypatch.setattr(cc.ASTSource, "make_ir", refuse("ASTSource.make_ir"))
    return calls


def _tensors(rows: int, cols: int, offset: int = 0) -> tuple[Any, Any]:
    import torch

    buf = torch.empty(rows * cols + offset, dtype=torch.float16)
    x = buf[offset:].view(rows, cols)
    return x, torch.empty_like(x)


def launch_softmax(kernels: Any, *, rows: int = 64, cols: int = 1024, block: int = 1024, num_warps: int = 4) -> Any:
    """``kernels.softmax[grid](...)`` as kbx_jit.ops calls it: a real launch (load and launch stubbed)."""
    kernels.softmax.device_caches.clear()  # a first call: nothing in Triton's in-memory cache
    x, out = _tensors(rows, cols)
    return kernels.softmax[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=block, num_warps=num_warps,
                                    num_stages=3)


def shipped_cubin(shipped: Any, cc: int = 90) -> bytes:
    entry = next(e for e in shipped.index["entries"].values() if e["target"]["cc"] == cc)
    return (shipped.data_dir / entry["cubin"]).read_bytes()


def test_index_carries_triton_metadata_and_config(shipped: Any) -> None:
    index = load_index(shipped.data_dir / "index.json")
    assert index.version == 2
    for entry in index.entries.values():
        md = entry["triton_metadata"]
        assert md["name"] == entry["checks"]["name"] and md["shared"] == entry["checks"]["shared"]
        assert md["target"]["arch"] == entry["target"]["cc"]
        assert entry["config"] == {"kwargs": {"BLOCK": 1024}, "num_warps": 4, "num_stages": 3, "num_ctas": 1,
                                   "maxnreg": None}
        assert all("/" not in path for _, path in md.get("extern_libs") or [])  # no build-machine paths


def test_first_call_launches_the_shipped_cubin_without_compiling(shipped: Any, kernels: Any, fake_gpu: Any,
                                                                no_compiler: list[str]) -> None:
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    kernel = launch_softmax(kernels)
    cubin = shipped_cubin(shipped)
    assert cubin.endswith(MARKER)
    assert no_compiler == []
    # The driver's load step got exactly the shipped bytes, then the launch happened with the call's grid.
    ((symbol, loaded, shared, _device),) = fake.loads
    assert loaded == cubin and symbol == kernel.name and shared == kernel.metadata.shared
    ((gx, gy, gz, *_rest),) = fake.launches
    assert (gx, gy, gz) == (64, 1, 1)
    (event,) = kbuild.runtime.events()
    assert event.substituted and event.stage == "zero-jit" and event.target == "sm_90a"
    # Triton's in-memory cache now holds it: the second call neither compiles nor reloads.
    x, out = _tensors(64, 1024)
    kernels.softmax[(64,)](out, x, x.stride(0), out.stride(0), 1024, BLOCK=1024, num_warps=4, num_stages=3)
    assert len(fake.loads) == 1 and len(fake.launches) == 2 and no_compiler == []


@pytest.mark.parametrize("change", [{"num_warps": 8}, {"block": 2048, "cols": 2048}, {"cols": 1000}])
def test_a_differing_call_is_compiled_by_triton_and_logged_once(shipped: Any, kernels: Any, fake_gpu: Any,
                                                               no_compiler: list[str], change: dict[str, int],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    with caplog.at_level(logging.INFO, logger="kbuild.runtime"), pytest.raises(CompilerCalled):
        launch_softmax(kernels, **change)
    assert no_compiler and no_compiler[0] == "triton.compile"
    with caplog.at_level(logging.INFO, logger="kbuild.runtime"), pytest.raises(CompilerCalled):
        launch_softmax(kernels, **change)
    lines = [r.getMessage() for r in caplog.records if "Triton compiles it" in r.getMessage()]
    assert len(lines) == 1 and "kbx_jit.kernels:softmax" in lines[0]
    assert not [e for e in kbuild.runtime.events() if e.stage == "zero-jit"]


def test_other_gpu_and_other_triton_fall_back(shipped: Any, kernels: Any, fake_gpu: Any,
                                              no_compiler: list[str]) -> None:
    fake_gpu(89)  # no sm_89 entry
    kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    with pytest.raises(CompilerCalled):
        launch_softmax(kernels)
    kbuild.runtime.disable()
    path = shipped.data_dir / "index.json"
    doc = json.loads(path.read_text())
    for entry in doc["entries"].values():
        entry["triton_metadata"]["triton_version"] = "3.5.0"
    path.write_text(json.dumps(doc))
    fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    with pytest.raises(CompilerCalled):
        launch_softmax(kernels)


def test_damaged_cubin_is_not_loaded(shipped: Any, kernels: Any, fake_gpu: Any, no_compiler: list[str]) -> None:
    entry = next(e for e in shipped.index["entries"].values() if e["target"]["cc"] == 90)
    cubin = shipped.data_dir / entry["cubin"]
    cubin.write_bytes(cubin.read_bytes()[:-1] + b"X")
    fake = fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    with pytest.raises(CompilerCalled):
        launch_softmax(kernels)
    assert fake.loads == []


def test_runtime_off_compiles(shipped: Any, kernels: Any, fake_gpu: Any, no_compiler: list[str],
                              kbuild_env: Override) -> None:
    fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    kbuild_env.set(runtime="off")
    with pytest.raises(CompilerCalled):
        launch_softmax(kernels)


def _as_version_1(path: Path) -> None:
    doc = json.loads(path.read_text())
    doc["version"] = 1
    for entry in doc["entries"].values():
        for field in ("triton_metadata", "config", "autotune"):
            entry.pop(field, None)
    path.write_text(json.dumps(doc))


def test_version_1_index_still_substitutes_after_compiling(shipped: Any, kernels: Any, fake_gpu: Any) -> None:
    _as_version_1(shipped.data_dir / "index.json")
    assert load_index(shipped.data_dir / "index.json").version == 1
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    launch_softmax(kernels)  # Triton compiles (CPU ptxas), the post-compile hook swaps the cubin
    (event,) = kbuild.runtime.events()
    assert event.substituted and event.stage == "post-compile"
    ((_, loaded, _, _),) = fake.loads
    assert loaded == shipped_cubin(shipped)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d, e: d.update(version=3), "index version 3"),
    (lambda d, e: e.update(triton_metadata=[1]), "triton_metadata: expected dict"),
    (lambda d, e: e["triton_metadata"].update(name="other"), "is not the entry's kernel symbol"),
    (lambda d, e: e["triton_metadata"].pop("target"), "needs name, shared and target.arch"),
    (lambda d, e: e["config"].update(num_warps="4"), "integer num_warps"),
    (lambda d, e: e.update(autotune={"key": "1024"}), "autotune.key: expected a list"),
])
@pytest.mark.hostile(fault="malformed package index", outcome="degraded with warning")
def test_bad_version_2_fields_are_refused(shipped: Any, edit: Any, message: str,
                                         caplog: pytest.LogCaptureFixture) -> None:
    path = shipped.data_dir / "index.json"
    doc = json.loads(path.read_text())
    edit(doc, next(iter(doc["entries"].values())))
    path.write_text(json.dumps(doc))
    with pytest.raises(IndexFormatError, match=message):
        load_index(path)
    with caplog.at_level(logging.WARNING, logger="kbuild.runtime"):
        assert not kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)  # the package still imports
    assert any(message.split(":")[0] in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------------------------------
# @triton.autotune


def _autotuned(kernels: Any) -> Any:
    import triton

    return triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=8, num_stages=3),
                                    triton.Config({"BLOCK": 1024}, num_warps=4, num_stages=3)],
                           key=["n_cols"])(kernels.softmax)


#: What Autotuner.run builds for softmax(out, x, in_stride, out_stride, n_cols=1024) with fp16 tensors.
SHIPPED_KEY = [1024, "torch.float16", "torch.float16"]


@pytest.fixture
def shipped_autotune(shipped: Any) -> Any:
    path = shipped.data_dir / "index.json"
    doc = json.loads(path.read_text())
    for entry in doc["entries"].values():
        entry["autotune"] = {"key": SHIPPED_KEY}
    path.write_text(json.dumps(doc))
    return shipped


def test_autotuner_gets_the_shipped_choice_and_benchmarks_nothing(shipped_autotune: Any, kernels: Any,
                                                                 fake_gpu: Any, no_compiler: list[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped_autotune.data_dir)
    tuner = _autotuned(kernels)

    def no_bench(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the autotuner benchmarked")

    monkeypatch.setattr(tuner, "_bench", no_bench)
    kernels.softmax.device_caches.clear()
    x, out = _tensors(64, 1024)
    tuner[(64,)](out, x, x.stride(0), out.stride(0), 1024)
    assert tuner.best_config.num_warps == 4  # the shipped config, not the first one listed
    assert tuner.cache == {tuple(SHIPPED_KEY): tuner.configs[1]}
    assert no_compiler == []
    ((_, loaded, _, _),) = fake.loads
    assert loaded == shipped_cubin(shipped_autotune)
    assert [e.stage for e in kbuild.runtime.events()] == ["autotune", "zero-jit"]


def test_autotuner_key_not_shipped_is_autotuned_by_triton(shipped_autotune: Any, kernels: Any, fake_gpu: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped_autotune.data_dir)
    tuner = _autotuned(kernels)
    benched: list[Any] = []

    def synthetic_bench(*args: Any, config: Any, **kwargs: Any) -> list[float]:
        """Stand-in for the GPU timing (CPU test): fixed synthetic times, 8 warps 'faster'."""
        benched.append(config)
        return [1.0 if config.num_warps == 8 else 2.0] * 3

    monkeypatch.setattr(tuner, "_bench", synthetic_bench)
    kernels.softmax.device_caches.clear()
    x, out = _tensors(64, 512)
    tuner.warmup(out, x, x.stride(0), out.stride(0), 512, grid=(64,))  # warmup: no launch; key (512, ...)
    tuner.cache.pop((512, "torch.float16", "torch.float16"), None)
    tuner.run(out, x, x.stride(0), out.stride(0), 512, grid=(64,), warmup=True)
    assert len(benched) == 2  # Triton's own autotuning ran for the key that is not shipped
    assert tuner.cache[(512, "torch.float16", "torch.float16")].num_warps == 8
    assert tuple(SHIPPED_KEY) in tuner.cache  # the shipped answer is there for the shipped key


def test_autotuner_config_not_among_its_configs_is_not_answered(shipped_autotune: Any, kernels: Any,
                                                               fake_gpu: Any) -> None:
    import triton

    from kbuild.runtime.loader import answer_autotuner

    fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped_autotune.data_dir)
    tuner = triton.autotune(configs=[triton.Config({"BLOCK": 1024}, num_warps=8),
                                     triton.Config({"BLOCK": 2048}, num_warps=4)], key=["n_cols"])(kernels.softmax)
    assert answer_autotuner(tuner) == 0 and tuner.cache == {}
    fresh = _autotuned(kernels)
    assert answer_autotuner(fresh, arch=80) == 1  # the sm_80 entry
    assert answer_autotuner(fresh, arch=80) == 0  # once per autotuner
