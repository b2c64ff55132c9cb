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
                        a tuned wheel against the baseline wheel, both loaded in this process:
                        bit-identical outputs, and interleaved timing vs the manifest's speedup

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
    cfg = _matmul_constexprs()
    K.matmul_leaky_relu[(_cdiv(m, cfg["BLOCK_M"]) * _cdiv(n, cfg["BLOCK_N"]),)](
        a, bm, jit, m, n, k, a.stride(0), 1, bm.stride(0), 1, jit.stride(0), 1,
        num_warps=cfg.pop("num_warps"), num_stages=cfg.pop("num_stages"), **cfg)
    ref = torch.nn.functional.leaky_relu(a.float() @ bm.float(), 0.01).half()
    results.append(_compare(f"matmul_leaky_relu {m}x{n}x{k}", got, ref, jit, atol=5e-2, rtol=2e-2))
    torch.cuda.synchronize()
    return results


def _matmul_constexprs() -> dict[str, Any]:
    """The matmul's declaration in the manifest-building pyproject (BLOCK_* and options)."""
    from pathlib import Path

    import tomllib

    project = Path(__file__).resolve().parent.parent / "examples" / "cmake-extension" / "pyproject.toml"
    override = _ARGS.pyproject if _ARGS is not None and _ARGS.pyproject else project
    data = tomllib.loads(Path(override).read_text())
    decl = next(k for k in data["tool"]["kbuild"]["kernels"] if k["name"] == "matmul_leaky_relu")
    cfg = dict(decl["constexprs"])
    cfg["num_warps"], cfg["num_stages"] = decl.get("num_warps", 4), decl.get("num_stages", 3)
    return cfg


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
    cfg = _matmul_constexprs()
    warps, stages = cfg.pop("num_warps"), cfg.pop("num_stages")
    c = torch.empty(4096, 4096, device="cuda").half()
    grid = (_cdiv(4096, cfg["BLOCK_M"]) * _cdiv(4096, cfg["BLOCK_N"]),)

    def aot_mm() -> None:
        ops.matmul_leaky_relu(a, b)

    def jit_mm() -> None:
        K.matmul_leaky_relu[grid](a, b, c, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1, num_warps=warps,
                                  num_stages=stages, **cfg)

    gpu = {}
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


def compare_wheels(base_site: str, tuned_site: str, manifest_path: str) -> list[dict[str, Any]]:
    """The tuned wheel against the baseline wheel, side by side in one process: bit-identical outputs
    on the same inputs, and interleaved CUDA-event timing of each kernel vs the manifest's speedup."""
    exts = {"baseline": _load_ext("base_wheel", base_site), "tuned": _load_ext("tuned_wheel", tuned_site)}
    manifest = {(e["kernel"], e["target"]): e for e in json.load(open(manifest_path))["kernels"]}
    stream = torch.cuda.current_stream().cuda_stream
    g = torch.Generator(device="cuda").manual_seed(1)
    m = n = k = 4096
    a = torch.randn(m, k, device="cuda", generator=g).half()
    b = torch.randn(k, n, device="cuda", generator=g).half()
    x = torch.randn(32768, 1008, device="cuda", generator=g).half()
    xl = torch.randn(32768, 768, device="cuda", generator=g).half()
    w = torch.randn(768, device="cuda", generator=g).half()
    bias = torch.randn(768, device="cuda", generator=g).half()

    def launchers(ext: Any) -> dict[str, tuple[Any, list[torch.Tensor]]]:
        c = torch.empty(m, n, device="cuda").half()
        out = torch.empty_like(x)
        y, mean, rstd = torch.empty_like(xl), torch.empty(32768, device="cuda"), torch.empty(32768, device="cuda")
        return {
            "matmul_leaky_relu": (lambda: ext.matmul_leaky_relu(stream, _cdiv(m, 128) * _cdiv(n, 128), 1, 1,
                                                                a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k,
                                                                k, n, n), [c]),
            "softmax": (lambda: ext.softmax(stream, x.shape[0], 1, 1, out.data_ptr(), x.data_ptr(), 1008, 1008,
                                            1000), [out[:, :1000]]),  # the padding columns are never written
            "layernorm": (lambda: ext.layernorm(stream, xl.shape[0], 1, 1, xl.data_ptr(), y.data_ptr(), w.data_ptr(),
                                                bias.data_ptr(), mean.data_ptr(), rstd.data_ptr(), 768, 768, 1e-5),
                          [y, mean, rstd]),
        }

    runs = {name: launchers(ext) for name, ext in exts.items()}
    results = []
    for kernel in ("matmul_leaky_relu", "softmax", "layernorm"):
        for name in runs:
            runs[name][kernel][0]()
        torch.cuda.synchronize()
        identical = all(torch.equal(p, q) for p, q in zip(runs["baseline"][kernel][1], runs["tuned"][kernel][1]))
        times: dict[str, list[float]] = {"baseline": [], "tuned": []}
        for r in range(10):  # interleaved rounds, alternating order
            for name in (("baseline", "tuned") if r % 2 == 0 else ("tuned", "baseline")):
                fn = runs[name][kernel][0]
                for _ in range(3):
                    fn()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(20):
                    fn()
                end.record()
                torch.cuda.synchronize()
                times[name].append(start.elapsed_time(end) / 20 * 1e3)
        entry = manifest.get((kernel, "sm_90"), {})
        measured = statistics.median(times["baseline"]) / statistics.median(times["tuned"])
        results.append({"check": f"{kernel}: tuned wheel vs baseline wheel", "ok": identical,
                        "bit_identical": identical, "state": entry.get("state"),
                        "manifest_speedup": entry.get("speedup"), "measured_speedup": round(measured, 4),
                        "baseline_us": times["baseline"], "tuned_us": times["tuned"]})
    return results


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
    _ARGS = args = p.parse_args()
    doc: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "cc": list(torch.cuda.get_device_capability(0)),
                           "torch": torch.__version__, "checks": []}
    if args.compare:
        doc["checks"].extend(compare_wheels(*args.compare))
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
