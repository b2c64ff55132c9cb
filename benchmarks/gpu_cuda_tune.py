"""H200: tune the SASS of examples/cuda-cmake's three CUDA C++ kernels as kbuild-nvcc would (issue 17), verify the
result against the untouched cubin and measure the claimed speedup again in a fresh worker.

For each kernel (the mma.sync matmul ``matmul_f16_kernel<64, 64, 32, 2, 2>``, the reduction ``sum_f32_kernel<256>``,
the fp16 GELU ``gelu_f16_kernel``):

1. nvcc (``kbuild nvcc --where``, or ``--nvcc``) compiles its ``.cu`` to an sm_90 cubin (``-cubin -O3``);
2. the kernel is found by its demangled name (:func:`kbuild.nvcc.tuned.find_symbol`, as the launcher finds it);
3. :func:`kbuild.nvcc.tuned.tune_kernel` runs the greedy SASS search through the measurement worker (the CUDA
   session: driver-API launch with the spec of ``examples/cuda-cmake/kbx_cuda_bench.py``), and checks and times the
   result against the untouched cubin (the claimed speedup; the tuner's own acceptance rule);
4. a fresh worker loads the untouched cubin again, checks the shipped cubin on 10 new input sets, and times it
   (20 rounds x 20 launches, interleaved, with an A/A control): the measured ratio set beside the claim.

The reduction adds into its output with atomicAdd, so its check is within rtol 1e-5 (the spec's Tolerance), not
bitwise; the matmul and GELU are compared bit for bit. The configuration level (``maxrregcount`` variants) is not
run here (``-cubin`` has no PTX step to re-run); the launcher runs it when a kernel declares values.

    python benchmarks/gpu_cuda_tune.py [--nvcc PATH] [--out $OUT/gpu_cuda_tune.json] [--seconds 45]
    python benchmarks/gpu_cuda_tune.py --dry-run      # CPU: compile, find, load specs, cost-model search

Needs the nvidia-cuda-* wheels (``pip install --no-index --find-links .whl 'kbuild[cuda]'``) or ``--nvcc``, plus
the tune extra's wheels (gymnasium, ...). About 3 minutes on one H200 at the default budget (3 x 45 s search, plus
the checks and timings).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cuda-cmake"
KERNELS = [  # name, source, demangled function, bench spec
    ("matmul", "src/matmul.cu", "matmul_f16_kernel<64, 64, 32, 2, 2>", "kbx_cuda_bench:matmul"),
    ("reduce", "src/reduce.cu", "sum_f32_kernel<256>", "kbx_cuda_bench:reduce_sum"),
    ("gelu", "src/elementwise.cu", "gelu_f16_kernel", "kbx_cuda_bench:gelu"),
]


def compile_cubin(nvcc: str, source: Path, out: Path, arch: str) -> bytes:
    cmd = [nvcc, "-cubin", "-O3", f"-arch={arch}", "-I", str(source.parent), "-o", str(out), str(source)]
    subprocess.run(cmd, check=True)
    return out.read_bytes()


def verify(cubin: bytes, shipped: bytes, ref: Any) -> dict[str, Any]:
    """A fresh worker: the shipped cubin against the untouched one (check, then interleaved timing)."""
    from kbuild.tune.measure.backend import K_ACCEPT
    from kbuild.tune.measure.client import WorkerClient

    backend = WorkerClient()
    try:
        info = backend.load(ref, cubin)
        chk = backend.check(shipped, K_ACCEPT, seed=424_242)
        t = backend.time(shipped, rounds=20, reps=20) if chk.valid else None
    finally:
        backend.close()
    return {"device": info.device, "details": info.details, "check": chk.as_dict(),
            "ratio": t.ratio if t else None, "ci": list(t.ci) if t else None,
            "aa_ratio": t.aa_ratio if t else None, "baseline_ms": t.baseline_ms if t else None,
            "shipped_ms": t.candidate_ms if t else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nvcc", help="nvcc to use (default: kbuild nvcc --where)")
    parser.add_argument("--out", default="gpu_cuda_tune.json", help="JSON output file")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--evaluations", type=int, default=150)
    parser.add_argument("--seconds", type=float, default=45.0, help="search budget per kernel")
    parser.add_argument("--only", nargs="*", help="kernel names (matmul, reduce, gelu)")
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU: small specs, cost-model search, no measurement (checks the script's plumbing)")
    args = parser.parse_args(argv)

    from kbuild.bench.cuda import load_cuda_spec
    from kbuild.bench.spec import validate_inputs
    from kbuild.nvcc.toolkit import find_nvcc
    from kbuild.nvcc.tuned import find_symbol, tune_kernel
    from kbuild.settings.sources import settings_from_table
    from kbuild.tune.measure.backend import KernelRef

    nvcc = args.nvcc or (str(find_nvcc()) if find_nvcc() else None)
    if nvcc is None:
        print("error: no nvcc: pip install --no-index --find-links .whl 'kbuild[cuda]', or pass --nvcc", file=sys.stderr)
        return 2
    settings = settings_from_table({"algorithm": "greedy", "budget": {"evaluations": args.evaluations,
                                                                      "seconds": args.seconds}}, where="gpu_cuda_tune")
    python_path = [str(EXAMPLE)]
    rows: list[dict[str, Any]] = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="kbuild-cuda-tune-") as tmp:
        for name, source, function, bench in KERNELS:
            if args.only and name not in args.only:
                continue
            row: dict[str, Any] = {"kernel": name, "function": function, "bench": bench, "arch": args.arch}
            rows.append(row)
            try:
                cubin = compile_cubin(nvcc, EXAMPLE / source, Path(tmp) / f"{name}.cubin", args.arch)
                symbol = find_symbol(cubin, function, where=str(EXAMPLE / "pyproject.toml"), key=name)
                row.update(symbol=symbol, cubin_bytes=len(cubin))
                spec = load_cuda_spec(bench, small=args.dry_run, python_path=python_path)
                if args.dry_run:
                    inputs = spec.make_inputs(1, "cpu")
                    validate_inputs(spec, inputs)  # type: ignore[arg-type]
                    row["dims"] = spec.dims(inputs)
                    backend = None
                else:
                    from kbuild.tune.measure.client import WorkerClient

                    backend = WorkerClient()
                try:
                    out = tune_kernel(settings.tune_request(), cubin=cubin, symbol=symbol, bench=bench,
                                      python_path=python_path, backend=backend)
                finally:
                    if backend is not None:
                        backend.close()
                level2 = out.report["level2"]
                row.update(accepted=out.accepted, claimed_speedup=out.speedup, decision=out.reason,
                           backend=out.backend, evaluations=level2.get("evaluations"), tune_seconds=round(out.seconds, 1),
                           movable=level2.get("movable_instructions"), diff=level2.get("diff"), report=out.report)
                if not args.dry_run:
                    ref = KernelRef(spec=bench, python_path=tuple(python_path), symbol=symbol)
                    row["verify"] = verify(cubin, out.cubin, ref)
                    r = row["verify"]["ratio"]
                    row["measured_speedup"] = (1.0 / r) if r else None
            except Exception as exc:  # one kernel's failure is recorded; the others still run
                row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    doc = {"script": "benchmarks/gpu_cuda_tune.py", "argv": sys.argv[1:], "dry_run": args.dry_run, "nvcc": nvcc,
           "seconds": round(time.time() - started, 1), "kernels": rows}
    if not args.dry_run:
        from kbuild.device.timing import device_report

        try:
            doc["device"] = device_report()
        except Exception as exc:  # the record still matters without it
            doc["device"] = {"error": str(exc)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"{'kernel':8} {'evals':>5} {'accepted':>8} {'claimed':>8} {'measured':>8} {'check':>6}  decision")
    for r in rows:
        if "error" in r:
            print(f"{r['kernel']:8} error: {r['error'][:200]}")
            continue
        chk = r.get("verify", {}).get("check", {})
        fmt = (lambda v: f"{v:.3f}x" if isinstance(v, float) else "-")  # noqa: E731
        print(f"{r['kernel']:8} {r.get('evaluations') or 0:>5} {r['accepted']!s:>8} {fmt(r.get('claimed_speedup')):>8} "
              f"{fmt(r.get('measured_speedup')):>8} {('ok' if chk.get('valid') else 'FAIL') if chk else '-':>6}  "
              f"{str(r.get('decision'))[:90]}")
    print(f"wrote {args.out} ({doc['seconds']} s)")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
