"""Issue 5 evidence on the H200: the kernel suite's baselines, and fault isolation of the measurement worker.

Run from the repository root on the GPU machine (nothing to install; kbuild is imported from the checkout)::

    python3 benchmarks/gpu_bench_run.py            # writes under $OUT (or benchmarks/results/h200)

Steps (about 3-5 minutes in all; each step has its own time limit):

1. **fault isolation** (this process never touches CUDA; it compiles cubins for sm_90 with Triton
   and hands them to the worker process): for ``benchmarks/gpu_bench_faults.py:spec`` the worker
   loads the correct MODE=0 cubin as baseline, then judges candidates in this order: a good one
   (the baseline with operand-reuse flags cleared: other .text, same results), an illegal address
   (store 2^38 elements past the output), four elements written past the end (guard band), a wrong
   value, one that overwrites its input, every scoreboard wait removed, a cubin for sm_80, an endless loop
   (watchdog), the OOB one again (evaluation-cache hit), then another good one (reuse flags cleared on
   every other instruction), which must be valid and timed sensibly, and the baseline itself.
   Then the real 512x512x2048 matmul + LeakyReLU: scoreboard waits removed (invalid) vs. reuse
   flags cleared (valid, K=10, timed against the baseline with an A/A control).
2. **suite**: ``python3 -m kbuild bench --out $OUT/bench`` (falls back to ``python3 -m
   kbuild.bench`` when the full CLI cannot import here).
3. **GPU tests**: ``pytest -m gpu`` on the bench and measure GPU tests (``--no-pytest`` skips).

Writes ``$OUT/fault_isolation.json``, ``$OUT/bench/bench.{json,png,md}``, ``$OUT/pytest_gpu.txt``
and prints short tables last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kbuild.bench.spec import compile_spec, load_spec  # noqa: E402
from kbuild.tune.measure.backend import K_ACCEPT, KernelRef  # noqa: E402
from kbuild.tune.measure.cache import CachedBackend  # noqa: E402
from kbuild.tune.measure.client import WorkerClient  # noqa: E402
from kbuild.tune.measure.cubin import (  # noqa: E402
    patch_text,
    text_digest,
    with_control,
    without_reuse,
    without_waits,
)

FAULTS = "gpu_bench_faults:spec"
MATMUL = "kbuild.bench.kernels.matmul:matmul_512x512x2048"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def fault_isolation(hang_timeout: float) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    spec = load_spec(FAULTS, python_path=[str(ROOT / "benchmarks")])
    mode = {i: compile_spec(spec, cfg, 90).kernel for i, cfg in enumerate(spec.configs)}
    baseline = mode[0]
    good, n_reuse = without_reuse(baseline)
    # Another semantically equal candidate (reuse flags cleared on even words only): new .text, no cache hit.
    good2, n_reuse2 = patch_text(baseline, lambda i, w: with_control(w, reuse=0) if i % 2 == 0 else w)
    no_waits, n_waits = without_waits(baseline)
    sm80 = compile_spec(spec, spec.configs[0], 80).kernel

    client = WorkerClient(timeout_s=hang_timeout, load_timeout_s=240, env=_env(), cwd=str(ROOT))
    backend = CachedBackend(client)
    info = backend.load(KernelRef(FAULTS, config=0, python_path=(str(ROOT / "benchmarks"),)), baseline)

    def judge(label: str, cubin: bytes, expect_valid: bool, *, k: int = 3, timed: bool = False) -> None:
        t0 = time.perf_counter()
        restarts = client.restarts
        res = backend.check(cubin, k=k)
        row: dict[str, Any] = {"candidate": label, "expect_valid": expect_valid, "valid": res.valid, "k": res.k,
                               "reason": res.reason, "restarted": client.restarts - restarts,
                               "text_sha256": text_digest(cubin)[:12] if cubin[:4] == b"\x7fELF" else None}
        if timed and res.valid:
            tr = backend.time(cubin, rounds=8, reps=10)
            row["time"] = {"valid": tr.valid, "ratio": tr.ratio, "ci": tr.ci, "aa_ratio": tr.aa_ratio,
                           "aa_ci": tr.aa_ci, "baseline_ms": tr.baseline_ms, "candidate_ms": tr.candidate_ms,
                           "reason": tr.reason, "samples": tr.samples}
        row["seconds"] = round(time.perf_counter() - t0, 2)
        row["as_expected"] = res.valid == expect_valid
        rows.append(row)
        print(f"  {label:40s} valid={res.valid!s:5s} restarted={row['restarted']} {row['seconds']:6.1f}s "
              f"{(res.reason or '')[:90]}", flush=True)

    print(f"fault isolation: loaded {info.kernel} on {info.device} (sm_{info.arch})", flush=True)
    judge(f"good: reuse flags cleared ({n_reuse} words)", good, True, k=K_ACCEPT, timed=True)
    judge("illegal address (store 2^38 past y)", mode[1], False)
    judge("writes 4 elements past the end (guard band)", mode[3], False)
    judge("wrong value (2x+1.5)", mode[4], False)
    judge("overwrites its input", mode[5], False)
    judge(f"all scoreboard waits removed ({n_waits} words)", no_waits, False)
    judge("cubin for sm_80", sm80, False)
    judge(f"endless loop (watchdog {hang_timeout:g} s)", mode[2], False)
    judge("illegal address again (cache hit)", mode[1], False)
    judge(f"another good one, after all that ({n_reuse2})", good2, True, k=K_ACCEPT, timed=True)
    judge("first good one again (cache hit)", good, True, k=K_ACCEPT, timed=True)
    judge("baseline itself", baseline, True, k=K_ACCEPT, timed=True)

    # A real kernel: the suite's small matmul.
    mspec = load_spec(MATMUL)
    mbase = compile_spec(mspec, mspec.configs[0], 90).kernel
    mgood, _ = without_reuse(mbase)
    mbad, mn = without_waits(mbase)
    minfo = backend.load(KernelRef(MATMUL, config=0), mbase)
    print(f"fault isolation: loaded {minfo.kernel}; baseline vs reference {minfo.details}", flush=True)
    judge(f"matmul: all scoreboard waits removed ({mn})", mbad, False)
    judge("matmul: reuse flags cleared", mgood, True, k=K_ACCEPT, timed=True)
    judge("matmul: baseline itself", mbase, True, k=K_ACCEPT, timed=True)
    backend.close()
    return {"rows": rows, "restarts": client.restarts, "cache": vars(backend.stats),
            "all_as_expected": all(r["as_expected"] for r in rows), "seconds": round(time.perf_counter() - started, 1),
            "device": info.device}


def run_bench(out: Path, timeout: float, extra: list[str]) -> dict[str, Any]:
    cmds = [[sys.executable, "-m", "kbuild", "bench", "--out", str(out), *extra],
            [sys.executable, "-m", "kbuild.bench", "--out", str(out), *extra]]
    for cmd in cmds:
        t0 = time.perf_counter()
        try:
            res = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout,
                                 check=False)
        except subprocess.TimeoutExpired as exc:
            return {"command": cmd, "error": f"timed out after {timeout} s",
                    "stderr": (exc.stderr or b"")[-3000:].decode() if isinstance(exc.stderr, bytes) else ""}
        cli_missing = res.returncode not in (0, 1) and ("invalid choice" in res.stderr
                                                        or "ModuleNotFoundError" in res.stderr
                                                        or "ImportError" in res.stderr)
        if cli_missing and cmd is cmds[0]:
            print(f"  `{' '.join(cmd[1:4])}` unavailable here ({res.stderr.strip().splitlines()[-1][:120]}); "
                  "using python -m kbuild.bench", flush=True)
            continue
        return {"command": cmd, "returncode": res.returncode, "seconds": round(time.perf_counter() - t0, 1),
                "stderr_tail": res.stderr[-6000:]}
    return {"error": "unreachable"}


def run_pytest(out: Path, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
           "tests/measure/test_measure_gpu.py", "tests/bench/test_bench_gpu.py"]
    try:
        res = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"command": cmd, "error": f"timed out after {timeout} s"}
    (out / "pytest_gpu.txt").write_text(res.stdout + res.stderr)
    return {"command": cmd, "returncode": res.returncode, "summary": (res.stdout.strip().splitlines() or [""])[-1]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "benchmarks/results/h200"))
    p.add_argument("--bench-timeout", type=float, default=330.0)
    p.add_argument("--hang-timeout", type=float, default=15.0)
    p.add_argument("--no-pytest", action="store_true")
    p.add_argument("--no-bench", action="store_true")
    p.add_argument("bench_args", nargs="*", help="extra arguments for kbuild bench (e.g. kernel names)")
    args = p.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"argv": sys.argv}
    t0 = time.perf_counter()

    print("== 1. fault isolation", flush=True)
    try:
        record["fault_isolation"] = fault_isolation(args.hang_timeout)
    except Exception as exc:  # keep going: the suite numbers are still worth having
        record["fault_isolation"] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"  fault isolation failed: {type(exc).__name__}: {exc}", flush=True)
    (out / "fault_isolation.json").write_text(json.dumps(record["fault_isolation"], indent=1, default=str))

    if not args.no_bench:
        print("== 2. kbuild bench", flush=True)
        record["bench"] = run_bench(out / "bench", args.bench_timeout, args.bench_args)
    left = 540.0 - (time.perf_counter() - t0)  # stay inside a 10-minute command limit
    if not args.no_pytest and left > 60:
        print("== 3. GPU tests", flush=True)
        record["pytest"] = run_pytest(out, min(150.0, left))
    elif not args.no_pytest:
        record["pytest"] = {"error": "skipped: not enough time left in this call"}
    record["seconds"] = round(time.perf_counter() - t0, 1)
    (out / "gpu_bench_run.json").write_text(json.dumps(record, indent=1, default=str))

    # Short tables last.
    bench = record.get("bench", {})
    if bench.get("stderr_tail"):
        tail = bench["stderr_tail"]
        start = tail.rfind("ceilings:")
        print(tail[start:] if start >= 0 else tail[-4000:])
    if "error" in bench:
        print(f"bench: {bench['error']}")
    fi = record["fault_isolation"]
    if "rows" in fi:
        print(f"fault isolation ({fi['seconds']} s, {fi['restarts']} worker restarts, cache {fi['cache']}):")
        for r in fi["rows"]:
            t = r.get("time")
            timing = (f" ratio {t['ratio']:.4f} [{t['ci'][0]:.4f},{t['ci'][1]:.4f}] A/A {t['aa_ratio']:.4f}"
                      if t and t.get("valid") else "")
            ok = "ok " if r["as_expected"] else "BAD"
            print(f" {ok} {r['candidate'][:44]:44s} valid={r['valid']!s:5s} restart={r['restarted']}{timing}"
                  f" {('' if timing else (r['reason'] or ''))[:60]}")
    else:
        print(f"fault isolation: {fi.get('error')}")
    if "pytest" in record:
        print(f"pytest -m gpu: {record['pytest'].get('summary') or record['pytest'].get('error')}")
    print(f"total {record['seconds']} s; outputs in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
