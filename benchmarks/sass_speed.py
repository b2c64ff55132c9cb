"""CPU speed of the SASS engine on a ~3,000-instruction kernel (a benchmark, not a test).

    python benchmarks/sass_speed.py [--out benchmarks/results/sass_speed.json]

Compiles a large flash-attention forward (HEAD_DIM 128, 128×128 tiles) for sm_90 with Triton 3.6 unless
``--cubin`` is given, then times: the first analysis, ``legal_moves()`` along a random walk, ``apply``,
``undo``, ``to_cubin(verify=False)`` and the verifier's check. Targets: mask < 10 ms, apply < 1 ms.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "sass"))


def big_cubin() -> bytes:
    import dataclasses

    from kernels import SPECS, compile_spec

    spec = next(s for s in SPECS if s.name == "attention_fwd")
    spec = dataclasses.replace(spec, constexprs={"BLOCK_M": 128, "BLOCK_N": 128, "HEAD_DIM": 128}, num_warps=8,
                               num_stages=2)
    return compile_spec(spec, 90).asm["cubin"]


def timed(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cubin", type=Path)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sass_speed.json")
    args = ap.parse_args()
    from kbuild.sass import Schedule, Verifier
    from kbuild.sass.elf import write_atomic

    data = args.cubin.read_bytes() if args.cubin else big_cubin()
    t = time.perf_counter()
    s = Schedule.from_cubin(data)
    analysis_ms = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    v = Verifier(s.analysis, s.cubin)
    verifier_build_ms = (time.perf_counter() - t) * 1e3
    rng = np.random.default_rng(0)
    mask_ms, apply_ms, undo_ms = [], [], []
    for step in range(args.steps):
        t = time.perf_counter()
        m = s.legal_moves()
        mask_ms.append((time.perf_counter() - t) * 1e3)
        a = int(rng.choice(np.flatnonzero(m.reshape(-1))))
        t = time.perf_counter()
        s.apply_action(a)
        apply_ms.append((time.perf_counter() - t) * 1e3)
        if step % 5 == 4:
            t = time.perf_counter()
            s.undo()
            undo_ms.append((time.perf_counter() - t) * 1e3)
    cubin_ms = timed(lambda: s.to_cubin(verify=False), 20)
    out = s.to_cubin(verify=False)
    check_ms = timed(lambda: v.check(out), 20)

    def summary(xs: list[float]) -> dict[str, float]:
        return {"median_ms": round(statistics.median(xs), 4), "p90_ms": round(float(np.percentile(xs, 90)), 4),
                "max_ms": round(max(xs), 4), "n": len(xs)}

    res = {
        "command": "python benchmarks/sass_speed.py" + (f" --cubin {args.cubin}" if args.cubin else ""),
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                    "platform": platform.platform()},
        "kernel": s.kernel, "sm": s.cubin.sm if s.cubin else None, "instructions": s.n,
        "constraints": len(s.analysis.cons_p), "pinned_fraction": round(s.analysis.pinned_fraction(), 4),
        "first_analysis_ms": round(analysis_ms, 1), "verifier_build_ms": round(verifier_build_ms, 1),
        "legal_moves": summary(mask_ms), "apply": summary(apply_ms), "undo": summary(undo_ms),
        "to_cubin_no_verify": summary(cubin_ms), "verifier_check_no_disasm": summary(check_ms),
        "targets": {"legal_moves_ms": 10, "apply_ms": 1},
    }
    res["meets_targets"] = res["legal_moves"]["median_ms"] < 10 and res["apply"]["median_ms"] < 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, (json.dumps(res, indent=2) + "\n").encode())
    print(json.dumps({k: res[k] for k in ("instructions", "legal_moves", "apply", "meets_targets")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
