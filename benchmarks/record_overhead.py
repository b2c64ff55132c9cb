"""What ``kbuild record --mode cpu`` costs per launch: Liger-Kernel 0.8.5's wrappers on CPU tensors.

    python benchmarks/record_overhead.py [--repeat 20] [--out benchmarks/results/record_overhead_cpu.json]

On a CPU machine Liger's wrappers cannot launch at all, so the baseline is the cheapest recorder there is: the
``JITFunction.run`` / ``Autotuner.run`` stand-ins of ``tests/examples/test_liger_example.py`` that only append the
call to a list. Against it, :class:`kbuild.record.cpu.CpuMode` with its recorder (nothing written): Triton's
binder and cache key per call and target, the specialisation once per process, a sample key per call. Both run
the same calls in the same process, interleaved, ``--repeat`` rounds; the first round (each specialisation's
first call: Triton's ``_pack_args``, kbuild's source hash and distribution lookup) is reported apart. The calls are
those of ``tests/record/workload_liger.py`` in fp16 (11 launches per round, the autotuned dyt kernel's 18
configurations each a call under the recorder), on small tensors (the tensors' size does not matter to either:
nothing runs).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent


def calls(torch: Any, rows: int = 64) -> None:
    from liger_kernel.ops import cross_entropy, dyt, geglu, layer_norm, rms_norm, swiglu

    dt = torch.float16
    hidden, inter, vocab = 4096, 11008, 32000
    w = torch.ones(hidden, dtype=dt, requires_grad=True)
    x = torch.randn(rows, hidden).to(dt)
    _y, xv, _r, block, warps, mode = rms_norm.rms_norm_forward(x, w, 1e-6, 0.0, "llama", None)
    rms_norm.rms_norm_backward(torch.randn(rows, hidden).to(dt), xv, w, torch.empty(rows), 0.0, mode, block, warps,
                               True, None, needs_dw=True)
    a, b = torch.randn(rows, inter).to(dt), torch.randn(rows, inter).to(dt)
    swiglu.swiglu_forward(a, b, 1.0)
    geglu.geglu_forward(a, b)
    layer_norm.layer_norm_forward(x, w, torch.zeros(hidden, dtype=dt), 1e-5)
    logits = torch.randn(rows, vocab).to(dt).requires_grad_(True)
    cross_entropy.cross_entropy_forward(logits, torch.randint(0, vocab, (rows,)), None, -100, 0.0, 0.0, "mean", None,
                                        False)
    dyt.liger_dyt_fwd(x, torch.ones(1, dtype=dt), torch.ones(hidden, dtype=dt), torch.zeros(hidden, dtype=dt))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "record_overhead_cpu.json"))
    args = ap.parse_args()

    import torch
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    from kbuild.record.cpu import CpuMode
    from kbuild.record.recorder import Recorder

    torch.manual_seed(0)
    inputs_only: list[float] = []
    baseline: list[float] = []
    recorded: list[float] = []
    first_recorded = 0.0
    launches = [0]

    def plain_run(self: Any, *a: Any, grid: Any = None, warmup: bool = False, **k: Any) -> None:
        launches[0] += 1

    recorder = Recorder(parts_dir=None, samples=8, mode="cpu")
    mode = CpuMode(recorder, targets=[90], sm_count=1)

    def timed(fn: Any) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    for i in range(args.repeat + 1):
        with mock.patch.object(JITFunction, "run", plain_run), mock.patch.object(Autotuner, "run", plain_run):
            t_base = timed(lambda: calls(torch))
        mode.install()
        try:
            t_rec = timed(lambda: calls(torch))
        finally:
            mode.uninstall()
        t_inputs = timed(lambda: _inputs(torch))
        if i == 0:
            first_recorded = t_rec
            continue
        baseline.append(t_base)
        recorded.append(t_rec)
        inputs_only.append(t_inputs)
    per_round = launches[0] // (args.repeat + 1)
    specs = sum(len(k.specializations) for k in recorder.recording.kernels.values())
    calls_recorded = sum(s.calls for k in recorder.delta.kernels.values() for s in k.specializations.values())
    med = statistics.median
    extra = med(recorded) - med(baseline)
    doc = {
        "command": "python benchmarks/record_overhead.py" + (f" --repeat {args.repeat}" if args.repeat != 20 else ""),
        "python": platform.python_version(), "machine": platform.machine(),
        "what": "Liger-Kernel 0.8.5 wrappers on CPU tensors (fp16, 64 rows): one round = 7 wrapper calls",
        "rounds": args.repeat, "wrapper_launches_per_round": per_round,
        "recorded_calls_per_round": calls_recorded // (args.repeat + 1), "specializations": specs,
        "seconds_per_round_median": {"append_only_stand_in": round(med(baseline), 5),
                                     "kbuild_record_cpu_mode": round(med(recorded), 5),
                                     "making_the_inputs_alone": round(med(inputs_only), 5)},
        "first_round_seconds_kbuild_record": round(first_recorded, 4),
        "overhead_per_recorded_call_us": round(extra / max(1, calls_recorded // (args.repeat + 1)) * 1e6, 1),
        "ratio_round": round(med(recorded) / med(baseline), 3),
    }
    doc["gpu_mode_host_side"] = gpu_mode_host_side(torch, rounds=args.repeat)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


def gpu_mode_host_side(torch: Any, *, rounds: int, launches: int = 2000) -> dict[str, Any]:
    """``--mode gpu``'s cost on the host per launch, on this CPU: examples/jit-package's softmax launched through
    Triton's real ``JITFunction.run`` with the CPU stand-in driver of ``tests/record/workload_kernels.py`` (compiles
    for real; its launcher runs Triton's launch hooks and nothing else), with and without the recorder's hooks,
    interleaved. The GPU time of a launch is not in it: this is what the recorder adds to Triton's own host path."""
    import sys

    from triton.runtime.driver import driver

    from kbuild.record.gpu import GpuMode
    from kbuild.record.recorder import Recorder

    sys.path[:0] = [str(ROOT / "tests" / "record"), str(ROOT / "examples" / "jit-package")]
    from kbx_jit import kernels, softmax
    from workload_kernels import FakeGpu

    saved = driver._active
    driver.set_active(FakeGpu())
    x = torch.randn(64, 1024).half()
    mode = GpuMode(Recorder(parts_dir=None, samples=8, mode="gpu"))
    try:
        mode.install()
        softmax(x)  # compiled (ptxas), seen by the post-compile hook
        watched = kernels.softmax.launch_metadata
        plain: list[float] = []
        hooked: list[float] = []
        for _ in range(rounds):
            mode.uninstall()
            kernels.softmax.launch_metadata = None
            t0 = time.perf_counter()
            for _ in range(launches):
                softmax(x)
            plain.append((time.perf_counter() - t0) / launches)
            mode.install()
            kernels.softmax.launch_metadata = watched
            t0 = time.perf_counter()
            for _ in range(launches):
                softmax(x)
            hooked.append((time.perf_counter() - t0) / launches)
    finally:
        mode.uninstall()
        driver._active = saved
    counted = sum(s.calls for k in mode.recorder.delta.kernels.values() for s in k.specializations.values())
    med = statistics.median
    return {"what": "kbx_jit.softmax(64x1024 fp16) through JITFunction.run, CPU stand-in driver, per launch",
            "launches_per_round": launches, "rounds": rounds, "launches_counted": counted,
            "us_per_launch_median": {"triton_alone": round(med(plain) * 1e6, 2),
                                     "with_recorder": round(med(hooked) * 1e6, 2)},
            "overhead_us_per_launch": round((med(hooked) - med(plain)) * 1e6, 2)}


def _inputs(torch: Any, rows: int = 64) -> None:
    """The tensors :func:`calls` makes, alone (most of a round on a CPU)."""
    dt = torch.float16
    torch.randn(rows, 4096).to(dt)
    torch.randn(rows, 4096).to(dt)
    torch.randn(rows, 11008).to(dt)
    torch.randn(rows, 11008).to(dt)
    torch.randn(rows, 32000).to(dt)


if __name__ == "__main__":
    main()
