"""GPU evidence for kbuild.tile (issue 20): synthesised Gluon softmax, RMSNorm and fp16 GEMM vs hand-written
Triton and torch (cuBLAS for the GEMM); the int4 × fp16 GEMM vs a plain Triton kernel, torch and Marlin.

Run on the H200 (no network; kbuild from the working tree, nothing to install)::

    PYTHONPATH=. python3 benchmarks/gpu_tile.py                 # writes $OUT/gpu_tile.json, prints a table
    PYTHONPATH=. python3 benchmarks/gpu_tile.py --only gemm     # the GEMM alone (~1 min, 6 tile variants)
    PYTHONPATH=. python3 benchmarks/gpu_tile.py --only int4     # the int4 GEMM alone (~4 min, 15 problems)

``--only int4`` (not part of the default run): for every token count M in {1, 16, 64, 256, 4096} and
(N, K) in {(4096, 4096), (14336, 4096), (4096, 14336)} (Llama-3-8B's MLP; ``--int4-tokens``,
``--int4-shapes`` narrow it), it synthesises the tile kernel for that problem (:mod:`kbuild.tile.kernels`
``int4_gemm``: weights packed by the derived layout, group-128 fp16 scales) and compiles its variants, and
compiles the plain Triton dequantise-then-``tl.dot`` kernel's configurations
(:mod:`kbuild.bench.kernels.int4_matmul`, weights in GPTQ's plain packing); on the same seeded ``x``, ``q``
and ``s`` it checks each against the torch reference (fp16 dequantisation, fp32 product) and that two runs are
bit-identical, then times, interleaved: every correct tile variant and Triton configuration, torch's
dequantise + cuBLAS (unpack the plain words, ``(q - 8) · s``, ``x @ w``), cuBLAS alone on the already
dequantised fp16 weights (a reference point, not a competitor), and Marlin if a build of it imports (IST-DASLab's
``marlin`` package; a ``vllm`` install is noted but its Marlin call is not wired). Per problem it prints the best
tile variant's speed relative to the best Triton configuration (the issue's target: >= 3), to torch's
dequantise + cuBLAS (> 1) and to Marlin (>= 1 where it runs).

About two minutes: for softmax (65536×4096 fp16), RMSNorm (32768×4096 fp16) and the GEMM (fp16 4096³, fp32
accumulation; the tile kernel's wgmma + TMA variants vs ``torch.matmul`` and the suite's Triton matmuls:
:mod:`kbuild.bench.kernels.tma_matmul` (the same product, TMA + ``tl.dot``) and
:mod:`kbuild.bench.kernels.matmul` ``matmul_4096`` (its product carries a LeakyReLU epilogue)) it

1. builds the tile kernel (:mod:`kbuild.tile.kernels`: trace, layout synthesis, Gluon emission; the synthesis
   time is recorded) and compiles each kept layout variant for this GPU through kbuild's bench-spec path;
2. compiles the hand-written Triton kernels of the same bench suite (:mod:`kbuild.bench.kernels.softmax`,
   ``.rmsnorm``: their autotune lists);
3. runs every variant on the same seeded input, checks it against the torch reference (float64 relative
   error ≤ the spec's tolerance) and that two runs are bit-identical;
4. times every correct tile variant, every Triton configuration and torch's own op (``torch.softmax``;
   ``torch.nn.functional.rms_norm``) interleaved (L2 flushed before each launch, ``--rounds`` × ``--reps``);
5. prints per kernel: median ms and GB/s (TFLOP/s for the GEMM) of each, and the best tile variant's speed
   relative to the best Triton configuration and to torch (>1: the tile kernel is faster; the issue's GEMM
   target is ``tile_vs_torch`` >= 0.95 at 4096³).

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
    ("softmax", "kbuild.tile.kernels:softmax", ["kbuild.bench.kernels.softmax:softmax"]),
    ("rmsnorm", "kbuild.tile.kernels:rmsnorm", ["kbuild.bench.kernels.rmsnorm:rmsnorm"]),
    ("gemm", "kbuild.tile.kernels:gemm", ["kbuild.bench.kernels.tma_matmul:tma_matmul",
                                          "kbuild.bench.kernels.matmul:matmul_4096"]),
]


def torch_op(name: str, inputs: dict[str, Any]) -> Any:
    import torch

    if name == "gemm":
        a, b = inputs["a_ptr"], inputs["b_ptr"]
        return lambda: torch.matmul(a, b)
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


def _parse_int4(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    try:
        tokens = [int(t) for t in args.int4_tokens.split(",") if t]
        shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.int4_shapes.split(",") if shape]
    except ValueError:
        raise SystemExit(f"error: --int4-tokens {args.int4_tokens!r} / --int4-shapes {args.int4_shapes!r}: expected "
                         "'1,16' and '4096x4096,...'") from None
    if not tokens or not shapes or any(len(sh) != 2 for sh in shapes) or min([*tokens, *(x for sh in shapes for x in sh)]) < 1:
        raise SystemExit("error: --int4-tokens / --int4-shapes: expected positive integers, shapes as NxK")
    return [(m, n, k) for n, k in shapes for m in tokens]


def marlin_op(x: Any, q: Any, s: Any) -> tuple[Any, str]:
    """Marlin's int4 GEMM on these weights if a build of it imports: ``(launch, note)``, launch None otherwise."""
    try:
        import marlin  # IST-DASLab's package: marlin.Layer packs an nn.Linear with its scales
    except ImportError:
        marlin = None
    if marlin is not None:
        import torch

        from kbuild.bench.kernels import int4_matmul as plain

        k, n = q.shape
        linear = torch.nn.Linear(k, n, bias=False, dtype=torch.float16, device=x.device)
        linear.weight.data = plain.dequantise(q, s).t().contiguous()
        layer = marlin.Layer(k, n, groupsize=plain.GROUP).to(x.device)
        layer.pack(linear, s.t().contiguous())  # its round((w / s)) + 8 gives q back: the same weights
        return (lambda: layer(x)), f"marlin {getattr(marlin, '__version__', '?')} (IST-DASLab)"
    try:
        import vllm  # noqa: F401
    except ImportError:
        return None, "not importable here: neither IST-DASLab's `marlin` nor `vllm` is installed"
    return None, "vllm imports, but its gptq_marlin_gemm call (version-specific arguments) is not wired here"


def run_int4(args: argparse.Namespace, arch: int) -> dict[str, Any]:
    """The int4 part (see the module docstring): per problem, correctness and interleaved timing."""
    from kbuild.bench.kernels import int4_matmul as plain
    from kbuild.tile import kernels

    out: dict[str, Any] = {"problems": {}}
    baseline_compiled: dict[str, Any] = {}
    table = []
    for m, n, k in _parse_int4(args):
        key = f"{m}x{n}x{k}"
        t0 = time.perf_counter()
        tile = kernels.int4_gemm(m=m, n=n, k=k, variants=args.int4_variants)
        entry: dict[str, Any] = {"build_seconds": round(time.perf_counter() - t0, 3), "variants": {}}
        gk = kernels.int4_gemm_kernel(m, n, k, variants=args.int4_variants)
        entry["synthesis_seconds"] = round(gk.seconds, 3)
        entry["plans"] = [{"variant": i, "describe": p.describe(), "modelled_cycles": p.cost, "parts": p.parts}
                          for i, p in enumerate(gk.plans)]
        base = plain.int4_matmul(m=m, n=n, k=k)
        compiled = {f"tile[{c.label()}]": (tile, c, kk, sec) for c, kk, sec in compile_all(tile, arch)}
        for cfg in base.configs:
            if cfg.label() not in baseline_compiled:  # one kernel for every problem: M, N, K are runtime values
                t1 = time.perf_counter()
                baseline_compiled[cfg.label()] = (compile_spec(base, cfg, arch), time.perf_counter() - t1)
            kk, sec = baseline_compiled[cfg.label()]
            compiled[f"triton[{cfg.label()}]"] = (base, cfg, kk, sec)
        for label, (_, _, kk, sec) in compiled.items():
            entry["variants"][label] = {"compile_s": round(sec, 2), "registers": getattr(kk, "n_regs", None)}
        out["problems"][key] = entry
        if args.dry_run:
            print(f"int4 {key}: synthesis {gk.seconds:.2f}s; would time {', '.join(compiled)}, torch, cuBLAS, Marlin")
            continue
        import torch

        from kbuild.bench.peers import rel_err
        from kbuild.device import stats, timing

        p = plain.problem(0, timing.DEVICE, m, n, k)
        want = plain.reference(p["x"], p["q"], p["s"])
        inputs = {id(tile): tile.make_inputs(0, timing.DEVICE), id(base): base.make_inputs(0, timing.DEVICE)}
        assert torch.equal(inputs[id(tile)]["x_ptr"], p["x"]) and torch.equal(inputs[id(base)]["s_ptr"], p["s"])
        launchers: dict[str, Any] = {}
        for label, (spec, cfg, kk, _) in compiled.items():
            own = dict(inputs[id(spec)])
            own["y_ptr"] = torch.empty_like(own["y_ptr"])
            grid = spec.grid(spec.all_constexprs(cfg))
            launch_args = spec.launch_args(own, cfg)
            v = entry["variants"][label]
            try:
                kk[grid](*launch_args)
                torch.cuda.synchronize()
                first = own["y_ptr"].clone()
                own["y_ptr"].fill_(float("nan"))
                kk[grid](*launch_args)
                torch.cuda.synchronize()
            except Exception as exc:  # out of resources at load time
                v["error"] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            v["rel_err"] = rel_err(own["y_ptr"], want)
            v["bit_identical_rerun"] = bool(torch.equal(first, own["y_ptr"]))
            if not v["rel_err"] <= spec.reference_tol:
                v["error"] = f"wrong result: relative error {v['rel_err']:.3g}"
                continue
            launchers[label] = (lambda kk=kk, g=grid, a=launch_args: kk[g](*a))
        words, x, s = inputs[id(base)]["w_ptr"], p["x"], p["s"]
        w16 = plain.dequantise(p["q"], s)

        def torch_dequant_cublas(x: Any = x, w: Any = words, s: Any = s) -> Any:
            return x @ plain.dequantise(plain.unpack_plain(w), s)

        extra: dict[str, Any] = {"torch_dequant_cublas": torch_dequant_cublas,
                                 "cublas_fp16_weights": lambda x=x, w=w16: x @ w}
        try:
            marlin, entry["marlin"] = marlin_op(x, p["q"], s)
        except Exception as exc:  # a peer that fails to pack is recorded, not fatal
            marlin, entry["marlin"] = None, f"Marlin imports but failed: {type(exc).__name__}: {exc}"[:300]
        if marlin is not None:
            extra["marlin"] = marlin
        for label, fn in extra.items():
            try:
                got = fn()
                torch.cuda.synchronize()
                entry["variants"][label] = {"rel_err": rel_err(got, want), "bit_identical_rerun": bool(torch.equal(got, fn()))}
            except Exception as exc:  # Marlin may refuse a shape
                entry["variants"][label] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                continue
            if entry["variants"][label]["rel_err"] > 2e-3:
                entry["variants"][label]["error"] = f"wrong result: relative error {entry['variants'][label]['rel_err']:.3g}"
                continue
            launchers[label] = fn
        # each launch's host time (Python to the driver's queue) beside the flush's GPU time: a host slower than the
        # flush leaves the GPU idle at the start event, and then the events time the host too
        host: dict[str, list[float]] = {label: [] for label in launchers}

        def on_host(fn: Any, into: list[float]) -> Any:
            def launch() -> None:
                t = time.perf_counter()
                fn()
                into.append((time.perf_counter() - t) * 1e3)
            return launch

        flush = timing.L2Flush()
        samples = timing.time_interleaved([on_host(fn, host[label]) for label, fn in launchers.items()], rounds=args.rounds,
                                          reps=args.reps, flush=flush)
        entry["flush_ms"] = stats.median(timing.time_interleaved([flush], rounds=1, reps=10, flush=None)[0])
        for label, runs in zip(launchers, samples):
            med = stats.median(runs)
            entry["variants"][label].update({"median_ms": med, "tflops": 2.0 * m * n * k / med / 1e9,
                                             "weight_gbps": (n * k / 2 + (k // plain.GROUP) * n * 2) / med / 1e6,
                                             "host_launch_ms": stats.median([host[label]]), "samples_ms": runs})
        slowest = max((v["host_launch_ms"], lab) for lab, v in entry["variants"].items() if "host_launch_ms" in v)
        print(f"int4 {key}: flush {entry['flush_ms']:.4f} ms on the GPU; slowest host launch {slowest[0]:.4f} ms "
              f"({slowest[1]})")
        timed = {lab: v["median_ms"] for lab, v in entry["variants"].items() if "median_ms" in v}
        best = {kind: min(((ms, lab) for lab, ms in timed.items() if lab.startswith(kind)), default=(float("nan"), "-"))
                for kind in ("tile", "triton", "torch_dequant_cublas", "cublas_fp16_weights", "marlin")}
        entry["best"] = {kind: {"label": lab, "median_ms": ms} for kind, (ms, lab) in best.items()}
        tile_ms = best["tile"][0]
        entry["tile_vs_triton"] = best["triton"][0] / tile_ms
        entry["tile_vs_torch_dequant_cublas"] = best["torch_dequant_cublas"][0] / tile_ms
        entry["tile_vs_cublas_fp16_weights"] = best["cublas_fp16_weights"][0] / tile_ms
        entry["tile_vs_marlin"] = best["marlin"][0] / tile_ms
        table.append((key, tile_ms, best["tile"][1], entry["tile_vs_triton"], entry["tile_vs_torch_dequant_cublas"],
                      entry["tile_vs_cublas_fp16_weights"], entry["tile_vs_marlin"],
                      all(v.get("bit_identical_rerun", True) for lab, v in entry["variants"].items()
                          if lab.startswith("tile"))))
    if table:
        print(f"{'int4 M x N x K':18} {'tile ms':>9} {'vs Triton':>9} {'vs torch':>9} {'vs fp16':>8} {'vs Marlin':>9}  "
              "rerun  best tile variant")
        for key, ms, lab, tri, tor, f16, mar, rerun in table:
            print(f"{key:18} {ms:9.4f} {tri:9.2f} {tor:9.2f} {f16:8.2f} {mar:9.2f}  {rerun!s:5}  {lab}")
        print(f"Marlin: {next(iter(out['problems'].values()))['marlin']}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "benchmarks/results")))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", choices=[*(name for name, _, _ in PAIRS), "int4"], action="append",
                    help="measure only this kernel (repeatable); 'int4' runs only with --only")
    ap.add_argument("--int4-tokens", default="1,16,64,256,4096", help="int4: token counts M (comma-separated)")
    ap.add_argument("--int4-shapes", default="4096x4096,14336x4096,4096x14336",
                    help="int4: N x K shapes (comma-separated)")
    ap.add_argument("--int4-variants", type=int, default=3, help="int4: tile variants synthesised per problem")
    ap.add_argument("--gemm-variants", type=int, default=6, help="GEMM configurations synthesised and timed")
    ap.add_argument("--small", action="store_true", help="16x512 problems, 256^3 GEMM (a smoke test, not numbers)")
    ap.add_argument("--dry-run", action="store_true", help="CPU: build and compile for sm_90, launch nothing")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"command": " ".join(sys.argv), "kernels": {}}
    arch = 90
    if not args.dry_run:
        from kbuild.device import timing

        arch = timing.require_gpu((90,))
        record["device"] = timing.device_report()
        timing.set_scratch_allocator()  # device-side TMA descriptors (the GEMMs)
    rows = []
    for name, tile_ref, triton_refs in PAIRS:
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        if name == "gemm":  # more variants than the spec's default: this run also calibrates the cost model
            from kbuild.tile import kernels as tile_kernels

            tile = tile_kernels.gemm(small=args.small, variants=args.gemm_variants)
        else:
            tile = load_spec(tile_ref, small=args.small)
        build_s = time.perf_counter() - t0
        peers = [load_spec(ref, small=args.small) for ref in triton_refs]
        entry: dict[str, Any] = {"build_seconds": round(build_s, 3), "gluon_source": None, "variants": {}}
        from kbuild.tile import kernels

        n = 512 if args.small else 4096
        g = 256 if args.small else 4096
        if name == "gemm":
            gk = kernels.gemm_kernel(g, g, g, variants=args.gemm_variants)
            entry["gluon_source"] = gk.source
            entry["plans"] = [{"variant": i, "describe": p.describe(), "modelled_cycles": p.cost, "parts": p.parts}
                              for i, p in enumerate(gk.plans)]
        else:
            entry["gluon_source"] = (kernels.softmax_kernel(n) if name == "softmax" else kernels.rmsnorm_kernel(n)).source
        compiled = {f"tile[{c.label()}]": (tile, c, k, s) for c, k, s in compile_all(tile, arch)}
        for peer in peers:
            compiled |= {f"triton:{peer.name}[{c.label()}]": (peer, c, k, s) for c, k, s in compile_all(peer, arch)}
        for label, (_, _, k, s) in compiled.items():
            entry["variants"][label] = {"compile_s": round(s, 2), "registers": getattr(k, "n_regs", None)}
        record["kernels"][name] = entry
        if args.dry_run:
            print(f"{name}: build {build_s:.2f}s; would time {', '.join(compiled)} and torch")
            continue
        import torch

        from kbuild.bench.peers import rel_err
        from kbuild.device import stats, timing

        own_inputs = {id(spec): spec.make_inputs(0, timing.DEVICE) for spec in (tile, *peers)}
        refs = {id(spec): spec.reference(own_inputs[id(spec)]) if spec.reference else None for spec in (tile, *peers)}
        launchers: dict[str, Any] = {}
        for label, (spec, cfg, k, _) in compiled.items():
            out_name = next(iter(spec.outputs))
            own = dict(own_inputs[id(spec)])
            own[out_name] = torch.empty_like(own[out_name])
            spec_ref = refs[id(spec)]
            ref = spec_ref[out_name] if spec_ref is not None else None
            grid = spec.grid(spec.all_constexprs(cfg))
            launch_args = spec.launch_args(own, cfg)
            v = entry["variants"][label]
            try:
                k[grid](*launch_args)
                torch.cuda.synchronize()
                first = own[out_name].clone()
                k[grid](*launch_args)
                torch.cuda.synchronize()
            except Exception as exc:  # out of resources at load time
                v["error"] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            v["rel_err"] = rel_err(own[out_name], ref) if ref is not None else None
            v["bit_identical_rerun"] = bool(torch.equal(first, own[out_name]))
            if v["rel_err"] is not None and v["rel_err"] > spec.reference_tol:
                v["error"] = f"wrong result: relative error {v['rel_err']:.3g}"
                continue
            launchers[label] = (lambda k=k, g=grid, a=launch_args: k[g](*a))
        tile_inputs = own_inputs[id(tile)]
        tile_refs = refs[id(tile)]
        tile_ref_out = tile_refs[next(iter(tile.outputs))] if tile_refs is not None else None
        launchers["torch"] = torch_op(name, tile_inputs)
        entry["variants"]["torch"] = {"rel_err": rel_err(launchers["torch"](), tile_ref_out)
                                      if tile_ref_out is not None else None}
        flush = timing.L2Flush()
        samples = timing.time_interleaved(list(launchers.values()), rounds=args.rounds, reps=args.reps, flush=flush)
        for label, runs in zip(launchers, samples):
            med = stats.median(runs)
            entry["variants"][label].update({"median_ms": med, "gbps": tile.bytes_moved / med / 1e6,
                                             "tflops": tile.flops / med / 1e9, "samples_ms": runs})
        best = {kind: min(((v["median_ms"], lab) for lab, v in entry["variants"].items()
                           if lab.startswith(kind) and "median_ms" in v), default=(float("nan"), "-"))
                for kind in ("tile", "triton", "torch")}
        entry["best"] = {k: {"label": lab, "median_ms": ms} for k, (ms, lab) in best.items()}
        entry["tile_vs_triton"] = best["triton"][0] / best["tile"][0]
        entry["tile_vs_torch"] = best["torch"][0] / best["tile"][0]
        for label, v in entry["variants"].items():
            speed = v.get("tflops") if name == "gemm" else v.get("gbps")
            if "median_ms" in v:
                rows.append((name, label, v["median_ms"], speed, v.get("rel_err"), v.get("bit_identical_rerun")))
            else:
                rows.append((name, label, None, None, v.get("rel_err"), v.get("error")))
    if args.only and "int4" in args.only:
        record["int4"] = run_int4(args, arch)
    path = args.out / "gpu_tile.json"
    path.write_text(json.dumps(record, indent=1, default=str))
    if rows:
        print(f"{'kernel':8} {'variant':72} {'ms':>8} {'GB/s|TF':>7} {'rel_err':>9}  rerun")
        for name, label, ms, speed, err, note in rows:
            ms_s = f"{ms:8.4f}" if ms is not None else "       -"
            sp_s = f"{speed:7.0f}" if speed is not None else "      -"
            err_s = f"{err:9.2e}" if isinstance(err, float) else "        -"
            print(f"{name:8} {label:72} {ms_s} {sp_s} {err_s}  {note}")
        for name, entry in record["kernels"].items():
            if "tile_vs_triton" in entry:
                print(f"{name}: best tile {entry['best']['tile']['label']} is {entry['tile_vs_triton']:.3f}x the best "
                      f"Triton ({entry['best']['triton']['label']}), {entry['tile_vs_torch']:.3f}x torch")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
