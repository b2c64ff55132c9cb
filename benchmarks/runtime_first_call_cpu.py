"""Host side of a shipped kernel's first call through the direct path, on the CPU (stand-ins, labelled).

    python benchmarks/runtime_first_call_cpu.py --out benchmarks/results/runtime_first_call_cpu.json [--repeats 7]

Builds examples/jit-package's softmax for sm_90 on the CPU (``tune = "off"``) into package data, then runs
``tests/runtime/direct_first_call_probe.py`` in fresh processes: libcuda, torch's CUDA queries and Triton's driver
are stand-ins, so nothing runs on a GPU and the time is only the host work of the first call (binding,
specialisation, shipped-kernel lookup, the calls into the stand-in driver). Two specialisers
(``kbuild``: kbuild.runtime.specialize; ``triton``: Triton's native_specialize_impl, which imports Gluon on first
use), and ``kbuild-no-preload`` (kbuild's specialiser, but :func:`kbuild.runtime.enable` imports nothing for the
first call, as before it did: the first call imports the run time's modules itself) × two bytecode states
(``cached``: a PYTHONPYCACHEPREFIX warmed by an untimed run, as an install made by pip; ``none``: an empty prefix per
run, as the device's Triton without .pyc files). Beside each first call, the same process's steady state:
``--later`` calls after it, µs per call in chunks of 100 (the runtime-off comparison of later calls is
benchmarks/runtime_per_call_cpu.py's). Medians of ``--repeats`` runs.
Not a GPU measurement: the H200 numbers come from benchmarks/gpu_runtime_coldstart.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "tests" / "runtime" / "direct_first_call_probe.py"


def build(work: Path) -> Path:
    from kbuild.build.package_data import write_package_data
    from kbuild.build.pipeline import run_pipeline
    from kbuild.settings.sources import load_settings

    settings = load_settings(ROOT / "examples" / "jit-package" / "pyproject.toml")
    settings = dataclasses.replace(settings, targets=["sm_90"], tune="off", store=work / "store", remotes=[])
    builds = run_pipeline(settings, kernels=["softmax"])
    return Path(write_package_data(settings, builds, work / "kbx_jit").data_dir)


def probe(data_dir: Path, specialize: str, pycache: Path, *, preload: bool = True, later: int = 0) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(pycache))
    flags = [*([] if preload else ["--no-preload"]), "--later", str(later)]
    done = subprocess.run([sys.executable, str(PROBE), str(data_dir), "--specialize", specialize, *flags], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"probe failed ({specialize}):\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--later", type=int, default=2000,
                        help="later calls timed per process (chunks of 100): the steady state beside the first call")
    args = parser.parse_args()
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kbuild-first-call-") as tmp:
        work = Path(tmp)
        data_dir = build(work)
        warm = work / "pycache-warm"
        for specialize in ("kbuild", "triton"):
            probe(data_dir, specialize, warm)  # untimed: writes the bytecode both sides import
        variants = (("kbuild", True), ("triton", True), ("kbuild-no-preload", False))
        for bytecode in ("cached", "none"):
            for name, preload in variants:
                specialize = name.split("-")[0]
                samples = []
                for i in range(args.repeats):
                    pycache = warm if bytecode == "cached" else work / f"pycache-empty-{name}-{i}"
                    samples.append(probe(data_dir, specialize, pycache, preload=preload, later=args.later))
                rows[f"{name}/{bytecode}"] = {
                    "first_call_s": statistics.median(s["first_call_s"] for s in samples),
                    "second_call_s": statistics.median(s["second_call_s"] for s in samples),
                    "later_call_us": statistics.median(x for s in samples for x in s["later_call_us"])
                    if args.later >= 100 else None,
                    "imports_s": statistics.median(s["imports_s"] for s in samples),
                    "gluon_imported": sorted({s["gluon_imported_after"] for s in samples}),
                    "samples": samples}
    doc = {"machine": "CPU (no GPU; libcuda, torch CUDA queries and Triton's driver are stand-ins)",
           "command": " ".join(["python", *sys.argv]), "repeats": args.repeats, "rows": rows,
           "date": time.strftime("%Y-%m-%d")}
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(f"{'variant/bytecode':<28} {'first call':>11} {'second call':>12} {'later calls':>12} {'imports':>9}  "
          "gluon imported")
    for name, r in rows.items():
        later = f"{r['later_call_us']:>10.1f}us" if r["later_call_us"] is not None else f"{'-':>12}"
        print(f"{name:<28} {r['first_call_s'] * 1e3:>9.1f}ms {r['second_call_s'] * 1e6:>10.0f}us {later} "
              f"{r['imports_s']:>8.2f}s  {r['gluon_imported']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
