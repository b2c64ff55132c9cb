"""A shipped cubin compiled with extra ptxas flags (``ptx_options``, issue 15) answers only a JIT call whose options
hold the same flags: through Triton's real JIT path on a CPU (driver load/launch stubbed, as in
test_runtime_zero_jit.py), and never an autotuner (a ``triton.Config`` carries no ptxas flags)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import MARKER, make_tuned

import kbuild.runtime
from kbuild.build.package_data import write_package_data
from kbuild.runtime.index import entry_config, load_index
from kbuild.runtime.lookup import config_matches, metadata_mismatch


class CompilerCalled(AssertionError):
    pass


@pytest.fixture(scope="module")
def ptx_builds(jit_settings: Any) -> list[Any]:
    """The example's softmax declared with ``ptx_options = "-O2"``, compiled for sm_90."""
    from kbuild.build.pipeline import run_pipeline

    spec = dataclasses.replace(jit_settings.kernel("softmax"), ptx_options="-O2")
    settings = dataclasses.replace(jit_settings, kernels=[spec if k.name == "softmax" else k
                                                          for k in jit_settings.kernels])
    return run_pipeline(settings, kernels=["softmax"], targets=["sm_90"])


@pytest.fixture
def shipped(jit_settings: Any, ptx_builds: list[Any], tmp_path: Path) -> Any:
    return write_package_data(jit_settings, [make_tuned(jit_settings, dataclasses.replace(b)) for b in ptx_builds],
                              tmp_path / "kbx_jit")


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import triton.compiler

    calls: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        calls.append("triton.compile")
        raise CompilerCalled("Triton's compile was called")

    monkeypatch.setattr(triton.compiler, "compile", refuse)
    return calls


def _launch(kernels: Any, **options: Any) -> Any:
    import torch

    kernels.softmax.device_caches.clear()
    x = torch.empty(64, 1024, dtype=torch.float16)
    out = torch.empty_like(x)
    return kernels.softmax[(64,)](out, x, x.stride(0), out.stride(0), 1024, BLOCK=1024, num_warps=4, num_stages=3,
                                  **options)


def test_the_index_records_the_flags(shipped: Any) -> None:
    (entry,) = load_index(shipped.data_dir / "index.json").entries.values()
    assert entry["config"]["ptx_options"] == "-O2"
    assert entry["triton_metadata"]["ptx_options"] == "-O2"
    assert entry["key_components"]["compiler"]["options"]["ptx_options"] == "-O2"


def test_a_call_with_the_same_flags_gets_the_shipped_cubin(shipped: Any, kernels: Any, fake_gpu: Any,
                                                           compiles: list[str]) -> None:
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    _launch(kernels, ptx_options="-O2")
    assert compiles == []
    ((_symbol, loaded, _shared, _device),) = fake.loads
    assert loaded.endswith(MARKER)


@pytest.mark.parametrize("options", [{}, {"ptx_options": "-O3"}])
def test_a_call_with_other_flags_is_compiled_by_triton(shipped: Any, kernels: Any, fake_gpu: Any,
                                                       compiles: list[str], options: dict[str, str],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    with caplog.at_level(logging.INFO, logger="kbuild.runtime"), pytest.raises(CompilerCalled):
        _launch(kernels, **options)
    assert compiles == ["triton.compile"]
    assert not [e for e in kbuild.runtime.events() if e.stage == "zero-jit"]


def test_metadata_mismatch_and_autotune_matching_see_the_flags(shipped: Any) -> None:
    import triton

    (entry,) = load_index(shipped.data_dir / "index.json").entries.values()
    md = entry["triton_metadata"]
    options = {k: md[k] for k in ("num_warps", "num_stages", "num_ctas", "maxnreg", "ptx_options")}
    assert metadata_mismatch(md, options, 90, md["triton_version"]) is None
    why = metadata_mismatch(md, {**options, "ptx_options": None}, 90, md["triton_version"])
    assert why == "option ptx_options is None, shipped '-O2'"
    same = triton.Config({"BLOCK": 1024}, num_warps=4, num_stages=3)
    assert not config_matches(same, entry["config"])  # an autotuner's config has no ptxas flags
    assert config_matches(same, entry_config({"BLOCK": 1024}, {**options, "ptx_options": None}))
