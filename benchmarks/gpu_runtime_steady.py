"""Steady state of shipped kernels on one GPU (issue 34, item 0): per-call time with kbuild's runtime on against
``KBUILD_RUNTIME=off``, side by side, interleaved, on small launches where host overhead shows.

Run on the GPU machine from the repository root, kbuild from the tree (no pip install of kbuild)::

    PYTHONPATH=$PWD:/tmp/site python3 benchmarks/gpu_runtime_steady.py --out $OUT/steady.json
    python benchmarks/gpu_runtime_steady.py --out FILE --dry-run     # CPU: the build, the index and the child's code

1. **build** (CPU work, :func:`gpu_runtime_coldstart.build`): examples/jit-package copied to a temporary directory,
   its kernels compiled for this GPU (``tune = "off"``) and its ``kbx_jit/_kbuild/`` written (index version 2, every
   entry with Triton's metadata); the children import it from there.
2. **measure**: fresh child processes, one per variant and round, the variants' order rotated each round
   (``--rounds``):

   * ``off``: ``KBUILD_RUNTIME=off``, Triton's own JIT, with a Triton cache that an untimed ``off`` child filled
     (its kernels, ``cuda_utils`` and the launchers): Triton's steady state;
   * ``on``: kbuild.runtime on (zero-JIT first call) with that same Triton cache: the shipped kernel sits in
     Triton's ``kernel_cache`` and is launched by Triton's own launcher loaded from Triton's cache
     (``kbuild.runtime.direct.cached_triton_launcher``);
   * ``on-own-launcher``: kbuild.runtime on with an empty Triton cache per child (a fresh machine) and
     ``KBUILD_RUNTIME_HANDOVER=0``: the shipped kernel is launched by kbuild's generated launcher
     (``kbuild.runtime.direct.DirectLauncher``) on every call; nothing is built with the host compiler;
   * ``on-hand-over``: the same fresh machine with ``KBUILD_RUNTIME_HANDOVER`` at :data:`HAND_OVER_CALLS`: kbuild's
     launcher runs the first calls, then Triton's launcher, built in a background thread, takes over (the child
     waits for that build after the warm-up and reports the wait).

   Each child calls the kernels as examples/jit-package's entry points do, into preallocated outputs (so that only
   the launch path is timed, no allocation): ``softmax`` on 64×1024 fp16 and ``matmul_leaky_relu`` on 512³ fp16.
   Per kernel: the first and second call (seconds, each to a synchronise), ``--warmup`` calls, then ``--inner``
   samples alternating the kernels, each of ``--calls`` back-to-back calls: **host µs per call** (``perf_counter``
   around the calls, no synchronise inside: what the launch path costs the host), **CUDA-event µs per call**
   (events recorded on torch's current stream before the first and after the last call), and wall µs per call
   (to after ``torch.cuda.synchronize()``). Also the output's sha256 (every variant must give the same bytes),
   what launches the cached kernel, the runtime's event stages, the coverage totals and the C modules Triton built.
3. **strict**: one ``KBUILD_RUNTIME=strict`` child making the same calls; it must not raise (every call shipped).

Medians are over every sample of a variant (all its children), raw samples kept. Target (issue 34): ``on`` and
``on-own-launcher`` within 2% of ``off`` per call. About 3 minutes on an H100 with the defaults.
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

VARIANTS = ("off", "on", "on-own-launcher", "on-hand-over")
OPS = ("softmax", "matmul")
#: ``on-hand-over``'s ``KBUILD_RUNTIME_HANDOVER``: fewer than the warm-up's calls, so that Triton's launcher, built
#: in the background, runs every timed call (the child waits for the build after the warm-up).
HAND_OVER_CALLS = 100

_CHILD = r'''
import hashlib, json, sys, time
sys.path.insert(0, {src!r})
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
import triton.runtime.build as build
from triton.backends.nvidia import driver as nvidia
built = []
_original_build = build._build
def _counted_build(name, *a, **k):
    built.append(name)
    return _original_build(name, *a, **k)
build._build = _counted_build
import kbx_jit, kbuild.runtime
from kbx_jit import kernels
torch.manual_seed(0)
x = torch.randn((64, 1024), device="cuda", dtype=torch.float16)
y = torch.empty_like(x)
a = torch.randn((512, 512), device="cuda", dtype=torch.float16)
b = torch.randn((512, 512), device="cuda", dtype=torch.float16)
c = torch.empty((512, 512), device="cuda", dtype=torch.float16)
def softmax():
    kernels.softmax[(64,)](y, x, x.stride(0), y.stride(0), 1024, BLOCK=1024, num_warps=4, num_stages=3)
def matmul():
    kernels.matmul_leaky_relu[(16,)](a, b, c, 512, 512, 512, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                     c.stride(0), c.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8,
                                     SLOPE=0.01, num_warps=8, num_stages=3)
ops = {{"softmax": (softmax, kernels.softmax, y), "matmul": (matmul, kernels.matmul_leaky_relu, c)}}
rows = {{}}
for name, (op, jit, out) in ops.items():
    t0 = time.perf_counter(); op(); torch.cuda.synchronize(); first = time.perf_counter() - t0
    t0 = time.perf_counter(); op(); torch.cuda.synchronize(); second = time.perf_counter() - t0
    for _ in range({warmup}):
        op()
    torch.cuda.synchronize()
    import threading
    t0 = time.perf_counter()
    for t in threading.enumerate():  # on-hand-over: Triton's launcher is being built in the background
        if t.name.startswith("kbuild-hand-over-"):
            t.join(timeout=120)
    hand_over_wait = time.perf_counter() - t0
    digest = hashlib.sha256(out.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()
    cached = list(jit.device_caches[torch.cuda.current_device()][0].values())
    run = getattr(cached[0], "_run", None) if len(cached) == 1 else None
    launcher = (f"{{run.__module__}}.{{run.__name__}}" if hasattr(run, "__code__") else
                f"{{type(run).__module__}}.{{type(run).__qualname__}}")
    rows[name] = {{"first_call_s": first, "second_call_s": second, "out_sha256": digest, "kernels_cached": len(cached),
                  "hand_over_wait_s": hand_over_wait,
                  "kbuild_kernel": [getattr(k, "kbuild_entry", None) is not None for k in cached],
                  "launcher": launcher, "host_us": [], "event_us": [], "wall_us": []}}
calls = {calls}
stream = torch.cuda.current_stream()
for _ in range({inner}):
    for name, (op, jit, out) in ops.items():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record(stream)
        t0 = time.perf_counter()
        for _ in range(calls):
            op()
        t1 = time.perf_counter()
        end.record(stream)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        rows[name]["host_us"].append((t1 - t0) / calls * 1e6)
        rows[name]["event_us"].append(start.elapsed_time(end) * 1e3 / calls)
        rows[name]["wall_us"].append((t2 - t0) / calls * 1e6)
print(json.dumps({{"rows": rows, "built": built, "stages": [e.stage for e in kbuild.runtime.events()],
                  "coverage": kbuild.runtime.coverage_report()["totals"]}}))
'''


def child_code(src: str, *, calls: int, inner: int, warmup: int) -> str:
    """The child's program (``python -c``)."""
    return _CHILD.format(src=src, calls=calls, inner=inner, warmup=warmup)


def child(code: str, variant: str, cache: Path) -> dict[str, Any]:
    """One fresh process of ``variant`` (``strict`` too) with Triton's cache at ``cache``."""
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache),
               KBUILD_RUNTIME={"off": "off", "strict": "strict"}.get(variant, "on"),
               # kbuild's launcher throughout, or handing over to Triton's after HAND_OVER_CALLS (within the warm-up)
               KBUILD_RUNTIME_HANDOVER={"on-own-launcher": "0", "on-hand-over": str(HAND_OVER_CALLS)}.get(variant, ""))
    env.pop("KBUILD_RUNTIME_LAUNCH", None)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          cwd=tempfile.gettempdir(), check=False)
    if proc.returncode != 0:
        return {"variant": variant, "error": proc.stderr[-3000:]}
    doc = dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {"variant": variant, "process_s": round(time.perf_counter() - started, 2), **doc}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per kernel: each variant's medians (host, event, wall µs per call; first and second call), the ratios to
    ``off``, whether every output is the same bytes, and what launched the kernel."""
    out: dict[str, Any] = {}
    for op in OPS:
        rows = {v: [s["rows"][op] for s in samples[v] if "rows" in s] for v in samples}
        med = {v: {m: _median([x for r in rows[v] for x in r[m]]) for m in ("host_us", "event_us", "wall_us")}
               for v in rows}
        for v in rows:
            med[v]["first_call_s"] = _median([r["first_call_s"] for r in rows[v]])
            med[v]["second_call_s"] = _median([r["second_call_s"] for r in rows[v]])
        ratios = {v: {m: (med[v][m] / med["off"][m]) if med[v][m] and med["off"][m] else None
                      for m in ("host_us", "event_us", "wall_us")} for v in rows if v != "off"}
        out[op] = {"median": med, "ratio_to_off": ratios,
                   "bit_identical": len({r["out_sha256"] for v in rows for r in rows[v]}) == 1,
                   "launchers": {v: sorted({r["launcher"] for r in rows[v]}) for v in rows},
                   "children": {v: len(rows[v]) for v in rows}}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=5, help="children per variant, the order rotated each round")
    parser.add_argument("--inner", type=int, default=20, help="samples per kernel in each child")
    parser.add_argument("--calls", type=int, default=500, help="back-to-back calls per sample")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--cc", type=int, default=None, help="target compute capability (default: this GPU's)")
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU: build, check the index and compile the child's code; measure nothing")
    args = parser.parse_args()
    cc = args.cc
    if cc is None and not args.dry_run:
        import torch

        major, minor = torch.cuda.get_device_capability()
        cc = major * 10 + minor
    doc: dict[str, Any] = {"command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d"),
                           "rounds": args.rounds, "inner": args.inner, "calls": args.calls, "warmup": args.warmup,
                           "variants": list(VARIANTS)}
    with tempfile.TemporaryDirectory(prefix="kbuild-steady-") as tmp:
        work = Path(tmp)
        built = build(work, cc or 90, EXAMPLE)
        doc["build"] = built
        code = child_code(built["src"], calls=args.calls, inner=args.inner, warmup=args.warmup)
        compile(code, "<gpu_runtime_steady child>", "exec")  # the child's program is valid Python
        if args.dry_run:
            doc["dry_run"] = True
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            print(json.dumps(built))
            return 0
        import torch

        doc["device"] = torch.cuda.get_device_name()
        cache = work / "triton-cache"
        doc["warm_child"] = child(child_code(built["src"], calls=10, inner=1, warmup=10), "off", cache)
        samples: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
        started = time.perf_counter()
        for r in range(args.rounds):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for variant in order:
                where = (Path(tempfile.mkdtemp(prefix="empty-", dir=work)) if variant.startswith("on-") else cache)
                samples[variant].append(child(code, variant, where))
            print(f"round {r + 1}/{args.rounds} done at {time.perf_counter() - started:.0f} s", file=sys.stderr)
        doc["strict"] = child(child_code(built["src"], calls=10, inner=1, warmup=10), "strict", cache)
    doc["samples"] = samples
    doc["errors"] = [s["error"] for v in samples for s in samples[v] if "error" in s]
    doc["summary"] = summary = summarise(samples)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{'kernel':<8} {'variant':<16} {'host us':>8} {'event us':>9} {'wall us':>8} {'host/off':>9} "
          f"{'event/off':>10}  launcher")
    for op, row in summary.items():
        for v in VARIANTS:
            m, ratio = row["median"][v], row["ratio_to_off"].get(v, {})
            fmt = lambda x, p=2: f"{x:.{p}f}" if x is not None else "-"  # noqa: E731
            print(f"{op:<8} {v:<16} {fmt(m['host_us']):>8} {fmt(m['event_us']):>9} {fmt(m['wall_us']):>8} "
                  f"{fmt(ratio.get('host_us'), 3):>9} {fmt(ratio.get('event_us'), 3):>10}  {row['launchers'][v]}")
        print(f"{op:<8} bit-identical: {row['bit_identical']}")
    print("strict:", "ok" if "rows" in doc["strict"] else doc["strict"].get("error", "")[-500:])
    print("errors:", len(doc["errors"]))
    return 1 if doc["errors"] or "rows" not in doc["strict"] else 0


if __name__ == "__main__":
    sys.exit(main())
