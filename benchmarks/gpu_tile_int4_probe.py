"""Probe the int4 tile GEMM variants that gave wrong results on the H200 (issue 20, 2026-12-04 run).

The first GPU run of ``gpu_tile.py --only int4`` found some synthesised variants wrong and not bit-identical across
reruns (``results/h200/issue20/int4/``). This script takes the variants of the failing problems and runs each
with its ring depth (``STAGES``) and split (``SPLIT_K``) overridden, three times each from a NaN-filled output
and zeroed tile counters, and records the relative error, whether the reruns agree, how many outputs stay NaN
(never written) and which 64 × 64 blocks of Y are wrong: the pattern says whether the fault follows the ring
depth, the tile shape or the split-K reduction.

    PYTHONPATH=. python3 benchmarks/gpu_tile_int4_probe.py --out "$OUT/int4_probe.json"

``--dry-run`` (CPU): compiles every probed configuration for sm_90, launches nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbuild.bench.spec import Config, compile_spec

PROBLEMS = [(256, 4096, 4096), (4096, 4096, 4096)]


def probes(cfg: Config) -> list[Config]:
    """The variant as synthesised, then shallower rings, then (split-K variants) without the split."""
    c = dict(cfg.constexprs)
    out = [cfg]
    for stages in (4, 3, 2):
        if stages < int(c["STAGES"]):
            out.append(Config({**c, "STAGES": stages}, num_warps=cfg.num_warps, num_stages=1))
    if int(c["SPLIT_K"]) > 1:
        out.append(Config({**c, "SPLIT_K": 1}, num_warps=cfg.num_warps, num_stages=1))
    return out


def pattern(y: Any, want: Any) -> dict[str, Any]:
    """Where Y is wrong: NaN count, and the 64 × 64 blocks whose error exceeds 1% of the reference's scale."""
    import torch

    err = (y.double() - want.double()).abs()
    bad = (err > 1e-2 * float(want.double().abs().mean())) | torch.isnan(y)
    m, n = y.shape
    blocks = bad[: m - m % 64 or m, : n - n % 64].reshape(max(m // 64, 1), -1, n // 64, 64).any(3).any(1)
    where = blocks.nonzero().tolist()
    return {"nan": int(torch.isnan(y).sum()), "bad_elems": int(bad.sum()), "elems": m * n,
            "bad_blocks": len(where), "blocks": int(blocks.numel()), "first_bad_blocks": where[:8]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    from kbuild.tile import kernels

    record: dict[str, Any] = {"command": " ".join(sys.argv), "problems": {}}
    if not args.dry_run:
        import torch

        from kbuild.bench.peers import rel_err
        from kbuild.device import timing

        timing.set_scratch_allocator()
    for m, n, k in PROBLEMS:
        spec = kernels.int4_gemm(m=m, n=n, k=k)
        rows: list[dict[str, Any]] = []
        record["problems"][f"{m}x{n}x{k}"] = rows
        inputs = None if args.dry_run else spec.make_inputs(1, "cuda")
        want = None if inputs is None else spec.reference(inputs)["y_ptr"]  # type: ignore[misc]
        for base in spec.configs:
            for cfg in probes(base):
                t = time.perf_counter()
                row: dict[str, Any] = {"config": cfg.label(), "synthesised": cfg is base}
                try:
                    kernel = compile_spec(spec, cfg, 90)
                except Exception as exc:  # a probe outside what the variant's layouts allow
                    row["compile_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    rows.append(row)
                    print(f"{m}x{n}x{k} {cfg.label():<70} compile error", flush=True)
                    continue
                row["shared"] = kernel.metadata.shared
                row["compile_s"] = round(time.perf_counter() - t, 2)
                if inputs is not None:
                    outs, errs = [], []
                    for _ in range(args.runs):
                        inputs["y_ptr"].fill_(float("nan"))
                        inputs["counters_ptr"].zero_()
                        kernel[spec.grid(spec.all_constexprs(cfg))](*spec.launch_args(inputs, cfg))
                        torch.cuda.synchronize()
                        outs.append(inputs["y_ptr"].clone())
                        errs.append(rel_err(outs[-1], want))
                    row["rel_err"] = errs
                    row["reruns_identical"] = all(torch.equal(outs[0], o) for o in outs[1:])
                    row["counters_after"] = int(inputs["counters_ptr"].abs().sum())
                    row["ok"] = max(errs) < 2e-3 and row["reruns_identical"]
                    row["pattern"] = [pattern(o, want) for o in outs] if not row["ok"] else None
                rows.append(row)
                print(f"{m}x{n}x{k} {cfg.label():<70} shared {row['shared']:>7} "
                      f"{'' if inputs is None else ('ok' if row['ok'] else 'WRONG ' + str([f'{e:.2g}' for e in row['rel_err']]))}",
                      flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
