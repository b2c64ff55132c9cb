"""H200 check of examples/cuda-cmake's CUDA C++ kernels (issue 17): build the wheel through kbuild-nvcc, load the
extension, check every kernel against torch and time it. The kernels were written and compiled on a CPU machine
only; this is their first run.

Needs nvcc: ``kbuild nvcc --where`` (the ``nvidia-cuda-nvcc``, ``-crt``, ``-runtime``, ``-cccl`` and
``nvidia-nvvm`` wheels of the same CUDA release, installed from ``.whl/`` with ``pip install --no-index
--find-links .whl 'kbuild[cuda]'``), else ``$CUDA_HOME/bin/nvcc`` passed as ``--nvcc``. The H200's driver must
accept the CUDA release's cubins (sm_90 SASS runs on any driver that supports sm_90; only the PTX needs a new one).

    python benchmarks/gpu_cuda_example.py [--nvcc PATH] [--out $OUT/gpu_cuda_example.json]
    python benchmarks/gpu_cuda_example.py --dry-run [--nvcc PATH]   # CPU: the build and the wheel only

Writes JSON (correctness, median times, the build's step counts) and prints a short table. About a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cuda-cmake"


def build(work: Path, nvcc: str | None) -> tuple[Path, dict[str, int]]:
    project = work / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("build", "__pycache__"))
    log = work / "steps.jsonl"
    # tune off: the example declares its kernels in [tool.kbuild.cuda]; this run checks and times them as compiled
    env = {**os.environ, "KBUILD_STORE": str(work / "store"), "KBUILD_NVCC_LOG": str(log), "PIP_NO_INDEX": "1",
           "KBUILD_TUNE": "off"}
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work / "dist"),
           str(project)]
    if nvcc:
        cmd += ["-C", f"cmake.define.CMAKE_CUDA_COMPILER={nvcc}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        e = json.loads(line)
        counts[f"{e['tool']}:{e['action']}"] = counts.get(f"{e['tool']}:{e['action']}", 0) + 1
    wheel = next((work / "dist").glob("*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(work / "site")
    return work / "site", counts


def median_ms(torch: Any, fn: Any, reps: int = 50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nvcc", default=None, help="the nvcc to build with (default: kbuild nvcc --where)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "gpu_cuda_example.json")
    ap.add_argument("--dry-run", action="store_true", help="CPU: build the wheel and stop (no torch, no GPU)")
    args = ap.parse_args()
    if args.dry_run:
        with tempfile.TemporaryDirectory(prefix="kbx-cuda-") as tmp:
            site, steps = build(Path(tmp), args.nvcc)
            ext = sorted(p.name for p in (site / "kbx_cuda").glob("_kernels*.so"))
        doc = {"command": "python benchmarks/gpu_cuda_example.py --dry-run", "dry_run": True, "build_steps": steps,
               "extension": ext}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"dry run: built {ext}; build steps {steps}; wrote {args.out}")
        return 0 if ext else 1
    import torch

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kbx-cuda-") as tmp:
        site, steps = build(Path(tmp), args.nvcc)
        sys.path.insert(0, str(site))
        import kbx_cuda

        stream = 0  # the default stream, the one torch uses here
        torch.manual_seed(0)
        for n in (1024, 4096):
            a = torch.randn(n, n, device="cuda", dtype=torch.float16)
            b = torch.randn(n, n, device="cuda", dtype=torch.float16)
            ref = (a.float() @ b.float())
            for tile, (bm, bn) in enumerate(kbx_cuda.tiles()):
                c = torch.empty(n, n, device="cuda", dtype=torch.float16)
                err = kbx_cuda.matmul_f16(a.data_ptr(), b.data_ptr(), c.data_ptr(), n, n, n, tile, stream)
                torch.cuda.synchronize()
                worst = (c.float() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-6)
                ms = median_ms(torch, lambda a=a, b=b, c=c, n=n, tile=tile: kbx_cuda.matmul_f16(
                    a.data_ptr(), b.data_ptr(), c.data_ptr(), n, n, n, tile, stream))
                cublas = median_ms(torch, lambda a=a, b=b: a @ b)
                rows.append({"kernel": f"matmul_f16[{bm}x{bn}]", "n": n, "cuda_error": err,
                             "ok": err == 0 and worst < 2e-3, "max_rel_err": worst, "ms": ms,
                             "tflops": 2 * n**3 / ms / 1e9, "cublas_ms": cublas})
        for n in (1 << 20, 1 << 26):
            x = torch.randn(n, device="cuda", dtype=torch.float32)
            out = torch.zeros(1, device="cuda", dtype=torch.float32)
            err = kbx_cuda.sum_f32(x.data_ptr(), out.data_ptr(), n, stream)
            torch.cuda.synchronize()
            ref = x.double().sum().item()
            rel = abs(out.item() - ref) / x.double().abs().sum().item()  # relative to the sum of magnitudes
            ms = median_ms(torch, lambda x=x, out=out, n=n: kbx_cuda.sum_f32(x.data_ptr(), out.data_ptr(), n, stream))
            rows.append({"kernel": "sum_f32", "n": n, "cuda_error": err, "ok": err == 0 and rel < 1e-5,
                         "max_rel_err": rel, "ms": ms, "gbps": 4 * n / ms / 1e6, "torch_ms": median_ms(torch, x.sum)})
        for n in (1 << 20, (1 << 26) + 1):
            x = torch.randn(n, device="cuda", dtype=torch.float16)
            y = torch.empty_like(x)
            err = kbx_cuda.gelu_f16(x.data_ptr(), y.data_ptr(), n, stream)
            torch.cuda.synchronize()
            ref = torch.nn.functional.gelu(x.float(), approximate="tanh")
            worst = (y.float() - ref).abs().max().item()
            ms = median_ms(torch, lambda x=x, y=y, n=n: kbx_cuda.gelu_f16(x.data_ptr(), y.data_ptr(), n, stream))
            rows.append({"kernel": "gelu_f16", "n": n, "cuda_error": err, "ok": err == 0 and worst < 1e-2,
                         "max_abs_err": worst, "ms": ms, "gbps": 4 * n / ms / 1e6,
                         "torch_ms": median_ms(torch, lambda x=x: torch.nn.functional.gelu(x, approximate="tanh"))})
    doc = {"command": "python benchmarks/gpu_cuda_example.py", "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "build_steps": steps, "rows": rows, "all_ok": all(r["ok"] for r in rows)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{'kernel':<22}{'n':>10}{'ok':>5}{'ms':>10}{'peer ms':>10}")
    for r in rows:
        peer = r.get("cublas_ms", r.get("torch_ms", float("nan")))
        print(f"{r['kernel']:<22}{r['n']:>10}{'yes' if r['ok'] else 'NO':>5}{r['ms']:>10.4f}{peer:>10.4f}")
    print(f"all correct: {doc['all_ok']}; build steps {steps}; wrote {args.out}")
    return 0 if doc["all_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
