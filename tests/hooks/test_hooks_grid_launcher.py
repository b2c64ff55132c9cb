"""The grid follows the shipped config (issue 15): a kernel with a space and a grid expression goes through the
pipeline with Triton (no GPU), an injected tuner ships a non-default point on sm_90 (compile_config), and the
generated launcher, compiled with gcc and run against the fake libcuda of tests/hooks/csrc, launches with the
grid, threads and shared memory of the configuration each GPU gets. The tuner is a stand-in (no measuring):
it picks the point it is told to."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kbuild.build import plan as planning
from kbuild.build import tunable
from kbuild.build.baselines import compile_config
from kbuild.build.kernel_build import KernelBuild
from kbuild.build.manifest import check_manifest, manifest_bytes
from kbuild.build.resolve import resolve
from kbuild.build.tuning import tuned_artefact
from kbuild.cache import Artefact
from kbuild.emit import EmitError, EmitKernel, cuda_include_dir, render_sources, write_files
from kbuild.settings.sources import settings_from_table
from kbuild.targets import parse_target

CSRC = Path(__file__).parent / "csrc"
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def scale(out, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(out + offs, mask=offs < n) * s, mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 128}, num_warps=4)],
                 key=["n"])
@triton.jit
def scale_auto(out, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(out + offs, mask=offs < n) * s, mask=offs < n)
'''

HARNESS = r'''
#include <stdio.h>
#include <stdint.h>
#include "kbuild_kernels.h"
void fake_set_context(uintptr_t id);
int main(int argc, char **argv) {
  (void)argc;
  fake_set_context(1);
  long long n = 0;
  sscanf(argv[1], "%lld", &n);
  CUresult r = kbt_scale((CUstream)3, 4096, (int32_t)n, 2.0f);
  printf("result %d %s\n", (int)r, kbt_last_error());
  return 0;
}
'''


def table(grid: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    k: dict[str, Any] = {"name": "scale", "source": "gridpkg.k:scale", "bench": "gridpkg.k:nothing",
                         "signature": {"out": "*fp32:16", "n": "i32", "s": "fp32"}, "constexprs": {"BLOCK": 64},
                         "space": {"BLOCK": [64, 256], "num_warps": [4, 8]}, "grid": grid or ["cdiv(n, BLOCK)"]}
    k.update(extra)
    return {"targets": ["sm_80", "sm_90"], "tune": "auto", "kernels": [k]}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    pkg = tmp_path / "gridpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "k.py").write_text(textwrap.dedent(KERNEL))
    monkeypatch.setattr(tunable, "has_gpu", lambda cc: cc == 90)  # "an sm_90 GPU is here" (the tuner is fake)
    yield tmp_path
    for name in [m for m in sys.modules if m == "gridpkg" or m.startswith("gridpkg.")]:
        del sys.modules[name]


class PickPoint:
    """A stand-in tuner: ships the untouched compile of ``point`` (compile_config), with made-up gains."""

    def __init__(self, point: dict[str, Any]) -> None:
        self.point = point
        self.calls = 0

    def __call__(self, settings: Any, b: KernelBuild) -> Any:
        self.calls += 1
        art = compile_config(settings, b, self.point)
        return tuned_artefact(b, art.cubin, accepted=True, speedup=1.25, reason="accepted: stand-in",
                                       base=art, gains={"level1": 1.25, "level2": 1.0})


def plan_for(project: Path, tbl: dict[str, Any], tuner: Any) -> planning.BuildPlan:
    from kbuild.cache import open_store

    s = settings_from_table(tbl, where=str(project / "pyproject.toml"), project_dir=project,
                            environ={"KBUILD_STORE": str(project / "store")})
    with open_store(s) as store:
        return planning.plan(s, store, tuner=tuner)


def test_the_shipped_config_drives_launcher_and_manifest(project: Path, tmp_path: Path):
    point = {"constexprs": {"BLOCK": 256}, "num_warps": 8, "num_stages": 3, "maxnreg": None, "num_ctas": 1}
    tuner = PickPoint(point)
    plan = plan_for(project, table(), tuner)
    assert tuner.calls == 1  # sm_90 only: no sm_80 GPU here
    by_target = {b.target.name: b for b in plan.builds}
    b80, b90 = by_target["sm_80"], by_target["sm_90"]
    assert b80.space[0]["constexprs"] == {"BLOCK": 64} and len(b80.space) == 4
    assert b90.shipped.meta["config"] == point and b90.shipped.meta["constexprs"]["BLOCK"] == 256
    assert b90.shipped.meta["num_warps"] == 8 and b80.shipped.meta["num_warps"] == 4
    assert b90.tuned_key is not None and b90.shipped.key == b90.tuned_key.hex and b90.improved

    # compile_config of the default point is the baseline, byte for byte and key for key (deterministic)
    again = compile_config(plan.settings, b80, b80.space[0])
    assert again.key == b80.baseline_key.hex and again.cubin == b80.shipped.cubin

    manifest = check_manifest(json.loads(manifest_bytes(plan.manifest)), "kbuild.json")
    entries = {e["target"]: e for e in manifest["kernels"]}
    assert entries["sm_90"]["config"] == point and entries["sm_90"]["default_config"] is False
    assert entries["sm_90"]["gains"] == {"level1": 1.25, "level2": 1.0}
    assert entries["sm_80"]["default_config"] is True and entries["sm_80"]["gains"] is None
    assert entries["sm_80"]["grid"] == ["cdiv(n, BLOCK)"]

    files = plan.files(prefix="kbt_")
    header = files["kbuild_kernels.h"].decode()
    assert "CUresult kbt_scale(CUstream stream, CUdeviceptr out, int32_t n, float s);" in header
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    out = tmp_path / "c"
    write_files(out, files)
    runs = run_harness(out, tmp_path, {"90": ["1000", "0", "-300"], "80": ["1000"]})
    # sm_90 ships BLOCK=256 with 8 warps: cdiv(1000, 256) = 4 blocks of 256 threads; sm_80 the default,
    # BLOCK=64 with 4 warps: 16 blocks of 128 threads
    assert "grid=4,1,1 block=256,1,1" in runs["90"][0] and runs["90"][0].endswith("result 0 "), runs
    assert "grid=16,1,1 block=128,1,1" in runs["80"][0] and runs["80"][0].endswith("result 0 "), runs
    assert runs["90"][1] == "result 0 ", runs  # an empty grid launches nothing, as an explicit zero grid did
    # cdiv(-300, 256) = -1: refused with CUDA_ERROR_INVALID_VALUE (1) and a message, nothing launched
    assert runs["90"][2] == "result 1 kbuild: scale (sm_90a): grid dimension x = -1 is outside 0..2147483647", runs


def run_harness(out: Path, tmp_path: Path, runs: dict[str, list[str]]) -> dict[str, list[str]]:
    """Build the harness against the fake libcuda; per FAKE_CC, the launch lines and result lines of each n."""
    inc = str(cuda_include_dir())
    lib = tmp_path / "lib"
    lib.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-I", inc, "-o", str(lib / "libcuda.so.1"),
                    str(CSRC / "fake_cuda.c"), "-lpthread"], check=True)
    (out / "h.c").write_text(HARNESS)
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I", str(out), "-I", inc,
                    "-o", str(out / "harness"), str(out / "h.c"), str(out / "kbuild_kernels.c"),
                    str(lib / "libcuda.so.1"), f"-Wl,-rpath,{lib}", "-ldl", "-lpthread"], check=True)
    result: dict[str, list[str]] = {}
    for cc, ns in runs.items():
        for n in ns:
            log = tmp_path / f"fake-{cc}-{n}.log"
            proc = subprocess.run([str(out / "harness"), n], capture_output=True, text=True, check=True,
                                  env={"PATH": os.environ.get("PATH", ""), "FAKE_LOG": str(log), "FAKE_CC": cc})
            launched = [x for x in log.read_text().splitlines() if x.startswith("launch ")] if log.exists() else []
            result.setdefault(cc, []).append(" | ".join([*launched, proc.stdout.rstrip("\n")]))
    return result


def test_an_autotuned_source_gives_its_configs(project: Path):
    tbl = table(source="gridpkg.k:scale_auto", constexprs={}, space={}, autotune=True)
    plan = plan_for(project, tbl, PickPoint({"constexprs": {"BLOCK": 128}, "num_warps": 4}))
    b = plan.builds[0]
    # BLOCK is set by the configs only: the autotuner's first config is the default
    assert [p["constexprs"]["BLOCK"] for p in b.space] == [32, 128]
    assert b.space[0]["num_warps"] == 1 and b.spec.constexprs == {"BLOCK": 32}
    assert plan.builds[0].shipped.meta["constexprs"]["BLOCK"] == 32


def test_the_space_is_in_the_tuned_key_only(project: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tunable, "has_gpu", lambda cc: False)
    s1 = settings_from_table(table(), project_dir=project, environ={})
    s2 = settings_from_table(table(space={"BLOCK": [64, 128]}), project_dir=project, environ={})
    s3 = settings_from_table(table(space={}), project_dir=project, environ={})
    targets = [parse_target("sm_90")]
    (a,), (b,), (c,) = (resolve(s, s.kernels, targets) for s in (s1, s2, s3))
    assert a.baseline_key.hex == b.baseline_key.hex == c.baseline_key.hex
    assert a.tuned_key is not None and b.tuned_key is not None and c.tuned_key is not None
    assert len({a.tuned_key.hex, b.tuned_key.hex, c.tuned_key.hex}) == 3
    assert "space" not in c.tuned_key.components["tuner"]  # no space: the tuned key of before
    reordered = table(space={"num_warps": [8, 4], "BLOCK": [256, 64]})
    (d,) = resolve(settings_from_table(reordered, project_dir=project, environ={}), s1.kernels, targets)
    assert d.tuned_key is not None
    assert d.tuned_key.hex == a.tuned_key.hex  # the order a grid is written in does not move the key


@needs_gcc
@pytest.mark.hostile(fault="bad grid expression", outcome="clean error")
def test_a_grid_dividing_by_a_constexpr_zero_is_refused_at_emit():
    meta = {"symbol": "k", "num_warps": 4, "shared": 0, "constexprs": {"BLOCK": 64, "Z": 0},
            "params": [{"name": "n", "type": "i32", "constexpr": False}]}
    art = Artefact.create(key=hashlib.sha256(b"x").hexdigest(), cubin=b"x", meta=meta)
    kernel = EmitKernel("k", "p.m:k", ((parse_target("sm_90"), art),), ("n // Z",))
    with pytest.raises(EmitError, match=r"grid\[0\] 'n // Z' for sm_90 \(BLOCK=64, Z=0\): division by zero"):
        render_sources([kernel])
    ok = EmitKernel("k", "p.m:k", ((parse_target("sm_90"), art),))
    assert b"unsigned int grid_x" in render_sources([ok])["kbuild_kernels.h"]  # no grid: as before


def test_manifest_without_the_new_fields_still_reads():
    old = {"format": "kbuild-manifest/1", "kernels": [{"kernel": "k", "target": "sm_90", "key": "a" * 64,
                                                        "cubin_sha256": "b" * 64}]}
    assert check_manifest(old, "m")["kernels"][0]["kernel"] == "k"


@pytest.mark.hostile(fault="damaged manifest", outcome="clean error")
@pytest.mark.parametrize("field, value, fragment", [
    ("config", {"num_warps": 3}, "kernels[0].config.num_warps: expected a power of two"),
    ("gains", {"level1": -1}, "kernels[0].gains.level1: expected a positive number"),
    ("grid", ["n / 2"], "kernels[0].grid[0]: the operator /"),
    ("default_config", "yes", "kernels[0].default_config: expected true"),
])
def test_bad_config_fields_of_a_manifest_name_the_key(field: str, value: Any, fragment: str):
    from kbuild.errors import UsageError

    doc = {"format": "kbuild-manifest/1", "kernels": [{"kernel": "k", "target": "sm_90", "key": "a" * 64,
                                                        "cubin_sha256": "b" * 64, field: value}]}
    with pytest.raises(UsageError) as info:
        check_manifest(doc, "w.whl!x/kbuild.json")
    assert fragment in str(info.value)


def test_inspect_shows_config_and_gains(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from kbuild.cli import main

    entry = {"kernel": "k", "target": "sm_90", "key": "a" * 64, "cubin_sha256": "b" * 64, "state": "tuned",
             "speedup": 1.3, "config": {"constexprs": {"BLOCK": 256}, "num_warps": 8, "num_stages": 3,
                                        "maxnreg": 232, "num_ctas": 1},
             "default_config": False, "gains": {"level1": 1.25, "level2": 1.04}}
    path = tmp_path / "kbuild.json"
    path.write_text(json.dumps({"format": "kbuild-manifest/1", "kernels": [entry]}))
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().err  # the table is for people: kbuild.console prints to stderr
    assert "BLOCK=256,w8,s3,r232" in text and "×1.250" in text and "×1.040" in text
    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kernels"][0]["gains"] == {"level1": 1.25, "level2": 1.04}
