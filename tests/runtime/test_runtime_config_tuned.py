"""Config-tuned artefacts in package data (issue 15 × issue 16) and the autotune key filled at build time.

A tuned artefact may be the compile of a configuration other than the declared default. A plain ``@triton.jit``
caller launches the default's constexprs and options: a tuned configuration that differs only in options that change
neither results nor the grid is served to it (``serves_call``, issue 35 part 3); one with other constexprs cannot
be reached, so the default's compile ships (``default-of-tuned``); an
``@triton.autotune`` kernel gets its tuned config under that config's key, with the autotune key that makes the
autotuner choose it. Calls go through Triton's real JIT and autotuner code on a CPU (``runtime_helpers.FakeDriver``:
load and launch are recording stand-ins, no kernel runs); Triton's compiler is made to raise
(``test_runtime_zero_jit.no_compiler``), so a test that compiled would fail. **Stand-in tuning result:** the
"tuned" cubin is the chosen configuration's real compile with :data:`MARKER` appended (never run).
"""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import MARKER
from test_runtime_zero_jit import CompilerCalled, _tensors, no_compiler  # noqa: F401  (fixture)

import kbuild.runtime
from kbuild.build.baselines import compile_config
from kbuild.build.package_data import config_key, write_package_data
from kbuild.build.pipeline import run_pipeline
from kbuild.build.tuning import tuned_artefact
from kbuild.key import KernelKey, tuner_component
from kbuild.runtime.autotune import autotune_key
from kbuild.tune import TUNER_VERSION


def _stand_in_tuned(settings: Any, b: Any, config: dict[str, Any]) -> Any:
    """``b`` with the artefact the tuner would store for ``config`` (its compile + MARKER), under a tuned key."""
    b = dataclasses.replace(b)
    b.tuned_key = KernelKey({**b.baseline_key.components,
                             "tuner": tuner_component(dataclasses.replace(settings, tune="auto"), version=TUNER_VERSION)})
    base = compile_config(settings, b, config)
    b.artefact = tuned_artefact(b, base.cubin + MARKER, accepted=True, speedup=1.3, reason="stand-in", base=base)
    b.tuned = True
    return b


# ---------------------------------------------------------------------------------------------------------------
# Plain @triton.jit: a tuned configuration that differs from the caller's only in options that change neither results
# nor the grid is served to the caller (issue 35 part 3); one with other constexprs cannot be reached, and the
# default's compile ships.


def _default_call(request: pytest.FixtureRequest, fake_gpu: Any, kernels: Any, shipped: Any) -> tuple[list[str], Any]:
    """The example's softmax called as its package calls it (num_warps=4, num_stages=3) on a fake sm_90, with the
    package data enabled and Triton's compiler made to raise: (the compiler calls, the fake driver)."""
    compiler_calls = request.getfixturevalue("no_compiler")  # from here on, compiling fails the test
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    kernels.softmax.device_caches.clear()
    x, out = _tensors(64, 1024)
    kernels.softmax[(64,)](out, x, x.stride(0), out.stride(0), 1024, BLOCK=1024, num_warps=4, num_stages=3)
    return compiler_calls, fake


def test_jit_kernel_tuned_in_launch_options_is_served_to_the_default_call(
        jit_settings: Any, baseline_builds: list[Any], kernels: Any, fake_gpu: Any, tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    (b90,) = [b for b in baseline_builds if b.target.cc == 90]
    tuned = _stand_in_tuned(jit_settings, b90, {**b90.default_config, "num_warps": 8, "num_stages": 2})
    assert not tuned.is_default_config and tuned.improved
    shipped = write_package_data(jit_settings, [tuned], tmp_path / "kbx_jit")
    ((key, entry),) = shipped.index["entries"].items()
    assert key == b90.baseline_key.hex  # the call's key: the default's
    assert entry["serves_call"] == {"num_stages": 3, "num_warps": 4}
    assert entry["state"] == "tuned" and entry["tuned"] is True and entry["speedup"] == 1.3
    assert entry["cubin_sha256"] == tuned.artefact.cubin_sha256 != b90.artefact.cubin_sha256
    assert entry["config"]["num_warps"] == 4  # the key's (the call's) configuration ...
    assert entry["checks"]["num_warps"] == entry["triton_metadata"]["num_warps"] == 8  # ... the cubin's own
    assert entry["triton_metadata"]["num_stages"] == 2
    assert "served to calls that ask for num_stages=3, num_warps=4" in entry["note"]
    # The default call gets the tuned cubin, launched with its own 8 warps, without compiling.
    compiler_calls, fake = _default_call(request, fake_gpu, kernels, shipped)
    assert compiler_calls == [] and [c for _, c, _, _ in fake.loads] == [tuned.artefact.cubin]
    (kernel,) = kernels.softmax.device_caches[0][0].values()
    assert kernel.metadata.num_warps == 8 and kernel.metadata.num_stages == 2
    (event,) = [e for e in kbuild.runtime.events() if e.stage == "zero-jit"]
    assert "serves this call, which asks num_stages=3, num_warps=4" in event.reason
    # A call asking for other options is not served by it: Triton compiles (here: the stand-in refuses).
    kernels.softmax.device_caches.clear()
    x, out = _tensors(64, 1024)
    with pytest.raises(CompilerCalled):
        kernels.softmax[(64,)](out, x, x.stride(0), out.stride(0), 1024, BLOCK=1024, num_warps=8, num_stages=2)
    assert compiler_calls


def test_served_options_are_checked_at_run_time(jit_settings: Any, baseline_builds: list[Any]) -> None:
    """``serves_call`` lists only options that change neither results nor the grid: an index naming another is
    refused when read, and the lookup refuses one all the same."""
    from kbuild.runtime.index import IndexFormatError, _check_v2_fields
    from kbuild.runtime.lookup import metadata_mismatch

    md = {"triton_version": "3.6.0", "target": {"backend": "cuda", "arch": 90, "warp_size": 32}, "num_warps": 8,
          "num_ctas": 1, "name": "k", "shared": 0}
    assert metadata_mismatch(md, {"num_warps": 4, "num_ctas": 1}, 90, "3.6.0", serves={"num_warps": 4}) is None
    assert "asking 4" in str(metadata_mismatch(md, {"num_warps": 2, "num_ctas": 1}, 90, "3.6.0",
                                               serves={"num_warps": 4}))
    assert "may change results" in str(metadata_mismatch(md, {"num_warps": 8, "num_ctas": 2}, 90, "3.6.0",
                                                         serves={"num_ctas": 2}))
    assert "num_warps is 4, shipped 8" in str(metadata_mismatch(md, {"num_warps": 4, "num_ctas": 1}, 90, "3.6.0"))
    entry = {"triton_metadata": md, "checks": {"name": "k"}, "serves_call": {"num_ctas": 2}}
    with pytest.raises(IndexFormatError, match=r"serves_call\.num_ctas: not an option a call may be served"):
        _check_v2_fields(entry, where="index.json: entries.k")
    with pytest.raises(IndexFormatError, match="needs its triton_metadata"):
        _check_v2_fields({"serves_call": {"num_warps": 4}}, where="index.json: entries.k")
    # constexprs an output check showed safe are listed by the values the call asks (its key's): accepted when read,
    # and the options are still checked
    served = {"num_warps": 4, "constexprs": {"BLOCK": 1024}}
    _check_v2_fields({**entry, "serves_call": served}, where="index.json: entries.k")
    assert metadata_mismatch(md, {"num_warps": 4, "num_ctas": 1}, 90, "3.6.0", serves=served) is None
    assert "asking 4" in str(metadata_mismatch(md, {"num_warps": 2, "num_ctas": 1}, 90, "3.6.0", serves=served))
    for bad in ({}, ["BLOCK"], {1: 2}):
        with pytest.raises(IndexFormatError, match=r"serves_call\.constexprs: expected a non-empty table"):
            _check_v2_fields({**entry, "serves_call": {"constexprs": bad}}, where="index.json: entries.k")


def test_jit_kernel_tuned_at_other_constexprs_ships_the_default(jit_settings: Any, baseline_builds: list[Any],
                                                               kernels: Any, fake_gpu: Any, tmp_path: Path,
                                                               request: pytest.FixtureRequest) -> None:
    (b90,) = [b for b in baseline_builds if b.target.cc == 90]
    chosen = {**b90.default_config, "constexprs": {**b90.default_config["constexprs"], "BLOCK": 2048},
              "num_warps": 8}
    tuned = _stand_in_tuned(jit_settings, b90, chosen)
    assert not tuned.is_default_config and tuned.improved
    shipped = write_package_data(jit_settings, [tuned], tmp_path / "kbx_jit")
    ((key, entry),) = shipped.index["entries"].items()
    assert key == b90.baseline_key.hex and "serves_call" not in entry
    assert entry["state"] == "default-of-tuned" and entry["tuned"] is False and entry["speedup"] is None
    assert entry["cubin_sha256"] == b90.artefact.cubin_sha256 != tuned.artefact.cubin_sha256
    assert entry["artefact_key"] == b90.baseline_key.hex
    assert entry["config"]["num_warps"] == 4 and entry["checks"]["num_warps"] == 4
    assert "BLOCK=2048" in entry["note"] and "not shipped" in entry["note"] and "constexprs differ (BLOCK)" in entry["note"]
    assert shipped.notes == [("softmax", "sm_90", entry["note"])]
    # The default call launches the shipped default cubin without compiling.
    compiler_calls, fake = _default_call(request, fake_gpu, kernels, shipped)
    assert compiler_calls == [] and [c for _, c, _, _ in fake.loads] == [b90.artefact.cubin]


def test_jit_kernel_default_found_by_compiling_when_the_store_lacks_it(jit_settings: Any, baseline_builds: list[Any],
                                                                      tmp_path: Path) -> None:
    """The default's compile comes from the store, else is compiled now (deterministic): same bytes."""
    from kbuild.cache import open_store

    (b90,) = [b for b in baseline_builds if b.target.cc == 90]
    tuned = _stand_in_tuned(jit_settings, b90, {**b90.default_config, "num_warps": 8,
                                               "constexprs": {**b90.default_config["constexprs"], "BLOCK": 2048}})
    empty = open_store(dataclasses.replace(jit_settings, store=tmp_path / "empty-store"))
    shipped = write_package_data(jit_settings, [tuned], tmp_path / "kbx_jit", store=empty)
    (entry,) = shipped.index["entries"].values()
    assert entry["cubin_sha256"] == b90.artefact.cubin_sha256


def test_config_key_of_the_default_is_the_baseline_key(baseline_builds: list[Any]) -> None:
    for b in baseline_builds:
        assert config_key(b, b.default_config).hex == b.baseline_key.hex
        assert config_key(b, {**b.default_config, "num_warps": 8}).hex != b.baseline_key.hex


# ---------------------------------------------------------------------------------------------------------------
# @triton.autotune: the tuned config answers the autotuner, under its own key.

AUTOTUNED = '''
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=4, num_stages=3),
                          triton.Config({"BLOCK": 512}, num_warps=8, num_stages=3)], key=["N"])
@triton.jit
def scale(x_ptr, y_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=4, num_stages=3),
                          triton.Config({"BLOCK": 512}, num_warps=8, num_stages=3)], key=["n"])
@triton.jit
def scale_n(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)
'''

PYPROJECT = '''
[project]
name = "kbx-at"
version = "0.1.0"

[tool.kbuild]
ship = "package-data"
targets = ["sm_90"]
tune = "auto"

[[tool.kbuild.kernels]]
name = "scale"
source = "kbx_at.kernels:scale"
signature = { x_ptr = "*fp16:16", y_ptr = "*fp16:16" }
constexprs = { N = 4096 }

[[tool.kbuild.kernels]]
name = "scale_n"
source = "kbx_at.kernels:scale_n"
signature = { x_ptr = "*fp16:16", y_ptr = "*fp16:16", n = "i32:16" }
'''

#: What Autotuner.run builds for scale(x, y, 4096) with fp16 tensors: N's value, then each tensor's dtype.
SCALE_KEY = [4096, "torch.float16", "torch.float16"]


@pytest.fixture
def autotuned(tmp_path: Path) -> Iterator[tuple[Any, list[Any], Any]]:
    from kbuild.settings.sources import load_settings

    project = tmp_path / "proj"
    (project / "kbx_at").mkdir(parents=True)
    (project / "kbx_at" / "__init__.py").write_text("")
    (project / "kbx_at" / "kernels.py").write_text(textwrap.dedent(AUTOTUNED))
    (project / "pyproject.toml").write_text(PYPROJECT)
    settings = dataclasses.replace(load_settings(project / "pyproject.toml"), store=tmp_path / "store")
    try:
        builds = run_pipeline(settings)  # the defaults' compiles (CPU ptxas); nothing tuned
        yield settings, builds, sys.modules["kbx_at.kernels"]
    finally:
        for name in [m for m in sys.modules if m == "kbx_at" or m.startswith("kbx_at.")]:
            del sys.modules[name]


def test_autotune_key_derived_from_the_declaration(autotuned: tuple[Any, list[Any], Any]) -> None:
    _, builds, module = autotuned
    scale, scale_n = (next(b for b in builds if b.spec.name == n) for n in ("scale", "scale_n"))
    assert scale.default_config["constexprs"] == {"N": 4096, "BLOCK": 256}  # the first of the autotuner's configs
    key, why = autotune_key(module.scale, module.scale.fn, scale.spec.signature, scale.default_config["constexprs"])
    assert (key, why) == (SCALE_KEY, None)
    key, why = autotune_key(module.scale_n, module.scale_n.fn, scale_n.spec.signature,
                            scale_n.default_config["constexprs"])
    assert key is None and "'n'" in str(why) and "no value" in str(why)


def test_autotuned_kernel_tuned_at_another_config_answers_the_autotuner(
        autotuned: tuple[Any, list[Any], Any], fake_gpu: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    import torch
    import triton

    settings, builds, module = autotuned
    b = next(b for b in builds if b.spec.name == "scale")
    chosen = {**b.default_config, "constexprs": {"N": 4096, "BLOCK": 512}, "num_warps": 8}
    tuned = _stand_in_tuned(settings, b, chosen)
    shipped = write_package_data(settings, [tuned], tmp_path / "kbx_at")
    ((key, entry),) = shipped.index["entries"].items()
    assert key == config_key(b, chosen).hex != b.baseline_key.hex
    assert entry["state"] == "tuned" and entry["cubin_sha256"] == tuned.artefact.cubin_sha256
    assert entry["autotune"] == {"key": SCALE_KEY} and "note" not in entry
    assert entry["config"] == {"kwargs": {"N": 4096, "BLOCK": 512}, "num_warps": 8, "num_stages": 3, "num_ctas": 1,
                               "maxnreg": None}

    compiler_calls = request.getfixturevalue("no_compiler")  # from here on, compiling fails the test
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_at", data_dir=shipped.data_dir)
    tuner = module.scale

    def no_bench(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the autotuner benchmarked")

    monkeypatch.setattr(tuner, "_bench", no_bench)
    tuner.fn.device_caches.clear()
    x = torch.empty(4096, dtype=torch.float16)
    y = torch.empty_like(x)
    tuner[lambda meta: (triton.cdiv(4096, meta["BLOCK"]),)](x, y, 4096)
    assert tuner.best_config.kwargs == {"BLOCK": 512} and tuner.best_config.num_warps == 8
    assert compiler_calls == []
    ((_, loaded, _, _),) = fake.loads
    assert loaded == tuned.artefact.cubin and loaded.endswith(MARKER)
    ((gx, _, _, *_),) = fake.launches
    assert gx == 8  # 4096 / BLOCK 512: the grid of the shipped config
    assert [e.stage for e in kbuild.runtime.events()] == ["autotune", "zero-jit"]


def test_untuned_autotuned_kernel_ships_without_a_key_and_runtime_key_args_are_noted(
        autotuned: tuple[Any, list[Any], Any], tmp_path: Path) -> None:
    settings, builds, _ = autotuned
    shipped = write_package_data(settings, builds, tmp_path / "kbx_at")
    entries = {e["kernel"]: e for e in shipped.index["entries"].values()}
    assert set(entries) == {"scale", "scale_n"}
    for e in entries.values():  # the defaults' compiles ship (zero-JIT for the default), the autotuner is not answered
        assert e["state"] == "baseline" and "autotune" not in e and "untuned" in e["note"]
    scale_n = next(b for b in builds if b.spec.name == "scale_n")
    measured = _stand_in_tuned(settings, scale_n, scale_n.default_config)  # tuned at the default: measured
    again = write_package_data(settings, [measured], tmp_path / "kbx_at")
    (e,) = again.index["entries"].values()
    assert e["state"] == "tuned" and "autotune" not in e and "'n'" in e["note"]
