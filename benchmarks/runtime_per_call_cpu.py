"""Host cost per call of a shipped kernel, steady state, on the CPU against a stand-in libcuda (labelled as such).

    python benchmarks/runtime_per_call_cpu.py --out benchmarks/results/runtime_per_call_cpu.json \
        [--calls 10000] [--repeats 5] [--before REF]

What runs: examples/jit-package's softmax (64×1024, 5 arguments and a constexpr) and its matmul (512³, 12 arguments
and 5 constexprs), built for sm_90 on this machine (``tune = "off"``) into package data, then called from fresh
processes, interleaved (each repeat runs every variant once, in turn):

* ``triton``: ``KBUILD_RUNTIME=off``: Triton 3.6's own path throughout, its real ``cuda_utils`` and generated C
  launcher (compiled with gcc against the stand-in's headers and library, once, into a shared Triton cache);
* ``kbuild-before``: kbuild's runtime at ``--before`` (default: where this branch left ``main``), exported with
  ``git archive``: its ``JITFunction.run`` wrapper on every call, launching through ctypes;
* ``kbuild``: kbuild's runtime in this checkout, Triton's cache holding its launcher for the signature (as left by
  the ``triton`` variant): after a specialisation's first call, Triton's own ``run`` with the shipped kernel in its
  ``kernel_cache``, launched by Triton's own launcher loaded from its cache (no host compiler runs);
* ``kbuild-own-launcher``: the same with an empty Triton cache per process (a fresh machine): launched by kbuild's
  generated ctypes launcher (``kbuild.runtime.direct.DirectLauncher``).

**Stand-ins** (there is no GPU here): ``libcuda.so.1`` is ``benchmarks/standin/libcuda_standin.c`` built with cc
(every driver call returns at once; a launch only counts itself); torch's CUDA queries (available, initialised,
device 0, sm_90, the current stream) are lambdas; tensors are CPU tensors, so both launchers ask the stand-in driver
for each pointer: Triton's C launcher always does, in C; kbuild's launcher does so through ctypes only for what is
not a CUDA tensor (``pointer_query_us`` per pointer; on a GPU a CUDA tensor skips it, so ``kbuild-own-launcher``
less that per pointer argument estimates its GPU host cost: ``us_per_call_less_pointer_queries``, derived). What is measured is the host work
of a call around the driver: binding and specialising the arguments, the cache lookup, packing and the driver call.

Per variant and kernel: the first and second call (host seconds, Triton's cache warm), the median over repeats of
the mean µs per call over ``--calls`` calls (each repeat's median of 10 chunks), the least disturbed chunk of all
repeats (``us_per_call_min_chunk``: the machine is shared, ``load_average_1_5_15_min`` says how busy it was), the C modules Triton built or loaded (``compile_module_from_src``),
``triton.compile`` calls, the stand-in's launch count, and the kbuild frames a steady-state call enters
(``sys.setprofile``). Not a GPU measurement: benchmarks/gpu_session.md has the GPU step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "jit-package"
STANDIN = ROOT / "benchmarks" / "standin" / "libcuda_standin.c"
VARIANTS = ("triton", "kbuild-before", "kbuild", "kbuild-own-launcher")


def build_standin(work: Path) -> Path:
    out = work / "libcuda"
    out.mkdir()
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(out / "libcuda.so.1"), str(STANDIN)], check=True)
    return out


def build_package_data(work: Path) -> Path:
    from kbuild.build.package_data import write_package_data
    from kbuild.build.pipeline import run_pipeline
    from kbuild.settings.sources import load_settings

    settings = load_settings(EXAMPLE / "pyproject.toml")
    settings = dataclasses.replace(settings, targets=["sm_90"], tune="off", store=work / "store", remotes=[])
    builds = run_pipeline(settings, kernels=["softmax", "matmul_leaky_relu"])
    return Path(write_package_data(settings, builds, work / "kbx_jit").data_dir)


def export(ref: str, work: Path) -> Path:
    """kbuild at ``ref`` laid out as installed (``kbuild/``, with ``hooks/``, ``cache/`` and ``templates/`` inside)."""
    dest = work / "before"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "kbuild", "hooks", "cache", "templates"],
                             check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    for sub in ("hooks", "cache", "templates"):
        (dest / sub).rename(dest / "kbuild" / sub)
    return dest


def child(variant: str, data_dir: Path, calls: int, src: Path, libcuda: Path, cache: Path) -> dict[str, Any]:
    if variant == "kbuild-own-launcher":  # an empty Triton cache: nothing of Triton's is built or loaded
        cache = Path(tempfile.mkdtemp(prefix="triton-empty-", dir=cache.parent))
    env = dict(os.environ, LD_LIBRARY_PATH=str(libcuda), TRITON_LIBCUDA_PATH=str(libcuda),
               TRITON_CACHE_DIR=str(cache), KBUILD_RUNTIME="off" if variant == "triton" else "on",
               PYTHONPATH=str(EXAMPLE), KBUILD_BENCH_SRC=str(src))
    env.pop("KBUILD_RUNTIME_LAUNCH", None)
    done = subprocess.run([sys.executable, __file__, "--child", variant, "--data-dir", str(data_dir), "--calls",
                           str(calls)], env=env, capture_output=True, text=True, timeout=900, check=False,
                          cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{done.stderr[-4000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


# ----------------------------------------------------------------------------------------------
# One process


def use_source(src: str) -> None:
    """Import kbuild from ``src`` (a checkout, or an export laid out as installed), not from the editable install's
    redirecting finder."""
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
    sys.path.insert(0, src)


def launcher_of(jit: Any) -> str:
    """What launches the function's cached kernel: Triton's ``CudaLauncher`` or kbuild's ``direct_launch``."""
    kernels = list(jit.device_caches[0][0].values()) if 0 in jit.device_caches else []
    if len(kernels) != 1:
        return f"{len(kernels)} kernels in Triton's kernel_cache"
    run = kernels[0]._run
    return f"{run.__module__}.{run.__name__}" if hasattr(run, "__code__") else \
        f"{type(run).__module__}.{type(run).__qualname__}"


def run_child(variant: str, data_dir: Path, calls: int) -> dict[str, Any]:
    import ctypes

    import torch

    # Stand-ins for torch's CUDA queries (labelled in the module docstring); set before Triton reads them.
    torch._C._cuda_getCurrentRawStream = lambda device: 77
    torch.cuda.is_available = lambda: True
    torch.cuda.is_initialized = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    torch.cuda.set_device = lambda device: None
    import triton.compiler
    import triton.runtime.build as build
    from triton.backends.nvidia import driver as nvidia_driver

    modules: list[str] = []
    compiles: list[int] = []
    original_module = build.compile_module_from_src
    original_compile = triton.compiler.compile

    def counted_module(*args: Any, **kwargs: Any) -> Any:
        modules.append(str(kwargs.get("name")))
        return original_module(*args, **kwargs)

    def counted_compile(*args: Any, **kwargs: Any) -> Any:
        compiles.append(1)
        return original_compile(*args, **kwargs)

    build.compile_module_from_src = counted_module
    nvidia_driver.compile_module_from_src = counted_module
    triton.compiler.compile = counted_compile
    lib = ctypes.CDLL("libcuda.so.1")
    lib.standin_launches.restype = ctypes.c_ulonglong

    import kbuild.runtime

    if variant != "triton":
        assert kbuild.runtime.enable("kbx_jit", data_dir=data_dir)
    import kbx_jit.kernels as k

    x = torch.empty(64 * 1024, dtype=torch.float16).view(64, 1024)
    out = torch.empty_like(x)
    a = torch.empty(512 * 512, dtype=torch.float16).view(512, 512)
    b, c = torch.empty_like(a), torch.empty_like(a)

    def softmax() -> None:
        k.softmax[(64,)](out, x, x.stride(0), out.stride(0), 1024, BLOCK=1024, num_warps=4, num_stages=3)

    def matmul() -> None:
        k.matmul_leaky_relu[(16,)](a, b, c, 512, 512, 512, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                   c.stride(0), c.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8,
                                   SLOPE=0.01, num_warps=8, num_stages=3)

    rows: dict[str, Any] = {}
    for name, call in (("softmax", softmax), ("matmul", matmul)):
        before = (len(modules), len(compiles), lib.standin_launches())
        t0 = time.perf_counter()
        call()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        call()
        second = time.perf_counter() - t0
        frames: list[str] = []

        def profile(frame: Any, event: str, arg: Any, frames: list[str] = frames) -> None:
            if event in ("call", "c_call"):
                module = frame.f_globals.get("__name__", "")
                if event == "call" and str(module).startswith("kbuild"):
                    frames.append(f"{module}:{frame.f_code.co_name}")

        sys.setprofile(profile)
        call()
        sys.setprofile(None)
        chunks = []
        per = max(calls // 10, 1)
        for _ in range(10):
            t0 = time.perf_counter_ns()
            for _ in range(per):
                call()
            chunks.append((time.perf_counter_ns() - t0) / per / 1000)
        rows[name] = {"first_call_s": first, "second_call_s": second, "us_per_call": statistics.median(chunks),
                      "us_per_call_chunks": chunks, "calls": per * 10,
                      "c_modules": modules[before[0]:], "triton_compiles": len(compiles) - before[1],
                      "standin_launches": lib.standin_launches() - before[2], "kbuild_frames_per_call": frames,
                      "launcher": launcher_of(k.softmax if name == "softmax" else k.matmul_leaky_relu)}
    stages = [e.stage for e in kbuild.runtime.events()]
    # What one pointer argument of a CPU tensor costs kbuild's launcher here: the stand-in driver's
    # cuPointerGetAttribute through ctypes (a CUDA tensor on a GPU skips it; Triton's C launcher asks in C).
    from kbuild.device import cuda

    binding = cuda.driver()
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        binding.device_pointer(x.data_ptr())
    pointer_query_us = (time.perf_counter_ns() - t0) / calls / 1000
    return {"variant": variant, "kernels": rows, "stages": stages, "pointer_query_us": pointer_query_us}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before", default=None, help="git ref of the kbuild measured as kbuild-before "
                                                        "(default: git merge-base HEAD main)")
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--data-dir", type=Path)
    args = parser.parse_args()
    if args.child:
        if Path(os.environ["KBUILD_BENCH_SRC"]).resolve() != ROOT:
            use_source(os.environ["KBUILD_BENCH_SRC"])
        import kbuild

        found = Path(kbuild.__file__).resolve().parent
        assert found == Path(os.environ["KBUILD_BENCH_SRC"]).resolve() / "kbuild", found
        print(json.dumps({**run_child(args.child, args.data_dir, args.calls), "kbuild": str(found)}))
        return 0
    if args.out is None:
        parser.error("--out is required")
    ref = args.before or subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], check=True,
                                        capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    samples: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    load_before = os.getloadavg()  # the machine is shared: how busy it was says how noisy the numbers are
    with tempfile.TemporaryDirectory(prefix="kbuild-per-call-") as tmp:
        work = Path(tmp)
        libcuda = build_standin(work)
        data_dir = build_package_data(work)
        srcs = {"triton": ROOT, "kbuild-before": export(ref, work), "kbuild": ROOT,  # ROOT: kbuild/ lives there
                "kbuild-own-launcher": ROOT}
        cache = work / "triton-cache"
        for v in VARIANTS:  # untimed: Triton's cache gets its C modules (the stand-in's) and compiled kernels
            child(v, data_dir, 100, srcs[v], libcuda, cache)
        for _ in range(args.repeats):
            for v in VARIANTS:
                samples[v].append(child(v, data_dir, args.calls, srcs[v], libcuda, cache))
        shutil.rmtree(cache, ignore_errors=True)
    rows: dict[str, Any] = {}
    for v in VARIANTS:
        rows[v] = {}
        for kernel in ("softmax", "matmul"):
            ks = [s["kernels"][kernel] for s in samples[v]]
            rows[v][kernel] = {
                "us_per_call": statistics.median(s["us_per_call"] for s in ks),
                # the least disturbed chunk of all repeats: on a shared machine, the closest to the host cost itself
                "us_per_call_min_chunk": min(c for s in ks for c in s["us_per_call_chunks"]),
                "first_call_s": statistics.median(s["first_call_s"] for s in ks),
                "second_call_s": statistics.median(s["second_call_s"] for s in ks),
                "c_modules": sorted({m for s in ks for m in s["c_modules"]}),
                "triton_compiles": max(s["triton_compiles"] for s in ks),
                "kbuild_frames_per_call": ks[-1]["kbuild_frames_per_call"],
                "launcher": ks[-1]["launcher"]}
        rows[v]["pointer_query_us"] = statistics.median(s["pointer_query_us"] for s in samples[v])
    own = rows["kbuild-own-launcher"]
    for kernel, pointers in (("softmax", 2), ("matmul", 3)):
        for stat in ("us_per_call", "us_per_call_min_chunk"):
            own[kernel][f"{stat}_less_pointer_queries"] = own[kernel][stat] - pointers * own["pointer_query_us"]
    doc = {"label": "CPU stand-in (no GPU): host cost per call only, not a GPU measurement",
           "machine": "CPU, no GPU: libcuda.so.1 is a stand-in (benchmarks/standin/libcuda_standin.c), torch's CUDA "
                      "queries are stand-ins, tensors are CPU tensors; host cost only",
           "load_average_1_5_15_min": {"before": load_before, "after": os.getloadavg(), "cpus": os.cpu_count()},
           "command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d"), "head": head,
           "before": ref, "calls": args.calls, "repeats": args.repeats, "rows": rows, "samples": samples}
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"{'variant':<20} {'kernel':<8} {'us/call':>8} {'min':>6} {'first':>9} {'second':>9}  C modules, "
          "kbuild frames/call")
    for v in VARIANTS:
        for kernel, r in rows[v].items():
            if kernel == "pointer_query_us":
                continue
            print(f"{v:<20} {kernel:<8} {r['us_per_call']:>8.2f} {r['us_per_call_min_chunk']:>6.2f} "
                  f"{r['first_call_s'] * 1e3:>7.1f}ms "
                  f"{r['second_call_s'] * 1e3:>7.1f}ms  {r['c_modules']}, {len(r['kbuild_frames_per_call'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
