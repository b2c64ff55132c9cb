"""Liger-Kernel 0.8.5 through its own Python API with kbuild's shipped cubins (issue 16, item 5), on the H200.

Run on the GPU machine from the repository root (``bash benchmarks/gpu_session.sh liger`` does it)::

    python benchmarks/gpu_liger.py --out FILE [--repeats N] [--sdist .whl/liger-tests/liger_kernel-0.8.5.tar.gz]
    python benchmarks/gpu_liger.py --out FILE --dry-run     # CPU: build, install, plan check; nothing timed

1. **build**: ``examples/liger`` is copied to a temp dir and built into a wheel through kbuild's PEP 517
   backend (``pip wheel --no-build-isolation --no-deps --no-index``, ``-C kbuild.targets=sm_XX`` for this
   GPU) with an empty store (``KBUILD_STORE`` a fresh dir, ``tune = "off"``) from the Llama-shape recording
   alone (``KBUILD_RECORDINGS=recordings/llama-shapes.cpu.json``: the calls timed here, ~50 entries per target):
   what ships are the baselines. The wheel must hold ``kbx_liger/_kbuild/index.json`` and entries of every kernel
   function of ``OPS`` with Triton's metadata (index version 2), or the run stops with a clear error (an empty
   ``_kbuild/`` means the backend shipped only tuned kernels). It is installed with ``--no-deps`` into a target dir;
   liger-kernel itself comes from ``.whl/`` (installed by gpu_session.sh) or the environment.
2. **first call**: for each op × dtype, fresh ``python`` children call Liger's own autograd Function
   (``LigerRMSNormFunction`` forward and backward, ``LigerSiLUMulFunction``, ``LigerGELUMulFunction``,
   ``LigerLayerNormFunction``, ``LigerCrossEntropyFunction``, ``LigerDyTFunction`` — an ``@triton.autotune``
   kernel) on the shapes of ``kbx_liger.SHAPES``, timed from before the call to after
   ``torch.cuda.synchronize()`` (CUDA context and inputs made before the clock). Modes, ``--repeats`` each:
   ``shipped_cold`` (``import kbx_liger`` enables kbuild.runtime; fresh ``TRITON_CACHE_DIR``),
   ``shipped_warm`` (the cache ``shipped_cold`` left), ``triton_cold`` (``KBUILD_RUNTIME=off``, fresh cache:
   full JIT, and for dyt the autotuner's benchmarking of its 18 configs), ``triton_warm`` (the cache
   ``triton_cold`` filled). A child reports the ``triton.compiler.compile`` calls (wrapped; a disk-cache hit
   counts), kbuild.runtime's events (stage ``zero-jit``/``autotune``/``post-compile``), the runtime's
   fall-back log lines (``... Triton compiles it``), and the sha256 of every output (forward; for rms_norm
   also dX and dW). Shipped and Triton outputs must be bit-identical. Note: Liger's dyt autotuner may pick
   another config than the shipped one (the first); its outputs are compared all the same, and a
   difference is reported, not hidden.
3. **steady state**: one child per dtype runs every op with kbuild.runtime on (the shipped kernels, launched
   directly: :mod:`kbuild.runtime.direct`; since issue 34 they sit in Triton's own ``kernel_cache``), then disables
   kbuild.runtime, clears those caches and runs every op again (Triton compiles the same specialisations), checks
   the outputs bit for bit once more and times both through Triton's own ``run``, interleaved launch by launch
   with an L2 flush (:func:`kbuild.device.timing.time_interleaved`), each variant's kernels put into the
   ``kernel_cache`` before its call.
4. **Liger's own unit tests** (``--sdist``): ``test/transformers/test_{rms_norm,swiglu,geglu,layer_norm,
   cross_entropy,dyt}.py`` from the 0.8.5 sdist, run with pytest and a root ``conftest.py`` that imports
   ``kbx_liger`` (kbuild.runtime on) and records the runtime's events; pass/fail counts from the junit XML.
   Liger's ``test/utils.py`` imports transformers (>= 5) and tokenizers: their wheels travel in
   ``.whl/liger-tests/`` (installed into a separate target dir). ``pythonpath`` is overridden to ``.`` so
   that liger_kernel is the installed wheel, not the sdist's ``src/``.
5. JSON with every raw sample to ``--out``; a short table is printed last.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "liger"
PACKAGE = "kbx_liger"
MODES = ("shipped_cold", "shipped_warm", "triton_cold", "triton_warm")
#: Liger's own ops, each with the kernel functions its call runs (the index's ``function``; entries are matched by
#: function and key, not by name: recorded entries are named from the function and their content).
OPS = {
    "rms_norm": ("liger_kernel.ops.rms_norm:_rms_norm_forward_kernel",
                 "liger_kernel.ops.rms_norm:_rms_norm_backward_kernel"),
    "swiglu": ("liger_kernel.ops.swiglu:_swiglu_forward_kernel",),
    "geglu": ("liger_kernel.ops.geglu:_geglu_tanh_forward_kernel",),
    "layer_norm": ("liger_kernel.ops.layer_norm:_layer_norm_forward_kernel",),
    "cross_entropy": ("liger_kernel.ops.cross_entropy:liger_cross_entropy_kernel",),
    "dyt": ("liger_kernel.ops.dyt:_dyt_fwd_kernel",),
}
#: The recording the benchmark's wheel is built from (``KBUILD_RECORDINGS``): examples/liger/workload.py's calls, the
#: shapes this benchmark times (~100 entries; the example's full build from Liger's test files is ~1,600).
RECORDINGS = "recordings/llama-shapes.cpu.json"
DTYPES = ("fp16", "bf16")
LIGER_TESTS = tuple(f"test/transformers/test_{op}.py" for op in OPS)
#: Wheels Liger's tests need beyond the device image (transformers>=5 and its import-time dependencies).
TEST_WHEELS = ROOT / ".whl" / "liger-tests"

# The calls, shared by the first-call and steady-state children (and checked on CPU by --dry-run).
# ``make(op, dtype, device)`` returns (inputs, run) where run(inputs) -> dict of output tensors.
_CALLS = r'''
import hashlib
import torch
from liger_kernel.ops import (LigerCrossEntropyFunction, LigerDyTFunction, LigerGELUMulFunction,
                              LigerLayerNormFunction, LigerRMSNormFunction, LigerSiLUMulFunction)
import os
import kbx_liger
S = dict(kbx_liger.SHAPES)
if os.environ.get("KBX_LIGER_SHAPES") == "llama3":  # issue 35's shapes (examples/liger/workload.py --llama3)
    S.update(rows=4096, hidden=4096, intermediate=14336, vocab=128256)
DT = {"fp16": torch.float16, "bf16": torch.bfloat16}

def make(op, dtype, device):
    g = torch.Generator(device="cpu").manual_seed(1234)
    dt, R, H, I, V = DT[dtype], S["rows"], S["hidden"], S["intermediate"], S["vocab"]
    rnd = lambda *shape: torch.randn(*shape, generator=g).to(device=device, dtype=dt)
    if op == "rms_norm":
        x, w, dy = rnd(R, H), rnd(H), rnd(R, H)
        def run(x=x, w=w, dy=dy):
            x = x.clone().requires_grad_(True); w = w.clone().requires_grad_(True)
            y = LigerRMSNormFunction.apply(x, w, 1e-6)
            dx, dw = torch.autograd.grad(y, (x, w), dy.clone())
            return {"y": y, "dx": dx, "dw": dw}
        return run
    if op in ("swiglu", "geglu"):
        a, b = rnd(R, I), rnd(R, I)
        fn = LigerSiLUMulFunction if op == "swiglu" else LigerGELUMulFunction
        return lambda: {"c": fn.apply(a, b)}
    if op == "layer_norm":
        x, w, b = rnd(R, H), rnd(H), rnd(H)
        return lambda: {"y": LigerLayerNormFunction.apply(x, w, b, 1e-5)}
    if op == "cross_entropy":
        logits = rnd(R, V)
        target = torch.randint(0, V, (R,), generator=g).to(device)
        def run():
            x = logits.clone().requires_grad_(True)   # Liger writes the gradient into the logits
            loss = LigerCrossEntropyFunction.apply(x, target, None)[0]
            return {"loss": loss, "grad_in_logits": x.detach()}
        return run
    if op == "dyt":
        x, alpha, gamma, beta = rnd(R, H), torch.full((1,), 0.5, dtype=dt, device=device), rnd(H), rnd(H)
        return lambda: {"y": LigerDyTFunction.apply(x, alpha, gamma, beta)}
    raise KeyError(op)

def digest(outs):
    return {k: hashlib.sha256(v.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes()).hexdigest()
            for k, v in outs.items()}
'''

_KERNEL_TIMER = r'''
# each kernel's own first launch: the host time of the outermost `kernel[grid](...)` call (autotuner, heuristics or
# JIT function; what kbuild's runtime or Triton's compile, autotuning and load do happens inside it), apart from the
# torch work between launches that the op's figure includes in both modes
from triton.runtime.jit import JITFunction, KernelInterface
kernel_first = {}
_depth = [0]
def _base(k):
    while not isinstance(k, JITFunction):
        k = k.fn
    return f"{k.fn.__module__}:{k.fn.__name__}"
def _timed_getitem(self, grid):
    def launch(*args, **kwargs):
        _depth[0] += 1
        t = time.perf_counter()
        try:
            return self.run(grid=grid, warmup=False, *args, **kwargs)
        finally:
            _depth[0] -= 1
            if _depth[0] == 0:
                kernel_first.setdefault(_base(self), time.perf_counter() - t)
    return launch
KernelInterface.__getitem__ = _timed_getitem
'''

_FIRST_CALL = r'''
import hashlib, json, logging, sys, time
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()          # CUDA context before the clock
import triton, triton.compiler
compiles = []
_orig = triton.compiler.compile
def counting(*a, **k):
    compiles.append(getattr(a[0], "name", "?") if a else "?")
    return _orig(*a, **k)
triton.compiler.compile = counting                                 # what create_binder picks up
import triton.runtime.build as build
host_builds = []                                                   # C modules built with the host compiler
_orig_build = build._build
def counting_build(name, *a, **k):
    host_builds.append(name)
    return _orig_build(name, *a, **k)
build._build = counting_build
fallbacks = []
class _H(logging.Handler):
    def emit(self, record):
        msg = record.getMessage()
        if "Triton compiles it" in msg or "Triton's own" in msg:
            fallbacks.append(msg)
logging.getLogger("kbuild").addHandler(_H()); logging.getLogger("kbuild").setLevel(logging.INFO)
{kernel_timer}{calls}
import kbuild.runtime
run = make({op!r}, {dtype!r}, "cuda")
import os
profile_dir = os.environ.get("KBX_PROFILE_DIR")   # a diagnostic run: the first call under cProfile (slower)
if profile_dir:
    import cProfile
    profiler = cProfile.Profile()
torch.cuda.synchronize()
t0 = time.perf_counter()
if profile_dir:
    profiler.enable()
outs = run()
torch.cuda.synchronize()
if profile_dir:
    profiler.disable()
seconds = time.perf_counter() - t0
if profile_dir:
    import io, pstats
    text = io.StringIO()
    text.write(f"{{seconds:.4f}} s (profiled) KBUILD_RUNTIME={{os.environ.get('KBUILD_RUNTIME')}}\n")
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    name = "%s-%s-%s-%d.txt" % ({op!r}, {dtype!r}, os.environ.get("KBUILD_RUNTIME"), os.getpid())
    with open(os.path.join(profile_dir, name), "w") as f:
        f.write(text.getvalue())
gluon = any(m.startswith("triton.experimental.gluon") for m in sys.modules)  # Triton's specialiser's first-use import
print(json.dumps({{"seconds": seconds, "kernel_first_seconds": kernel_first, "gluon_imported": gluon, "compiles": compiles, "host_builds": host_builds,
                  "fallbacks": fallbacks,
                  "events": [e.as_dict() for e in kbuild.runtime.events()],
                  "enabled": kbuild.runtime.enabled_packages(), "out_sha256": digest(outs)}}))
'''

_STEADY = r'''
import json, os, statistics, sys
import torch
{calls}
import kbuild.runtime
from kbuild.device.timing import L2Flush, time_interleaved
from liger_kernel.ops import cross_entropy, dyt, geglu, layer_norm, rms_norm, swiglu
from triton.runtime.autotuner import Autotuner
JITS = {{"rms_norm": [rms_norm._rms_norm_forward_kernel, rms_norm._rms_norm_backward_kernel],
        "swiglu": [swiglu._swiglu_forward_kernel], "geglu": [geglu._geglu_tanh_forward_kernel],
        "layer_norm": [layer_norm._layer_norm_forward_kernel],
        "cross_entropy": [cross_entropy.liger_cross_entropy_kernel], "dyt": [dyt._dyt_fwd_kernel]}}
jit = lambda k: k.fn if isinstance(k, Autotuner) else k
cache = lambda k: jit(k).device_caches[torch.cuda.current_device()][0]
dtype, rounds, reps = {dtype!r}, {rounds}, {reps}
runs = {{op: make(op, dtype, "cuda") for op in JITS}}
shipped, plain, out = {{}}, {{}}, {{}}
from kbuild.bench.tolerance import config_tolerance, relative_error
shipped_out = {{}}
for op, run in runs.items():
    o = run(); torch.cuda.synchronize()
    shipped[op] = ([dict(cache(k)) for k in JITS[op]], digest(o))
    shipped_out[op] = {{k: v.detach().clone() for k, v in o.items()}}
events = [e.as_dict() for e in kbuild.runtime.events()]
coverage = kbuild.runtime.coverage_report()["totals"]
# Since issue 34 kbuild is on no call's path after a specialisation's first: the shipped kernel sits in Triton's own
# kernel_cache (launched by kbuild's generated launcher, or Triton's under KBUILD_RUNTIME_LAUNCH=triton), and
# KBUILD_RUNTIME is read only when a specialisation is first called. So Triton's own kernels come from its own compile
# of the same calls with kbuild disabled (the autotuner's cache keeps the shipped choice: the same config), and each
# variant puts its kernels into the kernel_caches before its call (one dict update per kernel, both variants alike).
kbuild.runtime.disable()
for op in runs:
    for k in JITS[op]:
        cache(k).clear()
# each output against Triton's (Liger's configuration), norm-relative, beside the tolerance a tuned configuration is
# held to (kbuild.bench.tolerance: the output's dtype; the largest dimension of any of the op's outputs as the
# reduction length, so that cross-entropy's scalar loss is allowed its sum over the vocabulary)
errors = {{}}
for op, run in runs.items():
    o = run(); torch.cuda.synchronize()
    plain[op] = ([dict(cache(k)) for k in JITS[op]], digest(o))
    length = max((d for v in o.values() for d in v.shape), default=1)
    errors[op] = {{k: {{"rel_err": relative_error(shipped_out[op][k], v),
                       "tolerance": config_tolerance(str(v.dtype), length)}} for k, v in o.items()}}
    del shipped_out[op]
def variant(op, mode):
    tables = shipped[op][0] if mode == "on" else plain[op][0]
    caches = [cache(k) for k in JITS[op]]
    pairs = list(zip(caches, tables))
    def call():
        for c, t in pairs:
            c.update(t)
        runs[op]()
    return call
flush = L2Flush()
for op in runs:
    ms = time_interleaved([variant(op, "on"), variant(op, "off")], rounds=rounds, reps=reps,
                          flush=flush)
    flat = [[x for r in v for x in r] for v in ms]
    out[op] = {{"bit_identical": shipped[op][1] == plain[op][1], "errors": errors[op],
               "within_tolerance": all(e["rel_err"] <= e["tolerance"] for e in errors[op].values()),
               "shipped_sha256": shipped[op][1],
               "triton_sha256": plain[op][1], "shipped_ms": flat[0], "triton_ms": flat[1],
               "median_ms": {{"shipped": statistics.median(flat[0]), "triton": statistics.median(flat[1])}}}}
print(json.dumps({{"ops": out, "events": events, "coverage": coverage,
                  "kbuild_kernels": {{op: [sum(getattr(v, "kbuild_entry", None) is not None for v in t.values())
                                          for t in shipped[op][0]] for op in shipped}}}}))
'''

_CONFTEST = r'''
"""Written by benchmarks/gpu_liger.py: Liger's own tests with kbuild.runtime on (kbx_liger's shipped cubins)."""
import json, os
import kbuild.runtime
import kbx_liger  # noqa: F401  (its _kbuild enables the runtime)

assert kbuild.runtime.enabled_packages() == ["kbx_liger"], kbuild.runtime.enabled_packages()

def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["KBX_LIGER_EVENTS"], "a") as f:  # one line per pytest run (one per test file)
        f.write(json.dumps([e.as_dict() for e in kbuild.runtime.events()]) + "\n")
'''


class PlanError(SystemExit):
    """The build or the plan is not what the benchmark needs (message says what)."""


def build_wheel(work: Path, cc: int, prebuilt: Path | None = None) -> dict[str, Any]:
    """Build examples/liger through kbuild's backend (empty store, tune off) for sm_<cc>; check its _kbuild/.

    ``prebuilt``: a wheel this function built earlier (on a CPU machine: the build needs no GPU) is checked the
    same way instead of building again (``--wheel``; saves the build's time on the GPU machine)."""
    src, dist = work / "src", work / "dist"
    if prebuilt is not None:
        dist.mkdir(parents=True, exist_ok=True)
        shutil.copy2(prebuilt, dist / prebuilt.name)
        return _checked_wheel(dist / prebuilt.name, cc, seconds=0.0)
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "_kbuild", "*.egg-info"))
    env = dict(os.environ, KBUILD_STORE=str(work / "store"), KBUILD_TUNE="off", SOURCE_DATE_EPOCH="1700000000",
               TRITON_CACHE_DIR=str(work / "build-triton-cache"), KBUILD_RECORDINGS=RECORDINGS)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps",
                           "--no-build-isolation", "--no-index", "-v", "-w", str(dist), str(src),
                           "-C", f"kbuild.targets=sm_{cc}"], env=env, capture_output=True, text=True, check=False)
    seconds = round(time.perf_counter() - started, 2)
    (work / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise PlanError(f"wheel build failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    (wheel,) = dist.glob("kbx_liger-*.whl")
    return _checked_wheel(wheel, cc, seconds)


def _checked_wheel(wheel: Path, cc: int, seconds: float) -> dict[str, Any]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        data = [n for n in names if n.startswith(f"{PACKAGE}/_kbuild/")]
        cubins = [n for n in data if n.endswith(".cubin")]
        if not cubins or f"{PACKAGE}/_kbuild/index.json" not in names:
            raise PlanError(f"{wheel.name}: {PACKAGE}/_kbuild/ is empty ({len(data)} files, {len(cubins)} cubins, "
                            f"index.json {'present' if f'{PACKAGE}/_kbuild/index.json' in names else 'absent'}): "
                            "the backend shipped no baselines from an untuned build (ship = \"package-data\" "
                            "must ship untuned kernels too), so nothing can load zero-JIT")
        index = json.loads(zf.read(f"{PACKAGE}/_kbuild/index.json"))
    entries = list(index.get("entries", {}).values())
    want = {f for fs in OPS.values() for f in fs}
    got = {e["function"] for e in entries if e.get("target", {}).get("name") == f"sm_{cc}"}
    no_md = sorted(e["kernel"] for e in entries if "triton_metadata" not in e)
    if not want <= got or no_md or index.get("version") != 2:
        raise PlanError(f"{wheel.name}: index version {index.get('version')}, sm_{cc} entries missing "
                        f"{sorted(want - got)}, unexpected {sorted(got - want)}, without Triton metadata {no_md}")
    return {"wheel": str(wheel), "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
            "build_seconds": seconds, "cubins": len(cubins), "index_version": index["version"],
            "entries": {e["kernel"]: {"key": k, "cubin_sha256": e.get("cubin_sha256"), "tuned": e.get("tuned")}
                        for k, e in index["entries"].items()}}


def install(wheel: str, site: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                    "--no-deps", "--target", str(site), wheel], check=True)


def child_env(site: Path, cache: Path | None, runtime_on: bool) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, KBUILD_RUNTIME="on" if runtime_on else "off")
    if cache is not None:
        env["TRITON_CACHE_DIR"] = str(cache)
    return env


def run_child(code: str, env: dict[str, str], timeout: float = 300) -> dict[str, Any]:
    try:
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              timeout=timeout, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if proc.returncode != 0:
        return {"error": proc.stderr[-3000:]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def first_calls(site: Path, repeats: int, only: list[str] | None = None,
                budget_s: float | None = None, on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """``only``: op/dtype names, measured in that order (a priority; default all 12 in OPS order); ``budget_s``: no
    op/dtype starts after this many seconds (the rest are recorded as not measured); ``on_row``: called with the rows
    so far after each op/dtype (a call cut by its time limit keeps every op measured before the cut)."""
    rows: dict[str, Any] = {}
    started = time.perf_counter()
    for name in only or [f"{op}/{dtype}" for op in OPS for dtype in DTYPES]:
        op, dtype = name.split("/")
        if budget_s is not None and time.perf_counter() - started > budget_s:
            rows[name] = {"not_measured": f"first-call budget of {budget_s:.0f} s used"}
            print(f"  {name}: not measured (budget)", flush=True)
            continue
        code = _FIRST_CALL.format(calls=_CALLS, kernel_timer=_KERNEL_TIMER, op=op, dtype=dtype)
        samples: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        for _ in range(repeats):
            for on, cold, warm in ((True, "shipped_cold", "shipped_warm"), (False, "triton_cold", "triton_warm")):
                with tempfile.TemporaryDirectory(prefix="kbuild-liger-cache-") as cache:
                    samples[cold].append(run_child(code, child_env(site, Path(cache), on)))
                    samples[warm].append(run_child(code, child_env(site, Path(cache), on)))
        rows[name] = summarise(samples, len(OPS[op]))
        print(f"  {name}: {short(rows[name])}", flush=True)
        if on_row is not None:
            on_row(rows)
    return rows


def summarise(samples: dict[str, list[dict[str, Any]]], n_kernels: int) -> dict[str, Any]:
    ok = {m: [s for s in samples[m] if "seconds" in s] for m in MODES}
    med = {m: statistics.median(s["seconds"] for s in ok[m]) if ok[m] and len(ok[m]) == len(samples[m]) else None
           for m in MODES}
    shipped = ok["shipped_cold"] + ok["shipped_warm"]
    served = [sum(1 for e in s["events"] if e.get("stage") in ("zero-jit", "autotune") and e.get("substituted"))
              for s in shipped]
    digests = {json.dumps(s["out_sha256"], sort_keys=True) for m in MODES for s in ok[m]}
    return {
        "median_seconds": med,
        "errors": {m: [s["error"] for s in samples[m] if "error" in s] for m in MODES if len(ok[m]) < len(samples[m])},
        "kernels": n_kernels,
        "served_zero_jit": min(served) if served else 0,
        "shipped_compiles": sorted({c for s in shipped for c in s["compiles"]}),
        "shipped_host_builds": sorted({b for s in shipped for b in s.get("host_builds", ())}),
        "fallbacks": sorted({f for s in shipped for f in s["fallbacks"]}),
        "stages": sorted({str(e.get("stage")) for s in shipped for e in s["events"]}),
        "gluon_imported": {m: sum(1 for s in ok[m] if s.get("gluon_imported")) for m in MODES},
        "bit_identical": len(digests) == 1 and all(len(ok[m]) == len(samples[m]) for m in MODES),
        "x_vs_triton_cold": _ratio(med["triton_cold"], med["shipped_cold"]),
        "x_vs_triton_warm": _ratio(med["triton_warm"], med["shipped_warm"]),
        **kernel_first_calls(ok, samples),
        "samples": samples,
    }


def kernel_first_calls(ok: dict[str, list[dict[str, Any]]], samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each kernel's own first launch (the host time of its outermost ``kernel[grid](...)`` call, what the issue's
    "first call of every recorded kernel" measures), median per mode, and Triton cold against shipped cold per
    kernel; the op's figure above also holds the torch work between the launches, the same in both modes."""
    names = sorted({k for m in MODES for s in ok[m] for k in s.get("kernel_first_seconds", {})})
    per: dict[str, Any] = {}
    for k in names:
        med = {}
        for m in MODES:
            xs = [s["kernel_first_seconds"][k] for s in ok[m] if k in s.get("kernel_first_seconds", {})]
            med[m] = statistics.median(xs) if xs and len(xs) == len(samples[m]) else None
        per[k] = {"median_seconds": med, "x_vs_triton_cold": _ratio(med["triton_cold"], med["shipped_cold"]),
                  "x_vs_triton_warm": _ratio(med["triton_warm"], med["shipped_warm"])}
    xs = [v["x_vs_triton_cold"] for v in per.values()]
    return {"kernel_first_call": per,
            "min_kernel_x_vs_triton_cold": min(xs) if xs and None not in xs else None}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 1) if a and b else None


def short(r: dict[str, Any]) -> str:
    med = r["median_seconds"]
    cells = " ".join(f"{m}={med[m]:.4f}s" if med[m] is not None else f"{m}=error" for m in MODES)
    per = "; ".join(f"{k.split(':')[-1]} {v['median_seconds']['shipped_cold'] or 0:.4f}s vs "
                    f"{v['median_seconds']['triton_cold'] or 0:.3f}s ×{v['x_vs_triton_cold']}"
                    for k, v in r.get("kernel_first_call", {}).items())
    return (f"{cells} zero-jit {r['served_zero_jit']}/{r['kernels']} compiles {r['shipped_compiles']} "
            f"host builds {r['shipped_host_builds']} bit-identical {r['bit_identical']}; each kernel's first launch, "
            f"shipped cold vs Triton cold: {per or '-'}")


def steady_state(site: Path, rounds: int, reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dtype in DTYPES:
        with tempfile.TemporaryDirectory(prefix="kbuild-liger-steady-") as cache:
            code = _STEADY.format(calls=_CALLS, dtype=dtype, rounds=rounds, reps=reps)
            out[dtype] = run_child(code, child_env(site, Path(cache), True), timeout=400)
    return out


_SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected)")


def liger_tests(site: Path, sdist: Path, work: Path, timeout: float, *, collect_only: bool = False,
                tests_site: Path | None = None, files: tuple[str, ...] = LIGER_TESTS,
                workers: int = 0) -> dict[str, Any]:
    """Liger's own unit tests for the covered ops, from its sdist, with kbuild.runtime on.

    ``tests_site``: a folder already holding transformers & co. (else ``.whl/liger-tests/*.whl`` are installed);
    ``collect_only``: pytest ``--collect-only`` (the CPU dry run: imports, conftest, runtime enabled);
    ``files``: the test files, run in order, each given an equal share of what is left of ``timeout`` (time a file
    does not use passes to the later ones); a file past its share gets SIGINT, so pytest still writes its junit XML
    and summary (what ran is counted), then SIGKILL 20 s later; ``workers``: pytest-xdist ``-n`` when xdist is
    importable (the tests' Triton compiles are CPU work)."""
    wheels = sorted(TEST_WHEELS.glob("*.whl"))
    if tests_site is None and wheels:
        tests_site = work / "liger-tests-site"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                        "--no-deps", "--target", str(tests_site), *map(str, wheels)], check=True)
    with tarfile.open(sdist) as tf:
        top = tf.getnames()[0].split("/")[0]
        members = [m for m in tf.getmembers() if m.name.startswith(f"{top}/test/") and m.isfile()]
        tf.extractall(work / "sdist", members=members, filter="data")
    root = work / "sdist" / top
    (root / "conftest.py").write_text(_CONFTEST)
    (root / "pytest.ini").write_text("[pytest]\n")  # not the sdist's pyproject options (pythonpath src/, asyncio)
    env = child_env(site, work / "liger-tests-triton-cache", True)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *([str(tests_site)] if tests_site else []), env["PYTHONPATH"]])
    env["KBX_LIGER_EVENTS"] = str(work / "liger-tests-events.json")
    # One pytest per file, each with its own junit XML, so that a file cut short by the time limit loses only
    # its own counts; the files share ``timeout`` in order (the covered ops first-come).
    import importlib.util

    xdist = workers > 0 and not collect_only and importlib.util.find_spec("xdist") is not None
    started = time.perf_counter()
    counts: dict[str, dict[str, int]] = {}
    summaries: dict[str, dict[str, int]] = {}
    shares: dict[str, float] = {}
    logs: list[str] = []
    rcs: dict[str, int | str] = {}
    for i, test_file in enumerate(files):
        left = timeout - (time.perf_counter() - started)
        name = Path(test_file).name
        if left < 5:
            rcs[name] = "not run (time)"
            continue
        share = shares[name] = round(left / (len(files) - i), 1)
        junit = work / f"{Path(test_file).stem}.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", f"--junitxml={junit}",
               *(["--collect-only"] if collect_only else []), *(["-n", str(workers)] if xdist else []), test_file]
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=share)
            rcs[name] = proc.returncode
            logs.append(f"==== {test_file} (exit {proc.returncode}, share {share:.0f} s)\n{out[-6000:]}{err[-2000:]}")
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # pytest stops, writes the junit XML and its summary
            try:
                out, err = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            rcs[name] = f"cut at its share ({share:.0f} s)"
            logs.append(f"==== {test_file} [cut at its share of {share:.0f} s]\n{out[-6000:]}{err[-2000:]}")
        tail = out.strip().splitlines()[-1] if out.strip() else ""
        summaries[name] = {k.rstrip("s") if k.startswith("error") else k: int(n) for n, k in _SUMMARY.findall(tail)}
        found = re.search(r"(\d+) tests? collected", out)
        if collect_only and found:
            counts.setdefault(name, {})["collected"] = int(found.group(1))
        if junit.is_file():
            for case in ET.parse(junit).getroot().iter("testcase"):
                kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
                counts.setdefault(name, {}).setdefault(kind, 0)
                counts[name][kind] += 1
    log = "\n".join(logs)
    events_file = Path(env["KBX_LIGER_EVENTS"])
    events = [e for line in (events_file.read_text().splitlines() if events_file.is_file() else ()) for e in json.loads(line)]
    stages: dict[str, int] = {}
    for e in events:
        stages[str(e.get("stage"))] = stages.get(str(e.get("stage")), 0) + 1
    return {"rc": rcs, "seconds": round(time.perf_counter() - started, 1), "counts": counts,
            "summary_line_counts": summaries, "shares_s": shares, "xdist_workers": workers if xdist else 0,
            "runtime_event_stages": stages, "log": log[-20000:], "files": list(files),
            "extra_wheels": [w.name for w in wheels], "collect_only": collect_only}


def dry_run_plan(site: Path, built: dict[str, Any]) -> dict[str, Any]:
    """CPU: each op × dtype through Liger's Function API with launches recorded (nothing compiles); every
    recorded call must key to a sm_90 entry of the wheel of the same function (the runtime's exact match)."""
    code = _CALLS + r'''
import json, sys
from unittest import mock
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction
from kbuild.runtime.keys import installed_distribution, specialization_for_call
entries = json.load(open(sys.argv[1]))["entries"]
by_function = {}
for k, e in entries.items():
    if e["target"]["name"] == "sm_90":
        by_function.setdefault(e["function"], []).append((k, e))
OPS = json.loads(sys.argv[2])
report = {}
for op, kernels in OPS.items():
    for dtype in ("fp16", "bf16"):
        calls = []
        def jit_run(self, *a, grid, warmup, **kw): calls.append((self, a, kw))
        def tuner_run(self, *a, grid, warmup=False, **kw):
            cfg = self.configs[0]   # the declared default: the autotuner's first config
            calls.append((self.fn, a, {**kw, **cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}))
        with mock.patch.object(JITFunction, "run", jit_run), mock.patch.object(Autotuner, "run", tuner_run):
            try:
                make(op, dtype, "cpu")()
            except Exception as exc:   # the recorder launched nothing, so later CPU code may trip on garbage
                pass
        for kernel, (jit, a, kw) in zip(kernels, calls):
            call = specialization_for_call(jit, *a, cc=90, **kw)
            found = [] if call.unsupported else [  # the run time's exact match: an entry of the function, same key
                entry["kernel"] for key, entry in by_function.get(kernel, ())
                if call.key(ptxas_version=entry["key_components"]["compiler"]["ptxas"], declared=entry.get("signature"),
                            distribution=installed_distribution(entry)).hex == key]
            report[f"{kernel.rpartition(':')[2]}/{dtype}"] = {"recorded": True, "unsupported": call.unsupported,
                                                              "match": bool(found), "entries": found}
        for kernel in kernels[len(calls):]:
            report[f"{kernel.rpartition(':')[2]}/{dtype}"] = {"recorded": False, "match": False}
print(json.dumps(report))
'''
    index = site / PACKAGE / "_kbuild" / "index.json"
    env = child_env(site, None, True)
    proc = subprocess.run([sys.executable, "-c", code, str(index), json.dumps(OPS)], env=env, capture_output=True,
                          text=True, check=False, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        raise PlanError(f"plan check failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _agreement(steady_op: dict[str, Any]) -> str:
    """How a steady-state op's shipped outputs compare with Triton's: nothing when bit-identical, ``within tol``
    (each output's largest norm-relative error) when a tuned configuration's reduction order differs within the
    tolerance, `` DIFFER`` otherwise."""
    if steady_op["bit_identical"]:
        return ""
    worst = max((e["rel_err"] for e in steady_op.get("errors", {}).values()), default=float("nan"))
    return f" within tol ({worst:.2g})" if steady_op.get("within_tolerance") else f" DIFFER ({worst:.2g})"


def table(doc: dict[str, Any]) -> str:
    lines = [f"{'op/dtype':<20} " + " ".join(f"{m:>13}" for m in MODES)
             + "  ×cold  ×warm  kernel×cold  zero-JIT  bit-id  steady shipped/triton ms"]
    first = doc.get("first_call", {})
    # Every op/dtype that either part measured: with --skip first-call the steady rows still print.
    steady_names = [f"{op}/{dtype}" for dtype, d in doc.get("steady", {}).items() for op in d.get("ops", {})]
    for name in [*first, *(n for n in steady_names if n not in first)]:
        r = first.get(name, {"not_measured": "first call skipped"})
        op, dtype = name.split("/")
        st = doc.get("steady", {}).get(dtype, {}).get("ops", {}).get(op)
        steady = (f"{st['median_ms']['shipped']:.4f}/{st['median_ms']['triton']:.4f}{_agreement(st)}") if st else "-"
        if "not_measured" in r and st:
            lines.append(f"{name:<20} first call not measured ({r['not_measured']}); steady {steady}")
            continue
        if "not_measured" in r:
            lines.append(f"{name:<20} not measured ({r['not_measured']})")
            continue
        med = r["median_seconds"]
        cells = " ".join(f"{med[m]:>12.4f}s" if med[m] is not None else f"{'error':>13}" for m in MODES)
        lines.append(f"{name:<20} {cells}  {r['x_vs_triton_cold']!s:>5}  {r['x_vs_triton_warm']!s:>5}  "
                     f"{r.get('min_kernel_x_vs_triton_cold')!s:>11}  "
                     f"{r['served_zero_jit']}/{r['kernels']:<6}  {r['bit_identical']!s:>6}  {steady}")
    tests = doc.get("liger_tests")
    if tests:
        lines.append(f"Liger's tests (exit per file {tests['rc']}, {tests['seconds']} s, runtime events "
                     f"{tests['runtime_event_stages']}):")
        lines += [f"  {f}: junit {tests['counts'].get(f)}, summary line {tests.get('summary_line_counts', {}).get(f)}"
                  for f in sorted(set(tests["counts"]) | set(tests.get("summary_line_counts", {})))]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="JSON file to write")
    parser.add_argument("--repeats", type=int, default=1, help="fresh-process samples per op × dtype × mode")
    parser.add_argument("--rounds", type=int, default=5, help="steady state: interleaved rounds")
    parser.add_argument("--reps", type=int, default=20, help="steady state: launches per variant per round")
    parser.add_argument("--sdist", type=Path, default=TEST_WHEELS / "liger_kernel-0.8.5.tar.gz",
                        help="Liger-Kernel's sdist, for its unit tests (skipped when absent)")
    parser.add_argument("--tests-timeout", type=float, default=150.0, help="seconds for Liger's tests")
    parser.add_argument("--tests-site", type=Path, default=None,
                        help="a folder holding transformers>=5 & co. for Liger's tests (default: install .whl/liger-tests)")
    parser.add_argument("--skip", action="append", default=[], choices=["first-call", "steady", "tests"])
    parser.add_argument("--only", action="append", default=[], metavar="OP/DTYPE",
                        help="first calls of these only (repeat; e.g. geglu/bf16), default all 12")
    parser.add_argument("--first-call-s", type=float, default=None,
                        help="no op/dtype's first calls start after this many seconds (the rest: not measured)")
    parser.add_argument("--test-files", default=None,
                        help="comma-separated ops whose test files run (e.g. swiglu,geglu), default all six")
    parser.add_argument("--tests-workers", type=int, default=0, help="pytest-xdist -n for Liger's tests (0: none)")
    parser.add_argument("--wheel", type=Path, default=None,
                        help="a kbx_liger wheel built earlier for this GPU's target (checked, not rebuilt)")
    parser.add_argument("--keep-wheel", type=Path, default=None, help="copy the built wheel here")
    parser.add_argument("--tuned", action="store_true",
                        help="the wheel ships tuned configurations: steady-state outputs within the configuration "
                             "tolerance of Triton's (kbuild.bench.tolerance) pass; otherwise they must be "
                             "bit-identical")
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU: build for sm_90, install, check the plan against the index; nothing timed")
    args = parser.parse_args()
    unknown = [o for o in args.only if o.split("/")[0] not in OPS or o.split("/")[-1] not in DTYPES]
    files = LIGER_TESTS if args.test_files is None else tuple(f"test/transformers/test_{op}.py"
                                                              for op in args.test_files.split(","))
    bad_files = [f for f in files if f not in LIGER_TESTS]
    if unknown or bad_files:
        parser.error(f"unknown --only {unknown} / --test-files {bad_files}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kbuild-liger-") as tmp:
        work = Path(tmp)
        if args.dry_run:
            cc = 90
        else:
            import torch

            major, minor = torch.cuda.get_device_capability(0)
            cc = major * 10 + minor
        built = build_wheel(work, cc, args.wheel)
        if args.keep_wheel is not None:
            args.keep_wheel.mkdir(parents=True, exist_ok=True)
            shutil.copy2(built["wheel"], args.keep_wheel)
        print(f"built {Path(built['wheel']).name}: {built['cubins']} cubins for sm_{cc} in {built['build_seconds']} s",
              flush=True)
        site = work / "site"
        install(built["wheel"], site)
        doc: dict[str, Any] = {"build": built, "cc": cc, "command": " ".join([Path(sys.executable).name, *sys.argv]),
                               "sha256_of_script": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}
        if args.dry_run:
            plan = dry_run_plan(site, built)
            doc.update(dry_run=True, note="CPU dry run: wheel built and installed, Liger's Function calls recorded "
                       "(nothing launched or timed) and keyed against the index", plan=plan,
                       sdist_present=args.sdist.is_file(), test_wheels=[w.name for w in TEST_WHEELS.glob("*.whl")])
            if args.sdist.is_file() and "tests" not in args.skip:
                collected = liger_tests(site, args.sdist, work, args.tests_timeout, collect_only=True,
                                        tests_site=args.tests_site, files=files)
                doc["liger_tests_collected"] = {k: v for k, v in collected.items() if k != "log"}
                print(f"collected Liger's tests with kbuild.runtime on: exit {collected['rc']}")
                if any(rc != 0 for rc in collected["rc"].values()):
                    print(collected["log"][-3000:])
                    return 1
            args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
            bad = sorted(k for k, v in plan.items() if not v["match"])
            print(f"dry run: {len(plan) - len(bad)}/{len(plan)} Liger calls key to the shipped entries"
                  f"{'; MISMATCH: ' + ', '.join(bad) if bad else ''}; sdist {'found' if doc['sdist_present'] else 'ABSENT'}"
                  f" ({args.sdist}); {len(doc['test_wheels'])} test wheels; wrote {args.out}")
            return 1 if bad else 0
        from kbuild.device.timing import device_report

        doc["device"] = device_report()
        doc["repeats"] = args.repeats
        write = lambda: args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")  # noqa: E731
        if "first-call" not in args.skip:
            print("== first calls (fresh processes)", flush=True)
            def on_row(rows: dict[str, Any]) -> None:
                doc["first_call"] = rows
                write()

            doc["first_call"] = first_calls(site, args.repeats, args.only or None, args.first_call_s, on_row=on_row)
            write()  # after each part: a call cut by its time limit keeps what was measured
        if "steady" not in args.skip:
            print("== steady state (interleaved)", flush=True)
            doc["steady"] = steady_state(site, args.rounds, args.reps)
            write()
        if "tests" not in args.skip and args.sdist.is_file():
            print(f"== Liger's own tests ({', '.join(files)}; {args.tests_timeout:.0f} s shared)", flush=True)
            doc["liger_tests"] = liger_tests(site, args.sdist, work, args.tests_timeout, tests_site=args.tests_site,
                                             files=files, workers=args.tests_workers)
            (args.out.parent / "liger_tests.log").write_text(doc["liger_tests"]["log"])
        elif "tests" not in args.skip:
            doc["liger_tests"] = None
            print(f"no sdist at {args.sdist}: Liger's tests not run")
        doc["seconds"] = round(time.perf_counter() - t0, 1)
        args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        print(table(doc))
        rows = [r for r in doc.get("first_call", {}).values() if "not_measured" not in r]
        bad = [r for r in rows if not r["bit_identical"] or r["served_zero_jit"] < r["kernels"]]
        steady_bad = [o for d in doc.get("steady", {}).values() for o in d.get("ops", {}).values()
                      if not (o["bit_identical"] or (args.tuned and o.get("within_tolerance")))] + [d["error"] for d in doc.get("steady", {}).values() if "error" in d]
        return 1 if bad or steady_bad else 0


if __name__ == "__main__":
    sys.exit(main())
