"""Smoke-run the GPU code paths of ``kbuild bench`` and the worker session on CPU.

torch.cuda's surface is faked (availability, capability, events, synchronize), tensors live on the
CPU, and "compiled kernels" are the @triton.jit functions run by Triton's interpreter. Nothing is
measured; this catches plumbing mistakes before GPU time is spent. A script: ``TRITON_INTERPRET``
must be set before Triton is imported. Prints one JSON line.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared interpreter switch
import json

import torch
import triton_interpreter  # noqa: F401  (must come before anything imports triton)


class FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.t - self.t) * 1e3


props = SimpleNamespace(major=9, minor=0, multi_processor_count=132, total_memory=141 << 30, L2_cache_size=1 << 20)
torch.cuda.is_available = lambda: True  # type: ignore[assignment]
torch.cuda.get_device_capability = lambda *a: (9, 0)  # type: ignore[assignment]
torch.cuda.get_device_name = lambda *a: "Fake H200 (CPU smoke test)"  # type: ignore[assignment]
torch.cuda.get_device_properties = lambda *a: props  # type: ignore[assignment]
torch.cuda.synchronize = lambda *a: None  # type: ignore[assignment]
torch.cuda.empty_cache = lambda: None  # type: ignore[assignment]
torch.cuda.Event = FakeEvent  # type: ignore[assignment,misc]

from kbuild.bench import runner  # noqa: E402
from kbuild.bench.cli import main as bench_main  # noqa: E402
from kbuild.device import timing  # noqa: E402
from kbuild.tune.measure import protocol, session, worker  # noqa: E402

timing.DEVICE = "cpu"
timing.L2Flush.MIN_BYTES = 1 << 20


def fake_cubin(arch: int) -> bytes:
    """A real cubin for ``sm_<arch>`` (the SASS fixtures' softmax): the interpreter ignores its code, the session
    reads its architecture (through the one cubin reader, which refuses a bare ELF header)."""
    return (Path(__file__).resolve().parents[1] / "fixtures" / "sass" / f"softmax.sm{arch}.cubin").read_bytes()


def interpreted(spec: Any, config: Any, arch: int) -> Any:
    return spec.fn  # an InterpretedFunction: launches as fn[grid](*args) like a CompiledKernel


runner.compile_spec = interpreted  # type: ignore[assignment]
session.compile_spec = interpreted  # type: ignore[attr-defined]


def main(out_dir: str) -> int:
    result: dict[str, Any] = {}
    rc = bench_main(["softmax", "tma_matmul_4096", "--small", "--rounds", "2", "--reps", "1", "--autotune-reps", "1",
                     "--no-chart", "--out", out_dir])
    result["bench_rc"] = rc
    bench_dir = str(Path(__file__).resolve().parents[2] / "benchmarks")
    cubin = fake_cubin(90)  # the interpreter ignores the bytes; the session reads the architecture
    sess = session.Session("gpu_bench_faults:spec", 0, cubin, small=True, python_path=(bench_dir,))
    result["session_details"] = sess.details
    result["check"] = sess.check(cubin, 3, 1)
    samples = sess.time(cubin, 2, 3)
    result["time_shape"] = {k: [len(r) for r in v] for k, v in samples.items()}
    try:
        sess.check(fake_cubin(80), 3, 1)
    except session.CandidateError as exc:
        result["wrong_arch"] = str(exc)
    # The peers beside what ships (the tune report's): the suite's softmax and torch.softmax, interleaved
    from kbuild.bench.kernels import SUITE

    soft = session.Session(SUITE["softmax"], 0, cubin, small=True)
    peers = soft.peers(cubin, 2, 3)
    result["peers"] = {"labels": [p["label"] for p in peers["peers"]],
                       "agree": [p.get("agrees") for p in peers["peers"]],
                       "samples": [len(p.get("samples_ms", ())) for p in peers["peers"]],
                       "kernel_rounds": len(peers["kernel_samples_ms"]), "kernel_ms": peers["kernel_ms"] > 0}
    result["no_peers"] = sess.peers(cubin, 2, 3)  # gpu_bench_faults's spec has none: nothing launched
    # The worker's request dispatch, in-process (the pipes are tested with a fake worker elsewhere).
    state: dict[str, Any] = {}
    load = worker.handle(state, {"op": "load", "version": protocol.PROTOCOL_VERSION, "spec": "gpu_bench_faults:spec",
                                 "config": 0, "small": True, "python_path": [bench_dir], "baseline": cubin})
    result["worker_load"] = {k: load[k] for k in ("ok", "kernel", "arch")}
    result["worker_check"] = worker.handle(state, {"op": "check", "cubin": cubin, "k": 2, "seed": 3})
    result["worker_time_ok"] = worker.handle(state, {"op": "time", "cubin": cubin, "rounds": 2, "reps": 1})["ok"]
    result["worker_peers"] = worker.handle(state, {"op": "peers", "cubin": cubin, "rounds": 2, "reps": 1})
    result["worker_wrong_arch"] = worker.handle(state, {"op": "check", "cubin": fake_cubin(80), "k": 2})
    result["worker_bad_config"] = worker.handle(state, {**{"op": "load", "version": protocol.PROTOCOL_VERSION,
                                                           "spec": "gpu_bench_faults:spec", "small": True,
                                                           "python_path": [bench_dir], "baseline": cubin},
                                                        "config": 99})
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
