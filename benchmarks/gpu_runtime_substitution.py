"""GPU evidence for kbuild.runtime (issue 8): tuned cubins substituted into ordinary @triton.jit calls.

Run on the H200 (no network; kbuild installed offline)::

    python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/kb .
    PYTHONPATH=/tmp/kb python3 benchmarks/gpu_runtime_substitution.py            # writes $OUT/...

What it does (about a minute plus the tuning budget):

1. **build** (this process): copies ``examples/jit-package`` (``ship = "package-data"``) to a temp
   dir and runs kbuild's pipeline on it with ``tune = "auto"`` for this GPU (a fresh local store):
   the real tuner searches each kernel within ``--evals``/``--seconds`` (``--algo``), and a schedule
   ships as "tuned" only if it passed the acceptance rule (verifier, 10 bit-exact input sets, the
   interleaved re-timing beating the A/A spread); otherwise the baseline is kept. Then
   :func:`kbuild.build.package_data.write_package_data` writes ``kbx_jit/_kbuild/`` (baseline-kept
   kernels included, so every call goes through the substitution).
2. **run** (a fresh Python process, like a user's): ``import kbx_jit`` (its ``_kbuild`` import
   enables kbuild.runtime) and calls ``kbx_jit.matmul_leaky_relu`` / ``kbx_jit.softmax``, i.e.
   normal ``kernel[grid](...)`` launches. It checks from the ``kbuild.runtime`` debug log and the
   compiled kernels that the shipped cubins were substituted, then disables kbuild.runtime and
   lets Triton compile the same calls itself; checks the outputs are bit-identical; times Triton's
   own cubin, kbuild's untuned (AOT) baseline and the substituted cubin through the same
   @triton.jit call (interleaved, medians; the index's speedup is relative to the baseline, and
   was re-timed on other inputs after the search, since the best of a noisy search is biased);
   and checks that calls that do not match (other num_warps, unaligned tensor) keep Triton's own
   cubin and stay correct.

Writes ``$OUT/runtime_substitution.json`` (raw samples included) and ``$OUT/runtime_substitution.log``
(the kbuild.runtime log), and prints a table last. Options: ``--out DIR`` (default ``$OUT`` or
``benchmarks/results``), ``--evals N --seconds S --algo A`` (tuning budget per kernel), ``--rounds R``
(default 15).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "jit-package"

# Problem sizes of the timed calls (the declarations match them: multiples of 16, unit strides).
MM = (4096, 4096, 4096)
SOFTMAX = (131072, 1024)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------------------------
# Shared helpers (both phases)


def make_inputs(seed: int) -> dict[str, Any]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    m, n, k = MM
    rows, cols = SOFTMAX
    return {
        "a": torch.randn((m, k), device="cuda", dtype=torch.float16, generator=g),
        "b": torch.randn((k, n), device="cuda", dtype=torch.float16, generator=g),
        "x": (torch.randn((rows, cols), device="cuda", dtype=torch.float16, generator=g) * 3.0),
    }


def ops_calls(kbx_jit: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """kernel name → a zero-argument callable making the package's ordinary @triton.jit launch."""
    return {
        "matmul_leaky_relu": lambda: kbx_jit.matmul_leaky_relu(inputs["a"], inputs["b"]),
        "softmax": lambda: kbx_jit.softmax(inputs["x"]),
    }


def jit_of(kernels_module: Any, name: str) -> Any:
    return getattr(kernels_module, name)


def cache_of(jit: Any) -> dict[Any, Any]:
    import torch

    return jit.device_caches[torch.cuda.current_device()][0]


def install(jit: Any, snapshot: dict[Any, Any]) -> None:
    """Make the JIT function's in-memory cache hold exactly ``snapshot`` (what a launch will find)."""
    cache = cache_of(jit)
    cache.clear()
    cache.update(snapshot)


def with_cubin(compiled: Any, cubin: bytes) -> Any:
    """A copy of a Triton 3.6 CompiledKernel that loads ``cubin`` at its first launch."""
    import copy

    clone = copy.copy(compiled)
    clone.asm = type(compiled.asm)(compiled.asm)
    clone.asm["cubin"] = cubin
    clone.asm.pop("sass", None)
    clone.kernel = cubin
    clone.module = None
    clone.function = None
    clone._run = None
    return clone


def bits_equal(a: Any, b: Any) -> bool:
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a.view(torch.int16), b.view(torch.int16)))


def time_interleaved(variants: dict[str, tuple[Any, dict[Any, Any]]], call: Any, *, rounds: int, reps: int) -> dict[str, list[float]]:
    """Milliseconds per call of each variant (``name → (jit, cache snapshot)``), interleaved round by round."""
    import torch

    names = list(variants)
    samples: dict[str, list[float]] = {n: [] for n in names}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for name in names:  # warm-up: load every module once
        jit, snap = variants[name]
        install(jit, snap)
        call()
    torch.cuda.synchronize()
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            jit, snap = variants[name]
            install(jit, snap)
            call()
            start.record()
            for _ in range(reps):
                call()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) / reps)
    return samples


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")


# ----------------------------------------------------------------------------------------------
# Phase 1: build the package data with searched schedules


def build_phase(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """kbuild's own pipeline with ``tune = "auto"`` on this GPU (the real tuner, its budget from the
    arguments): a schedule ships only if it passed the acceptance rule; otherwise the baseline is kept."""
    import dataclasses

    import torch

    from kbuild.build.package_data import write_package_data
    from kbuild.build.pipeline import run_pipeline
    from kbuild.cache import open_store
    from kbuild.settings.model import BudgetSettings
    from kbuild.settings.sources import load_settings

    src = work / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "_kbuild"))
    cc = torch.cuda.get_device_capability(0)
    cc_int = cc[0] * 10 + cc[1]
    settings = load_settings(src / "pyproject.toml")
    settings = dataclasses.replace(settings, targets=[f"sm_{cc_int}"], tune="auto", algorithm=args.algo,
                                   budget=BudgetSettings(evaluations=args.evals, seconds=args.seconds),
                                   store=work / "store", remotes=[], recordings=[])  # the declared kernels only
    store = open_store(settings)
    started = time.perf_counter()
    builds = run_pipeline(settings, store, tune_on_miss=True)
    tune_s = time.perf_counter() - started
    search: dict[str, Any] = {}
    for b in builds:
        name = b.spec.name
        baseline = store.get(b.baseline_key.hex).cubin
        (work / f"{name}.baseline.cubin").write_bytes(baseline)
        meta = b.artefact.meta
        report = meta.get("tune_report") or {}
        search[name] = {
            "state": b.state, "decision": meta.get("tune_decision"), "speedup_claimed": meta.get("speedup"),
            "evaluations": report.get("evaluations"), "tune_seconds": meta.get("tune_seconds"),
            "region": report.get("region"), "best_ratio_in_search": {a: r.get("best_ratio") for a, r in
                                                                    report.get("algorithms", {}).items()},
            "diff": report.get("diff"), "baseline_sha256": sha(baseline), "shipped_sha256": sha(b.artefact.cubin)}
    # Baseline-kept kernels ship too (include_untuned), so that every call exercises the substitution.
    result = write_package_data(settings, builds, src / "kbx_jit", include_untuned=True)
    return {"src": str(src), "tune_seconds": round(tune_s, 2), "budget": {"algorithm": args.algo,
            "evaluations": args.evals, "seconds": args.seconds}, "search": search, "cc": cc_int,
            "files": result.relative_files(src), "index": result.index}


# ----------------------------------------------------------------------------------------------
# Phase 2: a fresh process runs the package like a user


def run_phase(args: argparse.Namespace) -> int:
    import torch

    handler = ListHandler()
    logging.getLogger("kbuild.runtime").addHandler(handler)
    logging.getLogger("kbuild.runtime").setLevel(logging.DEBUG)
    sys.path.insert(0, args.src)
    import kbx_jit  # its "from . import _kbuild" enables kbuild.runtime

    import kbuild.runtime
    from kbuild.runtime.index import load_index

    kernels = sys.modules["kbx_jit.kernels"]
    index = load_index(Path(args.src) / "kbx_jit" / "_kbuild" / "index.json")
    entries = {e["kernel"]: e for e in index.entries.values()}
    out: dict[str, Any] = {"enabled": bool(kbx_jit._kbuild.ENABLED), "packages": kbuild.runtime.enabled_packages(),
                           "kernels": {}}
    inputs = make_inputs(7)
    calls = ops_calls(kbx_jit, inputs)
    tuned_snap, tuned_out = {}, {}
    for name, call in calls.items():  # first calls: Triton compiles (or loads its cache), the hook substitutes
        tuned_out[name] = call().clone()
        tuned_snap[name] = dict(cache_of(jit_of(kernels, name)))
    torch.cuda.synchronize()
    subs = {e.kernel: e for e in kbuild.runtime.substitutions()}
    kbuild.runtime.disable()  # now Triton's own cubins for the same calls
    plain_snap, plain_out = {}, {}
    for name, call in calls.items():
        cache_of(jit_of(kernels, name)).clear()
        plain_out[name] = call().clone()
        plain_snap[name] = dict(cache_of(jit_of(kernels, name)))
    torch.cuda.synchronize()
    for name, call in calls.items():
        jit = jit_of(kernels, name)
        (kt,) = tuned_snap[name].values()
        (key, kp), = plain_snap[name].items()
        entry = entries[name]
        # Three variants through the same @triton.jit call: Triton's own cubin, kbuild's untuned (AOT)
        # baseline, and the substituted one. The index's speedup is relative to the baseline.
        aot = (Path(args.src).parent / f"{name}.baseline.cubin").read_bytes()
        samples = time_interleaved({"triton": (jit, plain_snap[name]), "baseline": (jit, {key: with_cubin(kp, aot)}),
                                    "kbuild": (jit, tuned_snap[name])}, call, rounds=args.rounds, reps=args.reps)
        med_t, med_k = statistics.median(samples["triton"]), statistics.median(samples["kbuild"])
        med_b = statistics.median(samples["baseline"])
        out["kernels"][name] = {
            "substituted": name in subs and sha(kt.kernel) == entry["cubin_sha256"],
            "event": subs[name].as_dict() if name in subs else None,
            "shipped_sha256": entry["cubin_sha256"], "loaded_sha256": sha(kt.kernel),
            "triton_sha256": sha(kp.kernel), "tuned": entry["tuned"],
            "bit_identical": bits_equal(tuned_out[name], plain_out[name]),
            "median_ms_triton": med_t, "median_ms_baseline": med_b, "median_ms_kbuild": med_k,
            "speedup_vs_triton": med_t / med_k, "speedup_vs_baseline": med_b / med_k,
            "speedup_index": entry["speedup"], "samples_ms": samples,
        }
    # Calls that do not match the index keep Triton's cubin (and stay correct).
    kbuild.runtime.enable("kbx_jit")
    kbuild.runtime.reset_events()
    refusals = []
    x = inputs["x"]
    ref = torch.softmax(x.float(), dim=-1).half()
    for label, fn in (
        ("num_warps=8", lambda: _softmax_direct(kernels, x, num_warps=8)),
        ("unaligned input", lambda: kbx_jit.softmax(_unaligned_copy(x))),
    ):
        cache_of(kernels.softmax).clear()
        y = fn()
        torch.cuda.synchronize()
        ev = [e.as_dict() for e in kbuild.runtime.events()]
        refusals.append({"call": label, "substituted": any(e["substituted"] for e in ev), "events": ev,
                         "max_abs_err_vs_torch": float((y.float() - ref.float()).abs().max())})
        kbuild.runtime.reset_events()
    out["refusals"] = refusals
    out["log"] = handler.lines
    Path(args.result).write_text(json.dumps(out, indent=1))
    return 0


def _softmax_direct(kernels: Any, x: Any, *, num_warps: int) -> Any:
    import torch

    y = torch.empty_like(x)
    kernels.softmax[(x.shape[0],)](y, x, x.stride(0), y.stride(0), x.shape[1], BLOCK=1024, num_warps=num_warps,
                                   num_stages=3)
    return y


def _unaligned_copy(x: Any) -> Any:
    import torch

    buf = torch.empty(x.numel() + 1, device=x.device, dtype=x.dtype)
    view = buf[1:].view(x.shape)
    view.copy_(x)
    return view


# ----------------------------------------------------------------------------------------------


def device_info() -> dict[str, Any]:
    import torch
    import triton

    major, minor = torch.cuda.get_device_capability(0)
    info = {"gpu": torch.cuda.get_device_name(0), "cc": f"{major}.{minor}",
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()}
    try:
        info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        pass
    return info


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))
    p.add_argument("--evals", type=int, default=60, help="tuning budget per kernel: evaluations (default 60)")
    p.add_argument("--seconds", type=float, default=60.0, help="tuning budget per kernel: seconds (default 60)")
    p.add_argument("--algo", default="ppo", choices=["ppo", "random", "greedy"])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--phase", choices=["all", "run"], default="all", help=argparse.SUPPRESS)
    p.add_argument("--src", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.phase == "run":
        return run_phase(args)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU here; this script needs one", file=sys.stderr)
        return 2
    started = time.perf_counter()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kbuild-runtime-") as tmp:
        work = Path(tmp)
        os.environ.setdefault("TRITON_CACHE_DIR", str(work / "triton-cache"))
        built = build_phase(args, work)
        build_s = time.perf_counter() - started
        run_json = work / "run.json"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([built["src"], env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.pop("KBUILD_RUNTIME", None)
        proc = subprocess.run([sys.executable, __file__, "--phase", "run", "--src", built["src"], "--result",
                               str(run_json), "--rounds", str(args.rounds), "--reps", str(args.reps)],
                              env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            print(proc.stdout[-4000:], proc.stderr[-8000:], file=sys.stderr)
            return 1
        ran = json.loads(run_json.read_text())
    log_lines = ran.pop("log")
    doc = {
        "what": "issue 8: tuned cubins substituted into @triton.jit calls by kbuild.runtime",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "device": device_info(),
        "sizes": {"matmul_leaky_relu": list(MM), "softmax": list(SOFTMAX)},
        "timing": {"method": "CUDA events around `reps` back-to-back @triton.jit calls, variants interleaved per "
                             "round, median of rounds", "rounds": args.rounds, "reps": args.reps},
        "build": {k: v for k, v in built.items() if k not in ("src",)},
        "run": ran,
        "log": log_lines,
        "seconds": round(time.perf_counter() - started, 1),
        "build_seconds": round(build_s, 1),
    }
    ok = ran["enabled"] and all(k["substituted"] and k["bit_identical"] for k in ran["kernels"].values()) \
        and not any(r["substituted"] for r in ran["refusals"])
    doc["ok"] = ok
    (out_dir / "runtime_substitution.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out_dir / "runtime_substitution.log").write_text("\n".join(log_lines) + "\n")
    print(f"{'kernel':<18} {'subst':>5} {'bits':>5} {'triton ms':>9} {'base ms':>9} {'kbuild ms':>9} "
          f"{'vs triton':>9} {'vs base':>8} {'index':>6}  tuner")
    for name, k in ran["kernels"].items():
        s = built["search"][name]
        claimed = f"{k['speedup_index']:.3f}" if k["speedup_index"] else "-"
        print(f"{name:<18} {'yes' if k['substituted'] else 'NO':>5} {'same' if k['bit_identical'] else 'DIFF':>5} "
              f"{k['median_ms_triton']:>9.4f} {k['median_ms_baseline']:>9.4f} {k['median_ms_kbuild']:>9.4f} "
              f"{k['speedup_vs_triton']:>8.3f}x {k['speedup_vs_baseline']:>7.3f}x {claimed:>6}  "
              f"{s['state']}: {(s['decision'] or '')[:70]}")
    for r in ran["refusals"]:
        print(f"refused as expected: {r['call']:<16} substituted={r['substituted']} "
              f"max|err| vs torch {r['max_abs_err_vs_torch']:.2e}")
    print(f"{'OK' if ok else 'FAILED'} in {doc['seconds']} s -> {out_dir / 'runtime_substitution.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
