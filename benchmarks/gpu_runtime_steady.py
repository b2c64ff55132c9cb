"""Steady state of a shipped kernel on the GPU (issue 34, item 0): per-call time with kbuild's runtime on against
``KBUILD_RUNTIME=off``, side by side, and the first and second call.

Run on the GPU machine (kbuild on ``PYTHONPATH`` as for the other ``gpu_*`` scripts)::

    python benchmarks/gpu_runtime_steady.py --out FILE [--calls 10000] [--repeats 5]
    python benchmarks/gpu_runtime_steady.py --out FILE --dry-run     # CPU: build and index checks only

1. **build** (CPU work, :func:`gpu_runtime_coldstart.build`): examples/jit-package compiled for this GPU
   (``tune = "off"``), its package data written with every kernel (index version 2).
2. **measure**: fresh processes, alternating ``on`` (the package's ``_kbuild`` enables kbuild.runtime: zero-JIT
   first call, direct launch) and ``off`` (``KBUILD_RUNTIME=off``: Triton's own JIT), ``--repeats`` times, one shared
   Triton cache (warmed by an untimed ``off`` child, so ``off``'s first call is a disk-cache hit). Each process
   calls examples/jit-package's own entry points (``kbx_jit.softmax`` on 64×1024 fp16: a small launch, where host
   overhead shows; ``kbx_jit.matmul_leaky_relu`` on 512³) once, again, then ``--calls`` times with one
   ``torch.cuda.synchronize()`` at the end: wall µs per call, the host-bound steady state. Also: each output's
   sha256 (on and off must be bit-identical), the runtime's events and coverage totals, whether the kernel in
   Triton's ``kernel_cache`` is kbuild's (``kbuild_entry``), and a ``KBUILD_RUNTIME=strict`` process that makes the
   same calls (it must not raise: every call is shipped).

Target: ``on`` within 2% of ``off`` per call (medians of the repeats); ``on``'s first call zero-JIT.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpu_runtime_coldstart import EXAMPLE, build  # noqa: E402

_CHILD = r'''
import hashlib, json, sys, time
sys.path.insert(0, {src!r})
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
import kbx_jit, kbuild.runtime
from kbx_jit import kernels
calls = {calls}
torch.manual_seed(0)
x = torch.randn((64, 1024), device="cuda", dtype=torch.float16)
a = torch.randn((512, 512), device="cuda", dtype=torch.float16)
b = torch.randn((512, 512), device="cuda", dtype=torch.float16)
ops = {{"softmax": (lambda: kbx_jit.softmax(x), kernels.softmax),
       "matmul": (lambda: kbx_jit.matmul_leaky_relu(a, b), kernels.matmul_leaky_relu)}}
rows = {{}}
for name, (op, jit) in ops.items():
    t0 = time.perf_counter(); out = op(); torch.cuda.synchronize(); first = time.perf_counter() - t0
    t0 = time.perf_counter(); op(); torch.cuda.synchronize(); second = time.perf_counter() - t0
    for _ in range(100):
        op()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        op()
    torch.cuda.synchronize()
    per_call_us = (time.perf_counter() - t0) / calls * 1e6
    cached = list(jit.device_caches[torch.cuda.current_device()][0].values())
    rows[name] = {{"first_call_s": first, "second_call_s": second, "per_call_us": per_call_us,
                  "out_sha256": hashlib.sha256(out.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest(),
                  "kbuild_kernel": [getattr(k, "kbuild_entry", None) is not None for k in cached],
                  "launcher": [getattr(getattr(k, "_run", None), "__name__", type(getattr(k, "_run", None)).__name__)
                               for k in cached]}}
print(json.dumps({{"rows": rows, "events": [e.stage for e in kbuild.runtime.events()],
                  "coverage": kbuild.runtime.coverage_report()["totals"]}}))
'''


def child(src: str, mode: str, cache: Path, calls: int) -> dict[str, Any]:
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache), KBUILD_RUNTIME=mode)
    env.pop("KBUILD_RUNTIME_LAUNCH", None)
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(src=src, calls=calls)], env=env, capture_output=True,
                          text=True, timeout=600, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        return {"error": proc.stderr[-3000:]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cc", type=int, default=None, help="target compute capability (default: this GPU's)")
    parser.add_argument("--dry-run", action="store_true", help="build and check the index only (CPU)")
    args = parser.parse_args()
    cc = args.cc
    if cc is None:
        if args.dry_run:
            cc = 90
        else:
            import torch

            major, minor = torch.cuda.get_device_capability()
            cc = major * 10 + minor
    doc: dict[str, Any] = {"command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d"),
                           "calls": args.calls, "repeats": args.repeats}
    with tempfile.TemporaryDirectory(prefix="kbuild-steady-") as tmp:
        work = Path(tmp)
        built = build(work, cc, EXAMPLE)
        doc["build"] = built
        if args.dry_run:
            args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            print(json.dumps(built))
            return 0
        import torch

        doc["device"] = torch.cuda.get_device_name()
        cache = work / "triton-cache"
        child(built["src"], "off", cache, 100)  # untimed: Triton's cache holds its compiles and C modules
        samples: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
        for _ in range(args.repeats):
            for mode in ("on", "off"):
                samples[mode].append(child(built["src"], mode, cache, args.calls))
        doc["strict"] = child(built["src"], "strict", cache, 100)
    doc["samples"] = samples
    summary: dict[str, Any] = {}
    for op in ("softmax", "matmul"):
        ok = {m: [s["rows"][op] for s in samples[m] if "rows" in s] for m in samples}
        med = {m: statistics.median(r["per_call_us"] for r in ok[m]) if ok[m] else None for m in ok}
        summary[op] = {"per_call_us": med, "ratio_on_off": (med["on"] / med["off"]) if med["on"] and med["off"] else None,
                       "first_call_s": {m: statistics.median(r["first_call_s"] for r in ok[m]) if ok[m] else None
                                        for m in ok},
                       "second_call_s": {m: statistics.median(r["second_call_s"] for r in ok[m]) if ok[m] else None
                                         for m in ok},
                       "bit_identical": len({r["out_sha256"] for m in ok for r in ok[m]}) == 1}
    doc["summary"] = summary
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{'op':<8} {'on us/call':>11} {'off us/call':>12} {'on/off':>7}  first on/off  bit-identical")
    for op, r in summary.items():
        on, off = r["per_call_us"]["on"], r["per_call_us"]["off"]
        ratio = f"{r['ratio_on_off']:.3f}" if r["ratio_on_off"] else "–"
        print(f"{op:<8} {on or 0:>11.2f} {off or 0:>12.2f} {ratio:>7}  {r['first_call_s']['on'] or 0:.4f}/"
              f"{r['first_call_s']['off'] or 0:.4f} s  {r['bit_identical']}")
    print("strict:", "ok" if "rows" in doc["strict"] else doc["strict"].get("error", "")[-500:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
