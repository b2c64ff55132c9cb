"""What kbuild adds to a wheel build when every kernel is already in the store (an all-hit build).

Builds ``examples/cmake-extension`` two ways, interleaved, several rounds:

* **kbuild**: as shipped, ``build-backend = "kbuild.hooks.backend"`` + ``kbuild_add_kernels``,
  with a store that already holds every kernel × target (the first, untimed build fills it);
* **plain**: the same project built by plain scikit-build-core without kbuild: the C extension
  compiles the same generated launcher sources, vendored into the project with Triton's
  ``cuda.h``, and its CMakeLists.txt neither finds kbuild nor calls it.

Both use ``pip wheel --no-deps --no-build-isolation`` in this environment (no downloads), a fresh
output directory each time, and ``SOURCE_DATE_EPOCH``. The result is the ratio of median wall
times (target: ≤ 1.10).

    python benchmarks/build_overhead.py [--rounds 7] [--out benchmarks/results/build_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "cmake-extension"

PLAIN_CMAKE = """\
cmake_minimum_required(VERSION 3.18)
project(kbx_demo LANGUAGES C)
find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)
find_package(Threads REQUIRED)
Python_add_library(_kbx MODULE WITH_SOABI src/_kbx.c src/kbuild_kernels.c)
target_include_directories(_kbx PRIVATE src)
target_link_libraries(_kbx PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
install(TARGETS _kbx DESTINATION kbx_demo)
"""


def sh(cmd: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def make_plain(work: Path, env: dict[str, str]) -> Path:
    plain = work / "plain"
    shutil.copytree(EXAMPLE, plain, ignore=shutil.ignore_patterns("__pycache__", "build", "dist"))
    emitted = work / "emitted"
    sh([sys.executable, "-m", "kbuild", "emit", "--config", str(EXAMPLE / "pyproject.toml"), "--out-dir",
        str(emitted)], env)
    for name in ("kbuild_kernels.c", "kbuild_kernels.h"):
        shutil.copy(emitted / name, plain / "src" / name)
    import triton

    shutil.copy(Path(triton.__file__).parent / "backends" / "nvidia" / "include" / "cuda.h", plain / "src" / "cuda.h")
    (plain / "CMakeLists.txt").write_text(PLAIN_CMAKE)
    py = plain / "pyproject.toml"
    text = py.read_text().replace('requires = ["kbuild", "scikit-build-core>=1.0"]', 'requires = ["scikit-build-core>=1.0"]')
    text = text.replace('build-backend = "kbuild.hooks.backend"', 'build-backend = "scikit_build_core.build"')
    py.write_text(text[:text.index("[tool.kbuild]")])
    return plain


def build_seconds(project: Path, work: Path, env: dict[str, str]) -> float:
    out = Path(tempfile.mkdtemp(dir=work, prefix="dist-"))
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(project)]
    t0 = time.perf_counter()
    sh(cmd, env)
    seconds = time.perf_counter() - t0
    shutil.rmtree(out)
    return seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "build_overhead.json"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbuild-overhead-") as tmp:
        work = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KBUILD_")}
        env.update({"KBUILD_STORE": str(work / "store"), "SOURCE_DATE_EPOCH": "1700000000",
                    "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1"})
        kbuild_project = work / "kbuild"
        shutil.copytree(EXAMPLE, kbuild_project, ignore=shutil.ignore_patterns("__pycache__", "build", "dist"))
        plain = make_plain(work, env)
        cold = build_seconds(kbuild_project, work, env)  # fills the store (compiles every kernel × target)
        build_seconds(plain, work, env)  # warm the file cache for both
        samples: dict[str, list[float]] = {"kbuild": [], "plain": []}
        for i in range(args.rounds):
            order = ("kbuild", "plain") if i % 2 == 0 else ("plain", "kbuild")
            for name in order:
                samples[name].append(build_seconds(kbuild_project if name == "kbuild" else plain, work, env))
            print(f"round {i + 1}: kbuild {samples['kbuild'][-1]:.2f} s, plain {samples['plain'][-1]:.2f} s",
                  file=sys.stderr)
    med = {k: statistics.median(v) for k, v in samples.items()}
    ratio = med["kbuild"] / med["plain"]
    doc = {
        "what": "wall time of `pip wheel --no-deps --no-build-isolation` of examples/cmake-extension: kbuild backend "
                "+ kbuild_add_kernels with every kernel x target already in the store (all hits) vs the same "
                "C extension and launcher sources built by plain scikit-build-core without kbuild",
        "command": "python benchmarks/build_overhead.py --rounds " + str(args.rounds),
        "rounds": args.rounds,
        "samples_seconds": samples,
        "median_seconds": med,
        "ratio_kbuild_over_plain": round(ratio, 4),
        "target_ratio": 1.10,
        "meets_target": ratio <= 1.10,
        "first_build_seconds_filling_the_store": round(cold, 3),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: doc[k] for k in ("median_seconds", "ratio_kbuild_over_plain", "meets_target")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
