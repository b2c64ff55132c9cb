"""examples/cmake-extension declares a configuration space and a grid expression for its matmul (issue 15).

* The example's pyproject validates with the new keys: the matmul's space expands to 96 points, the declared
  default first; its grid is an expression; softmax and layernorm keep an explicit grid and no space, so both
  launcher kinds stay exercised.
* The bench spec agrees with the declaration: its first config is the declared default, and its grid function
  gives, for every point of the space, the grid the declaration's expression gives (what the launcher computes).
* Through the pipeline (real Triton compiles, no GPU), with a stand-in tuner that ships a non-default point on
  sm_90 (it measures nothing: it picks the point it is told to): the generated header's matmul launcher takes no
  grid while softmax's does, the example's C extension (src/_kbx.c) compiles against it with -Werror, and the
  launcher, run against the fake libcuda of tests/hooks/csrc, launches the grid and threads of the config each
  GPU gets.
* benchmarks/gpu_hooks_check.py's CPU parts: the JIT options and grid of a manifest config, the plan of what the
  H200 comparison checks bit for bit, and the measured-vs-claimed verdict; the shell script parses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from hooks_helpers import CMAKE_EXAMPLE, ROOT, copy_project, forget_example_modules
from script_helpers import load_benchmark

from kbuild.settings.sources import load_settings
from kbuild.settings.variables import Override

CSRC = Path(__file__).parent / "csrc"
SPACE = {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64], "num_warps": [4, 8],
         "num_stages": [3, 4], "maxnreg": [0, 232]}
#: The non-default point the stand-in tuner ships on sm_90.
POINT: dict[str, Any] = {"constexprs": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "SLOPE": 0.01},
         "num_warps": 4, "num_stages": 4, "maxnreg": 232, "num_ctas": 1}


def _matmul(settings: Any) -> Any:
    return settings.kernel("matmul_leaky_relu")


def test_the_example_declares_a_space_around_its_default_and_a_grid_expression():
    s = load_settings(CMAKE_EXAMPLE / "pyproject.toml", environ={})
    mm = _matmul(s)
    assert {k: list(v) for k, v in mm.space.items()} == SPACE
    points = mm.search_space()
    assert len(points) == 96 and len({json.dumps(p, sort_keys=True) for p in points}) == 96
    assert points[0] == {"constexprs": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "SLOPE": 0.01},
                         "num_warps": 8, "num_stages": 3, "maxnreg": None, "num_ctas": 1}
    assert {p["maxnreg"] for p in points} == {None, 232}  # maxnreg 0 is "ptxas decides"
    assert list(mm.grid) == ["cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)"]
    for name in ("softmax", "layernorm"):  # the explicit-grid launchers stay as they were
        k = s.kernel(name)
        assert not k.grid and not k.space and not k.configs and len(k.search_space()) == 1


def test_the_bench_spec_launches_the_declared_default_with_the_declared_grid(monkeypatch: pytest.MonkeyPatch):
    from kbuild.bench.spec import Config, load_spec, validate_inputs, validate_spec
    from kbuild.declarations.grid import parse_grid
    from kbuild.tune.two_level import project_spec

    monkeypatch.syspath_prepend(str(CMAKE_EXAMPLE))
    forget_example_modules()
    mm = _matmul(load_settings(CMAKE_EXAMPLE / "pyproject.toml", environ={}))
    points = mm.search_space()
    spec = load_spec("kbx_demo.bench:matmul_leaky_relu", small=True)
    validate_spec(spec)
    inputs = spec.make_inputs(0, "cpu")
    validate_inputs(spec, inputs)
    first, consts = spec.configs[0], spec.all_constexprs(spec.configs[0])
    assert {k: consts[k] for k in points[0]["constexprs"]} == points[0]["constexprs"]
    assert set(consts) - set(points[0]["constexprs"]) == {"stride_ak", "stride_bn", "stride_cn"}  # declared i32:1
    assert (first.num_warps, first.num_stages, first.maxnreg, first.num_ctas) == (8, 3, None, 1)
    grid = parse_grid(mm.grid)
    tuned = project_spec(spec, points)  # what the build's tuner launches: the declared points over the spec
    validate_spec(tuned)
    seen = set()
    for point in points:
        cfg = Config.from_dict(point)
        values = {"M": inputs["M"], "N": inputs["N"], "K": inputs["K"],
                  **{k: v for k, v in point["constexprs"].items() if isinstance(v, int)}}
        expected = grid.evaluate(values)
        assert tuned.grid(tuned.all_constexprs(cfg)) == expected, cfg.label()
        seen.add(expected)
    assert seen == {(16, 1, 1), (8, 1, 1), (4, 1, 1), (2, 1, 1)}  # 256x256 over 64/128/256 tiles: the grid follows
    forget_example_modules()


class ShipPoint:
    """A stand-in tuner (no measuring): ships the untouched compile of ``POINT`` for the matmul (through
    compile_config, as the two-level tuner ships a configuration) and keeps the baseline of the others."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, settings: Any, b: Any) -> Any:
        from kbuild.build.baselines import compile_config
        from kbuild.build.tuning import tuned_artefact

        self.calls.append((b.spec.name, b.target.name))
        if b.spec.name != "matmul_leaky_relu":
            return tuned_artefact(b, b"", accepted=False, speedup=1.0, reason="baseline kept: stand-in")
        art = compile_config(settings, b, POINT)
        return tuned_artefact(b, art.cubin, accepted=True, speedup=1.2, reason="accepted: stand-in",
                                       base=art, gains={"level1": 1.2, "level2": 1.0})


HARNESS = r'''
#include <stdio.h>
#include <stdint.h>
#include "kbuild_kernels.h"
void fake_set_context(uintptr_t id);
int main(int argc, char **argv) {
  (void)argc;
  fake_set_context(1);
  int m = 0, n = 0;
  sscanf(argv[1], "%d", &m);
  sscanf(argv[2], "%d", &n);
  CUresult r = kbuild_matmul_leaky_relu((CUstream)3, 4096, 8192, 12288, m, n, 64, 64, n, n);
  printf("matmul %d %s\n", (int)r, kbuild_last_error());
  r = kbuild_softmax((CUstream)3, 7, 1, 1, 4096, 8192, 1024, 1024, 1000);
  printf("softmax %d\n", (int)r);
  return 0;
}
'''


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_the_example_matmul_launcher_computes_the_grid_of_the_shipped_config(store: Path, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch, kbuild_env: Override):
    from kbuild.build import plan as planning
    from kbuild.build import tunable
    from kbuild.build.manifest import check_manifest, manifest_bytes
    from kbuild.emit import cuda_include_dir, write_files

    project = copy_project(CMAKE_EXAMPLE, tmp_path / "p")
    kbuild_env.set(store=store)
    monkeypatch.setattr(tunable, "has_gpu", lambda cc: cc == 90)  # "an sm_90 GPU is here" (the tuner is fake)
    forget_example_modules()
    tuner = ShipPoint()
    try:
        plan = planning.plan(load_settings(project / "pyproject.toml"), tuner=tuner)
    finally:
        forget_example_modules()
    assert sorted(tuner.calls) == [(k, "sm_90") for k in ("layernorm", "matmul_leaky_relu", "softmax")]
    manifest = check_manifest(json.loads(manifest_bytes(plan.manifest)), "kbuild.json")
    entries = {(e["kernel"], e["target"]): e for e in manifest["kernels"]}
    assert entries[("matmul_leaky_relu", "sm_90")]["config"] == POINT
    assert entries[("matmul_leaky_relu", "sm_90")]["default_config"] is False
    assert entries[("matmul_leaky_relu", "sm_80")]["default_config"] is True
    assert entries[("softmax", "sm_90")]["grid"] == [] and entries[("softmax", "sm_90")]["state"] == "baseline-kept"

    files = plan.files()
    header = files["kbuild_kernels.h"].decode()
    assert ("CUresult kbuild_matmul_leaky_relu(CUstream stream, CUdeviceptr a_ptr, CUdeviceptr b_ptr, "
            "CUdeviceptr c_ptr, int32_t M, int32_t N, int32_t K, int32_t stride_am, int32_t stride_bk, "
            "int32_t stride_cm);") in header
    assert "CUresult kbuild_softmax(CUstream stream, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z," \
        in header
    out = tmp_path / "c"
    write_files(out, files)
    inc = str(cuda_include_dir())

    # the example's own C extension compiles against the generated header, warnings as errors
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I", str(out), "-I", inc,
                    "-I", sysconfig.get_paths()["include"], str(CMAKE_EXAMPLE / "src" / "_kbx.c")], check=True)

    lib = tmp_path / "lib"
    lib.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-I", inc, "-o", str(lib / "libcuda.so.1"),
                    str(CSRC / "fake_cuda.c"), "-lpthread"], check=True)
    (out / "h.c").write_text(HARNESS)
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I", str(out), "-I", inc,
                    "-o", str(out / "harness"), str(out / "h.c"), str(out / "kbuild_kernels.c"),
                    str(lib / "libcuda.so.1"), f"-Wl,-rpath,{lib}", "-ldl", "-lpthread"], check=True)

    def launches(cc: str, m: int, n: int) -> tuple[list[str], str]:
        log = tmp_path / f"fake-{cc}-{m}-{n}.log"
        proc = subprocess.run([str(out / "harness"), str(m), str(n)], capture_output=True, text=True, check=True,
                              env={"PATH": os.environ.get("PATH", ""), "FAKE_LOG": str(log), "FAKE_CC": cc})
        lines = [x for x in log.read_text().splitlines() if x.startswith("launch ")] if log.exists() else []
        return lines, proc.stdout

    # sm_90 ships BLOCK_M = BLOCK_N = 64 with 4 warps: cdiv(1000, 64) * cdiv(1024, 64) = 16 * 16 blocks of 128
    # threads; sm_80 the default, 128 x 128 with 8 warps: 8 * 8 blocks of 256 threads. softmax: the grid given.
    lines, stdout = launches("90", 1000, 1024)
    assert "grid=256,1,1 block=128,1,1" in lines[0] and "grid=7,1,1 block=128,1,1" in lines[1], lines
    assert stdout.splitlines() == ["matmul 0 ", "softmax 0"], stdout
    lines, stdout = launches("80", 1000, 1024)
    assert "grid=64,1,1 block=256,1,1" in lines[0] and "grid=7,1,1 block=128,1,1" in lines[1], lines
    # a negative M: the launcher refuses (CUDA_ERROR_INVALID_VALUE) and launches nothing
    lines, stdout = launches("90", -100, 1024)
    assert len(lines) == 1 and "grid=7,1,1" in lines[0], lines
    assert stdout.splitlines()[0].startswith("matmul 1 kbuild: matmul_leaky_relu (sm_90a): grid dimension x = "), stdout


def _helper() -> Any:
    pytest.importorskip("torch")
    return load_benchmark("gpu_hooks_check")


def _entry(kernel: str, config: dict[str, Any], *, default: bool, grid: list[str], speedup: float | None = None,
           state: str = "baseline") -> dict[str, Any]:
    return {"kernel": kernel, "target": "sm_90", "state": state, "speedup": speedup, "config": config,
            "default_config": default, "gains": {"level1": 1.2, "level2": 1.01} if not default else None,
            "grid": grid}


def test_the_h200_check_compares_a_tuned_config_with_its_own_untouched_compile():
    g = _helper()
    assert g.jit_options(POINT) == {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "SLOPE": 0.01,
                                    "num_warps": 4, "num_stages": 4, "maxnreg": 232}
    assert "maxnreg" not in g.jit_options({**POINT, "maxnreg": None})
    assert g.jit_options({**POINT, "num_ctas": 2})["num_ctas"] == 2
    default = {**POINT, "constexprs": {**POINT["constexprs"], "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64},
               "num_warps": 8, "num_stages": 3, "maxnreg": None}
    expr = ["cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)"]
    manifest = {"kernels": [
        _entry("matmul_leaky_relu", POINT, default=False, grid=expr, speedup=1.21, state="tuned"),
        _entry("matmul_leaky_relu", default, default=True, grid=expr) | {"target": "sm_80"},
        _entry("softmax", {"constexprs": {"BLOCK": 1024}, "num_warps": 4, "num_stages": 3, "maxnreg": None,
                           "num_ctas": 1}, default=True, grid=[], speedup=1.03, state="tuned")]}
    plan = {p["kernel"]: p for p in g.compare_plan(manifest, "sm_90")}
    assert set(plan) == {"matmul_leaky_relu", "softmax"}
    mm = plan["matmul_leaky_relu"]
    assert mm["bit_reference"] == "Triton JIT of the shipped config" and mm["default_config"] is False
    assert mm["grid"] == [64 * 64, 1, 1]  # 4096 / 64 squared: the shipped tiles, not the default's 32 * 32
    assert mm["jit_options"]["maxnreg"] == 232 and mm["claimed_speedup"] == 1.21
    assert plan["softmax"]["bit_reference"] == "baseline wheel" and plan["softmax"]["grid"] == [32768, 1, 1]
    assert g.compare_plan(manifest, "sm_80")[0]["grid"] == [32 * 32, 1, 1]

    # measured vs claimed: within the tolerance plus the run's A/A spread, either way
    assert g.ratio_verdict(1.19, 1.21, 0.005, 0.03)["consistent"]
    assert not g.ratio_verdict(1.10, 1.21, 0.005, 0.03)["consistent"]
    assert not g.ratio_verdict(1.40, 1.21, 0.005, 0.03)["consistent"]
    assert g.ratio_verdict(1.10, 1.21, 0.07, 0.03)["consistent"]  # a noisy run allows more
    assert g.ratio_verdict(0.99, None, 0.0, 0.03)["claimed"] == 1.0  # no claim: level with the baseline
    assert g.aa_spread(1.002, (0.99, 1.004)) == pytest.approx(0.01)


def test_the_h200_check_dry_runs_on_a_manifest_and_the_script_parses(tmp_path: Path):
    pytest.importorskip("torch")
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_hooks_check.sh")], check=True)
    from kbuild.build.manifest import MANIFEST_FORMAT

    manifest = {"format": MANIFEST_FORMAT, "kbuild_version": "0", "tune": "auto", "kernels": [
        {"kernel": "matmul_leaky_relu", "target": "sm_90", "arch": "sm_90a", "key": "0" * 64,
         "cubin_sha256": "1" * 64, "cubin_bytes": 10, "state": "tuned", "speedup": 1.2, "config": POINT,
         "default_config": False, "gains": {"level1": 1.2, "level2": 1.0},
         "grid": ["cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)"]}]}
    path = tmp_path / "kbuild.json"
    path.write_text(json.dumps(manifest))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_hooks_check.py"), "--dry-run", str(path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    (item,) = json.loads(proc.stdout)["plan"]
    assert item["grid"] == [4096, 1, 1] and item["bit_reference"] == "Triton JIT of the shipped config"


class _CpuKernels:
    """A stand-in for the GPU in the CPU test of ``compare_wheels``: the three kernels in numpy, reading and writing
    memory at the addresses the C extension's functions receive (as the launchers do). Not a measurement."""

    @staticmethod
    def view(ptr: int, shape: tuple[int, ...], dtype: Any) -> Any:
        import ctypes

        import numpy as np

        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return np.frombuffer((ctypes.c_uint8 * count).from_address(ptr), dtype=dtype).reshape(shape)

    def matmul(self, a: int, b: int, c: int, m: int, n: int, k: int, bump: float = 0.0) -> None:
        import numpy as np

        acc = self.view(a, (m, k), np.float16).astype(np.float32) @ self.view(b, (k, n), np.float16).astype(np.float32)
        self.view(c, (m, n), np.float16)[:] = (np.where(acc >= 0, acc, acc * 0.01) + bump).astype(np.float16)

    def softmax(self, out: int, x: int, rows: int, cols: int) -> None:
        import numpy as np

        v = self.view(x, (rows, cols), np.float16).astype(np.float32)
        e = np.exp(v - v.max(-1, keepdims=True))
        self.view(out, (rows, cols), np.float16)[:] = (e / e.sum(-1, keepdims=True)).astype(np.float16)

    def layernorm(self, x: int, y: int, w: int, b: int, mean: int, rstd: int, rows: int, cols: int,
                  eps: float) -> None:
        import numpy as np

        v = self.view(x, (rows, cols), np.float16).astype(np.float32)
        mu = v.mean(-1)
        r = 1 / np.sqrt(((v - mu[:, None]) ** 2).mean(-1) + eps)
        wv, bv = (self.view(p, (cols,), np.float16).astype(np.float32) for p in (w, b))
        self.view(y, (rows, cols), np.float16)[:] = ((v - mu[:, None]) * r[:, None] * wv + bv).astype(np.float16)
        self.view(mean, (rows,), np.float32)[:] = mu
        self.view(rstd, (rows,), np.float32)[:] = r


def _fake_ext(cpu: _CpuKernels, bump: float) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(
        matmul_leaky_relu=lambda s, a, b, c, m, n, k, sam, sbk, scm: cpu.matmul(a, b, c, m, n, k, bump),
        softmax=lambda s, gx, gy, gz, out, x, sin, sout, cols: cpu.softmax(out, x, gx, cols),
        layernorm=lambda s, gx, gy, gz, x, y, w, b, mu, r, stride, n, eps: cpu.layernorm(x, y, w, b, mu, r, gx, n, eps))


@pytest.mark.parametrize("tuned_bump", [0.0, 0.5])
def test_compare_wheels_checks_a_tuned_config_against_its_jit_compile_on_a_cpu_stand_in(
        tuned_bump: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """compare_wheels end to end with the GPU stood in for (numpy kernels at the launchers' addresses, fixed synthetic
    timings: labelled fakes, nothing measured): the non-default matmul is checked against the JIT compile of the
    manifest's config (its keywords and grid recorded), the others against the baseline wheel; a tuned output one
    step off its config's compile fails the check."""
    import types

    import kbuild.device.timing as timing
    from kbuild.build.manifest import MANIFEST_FORMAT

    torch = pytest.importorskip("torch")
    g = _helper()
    cpu = _CpuKernels()
    jit_calls: list[tuple[str, Any, dict[str, Any]]] = []

    class FakeJit:
        def __getattr__(self, name: str) -> Any:
            class Launch:
                def __getitem__(self, grid: Any) -> Any:
                    def run(*args: Any, **kw: Any) -> None:
                        jit_calls.append((name, grid, kw))
                        p = [x.data_ptr() if hasattr(x, "data_ptr") else x for x in args]
                        assert name == "matmul_leaky_relu"
                        cpu.matmul(p[0], p[1], p[2], p[3], p[4], p[5])
                    return run
            return Launch()

    class CpuTorch(types.SimpleNamespace):
        def __getattr__(self, name: str) -> Any:
            return getattr(torch, name)

    def on_cpu(fn: Any) -> Any:
        return lambda *a, **kw: fn(*a, **{**kw, "device": "cpu"})

    fake_torch = CpuTorch(randn=on_cpu(torch.randn), empty=on_cpu(torch.empty), Generator=on_cpu(torch.Generator),
                          cuda=types.SimpleNamespace(get_device_capability=lambda *a: (9, 0), synchronize=lambda: None,
                                                     current_stream=lambda: types.SimpleNamespace(cuda_stream=0)))
    monkeypatch.setattr(g, "torch", fake_torch)
    monkeypatch.setattr(g, "COMPARE_SHAPES", {"matmul_leaky_relu": (64, 64, 32), "softmax": (8, 64),
                                              "layernorm": (8, 32)})
    exts = {"base": _fake_ext(cpu, 0.0), "tuned": _fake_ext(cpu, tuned_bump)}
    monkeypatch.setattr(g, "_load_ext", lambda name, site: exts["base" if site == "B" else "tuned"])
    monkeypatch.setattr(g, "_Jit", FakeJit)
    monkeypatch.setattr(g, "_site_manifest", lambda site: None)
    # synthetic timings (ms): baseline 1.0, tuned 1/1.2, the A/A copy 1.0, the JIT compile of the config 0.85
    fixed = [1.0, 1 / 1.2, 1.0, 0.85]
    monkeypatch.setattr(timing, "time_interleaved", lambda variants, *, rounds, reps, flush:
                        [[[fixed[i]] * reps for _ in range(rounds)] for i in range(len(variants))])
    monkeypatch.setattr(timing, "L2Flush", lambda: None)
    monkeypatch.syspath_prepend(str(tmp_path))

    def entry(kernel: str, config: dict[str, Any], default: bool, grid: list[str], speedup: float | None) -> Any:
        return {"kernel": kernel, "target": "sm_90", "key": "0" * 64, "cubin_sha256": "1" * 64,
                "state": "tuned" if speedup else "baseline", "speedup": speedup, "config": config,
                "default_config": default, "gains": {"level1": 1.18, "level2": 1.02} if not default else None,
                "grid": grid}

    plain = {"num_warps": 4, "num_stages": 3, "maxnreg": None, "num_ctas": 1}
    manifest = {"format": MANIFEST_FORMAT, "kernels": [
        entry("matmul_leaky_relu", POINT, False, ["cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)"], 1.21),
        entry("softmax", {"constexprs": {"BLOCK": 1024}, **plain}, True, [], 1.19),
        entry("layernorm", {"constexprs": {"BLOCK": 1024}, **plain}, True, [], None)]}
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    results = {r["check"].split(":")[0]: r for r in g.compare_wheels("B", "T", str(tmp_path / "m.json"), rounds=3,
                                                                      reps=2)}
    mm = results["matmul_leaky_relu"]
    assert jit_calls and all(c[0] == "matmul_leaky_relu" for c in jit_calls)
    assert jit_calls[0][1] == (1, 1, 1) and jit_calls[0][2] == g.jit_options(POINT)  # 64x64 over 64x64 tiles
    assert mm["bit_reference"] == "Triton JIT of the shipped config"
    assert mm["measured"]["speedup"] == pytest.approx(1.2) and mm["ratio"]["consistent"]
    assert mm["measured"]["gains"] == {"level1": pytest.approx(1 / 0.85, abs=1e-4),
                                       "level2": pytest.approx(0.85 * 1.2, abs=1e-4)}
    assert results["softmax"]["bit_reference"] == "baseline wheel" and results["softmax"]["ok"]
    assert results["softmax"]["bit_identical"] and results["layernorm"]["bit_identical"]
    # level with the baseline is what a baseline entry claims: 1.2 measured is not 1.0 claimed, so it fails
    assert results["layernorm"]["ratio"]["claimed"] == 1.0 and not results["layernorm"]["ratio"]["consistent"]
    assert not results["layernorm"]["ok"]
    if tuned_bump:
        assert not mm["bit_identical"] and not mm["ok"]
    else:
        assert mm["bit_identical"] and mm["within_tolerance_of_torch"] and mm["ok"]
