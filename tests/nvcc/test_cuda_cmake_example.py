"""examples/cuda-cmake built into a wheel through kbuild's backend (scikit-build-core), CMake's CUDA language and
kbuild-nvcc (nvcc 13.x from the package index): the second build of the unchanged project (a fresh build directory,
so every unit compiles again for ninja) runs no cicc and no ptxas, its CUDA compile time is at most 0.2x the
first's, and the wheels are byte-identical. The extension carries an sm_80 and an sm_90 cubin and imports without a
GPU. The wheel's manifest lists the three declared CUDA kernels per target with the digests of the cubins the
extension really carries (cuobjdump), ``kbuild inspect`` shows them, and a build in an up-to-date build directory
(nothing compiles) still lists them, byte-identical."""

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

from kbuild.build.manifest import wheel_manifest
from kbuild.toolchain import tool_path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cuda-cmake"

pytestmark = pytest.mark.slow


def cuda_seconds(build_dir: Path) -> float:
    """Sum of the ``*.cu.o`` edges' durations in ninja's log (launcher start-up included)."""
    total = 0.0
    for line in (build_dir / ".ninja_log").read_text().splitlines():
        if not line.startswith("#"):
            start, end, _mtime, target, *_ = line.split("\t")
            total += (int(end) - int(start)) / 1000.0 if target.endswith(".cu.o") else 0.0
    return total


def wheel(project: Path, work: Path, name: str, env: dict[str, str], build: str | None = None) -> tuple[Path, Path]:
    out, build_dir = work / f"wheels-{name}", work / f"build-{build or name}"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(out), str(project), "-C", f"build-dir={build_dir}"], env=env, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return next(out.glob("*.whl")), build_dir


def events(log: Path) -> list[dict]:
    found = [json.loads(ln) for ln in log.read_text().splitlines()]
    log.unlink()
    return found


def test_second_build_runs_no_cicc_no_ptxas_is_5x_faster_byte_identical_and_lists_its_kernels(nvcc, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("build", "__pycache__"))
    log = tmp_path / "steps.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBUILD_")}
    env.update({"KBUILD_STORE": str(tmp_path / "store"), "KBUILD_NVCC_LOG": str(log),
                "SOURCE_DATE_EPOCH": "1700000000", "PIP_NO_INDEX": "1"})

    first_whl, first_dir = wheel(project, tmp_path, "first", env)
    first = events(log)
    assert sum(e["tool"] == "cicc" and e["action"] == "stored" for e in first) == 6  # 3 units x 2 archs
    assert sum(e["tool"] == "ptxas" and e["action"] == "stored" for e in first) == 6

    second_whl, second_dir = wheel(project, tmp_path, "second", env)
    second = events(log)
    ran = [e for e in second if e["tool"] in ("cicc", "ptxas") and e["action"] != "hit"]
    assert not ran, ran
    assert sum(e["action"] == "total" for e in second) == 3  # every unit went through the launcher

    t1, t2 = cuda_seconds(first_dir), cuda_seconds(second_dir)
    assert t2 <= 0.2 * t1, f"second build's CUDA compile {t2:.2f} s vs first {t1:.2f} s"
    assert first_whl.read_bytes() == second_whl.read_bytes()

    # the extension carries one cubin per architecture and imports on a machine without a GPU
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(first_whl) as zf:
        zf.extractall(unpacked)
    (ext,) = (unpacked / "kbx_cuda").glob("_kernels*.so")
    listing = subprocess.run([str(tool_path("cuobjdump")), "--list-elf", str(ext)], capture_output=True, text=True,
                             check=True).stdout
    assert "sm_80" in listing and "sm_90" in listing

    # the manifest lists the declared kernels x targets, each with the digest of a cubin the extension carries
    cuda = wheel_manifest(first_whl)["cuda_kernels"]
    assert sorted((e["kernel"], e["target"]) for e in cuda) == sorted(
        (k, t) for k in ("gelu", "matmul", "reduce") for t in ("sm_80", "sm_90"))
    assert {e["state"] for e in cuda} == {"baseline"}  # no GPU here: as ptxas wrote them
    elves = tmp_path / "elves"
    elves.mkdir()
    subprocess.run([str(tool_path("cuobjdump")), "-xelf", "all", str(ext)], cwd=elves, capture_output=True,
                   check=True)
    carried = {hashlib.sha256(p.read_bytes()).hexdigest(): p.name for p in elves.glob("*.cubin")}
    assert len(carried) == 6 and {e["cubin_sha256"] for e in cuda} == set(carried)
    for e in cuda:
        assert f".{e['target']}.cubin" in carried[e["cubin_sha256"]]
    shown = subprocess.run([sys.executable, "-m", "kbuild", "inspect", str(first_whl)], env=env, capture_output=True,
                           text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert all(f"{k} (CUDA)" in shown.stderr for k in ("gelu", "matmul", "reduce")), shown.stderr

    # the second build's directory again: ninja finds every unit up to date, no kbuild-nvcc runs, and the records
    # kept in the build directory still list the kernels
    third_whl, _ = wheel(project, tmp_path, "third", env, build="second")
    assert not log.exists()
    assert third_whl.read_bytes() == first_whl.read_bytes()
    probe = subprocess.run([sys.executable, "-c", "import kbx_cuda; print(kbx_cuda.tiles())"], cwd=unpacked,
                           capture_output=True, text=True, check=False)
    assert probe.returncode == 0 and probe.stdout.strip() == "((64, 64), (128, 64), (128, 128))", probe.stderr
