"""Issue 34, item 3: the run time's coverage (hits, misses and why), its report at exit, and the must-hit mode.

Real Triton and the example package's real index and cubins; Triton's driver is ``runtime_helpers.FakeDriver``
(a stand-in: its load and launch steps record instead of calling CUDA), so misses really compile (ptxas, on the
CPU) and nothing runs on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import JIT_EXAMPLE
from test_runtime_steady_state import _autotuned, ship_autotune_key, softmax

import kbuild.runtime
from kbuild.build.package_data import write_package_data
from kbuild.runtime import CoverageError
from kbuild.settings.variables import Override

HERE = Path(__file__).resolve().parent
SOFTMAX = "kbx_jit.kernels:softmax"
MATMUL = "kbx_jit.kernels:matmul_leaky_relu"


@pytest.fixture
def shipped(jit_settings: Any, tuned_builds: list[Any], tmp_path: Path) -> Any:
    return write_package_data(jit_settings, tuned_builds, tmp_path / "kbx_jit")


@pytest.fixture
def no_compile(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """triton.compile is counted and refused: a strict-mode test must fail before Triton compiles."""
    import triton.compiler

    calls: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        calls.append("compile")
        raise AssertionError("Triton compiled")

    monkeypatch.setattr(triton.compiler, "compile", refuse)
    return calls


def matmul(kernels: Any, n: int = 256) -> Any:
    import torch

    a = torch.empty(n * 128, dtype=torch.float16).view(n, 128)
    b = torch.empty(128 * n, dtype=torch.float16).view(128, n)
    c = torch.empty(n * n, dtype=torch.float16).view(n, n)
    return kernels.matmul_leaky_relu[(4,)](a, b, c, n, n, 128, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                          c.stride(0), c.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8,
                                          SLOPE=0.01, num_warps=8, num_stages=3)


def test_hits_misses_and_the_reason_per_kernel(shipped: Any, kernels: Any, fake_gpu: Any) -> None:
    fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    for _ in range(2):  # a specialisation counts once, however often it is called
        softmax(kernels)
        softmax(kernels, cols=1000)
    doc = kbuild.runtime.coverage_report()
    assert doc["format"] == "kbuild-runtime-coverage" and doc["mode"] == "on"
    k = doc["kernels"][SOFTMAX]
    assert (k["package"], k["hits"], k["misses"], k["shipped_entries"]) == ("kbx_jit", 1, 1, 2)
    hit, miss = sorted(k["specializations"], key=lambda s: s["outcome"])
    assert hit["stage"] == "zero-jit" and hit["entry"] and hit["target"] == "sm_90"
    assert hit["signature"]["n_cols"] == "i32:16" and hit["options"] == {"num_warps": 4, "num_stages": 3,
                                                                         "num_ctas": 1}
    assert miss["signature"]["n_cols"] == "i32" and miss["reason"].startswith("no shipped entry has this call's key")
    nearest = miss["nearest"]
    assert nearest["kernel"] == "softmax" and nearest["target"] == "sm_90"
    assert "kernel.signature.n_cols: call 'i32', index 'i32:16'" in nearest["differences"]
    assert doc["totals"] == {"kernels": 1, "specializations": 2, "hits": 1, "misses": 1, "autotune_answered": 0,
                             "autotuned": 0}


def test_a_function_the_package_does_not_ship_is_counted(shipped: Any, kernels: Any, fake_gpu: Any) -> None:
    fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    matmul(kernels)
    (spec,) = kbuild.runtime.coverage_report()["kernels"][MATMUL]["specializations"]
    assert spec["outcome"] == "miss" and spec["reason"] == "package kbx_jit ships no entry for this function"
    assert spec["signature"]["a_ptr"] == "*fp16:16" and spec["constexprs"]["BLOCK_M"] == 128


def test_autotuning_keys_answered_and_autotuned(shipped: Any, kernels: Any, fake_gpu: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    ship_autotune_key(shipped, [1024, "torch.float16", "torch.float16"])
    fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    tuner = _autotuned(kernels)
    # Stand-in for the GPU timing of Triton's benchmarking (fixed synthetic times).
    monkeypatch.setattr(tuner, "_bench", lambda *a, config, **k: [1.0 if config.num_warps == 8 else 2.0] * 3)
    for cols in (1024, 512):
        x = torch.empty(64 * cols, dtype=torch.float16).view(64, cols)
        out = torch.empty_like(x)
        tuner.run(out, x, x.stride(0), out.stride(0), cols, grid=(64,), warmup=True)
    k = kbuild.runtime.coverage_report()["kernels"][SOFTMAX]
    assert (k["autotune_answered"], k["autotuned"]) == (1, 1)
    answered, tuned = sorted(k["autotuning"], key=lambda t: t["outcome"])
    assert answered["key"] == [1024, "torch.float16", "torch.float16"] and answered["target"] == "sm_90"
    assert tuned["key"] == [512, "torch.float16", "torch.float16"]
    assert "n_cols: call 512, shipped 1024" in tuned["reason"]


# ----------------------------------------------------------------------------------------------
# KBUILD_RUNTIME=strict


def test_strict_passes_inside_the_wheel_and_fails_outside_before_triton_compiles(
        shipped: Any, kernels: Any, fake_gpu: Any, no_compile: list[str], kbuild_env: Override) -> None:
    fake = fake_gpu(90)
    kbuild_env.set(runtime="strict")
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    softmax(kernels)  # shipped: answered, launched
    assert len(fake.launches) == 1
    with pytest.raises(CoverageError) as err:
        softmax(kernels, cols=1000)
    message = str(err.value)
    assert "\n" not in message and message.startswith("KBUILD_RUNTIME=strict: kbx_jit.kernels:softmax would compile")
    assert "n_cols: i32" in message and "kernel.signature.n_cols: call 'i32', index 'i32:16'" in message
    with pytest.raises(CoverageError, match="package kbx_jit ships no entry for this function"):
        matmul(kernels)
    assert no_compile == [] and len(fake.launches) == 1
    assert kbuild.runtime.coverage_report()["mode"] == "strict"


def test_strict_fails_an_autotuning_the_wheel_does_not_answer(shipped: Any, kernels: Any, fake_gpu: Any,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              kbuild_env: Override) -> None:
    import torch

    ship_autotune_key(shipped, [1024, "torch.float16", "torch.float16"])
    fake_gpu(90)
    kbuild_env.set(runtime="strict")
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    tuner = _autotuned(kernels)
    benched: list[Any] = []

    def bench(*a: Any, config: Any, **k: Any) -> list[float]:
        benched.append(config)
        return [1.0] * 3

    monkeypatch.setattr(tuner, "_bench", bench)
    x = torch.empty(64 * 512, dtype=torch.float16).view(64, 512)
    out = torch.empty_like(x)
    with pytest.raises(CoverageError, match=r"would autotune key \(512, 'torch.float16', 'torch.float16'\) on sm_90"):
        tuner.run(out, x, x.stride(0), out.stride(0), 512, grid=(64,), warmup=True)
    assert benched == []


def test_strict_without_an_index_is_an_error(kbuild_env: Override, tmp_path: Path) -> None:
    kbuild_env.set(runtime="strict")
    with pytest.raises(CoverageError, match=r"package nothing_here ships no _kbuild/index\.json"):
        kbuild.runtime.enable("nothing_here", data_dir=tmp_path)
    kbuild_env.set(runtime="on")
    assert not kbuild.runtime.enable("nothing_here", data_dir=tmp_path)  # not strict: Triton's own, quietly


# ----------------------------------------------------------------------------------------------
# KBUILD_RUNTIME_REPORT, at exit


_WORKLOAD = r'''
import sys
from runtime_helpers import FakeDriver
from triton.runtime.driver import driver
import torch
import kbuild.runtime

driver.set_active(FakeDriver(90))  # stand-in: Triton's load and launch steps record instead of calling CUDA
assert kbuild.runtime.enable("kbx_jit", data_dir=sys.argv[1])
import kbx_jit.kernels as k
for cols in map(int, (sys.argv[2] if len(sys.argv) > 2 else "1024,1024,1000").split(",")):
    x = torch.empty(64 * cols, dtype=torch.float16).view(64, cols)
    out = torch.empty_like(x)
    k.softmax[(64,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=1024, num_warps=4, num_stages=3)
'''


def test_the_report_is_written_at_exit(shipped: Any, tmp_path: Path, kbuild_env: Override) -> None:
    report = tmp_path / "out" / "coverage.json"
    report.parent.mkdir()
    kbuild_env.set(runtime_report=[str(report), "-"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(JIT_EXAMPLE), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _WORKLOAD, str(shipped.data_dir)], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(report.read_text())
    assert doc["totals"] == {"kernels": 1, "specializations": 2, "hits": 1, "misses": 1, "autotune_answered": 0,
                             "autotuned": 0}
    assert doc["packages"]["kbx_jit"]["entries"] == 2
    assert [p.name for p in report.parent.iterdir()] == ["coverage.json"]  # written atomically: no temporary left
    assert "kbuild.runtime coverage (on): 1 kernel(s), 2 specialisation(s): 1 answered from the wheel, 1 compiled " \
           "by Triton" in done.stderr
    assert "miss kbx_jit.kernels:softmax [sm_90]" in done.stderr


def test_one_report_per_process_merged_by_kbuild_coverage(shipped: Any, tmp_path: Path, kbuild_env: Override,
                                                           capsys: Any) -> None:
    """Two processes of one run (as pytest-xdist workers are) each write ``cov/{pid}.json``; ``kbuild coverage``
    makes one report of them: each specialisation once, the miss with its reason, exit status 1."""
    from kbuild.cli import main

    cov = tmp_path / "cov"
    cov.mkdir()
    kbuild_env.set(runtime_report=[str(cov / "{pid}.json")])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(JIT_EXAMPLE), os.environ.get("PYTHONPATH", "")]))
    for cols in ("1024", "1024,1000"):
        done = subprocess.run([sys.executable, "-c", _WORKLOAD, str(shipped.data_dir), cols], env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
    files = sorted(cov.glob("*.json"))
    assert len(files) == 2 and all(f.stem.isdigit() for f in files)
    assert [json.loads(f.read_text())["totals"]["specializations"] for f in files] in ([1, 2], [2, 1])
    merged = tmp_path / "merged.json"
    assert main(["coverage", *map(str, files), "--out", str(merged)]) == 1  # Triton compiled one specialisation
    said = capsys.readouterr().out
    assert "2 report(s): kbuild.runtime coverage (on): 1 kernel(s), 2 specialisation(s): 1 answered from the wheel, " \
           "1 compiled by Triton" in said and "miss kbx_jit.kernels:softmax [sm_90]" in said
    doc = json.loads(merged.read_text())
    assert doc["totals"] == {"kernels": 1, "specializations": 2, "hits": 1, "misses": 1, "autotune_answered": 0,
                             "autotuned": 0}
    assert main(["coverage", str(merged), str(merged), "--json"]) == 1  # merging a report with itself changes nothing
    assert json.loads(capsys.readouterr().out) == doc
    hits_only = tmp_path / "hits.json"
    assert main(["coverage", str(files[0] if json.loads(files[0].read_text())["totals"]["misses"] == 0 else files[1]),
                 "--out", str(hits_only)]) == 0


@pytest.mark.parametrize("edit, named", [
    (lambda d: d.update(format="something-else"), "format: expected 'kbuild-runtime-coverage'"),
    (lambda d: d.update(version=9), "version: expected 1, got 9"),
    (lambda d: d["kernels"]["kbx_jit.kernels:softmax"]["specializations"][0].update(outcome="maybe"),
     "kernels.kbx_jit.kernels:softmax.specializations[0].outcome: expected 'hit' or 'miss'"),
    (lambda d: d["kernels"]["kbx_jit.kernels:softmax"].update(autotuning={}),
     "kernels.kbx_jit.kernels:softmax.autotuning: expected a list of objects"),
    (lambda d: d["kernels"]["kbx_jit.kernels:softmax"].update(shipped_entries="2"),
     "kernels.kbx_jit.kernels:softmax.shipped_entries: expected an integer"),
])
def test_a_bad_coverage_report_is_a_clean_error(tmp_path: Path, capsys: Any, edit: Any, named: str) -> None:
    from kbuild.cli import main
    from kbuild.runtime.coverage import Coverage

    c = Coverage()
    c.specialization(SOFTMAX, {"target": "sm_90", "signature": {}, "constexprs": {}, "options": {}}, hit=True)
    doc = c.report(mode="on", packages={})
    edit(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "merged.json"
    assert main(["coverage", str(bad), "--out", str(out)]) == 2
    assert f"{bad}: {named}" in capsys.readouterr().err
    assert not out.exists()


# ----------------------------------------------------------------------------------------------
# The settings


def test_the_runtime_settings() -> None:
    from kbuild.errors import ConfigError
    from kbuild.schema import json_schema
    from kbuild.settings.variables import env_setting

    assert env_setting("runtime", {"KBUILD_RUNTIME": " Strict "}) == "strict"
    assert env_setting("runtime", {"KBUILD_RUNTIME": "0"}) is False
    assert env_setting("runtime", {"KBUILD_RUNTIME": "on"}) is True and env_setting("runtime", {}) is True
    with pytest.raises(ConfigError, match=r"KBUILD_RUNTIME: expected a boolean .* or 'strict', got 'sometimes'"):
        env_setting("runtime", {"KBUILD_RUNTIME": "sometimes"})
    assert env_setting("runtime_report", {"KBUILD_RUNTIME_REPORT": "cov.json,-"}) == ["cov.json", "-"]
    assert env_setting("runtime_report", {}) == []
    props = json_schema()["properties"]
    assert props["runtime"]["x-env"] == "KBUILD_RUNTIME" and {"enum": ["strict"]} in props["runtime"]["anyOf"]
    assert props["runtime_report"]["x-env"] == "KBUILD_RUNTIME_REPORT"
    committed = json.loads((Path(__file__).resolve().parents[2] / "kbuild" / "schema" / "kbuild.schema.json")
                           .read_text())
    assert committed["properties"]["runtime"] == props["runtime"]
    assert committed["properties"]["runtime_report"] == props["runtime_report"]
