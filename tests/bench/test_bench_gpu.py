"""``kbuild bench`` for real on a GPU (marked ``gpu``; skipped without one): small sizes, two kernels."""

from __future__ import annotations

import pytest


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU")]


def test_run_suite_small() -> None:
    from kbuild.bench.runner import BenchOptions, run_suite

    rep = run_suite(["softmax", "matmul_leakyrelu_512x512x2048"], BenchOptions(small=True, rounds=2, reps=3,
                                                                                  autotune_reps=3))
    # Small sizes measure launch overhead more than the machine (a 512³ bf16 matmul ran at 8.7 TFLOP/s).
    assert rep["ceilings"]["copy"]["gbps"] > 100 and rep["ceilings"]["matmul_bf16"]["tflops"] > 1
    for k in rep["kernels"]:
        assert "error" not in k, k
        assert k["time_ms"] > 0 and k["pct_of_ceiling"] > 0
        assert len(k["samples_ms"]["a"]) == 2 and all(len(r) == 3 for r in k["samples_ms"]["a"])
        assert any("median_ms" in t for t in k["autotune"])
