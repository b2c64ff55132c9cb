"""GPU evidence for kbuild.tile (issue 20): synthesised Gluon softmax and RMSNorm vs hand-written Triton and torch.

Run on the H200 (no network; kbuild from the working tree, nothing to install)::

    PYTHONPATH=. python3 benchmarks/gpu_tile.py                 # writes $OUT/gpu_tile.json, prints a table

About a minute: for softmax (65536×4096 fp16) and RMSNorm (32768×4096 fp16) it

1. builds the tile kernel (:mod:`kbuild.tile.kernels`: trace, layout synthesis, Gluon emission; the synthesis
   time is recorded) and compiles each kept layout variant for this GPU through kbuild's bench-spec path;
2. compiles the hand-written Triton kernels of the same bench suite (:mod:`kbuild.bench.kernels.softmax`,
   ``.rmsnorm``: their autotune lists);
3. runs every variant on the same seeded input, checks it against the torch reference (float64 relative
   error ≤ the spec's tolerance) and that two runs are bit-identical;
4. times every correct tile variant, every Triton configuration and torch's own op (``torch.softmax``;
   ``torch.nn.functional.rms_norm``) interleaved (L2 flushed before each launch, ``--rounds`` × ``--reps``);
5. prints per kernel: median ms and GB/s of each, and the best tile variant's speed relative to the best Triton
   configuration and to torch (>1: the tile kernel is faster).

``--dry-run`` (CPU): builds and compiles everything for sm_90 and prints the plan, no launch. Writes
``$OUT/gpu_tile.json`` (``--out DIR``; default ``$OUT`` or ``benchmarks/results``) with raw samples, errors,
registers, the emitted Gluon source and the device report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbuild.bench.spec import BenchSpec, Config, compile_spec, load_spec

PAIRS = [
    ("softmax", "kbuild.tile.kernels:softmax", "kbuild.bench.kernels.softmax:softmax"),
    ("rmsnorm", "kbuild.tile.kernels:rmsnorm", "kbuild.bench.kernels.rmsnorm:rmsnorm"),
]


def torch_op(name: str, inputs: dict[str, Any]) -> Any:
    import torch

    x = inputs["x_ptr"]
    if name == "softmax":
        return lambda: torch.softmax(x, dim=-1)
    w = inputs["w_ptr"]
    return lambda: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps=1e-6)


def compile_all(spec: BenchSpec, arch: int) -> list[tuple[Config, Any, float]]:
    out = []
    for cfg in spec.configs:
        t0 = time.perf_counter()
        out.append((cfg, compile_spec(spec, cfg, arch), time.perf_counter() - t0))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "benchmarks/results")))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--small", action="store_true", help="16x512 problems (a smoke test, not numbers)")
    ap.add_argument("--dry-run", action="store_true", help="CPU: build and compile for sm_90, launch nothing")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"command": " ".join(sys.argv), "kernels": {}}
    arch = 90
    if not args.dry_run:
        from kbuild.device import timing

        arch = timing.require_gpu((90,))
        record["device"] = timing.device_report()
    rows = []
    for name, tile_ref, triton_ref in PAIRS:
        t0 = time.perf_counter()
        tile = load_spec(tile_ref, small=args.small)
        build_s = time.perf_counter() - t0
        triton_spec = load_spec(triton_ref, small=args.small)
        entry: dict[str, Any] = {"build_seconds": round(build_s, 3), "gluon_source": None, "variants": {}}
        from kbuild.tile import kernels

        n = 512 if args.small else 4096
        entry["gluon_source"] = (kernels.softmax_kernel(n) if name == "softmax" else kernels.rmsnorm_kernel(n)).source
        compiled = {f"tile[{c.label()}]": (tile, c, k, s) for c, k, s in compile_all(tile, arch)}
        compiled |= {f"triton[{c.label()}]": (triton_spec, c, k, s) for c, k, s in compile_all(triton_spec, arch)}
        for label, (_, _, k, s) in compiled.items():
            entry["variants"][label] = {"compile_s": round(s, 2), "registers": getattr(k, "n_regs", None)}
        record["kernels"][name] = entry
        if args.dry_run:
            print(f"{name}: build {build_s:.2f}s; would time {', '.join(compiled)} and torch")
            continue
        import torch

        from kbuild.bench.peers import rel_err
        from kbuild.device import stats, timing

        inputs = tile.make_inputs(0, timing.DEVICE)
        ref = tile.reference(inputs)["y_ptr"] if tile.reference else None
        launchers: dict[str, Any] = {}
        for label, (spec, cfg, k, _) in compiled.items():
            own = dict(inputs) if spec is tile else triton_spec.make_inputs(0, timing.DEVICE)
            own["y_ptr"] = torch.empty_like(inputs["y_ptr"])
            grid = spec.grid(spec.all_constexprs(cfg))
            launch_args = spec.launch_args(own, cfg)
            v = entry["variants"][label]
            try:
                k[grid](*launch_args)
                torch.cuda.synchronize()
                first = own["y_ptr"].clone()
                k[grid](*launch_args)
                torch.cuda.synchronize()
            except Exception as exc:  # out of resources at load time
                v["error"] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            v["rel_err"] = rel_err(own["y_ptr"], ref) if ref is not None else None
            v["bit_identical_rerun"] = bool(torch.equal(first, own["y_ptr"]))
            if v["rel_err"] is not None and v["rel_err"] > spec.reference_tol:
                v["error"] = f"wrong result: relative error {v['rel_err']:.3g}"
                continue
            launchers[label] = (lambda k=k, g=grid, a=launch_args: k[g](*a))
        launchers["torch"] = torch_op(name, inputs)
        entry["variants"]["torch"] = {"rel_err": rel_err(launchers["torch"](), ref) if ref is not None else None}
        flush = timing.L2Flush()
        samples = timing.time_interleaved(list(launchers.values()), rounds=args.rounds, reps=args.reps, flush=flush)
        for label, s in zip(launchers, samples):
            med = stats.median(s)
            entry["variants"][label].update({"median_ms": med, "gbps": tile.bytes_moved / med / 1e6, "samples_ms": s})
        best = {kind: min((v["median_ms"], lab) for lab, v in entry["variants"].items()
                          if lab.startswith(kind) and "median_ms" in v) for kind in ("tile", "triton", "torch")}
        entry["best"] = {k: {"label": lab, "median_ms": ms} for k, (ms, lab) in best.items()}
        entry["tile_vs_triton"] = best["triton"][0] / best["tile"][0]
        entry["tile_vs_torch"] = best["torch"][0] / best["tile"][0]
        for label, v in entry["variants"].items():
            if "median_ms" in v:
                rows.append((name, label, v["median_ms"], v["gbps"], v.get("rel_err"), v.get("bit_identical_rerun")))
            else:
                rows.append((name, label, None, None, v.get("rel_err"), v.get("error")))
    path = args.out / "gpu_tile.json"
    path.write_text(json.dumps(record, indent=1, default=str))
    if rows:
        print(f"{'kernel':8} {'variant':34} {'ms':>8} {'GB/s':>7} {'rel_err':>9}  rerun")
        for name, label, ms, gbps, err, note in rows:
            ms_s = f"{ms:8.4f}" if ms is not None else "       -"
            gb_s = f"{gbps:7.0f}" if gbps is not None else "      -"
            err_s = f"{err:9.2e}" if isinstance(err, float) else "        -"
            print(f"{name:8} {label:34} {ms_s} {gb_s} {err_s}  {note}")
        for name, entry in record["kernels"].items():
            if "tile_vs_triton" in entry:
                print(f"{name}: best tile {entry['best']['tile']['label']} is {entry['tile_vs_triton']:.3f}x the best "
                      f"Triton ({entry['best']['triton']['label']}), {entry['tile_vs_torch']:.3f}x torch")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
