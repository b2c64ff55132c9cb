"""On a GPU machine: run the example wheel's kernels through its C extension and check them.

Run by ``benchmarks/gpu_hooks_check.sh`` with the built wheel of ``examples/cmake-extension`` on
``PYTHONPATH``. For each kernel it launches the AOT launcher (``kbx_demo.ops``, i.e. the C
extension calling ``kbuild_<kernel>``) and compares the result with a torch reference (within
tolerance) and with Triton's JIT launch of the same ``@triton.jit`` function and options
(bit for bit; the JIT functions specialise exactly as declared, see ``_Jit``). It also launches from several threads at once (lazy loading per context is
thread-safe), and times the launchers against Triton's JIT launch path.

    --expect-no-cubin   the wheel was built without this GPU's target: a launch must fail with
                        kbuild's "has no cubin for this GPU" error (and not crash)
    --compare BASE TUNED MANIFEST
                        a tuned wheel against the baseline wheel, both loaded in this process: bit for
                        bit against the same configuration's untouched compile (the baseline wheel, or
                        Triton's JIT of the tuned config when the manifest's config is not the default),
                        and interleaved, L2-flushed timing vs the manifest's speedup and gains
    --dry-run MANIFEST  no GPU: print what --compare would check (reference, JIT options, grid)

Prints one JSON document (also written to ``--out``); exit status 1 when any check fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

import torch


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _compare(name: str, got: torch.Tensor, ref: torch.Tensor, jit: torch.Tensor, atol: float,
             rtol: float) -> dict[str, Any]:
    diff = (got.float() - ref.float()).abs()
    ok = bool(torch.allclose(got.float(), ref.float(), atol=atol, rtol=rtol))
    bitwise = bool(torch.equal(got, jit))
    return {"check": name, "ok": ok, "max_abs_err_vs_torch": float(diff.max()), "atol": atol, "rtol": rtol,
            "bitwise_equal_to_triton_jit": bitwise,
            "max_abs_diff_vs_triton_jit": float((got.float() - jit.float()).abs().max())}


def _declarations() -> dict[str, dict[str, Any]]:
    from pathlib import Path

    import tomllib

    project = Path(__file__).resolve().parent.parent / "examples" / "cmake-extension" / "pyproject.toml"
    path = Path(_ARGS.pyproject) if _ARGS is not None and _ARGS.pyproject else project
    return {k["name"]: k for k in tomllib.loads(path.read_text())["tool"]["kbuild"]["kernels"]}


class _Jit:
    """The kernels as Triton JIT functions that specialise like the AOT declaration: integers declared
    without ``:16`` are not specialised (``do_not_specialize``), so JIT and AOT compile the same code."""

    def __getattr__(self, name: str) -> Any:
        import triton
        from kbx_demo import kernels

        decl = _declarations()[name]
        plain = [p for p, ty in decl["signature"].items() if not ty.startswith("*") and ":" not in ty]
        fn = triton.jit(getattr(kernels, name).fn, do_not_specialize=plain)
        setattr(self, name, fn)
        return fn


def check_kernels() -> list[dict[str, Any]]:
    from kbx_demo import ops

    K = _Jit()

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    results = []

    # softmax over a padded view: 1000 columns, row stride 1008 (a multiple of 16)
    x = torch.randn(4096, 1008, device=dev, generator=g).half()[:, :1000]
    got = ops.softmax(x)
    jit = torch.empty_like(got)
    K.softmax[(x.shape[0],)](jit, x, x.stride(0), jit.stride(0), x.shape[1], BLOCK=1024, num_warps=4, num_stages=3)
    ref = torch.softmax(x.float(), dim=-1).half()
    results.append(_compare("softmax 4096x1000 (row stride 1008)", got, ref, jit, atol=2e-3, rtol=1e-2))

    # layernorm
    x = torch.randn(4096, 768, device=dev, generator=g).half()
    w = torch.randn(768, device=dev, generator=g).half()
    b = torch.randn(768, device=dev, generator=g).half()
    y, mean, rstd = ops.layernorm(x, w, b, 1e-5)
    jy, jm, jr = torch.empty_like(y), torch.empty_like(mean), torch.empty_like(rstd)
    K.layernorm[(x.shape[0],)](x, jy, w, b, jm, jr, x.stride(0), x.shape[1], 1e-5, BLOCK=1024, num_warps=4,
                               num_stages=3)
    ref = torch.nn.functional.layer_norm(x.float(), (768,), w.float(), b.float(), 1e-5).half()
    r = _compare("layernorm 4096x768", y, ref, jy, atol=3e-2, rtol=1e-2)
    r["mean_ok"] = bool(torch.allclose(mean, x.float().mean(-1), atol=1e-3))
    r["rstd_ok"] = bool(torch.allclose(rstd, 1 / torch.sqrt(x.float().var(-1, unbiased=False) + 1e-5), rtol=1e-3))
    r["ok"] = r["ok"] and r["mean_ok"] and r["rstd_ok"]
    r["bitwise_equal_to_triton_jit"] = r["bitwise_equal_to_triton_jit"] and bool(torch.equal(mean, jm)) \
        and bool(torch.equal(rstd, jr))
    results.append(r)

    # matmul + leaky relu; M not a multiple of the block
    m, n, k = 1000, 1024, 512
    a = torch.randn(m, k, device=dev, generator=g).half()
    bm = torch.randn(k, n, device=dev, generator=g).half()
    got = ops.matmul_leaky_relu(a, bm)
    jit = torch.empty_like(got)
    shipped = _shipped("matmul_leaky_relu")  # the config the launcher runs, and the grid it computes
    K.matmul_leaky_relu[entry_grid(shipped, {"M": m, "N": n, "K": k}, _mm_grid(shipped, m, n))](
        a, bm, jit, m, n, k, a.stride(0), 1, bm.stride(0), 1, jit.stride(0), 1, **jit_options(shipped["config"]))
    ref = torch.nn.functional.leaky_relu(a.float() @ bm.float(), 0.01).half()
    results.append(_compare(f"matmul_leaky_relu {m}x{n}x{k}", got, ref, jit, atol=5e-2, rtol=2e-2))
    torch.cuda.synchronize()
    return results


def _mm_grid(entry: dict[str, Any], m: int, n: int) -> tuple[int, int, int]:
    """The matmul's grid written out (a declaration without a grid expression: the caller computes it)."""
    c = entry["config"]["constexprs"]
    return (_cdiv(m, int(c["BLOCK_M"])) * _cdiv(n, int(c["BLOCK_N"])), 1, 1)


def _shipped(kernel: str) -> dict[str, Any]:
    """The manifest entry of ``kernel`` for this GPU in the installed kbx_demo wheel (its ``config`` is what the
    launcher runs, its ``grid`` what the launcher computes); without a manifest, the pyproject declaration's
    default (``--pyproject``, else the example's)."""
    from pathlib import Path

    import kbx_demo

    major, minor = torch.cuda.get_device_capability(0)
    manifest = _site_manifest(str(Path(kbx_demo.__file__).resolve().parent.parent))
    for e in (manifest or {}).get("kernels", []):
        if e["kernel"] == kernel and e["target"] == f"sm_{major}{minor}" and e.get("config"):
            return dict(e)
    decl = _declarations()[kernel]
    return {"config": {"constexprs": dict(decl["constexprs"]), "num_warps": decl.get("num_warps", 4),
                       "num_stages": decl.get("num_stages", 3), "maxnreg": decl.get("maxnreg"),
                       "num_ctas": decl.get("num_ctas", 1)}, "grid": decl.get("grid") or []}


def check_threads(n_threads: int = 8, rounds: int = 20) -> dict[str, Any]:
    from kbx_demo import ops

    dev = torch.device("cuda")
    inputs = [torch.randn(512, 1024, device=dev).half() for _ in range(n_threads)]
    refs = [torch.softmax(x.float(), -1).half() for x in inputs]
    torch.cuda.synchronize()
    errors: list[str] = []
    start = threading.Barrier(n_threads)

    def work(i: int) -> None:
        try:
            start.wait()
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(rounds):
                    out = ops.softmax(inputs[i])
                stream.synchronize()
            if not torch.allclose(out.float(), refs[i].float(), atol=2e-3, rtol=1e-2):
                errors.append(f"thread {i}: wrong result")
        except Exception as exc:
            errors.append(f"thread {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"check": f"softmax from {n_threads} threads x {rounds} launches on their own streams",
            "ok": not errors, "errors": errors}


def time_launches() -> dict[str, Any]:
    """Host cost per launch (small input) and GPU time of the matmul, AOT launcher vs Triton JIT."""
    from kbx_demo import _kbx, ops

    K = _Jit()
    x = torch.randn(64, 1024, device="cuda").half()
    out = torch.empty_like(x)
    stream = torch.cuda.current_stream().cuda_stream

    def aot() -> None:
        _kbx.softmax(stream, 64, 1, 1, out.data_ptr(), x.data_ptr(), 1024, 1024, 1024)

    def jit() -> None:
        K.softmax[(64,)](out, x, 1024, 1024, 1024, BLOCK=1024, num_warps=4, num_stages=3)

    host = {}
    for name, fn in (("aot_launcher", aot), ("triton_jit", jit)):
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(1000):
                fn()
            samples.append((time.perf_counter() - t0) / 1000 * 1e6)
            torch.cuda.synchronize()
        host[name] = {"median_us_per_launch": statistics.median(samples), "samples_us": samples}

    a = torch.randn(4096, 4096, device="cuda").half()
    b = torch.randn(4096, 4096, device="cuda").half()
    shipped = _shipped("matmul_leaky_relu")
    opts = jit_options(shipped["config"])
    c = torch.empty(4096, 4096, device="cuda").half()
    grid = entry_grid(shipped, {"M": 4096, "N": 4096, "K": 4096}, _mm_grid(shipped, 4096, 4096))

    def aot_mm() -> None:
        ops.matmul_leaky_relu(a, b)

    def jit_mm() -> None:
        K.matmul_leaky_relu[grid](a, b, c, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1, **opts)

    gpu: dict[str, list[float]] = {}
    for _ in range(3):  # interleaved rounds
        for name, fn in (("aot_launcher", aot_mm), ("triton_jit", jit_mm)):
            for _ in range(5):
                fn()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(50):
                fn()
            end.record()
            torch.cuda.synchronize()
            gpu.setdefault(name, []).append(start.elapsed_time(end) / 50 * 1e3)
    return {"host_launch": host,
            "matmul_4096_us": {k: {"median": statistics.median(v), "samples": v} for k, v in gpu.items()}}


def _load_ext(name: str, site: str) -> Any:
    """``kbx_demo._kbx`` from the install under ``site``, as module ``<name>._kbx`` (two can coexist)."""
    import glob
    import importlib.util

    (path,) = glob.glob(f"{site}/kbx_demo/_kbx.*.so")
    spec = importlib.util.spec_from_file_location(f"{name}._kbx", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: The problem sizes compare_wheels runs: the bench specs' full sizes (kbx_demo/bench.py, ``small=False``), the
#: problems the tuner measured its claims on, so measured and claimed ratios are of the same work.
COMPARE_SHAPES = {"matmul_leaky_relu": (4096, 4096, 4096), "softmax": (32768, 1024), "layernorm": (32768, 768)}
#: Tolerance of each kernel's output against torch's fp32 reference (a configuration changes summation order).
TOLERANCES = {"matmul_leaky_relu": (5e-2, 2e-2), "softmax": (2e-3, 1e-2), "layernorm": (3e-2, 1e-2)}


def jit_options(config: dict[str, Any]) -> dict[str, Any]:
    """The keywords of a Triton JIT launch that compiles the manifest ``config`` (a :mod:`kbuild.declarations.space` point:
    ``constexprs``, ``num_warps``, ``num_stages``, ``maxnreg`` (None/0: ptxas decides), ``num_ctas``): the
    untouched compile of the configuration a tuned wheel ships."""
    kw: dict[str, Any] = dict(config.get("constexprs") or {})
    kw["num_warps"], kw["num_stages"] = int(config["num_warps"]), int(config["num_stages"])
    if config.get("maxnreg"):
        kw["maxnreg"] = int(config["maxnreg"])
    if int(config.get("num_ctas") or 1) != 1:
        kw["num_ctas"] = int(config["num_ctas"])
    return kw


def entry_grid(entry: dict[str, Any], args: dict[str, int], explicit: tuple[int, int, int]) -> tuple[int, int, int]:
    """The grid a launch of ``entry``'s kernel gets: its grid expressions (``entry["grid"]``, the manifest's copy
    of the declaration's) evaluated by :mod:`kbuild.declarations.grid` over ``args`` and the shipped config's integer
    constexprs (what the generated C launcher computes), or ``explicit`` for a kernel without them."""
    if not entry.get("grid"):
        return explicit
    from kbuild.declarations.grid import parse_grid

    consts = (entry.get("config") or {}).get("constexprs") or {}
    values = {**{k: v for k, v in consts.items() if isinstance(v, int) and not isinstance(v, bool)}, **args}
    return parse_grid(entry["grid"]).evaluate(values)


def aa_spread(aa_ratio: float, aa_ci: tuple[float, float]) -> float:
    """The A/A spread of a run: the rule :func:`kbuild.tune.two_level.final_beats_reference` applies."""
    return max(abs(1.0 - aa_ci[0]), abs(aa_ci[1] - 1.0), abs(1.0 - aa_ratio))


def ratio_verdict(measured: float, claimed: float | None, spread: float, tol: float) -> dict[str, Any]:
    """Whether a measured speedup (tuned wheel over baseline wheel) is the one the manifest claims: within
    ``tol`` plus the run's A/A ``spread`` of it. A manifest entry without a speedup (baseline, baseline kept)
    claims 1.0: its kernel must time level with the baseline's."""
    claim = float(claimed) if claimed is not None else 1.0
    off = measured / claim - 1.0
    return {"claimed": claim, "measured": round(measured, 4), "off_by": round(off, 4),
            "allowed": round(tol + spread, 4), "consistent": abs(off) <= tol + spread}


def compare_plan(manifest: dict[str, Any], target: str) -> list[dict[str, Any]]:
    """Per kernel of ``manifest`` for ``target``: what the tuned wheel's output is checked against bit for bit
    (the baseline wheel when it ships the default configuration; Triton's JIT compile of the shipped
    configuration otherwise) and the JIT keywords and grid of that compile at :data:`COMPARE_SHAPES`.
    No GPU needed (``--dry-run`` prints it)."""
    plan = []
    for e in manifest["kernels"]:
        if e["target"] != target or e["kernel"] not in COMPARE_SHAPES:
            continue
        shape = COMPARE_SHAPES[e["kernel"]]
        default = e.get("default_config") is not False
        item: dict[str, Any] = {"kernel": e["kernel"], "state": e.get("state"), "config": e.get("config"),
                                "default_config": default, "claimed_speedup": e.get("speedup"),
                                "claimed_gains": e.get("gains"), "grid_expressions": e.get("grid") or [],
                                "bit_reference": "baseline wheel" if default else "Triton JIT of the shipped config"}
        if e.get("config"):
            item["jit_options"] = jit_options(e["config"])
            args = {"M": shape[0], "N": shape[1], "K": shape[2]} if len(shape) == 3 else {}
            item["grid"] = list(entry_grid(e, args, (shape[0], 1, 1)))
        plan.append(item)
    return plan


def compare_wheels(base_site: str, tuned_site: str, manifest_path: str, *, rounds: int = 15, reps: int = 10,
                   ratio_tol: float = 0.03) -> list[dict[str, Any]]:
    """The tuned wheel against the baseline wheel, side by side in one process, per kernel:

    * bit for bit: a kernel shipping the default configuration against the baseline wheel's output; one shipping
      another configuration against Triton's JIT compile of that configuration (same ``@triton.jit`` function,
      its constexprs, ``num_warps``, ``num_stages``, ``maxnreg``): the SASS level must stay bit-exact to its
      configuration's untouched compile, while configurations differ in summation order (both are then checked
      against torch's fp32 reference within tolerance);
    * speed: the tuned wheel's launcher against the baseline wheel's, interleaved launch by launch with an L2
      flush before each (:func:`kbuild.device.timing.time_interleaved`), the baseline twice for the A/A control,
      and the JIT compile of a non-default configuration too (its GPU time per launch: the flush hides the JIT's
      host cost), for level 1 (configuration) and level 2 (SASS) measured apart; measured against the manifest's
      ``speedup`` and ``gains`` (:func:`ratio_verdict`)."""
    from kbuild.build.manifest import read_manifest
    from kbuild.device import stats
    from kbuild.device.timing import L2Flush, time_interleaved

    major, minor = torch.cuda.get_device_capability(0)
    target = f"sm_{major}{minor}"
    exts = {"baseline": _load_ext("base_wheel", base_site), "tuned": _load_ext("tuned_wheel", tuned_site)}
    manifest = read_manifest(manifest_path)
    plan = {p["kernel"]: p for p in compare_plan(manifest, target)}
    base_manifest = _site_manifest(base_site)
    base_default = {e["kernel"]: e.get("default_config") is not False
                    for e in base_manifest["kernels"] if e["target"] == target} if base_manifest else {}
    sys.path.insert(0, tuned_site)  # kbx_demo.kernels (the @triton.jit functions) for the JIT compiles
    K = _Jit()
    stream = torch.cuda.current_stream().cuda_stream
    g = torch.Generator(device="cuda").manual_seed(1)
    m, n, k = COMPARE_SHAPES["matmul_leaky_relu"]
    rows, cols = COMPARE_SHAPES["softmax"]
    lrows, lcols = COMPARE_SHAPES["layernorm"]
    a = torch.randn(m, k, device="cuda", generator=g).half()
    b = torch.randn(k, n, device="cuda", generator=g).half()
    x = torch.randn(rows, cols, device="cuda", generator=g).half()
    xl = torch.randn(lrows, lcols, device="cuda", generator=g).half()
    w = torch.randn(lcols, device="cuda", generator=g).half()
    bias = torch.randn(lcols, device="cuda", generator=g).half()
    refs = {"matmul_leaky_relu": [torch.nn.functional.leaky_relu(a.float() @ b.float(), 0.01)],
            "softmax": [torch.softmax(x.float(), dim=-1)],
            "layernorm": [torch.nn.functional.layer_norm(xl.float(), (lcols,), w.float(), bias.float(), 1e-5),
                          xl.float().mean(-1), 1 / torch.sqrt(xl.float().var(-1, unbiased=False) + 1e-5)]}

    def outputs(kernel: str) -> list[torch.Tensor]:
        if kernel == "matmul_leaky_relu":
            return [torch.empty(m, n, device="cuda").half()]
        if kernel == "softmax":
            return [torch.empty_like(x)]
        return [torch.empty_like(xl), torch.empty(lrows, device="cuda"), torch.empty(lrows, device="cuda")]

    def wheel_launch(ext: Any, kernel: str, out: list[torch.Tensor]) -> Any:
        if kernel == "matmul_leaky_relu":  # no grid: the launcher computes it from the shipped config
            return lambda: ext.matmul_leaky_relu(stream, a.data_ptr(), b.data_ptr(), out[0].data_ptr(), m, n, k,
                                                 k, n, n)
        if kernel == "softmax":
            return lambda: ext.softmax(stream, rows, 1, 1, out[0].data_ptr(), x.data_ptr(), cols, cols, cols)
        y, mean, rstd = out
        return lambda: ext.layernorm(stream, lrows, 1, 1, xl.data_ptr(), y.data_ptr(), w.data_ptr(),
                                     bias.data_ptr(), mean.data_ptr(), rstd.data_ptr(), lcols, lcols, 1e-5)

    def jit_launch(kernel: str, out: list[torch.Tensor]) -> Any:
        opts, grid = dict(plan[kernel]["jit_options"]), tuple(plan[kernel]["grid"])
        if kernel == "matmul_leaky_relu":
            return lambda: K.matmul_leaky_relu[grid](a, b, out[0], m, n, k, k, 1, n, 1, n, 1, **opts)
        if kernel == "softmax":
            return lambda: K.softmax[grid](out[0], x, cols, cols, cols, **opts)
        y, mean, rstd = out
        return lambda: K.layernorm[grid](xl, y, w, bias, mean, rstd, lcols, lcols, 1e-5, **opts)

    flush = L2Flush()
    results = []
    for kernel in COMPARE_SHAPES:
        item = plan.get(kernel)
        if item is None:
            results.append({"check": f"{kernel}: tuned wheel vs baseline wheel", "ok": False,
                            "error": f"the tuned manifest has no {kernel} entry for {target}"})
            continue
        outs = {name: outputs(kernel) for name in ("baseline", "tuned", "jit")}
        launch = {name: wheel_launch(exts[name], kernel, outs[name]) for name in ("baseline", "tuned")}
        jit = None if item["default_config"] else jit_launch(kernel, outs["jit"])
        for fn in (*launch.values(), *([jit] if jit else [])):
            fn()
        torch.cuda.synchronize()
        atol, rtol = TOLERANCES[kernel]
        same_as_base = all(torch.equal(p, q) for p, q in zip(outs["baseline"], outs["tuned"]))
        close = all(bool(torch.allclose(o.float(), r, atol=atol, rtol=rtol)) for o, r in zip(outs["tuned"], refs[kernel]))
        bit_ref = outs["baseline"] if jit is None else outs["jit"]
        bit_identical = all(torch.equal(p, q) for p, q in zip(bit_ref, outs["tuned"]))
        # the timing: baseline, tuned, baseline again (A/A), and the JIT compile of a non-default config
        variants = [launch["baseline"], launch["tuned"], launch["baseline"], *([jit] if jit else [])]
        ms = time_interleaved(variants, rounds=rounds, reps=reps, flush=flush)
        ratio, lo, hi = stats.ratio_ci(ms[0], ms[1])
        aa_ratio, aa_lo, aa_hi = stats.ratio_ci(ms[0], ms[2])
        spread = aa_spread(aa_ratio, (aa_lo, aa_hi))
        verdict = ratio_verdict(1.0 / ratio, item["claimed_speedup"], spread, ratio_tol)
        measured: dict[str, Any] = {"speedup": round(1.0 / ratio, 4), "speedup_ci": [round(1.0 / hi, 4),
                                                                                      round(1.0 / lo, 4)],
                                    "aa_ratio": round(aa_ratio, 4), "aa_spread": round(spread, 4),
                                    "baseline_ms": stats.median(ms[0]), "tuned_ms": stats.median(ms[1])}
        if jit is not None:
            jit_over_base, _, _ = stats.ratio_ci(ms[0], ms[3])
            tuned_over_jit, _, _ = stats.ratio_ci(ms[3], ms[1])
            measured["jit_config_ms"] = stats.median(ms[3])
            measured["gains"] = {"level1": round(1.0 / jit_over_base, 4), "level2": round(1.0 / tuned_over_jit, 4)}
        default_base = base_default.get(kernel, True)
        results.append({
            "check": f"{kernel}: tuned wheel vs baseline wheel", "state": item["state"], "config": item["config"],
            "default_config": item["default_config"], "baseline_wheel_ships_default": default_base,
            "bit_reference": item["bit_reference"], "bit_identical": bit_identical,
            "bit_identical_to_baseline_wheel": same_as_base, "within_tolerance_of_torch": close,
            "max_abs_diff_vs_baseline_wheel": max(float((p.float() - q.float()).abs().max())
                                                  for p, q in zip(outs["baseline"], outs["tuned"])),
            "claimed": {"speedup": item["claimed_speedup"], "gains": item["claimed_gains"]},
            "measured": measured, "ratio": verdict, "rounds": rounds, "reps": reps,
            "samples_ms": {"baseline": ms[0], "tuned": ms[1], "baseline_aa": ms[2],
                           **({"jit_config": ms[3]} if jit else {})},
            "ok": bit_identical and close and default_base and verdict["consistent"]})
    return results


def _site_manifest(site: str) -> dict[str, Any] | None:
    """The kbuild manifest of the wheel installed under ``site`` (its ``.dist-info/kbuild.json``), if any."""
    import glob

    from kbuild.build.manifest import read_manifest

    found = glob.glob(f"{site}/*.dist-info/kbuild.json")
    return read_manifest(found[0]) if found else None


_ARGS: argparse.Namespace | None = None


def main() -> int:
    global _ARGS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--pyproject", help="the pyproject.toml the wheel was built from (default: the example's)")
    p.add_argument("--expect-no-cubin", action="store_true")
    p.add_argument("--no-timing", action="store_true")
    p.add_argument("--compare", nargs=3, metavar=("BASE_SITE", "TUNED_SITE", "TUNED_MANIFEST"),
                   help="compare a tuned wheel's install with a baseline wheel's (no kbx_demo import needed)")
    p.add_argument("--rounds", type=int, default=15, help="--compare: interleaved timing rounds (default 15)")
    p.add_argument("--ratio-tol", type=float, default=0.03,
                   help="--compare: how far the measured speedup may be from the manifest's, beyond the run's A/A "
                        "spread (default 0.03)")
    p.add_argument("--dry-run", metavar="MANIFEST",
                   help="no GPU: print what --compare would check for this manifest (kbuild inspect --json)")
    p.add_argument("--target", default="sm_90", help="--dry-run: the GPU target (default sm_90)")
    _ARGS = args = p.parse_args()
    if args.dry_run:
        from kbuild.build.manifest import read_manifest

        plan = compare_plan(read_manifest(args.dry_run), args.target)
        print(json.dumps({"dry_run": True, "target": args.target, "plan": plan}, indent=2))
        return 0 if plan else 1
    doc: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "cc": list(torch.cuda.get_device_capability(0)),
                           "torch": torch.__version__, "checks": []}
    if args.compare:
        doc["checks"].extend(compare_wheels(*args.compare, rounds=args.rounds, ratio_tol=args.ratio_tol))
    elif args.expect_no_cubin:
        from kbx_demo import ops

        x = torch.randn(8, 1024, device="cuda").half()
        try:
            ops.softmax(x)
        except RuntimeError as exc:
            msg = str(exc)
            doc["checks"].append({"check": "no cubin for this GPU: clear error", "message": msg,
                                  "ok": "has no cubin for this GPU" in msg and "CUresult 209" in msg})
        else:
            doc["checks"].append({"check": "no cubin for this GPU: clear error", "ok": False,
                                  "message": "the launch succeeded"})
    else:
        import kbx_demo._kbx as ext

        doc["extension"] = ext.__file__
        doc["checks"].extend(check_kernels())
        doc["checks"].append(check_threads())
        if not args.no_timing:
            doc["timing"] = time_launches()
    doc["ok"] = all(c["ok"] for c in doc["checks"])
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
