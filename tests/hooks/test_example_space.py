"""examples/cmake-extension declares a configuration space and a grid expression for its matmul (issue 15).

* The example's pyproject validates with the new keys: the matmul's space expands to 64 points, the declared
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

import importlib.util
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

from kbuild.config import load_settings

CSRC = Path(__file__).parent / "csrc"
SPACE = {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128], "BLOCK_K": [32, 64], "num_warps": [4, 8],
         "num_stages": [3, 4], "maxnreg": [0, 232]}
#: The non-default point the stand-in tuner ships on sm_90.
POINT = {"constexprs": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "SLOPE": 0.01},
         "num_warps": 4, "num_stages": 4, "maxnreg": 232, "num_ctas": 1}


def _matmul(settings: Any) -> Any:
    return settings.kernel("matmul_leaky_relu")


def test_the_example_declares_a_space_around_its_default_and_a_grid_expression():
    s = load_settings(CMAKE_EXAMPLE / "pyproject.toml", environ={})
    mm = _matmul(s)
    assert {k: list(v) for k, v in mm.space.items()} == SPACE
    points = mm.search_space()
    assert len(points) == 64 and len({json.dumps(p, sort_keys=True) for p in points}) == 64
    assert points[0] == {"constexprs": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "SLOPE": 0.01},
                         "num_warps": 8, "num_stages": 3, "maxnreg": None, "num_ctas": 1}
    assert {p["maxnreg"] for p in points} == {None, 232}  # maxnreg 0 is "ptxas decides"
    assert list(mm.grid) == ["cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)"]
    for name in ("softmax", "layernorm"):  # the explicit-grid launchers stay as they were
        k = s.kernel(name)
        assert not k.grid and not k.space and not k.configs and len(k.search_space()) == 1


def test_the_bench_spec_launches_the_declared_default_with_the_declared_grid(monkeypatch: pytest.MonkeyPatch):
    from kbuild.bench.spec import Config, load_spec, validate_inputs, validate_spec
    from kbuild.grid import parse_grid
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
    assert seen == {(16, 1, 1), (8, 1, 1), (4, 1, 1)}  # 256x256 over 64/128 tiles: the grid follows the tiles
    forget_example_modules()


class ShipPoint:
    """A stand-in tuner (no measuring): ships the untouched compile of ``POINT`` for the matmul (through
    pipeline.compile_config, as the two-level tuner ships a configuration) and keeps the baseline of the others."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, settings: Any, b: Any) -> Any:
        from kbuild.hooks import pipeline

        self.calls.append((b.spec.name, b.target.name))
        if b.spec.name != "matmul_leaky_relu":
            return pipeline.tuned_artefact(b, b"", accepted=False, speedup=1.0, reason="baseline kept: stand-in")
        art = pipeline.compile_config(settings, b, POINT)
        return pipeline.tuned_artefact(b, art.cubin, accepted=True, speedup=1.2, reason="accepted: stand-in",
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
                                                                             monkeypatch: pytest.MonkeyPatch):
    from kbuild.emit import cuda_include_dir, write_files
    from kbuild.hooks import pipeline
    from kbuild.hooks.manifest import check_manifest, manifest_bytes

    project = copy_project(CMAKE_EXAMPLE, tmp_path / "p")
    monkeypatch.setenv("KBUILD_STORE", str(store))
    monkeypatch.setattr(pipeline, "has_gpu", lambda cc: cc == 90)  # "an sm_90 GPU is here" (the tuner is fake)
    forget_example_modules()
    tuner = ShipPoint()
    try:
        plan = pipeline.plan(load_settings(project / "pyproject.toml"), tuner=tuner)
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
    spec = importlib.util.spec_from_file_location("gpu_hooks_check", ROOT / "benchmarks" / "gpu_hooks_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    from kbuild.hooks.manifest import MANIFEST_FORMAT

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
