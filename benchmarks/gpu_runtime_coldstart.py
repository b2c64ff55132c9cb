"""Cold-start table for zero-JIT loading (issue 16): a shipped kernel's first call in a fresh process.

Run on the H200 (kbuild installed offline, as for gpu_runtime_substitution.py)::

    python benchmarks/gpu_runtime_coldstart.py --out FILE          # JSON to FILE, table to stdout
    python benchmarks/gpu_runtime_coldstart.py --out FILE --dry-run  # CPU: build + index checks only
    python benchmarks/gpu_runtime_coldstart.py --out FILE --bytecode plain  # one bytecode state only

Two bytecode states, both measured by default (``--bytecode both``), each row labelled:

* ``plain``: the Python install as it is (the device's Triton and torch have no ``.pyc`` files, so every child
  compiles the modules it imports from source, inside the clock too: Triton's specialiser imports 46 Gluon modules
  on its first call); children run with ``PYTHONDONTWRITEBYTECODE=1`` so that no sample changes the state for the
  next. kbuild's own modules are byte-compiled once by the parent (``compileall``), as an install would be.
* ``cached``: every child reads one ``PYTHONPYCACHEPREFIX`` that untimed children (one per side and kernel) filled
  first, as on an install whose ``.pyc`` files pip wrote.

Each child reports whether bytecode for ``torch`` and for ``triton.experimental.gluon`` existed when it started
(``pyc``), so the label can be checked. ``--budget-s`` (default 170) bounds the measuring: rounds go over every
(bytecode, kernel) cell in turn, and no round starts that the last one's duration says would end past the budget;
``--triton-repeats`` (default 3) rounds also time Triton's cold and warm baselines, the others only the shipped side.

1. **build** (this process, CPU work): copies ``examples/jit-package`` to a temp dir, compiles its
   kernels for this GPU with kbuild's pipeline (``tune = "off"``: the baseline cubins; zero-JIT
   loading does not depend on tuning) and writes ``kbx_jit/_kbuild/`` with ``include_untuned``.
   Every index entry must carry Triton's metadata (index version 2), or the run stops.
2. **measure**: for each kernel and mode, a fresh ``python`` child process imports the package,
   makes the package's ordinary ``kernel[grid](...)`` call once and times it from just before the
   call to after ``torch.cuda.synchronize()`` (CUDA context and inputs created before the clock
   starts). Modes, each ``--repeats`` times (median reported, raw samples kept):

   * ``shipped_cold``: kbuild.runtime on, empty Triton cache (with ``KBUILD_RUNTIME_LAUNCH=triton`` Triton
     still builds its ``cuda_utils`` and launcher C modules with the host compiler; the default direct launch
     builds nothing: ``host_builds`` counts the builds);
   * ``shipped_warm``: kbuild.runtime on, the Triton cache holding only what ``shipped_cold`` left
     (nothing with direct launch, the two C modules otherwise; no kernel was compiled);
   * ``triton_cold``: ``KBUILD_RUNTIME=off``, empty Triton cache (full JIT);
   * ``triton_warm``: ``KBUILD_RUNTIME=off``, the cache ``triton_cold`` filled (disk-cache hit).

   The child reports how often ``triton.compile`` was entered (wrapped to count calls; a disk-cache hit counts),
   the kbuild.runtime events, and the sha256 of the output bytes; shipped and Triton outputs must be
   bit-identical (same config, and here the same cubin up to Triton's own compile of it).

The suite kernels (``tests/fixtures/sass``, the tuner's suite) are not JIT-package kernels; to
add them, declare them in a ``ship = "package-data"`` project and point ``--example`` at it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
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
MODES = ("shipped_cold", "shipped_warm", "triton_cold", "triton_warm")

# One call per kernel, as kbx_jit.ops makes it (shapes the declarations match).
CALLS = {
    "matmul_leaky_relu": "kbx_jit.matmul_leaky_relu(torch.randn((1024, 1024), device='cuda', dtype=torch.float16), "
                         "torch.randn((1024, 1024), device='cuda', dtype=torch.float16))",
    "softmax": "kbx_jit.softmax(torch.randn((4096, 1024), device='cuda', dtype=torch.float16))",
}

_CHILD = r'''
import hashlib, importlib.util, json, os, sys, time
def _pyc(*parts):  # bytecode for this source file under this process's cache settings (PYTHONPYCACHEPREFIX)
    spec = importlib.util.find_spec(parts[0])
    src = os.path.join(os.path.dirname(spec.origin), *parts[1:], "__init__.py")
    return os.path.exists(importlib.util.cache_from_source(src))
pyc = {{"torch": _pyc("torch"), "gluon": _pyc("triton", "experimental", "gluon")}}
sys.path.insert(0, {src!r})
import torch
torch.manual_seed(0)
torch.zeros(1, device="cuda"); torch.cuda.synchronize()         # CUDA context before the clock
import triton, triton.compiler
compiles = []
_orig = triton.compiler.compile
def counting(*a, **k):
    compiles.append(1)
    return _orig(*a, **k)
triton.compiler.compile = counting                                # what create_binder picks up
import triton.runtime.build as build
builds = []                                                       # host-compiler runs (C modules not cached)
_orig_build = build._build
def counting_build(name, *a, **k):
    builds.append(name)
    return _orig_build(name, *a, **k)
build._build = counting_build
import kbx_jit, kbuild.runtime
make = lambda: {call}
torch.manual_seed(1)
profile = None
if {profile!r}:
    import cProfile, io, pstats
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    out = make()
    torch.cuda.synchronize()
    prof.disable()
    seconds = time.perf_counter() - t0
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
    profile = buf.getvalue()
else:
    t0 = time.perf_counter()
    out = make()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
print(json.dumps({{"seconds": seconds, "compiles": len(compiles), "host_builds": builds, "profile": profile, "pyc": pyc,
                  "gluon_imported": any(m.startswith("triton.experimental.gluon") for m in sys.modules),
                  "events": [e.as_dict() for e in kbuild.runtime.events()],
                  "enabled": kbuild.runtime.enabled_packages(),
                  "out_sha256": hashlib.sha256(out.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()}}))
'''


def build(work: Path, cc: int, example: Path) -> dict[str, Any]:
    from kbuild.build.package_data import write_package_data
    from kbuild.build.pipeline import run_pipeline
    from kbuild.runtime.index import load_index
    from kbuild.settings.sources import load_settings

    src = work / "src"
    shutil.copytree(example, src, ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "_kbuild"))
    settings = load_settings(src / "pyproject.toml")
    # The declared kernels only: the example's recording adds specialisations no measured call makes.
    settings = dataclasses.replace(settings, targets=[f"sm_{cc}"], tune="off", store=work / "store", remotes=[],
                                   recordings=[])
    started = time.perf_counter()
    builds = run_pipeline(settings)
    result = write_package_data(settings, builds, src / settings.kernels[0].module.split(".")[0],
                                include_untuned=True)
    index = load_index(result.data_dir / "index.json")
    missing = [e["kernel"] for e in index.entries.values() if "triton_metadata" not in e]
    if index.version != 2 or missing:
        raise SystemExit(f"index version {index.version}; entries without Triton metadata: {missing}")
    return {"src": str(src), "build_seconds": round(time.perf_counter() - started, 2),
            "kernels": sorted(e["kernel"] for e in index.entries.values()), "index_version": index.version}


BYTECODE = ("plain", "cached")


def child(src: str, kernel: str, cache: Path, runtime_on: bool, profile: bool = False,
          pycache: str | None = None) -> dict[str, Any]:
    """One fresh process. ``pycache`` None: plain (no bytecode written); else the shared PYTHONPYCACHEPREFIX."""
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache), KBUILD_RUNTIME="on" if runtime_on else "off")
    env.pop("PYTHONPYCACHEPREFIX", None)
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    code = _CHILD.format(src=src, call=CALLS[kernel], profile=profile)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr[-3000:]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def measure(src: str, kernels: list[str], repeats: int, profile: bool = False, bytecodes: tuple[str, ...] = BYTECODE,
            pycache: str | None = None, budget_s: float = 170.0, triton_repeats: int = 3) -> dict[str, Any]:
    """Rows per bytecode state and kernel. Rounds cycle over every cell so that a budget cut leaves every cell
    with the same number of samples; Triton's baselines are timed in the first ``triton_repeats`` rounds."""
    started = time.perf_counter()
    cells = [(b, k) for b in bytecodes for k in kernels]
    prefix = {b: (pycache if b == "cached" else None) for b in bytecodes}
    samples: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {cell: {m: [] for m in MODES} for cell in cells}
    profiled: dict[tuple[str, str], Any] = {}
    for b, kernel in cells:
        if b == "cached":  # untimed: each side imports its modules once, writing their bytecode under the prefix
            for runtime_on in (True, False):
                with tempfile.TemporaryDirectory(prefix="kbuild-coldstart-cache-") as cache:
                    child(src, kernel, Path(cache), runtime_on, pycache=prefix[b])
        if profile:  # one extra shipped first call under cProfile (not among the timed samples)
            with tempfile.TemporaryDirectory(prefix="kbuild-coldstart-cache-") as cache:
                profiled[(b, kernel)] = child(src, kernel, Path(cache), True, profile=True, pycache=prefix[b])
    rounds_done, last_round, stopped = 0, 0.0, None
    for r in range(repeats):
        sides = ((True, "shipped_cold", "shipped_warm"),) + (((False, "triton_cold", "triton_warm"),)
                                                             if r < triton_repeats else ())
        elapsed = time.perf_counter() - started
        if r and elapsed + last_round * (len(sides) / 2 if r == triton_repeats else 1) > budget_s:
            stopped = f"budget: {elapsed:.0f} s used of {budget_s:.0f} s after {r} rounds"
            break
        t_round = time.perf_counter()
        for b, kernel in cells:
            for runtime_on, cold, warm in sides:
                with tempfile.TemporaryDirectory(prefix="kbuild-coldstart-cache-") as cache:
                    samples[(b, kernel)][cold].append(child(src, kernel, Path(cache), runtime_on, pycache=prefix[b]))
                    samples[(b, kernel)][warm].append(child(src, kernel, Path(cache), runtime_on, pycache=prefix[b]))
        last_round = time.perf_counter() - t_round
        rounds_done = r + 1
        print(f"  round {rounds_done}: {last_round:.0f} s ({'shipped + Triton' if len(sides) == 2 else 'shipped'})",
              flush=True)
    rows: dict[str, Any] = {b: {} for b in bytecodes}
    for (b, kernel), smp in samples.items():
        ok = {m: [s for s in smp[m] if "seconds" in s] for m in MODES}
        med = {m: statistics.median(s["seconds"] for s in ok[m]) if ok[m] and len(ok[m]) == len(smp[m]) else None
               for m in MODES}
        outs = {s.get("out_sha256") for m in MODES for s in smp[m]}
        shipped = [s for m in ("shipped_cold", "shipped_warm") for s in smp[m]]
        rows[b][kernel] = {
            "median_seconds": med,
            "n": {m: len(smp[m]) for m in MODES},
            "zero_jit": all(any(e.get("stage") == "zero-jit" for e in s.get("events", ())) for s in shipped),
            "direct_launch": all(any(e.get("stage") == "direct-launch" for e in s.get("events", ())) for s in shipped),
            "shipped_compiles": sum(s.get("compiles", 0) for s in shipped),
            "shipped_host_builds": sorted({b2 for s in shipped for b2 in s.get("host_builds", ())}),
            "bit_identical": len(outs) == 1 and None not in outs,
            "shipped_imported_gluon": any(s.get("gluon_imported") for s in shipped),
            "pyc": sorted({json.dumps(s.get("pyc"), sort_keys=True) for m in MODES for s in smp[m]}),
            # Like for like: an empty Triton cache on both sides, and a warm one on both sides.
            "x_cold_vs_cold": _ratio(med["triton_cold"], med["shipped_cold"]),
            "x_warm_vs_warm": _ratio(med["triton_warm"], med["shipped_warm"]),
            "samples": smp}
        if (b, kernel) in profiled:
            got = profiled[(b, kernel)]
            rows[b][kernel]["profile_shipped_cold"] = got.get("profile") or got.get("error")
        print(table({b: {kernel: rows[b][kernel]}}).splitlines()[-1], flush=True)
    return {"rows": rows, "rounds": rounds_done, "stopped": stopped, "seconds": round(time.perf_counter() - started, 1)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 1) if a and b else None


def table(rows: dict[str, Any]) -> str:
    head = (f"{'bytecode':<8} {'kernel':<18} " + " ".join(f"{m:>13}" for m in MODES)
            + "  ×cold  ×warm  n(shipped/triton)  compiles  gcc  direct  gluon  bit-identical")
    lines = [head]
    for b, by_kernel in rows.items():
        for kernel, r in by_kernel.items():
            med = r["median_seconds"]
            cells = " ".join(f"{med[m]:>12.4f}s" if med[m] is not None else f"{'-':>13}" for m in MODES)
            n = f"{r['n']['shipped_cold']}/{r['n']['triton_cold']}"
            lines.append(f"{b:<8} {kernel:<18} {cells}  {r['x_cold_vs_cold']!s:>5}  {r['x_warm_vs_warm']!s:>5}  "
                         f"{n:>17}  {r['shipped_compiles']:>8}  {len(r['shipped_host_builds']):>3}  "
                         f"{r['direct_launch']!s:>6}  {r['shipped_imported_gluon']!s:>5}  {r['bit_identical']!s:>13}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--example", type=Path, default=EXAMPLE)
    parser.add_argument("--dry-run", action="store_true", help="CPU: build for sm_90 and check the index; no GPU")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one shipped first call per kernel (cProfile, top 25 cumulative)")
    parser.add_argument("--bytecode", choices=["both", *BYTECODE], default="both",
                        help="plain: the install as it is, no bytecode written; cached: one PYTHONPYCACHEPREFIX that "
                             "untimed children fill first, as on an install whose .pyc files pip wrote")
    parser.add_argument("--budget-s", type=float, default=170.0, help="seconds for measuring (rounds are not cut)")
    parser.add_argument("--triton-repeats", type=int, default=3, help="rounds that also time Triton's baselines")
    args = parser.parse_args()
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="kbuild-coldstart-") as tmp:
        if args.dry_run:
            built = build(Path(tmp), 90, args.example)
            doc = {"dry_run": True, "note": "CPU dry run: build and index only, nothing timed", "build": built,
                   "children": {k: _CHILD.format(src=built["src"], call=CALLS[k], profile=False)
                                for k in built["kernels"]}}
            out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
            print(f"dry run: built {built['kernels']} (index version {built['index_version']}); wrote {out}")
            return 0
        import torch

        major, minor = torch.cuda.get_device_capability(0)
        built = build(Path(tmp), major * 10 + minor, args.example)
        import compileall

        compileall.compile_dir(str(ROOT / "kbuild"), quiet=1)  # kbuild as an install would have it (both states)
        bytecodes = BYTECODE if args.bytecode == "both" else (args.bytecode,)
        print(table({}), flush=True)  # the header; rows follow as they are measured
        measured = measure(built["src"], built["kernels"], args.repeats, profile=args.profile, bytecodes=bytecodes,
                           pycache=str(Path(tmp) / "pycache"), budget_s=args.budget_s,
                           triton_repeats=args.triton_repeats)
        rows = measured["rows"]
        doc = {"device": torch.cuda.get_device_name(0), "cc": major * 10 + minor, "build": built,
               "repeats": args.repeats, "triton_repeats": args.triton_repeats, "budget_s": args.budget_s,
               "rounds": measured["rounds"], "stopped": measured["stopped"], "measure_seconds": measured["seconds"],
               "bytecode": list(bytecodes), "rows": rows,
               "command": " ".join([Path(sys.executable).name, *sys.argv]),
               "sha256_of_script": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}
        out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        for b, by_kernel in rows.items():
            for kernel, row in by_kernel.items():
                if row.get("profile_shipped_cold"):
                    print(f"-- {b} {kernel}: shipped first call, cProfile\n" + row["profile_shipped_cold"][:2500])
        print(f"rounds {measured['rounds']} ({measured['stopped'] or 'all'}), measuring {measured['seconds']} s")
        print(table(rows))
        failed = [k for by_kernel in rows.values() for k, r in by_kernel.items()
                  if r["shipped_compiles"] or not r["zero_jit"] or not r["bit_identical"]]
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
