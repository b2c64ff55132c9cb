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


def test_peers_in_the_same_run_small() -> None:
    """Peers are timed with the kernel: cuBLAS and its composite for the fused matmul, each SDPA backend for
    attention (available, or unavailable with torch's reason), with ratios and rel errs in the record."""
    from kbuild.bench import report
    from kbuild.bench.runner import BenchOptions, run_suite

    rep = run_suite(["matmul_leakyrelu_512x512x2048", "flash_attn_d64_causal", "rmsnorm_swiglu"],
                    BenchOptions(small=True, rounds=2, reps=3, autotune_reps=3))
    by_name = {k["name"]: k for k in rep["kernels"]}
    for k in by_name.values():
        assert "error" not in k, k
        assert k["config_source"] == "autotune"
        for p in k["peers"]:
            if p["available"]:
                assert p["agrees"], p  # torch's kernels compute the same function within the spec's tolerance
                assert p["median_ms"] > 0 and p["ratio_ci"][0] <= p["ratio"] <= p["ratio_ci"][1]
                assert len(p["samples_ms"]) == 2 and all(len(r) == 3 for r in p["samples_ms"])
            else:
                assert p["reason"]
    assert [p["label"] for p in by_name["flash_attn_d64_causal"]["peers"]] == ["sdpa_flash", "sdpa_cudnn",
                                                                                "sdpa_efficient"]
    assert any(p["available"] for p in by_name["flash_attn_d64_causal"]["peers"])  # flash runs on sm_80/sm_90
    assert all(p["available"] for p in by_name["matmul_leakyrelu_512x512x2048"]["peers"])
    assert len(report.peer_rows(rep)) == sum(len(k["peers"]) for k in rep["kernels"])


def test_pinned_config_is_what_gets_timed() -> None:
    from kbuild.bench.runner import BenchOptions, run_suite

    label = "BLOCK_M=64,BLOCK_N=64,BLOCK_K=128,GROUP_M=8,w4,s3,r232"
    rep = run_suite(["matmul_leakyrelu_512x512x2048"], BenchOptions(small=True, rounds=2, reps=3, autotune_reps=3,
                                                                    peers=False,
                                                                    pinned={"matmul_leakyrelu_512x512x2048": label}))
    (k,) = rep["kernels"]
    assert "error" not in k, k
    assert k["best_label"] == label and k["config_source"] == "pinned" and len(k["autotune"]) == 1
    assert "peers" not in k
