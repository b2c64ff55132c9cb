"""The GPU code paths of ``kbuild bench`` and the worker session, smoke-run on CPU (fake CUDA, Triton's interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_bench_and_session_plumbing_on_a_fake_gpu(tmp_path: Path) -> None:
    script = Path(__file__).with_name("fake_gpu_smoke.py")
    res = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 0, res.stderr[-4000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["bench_rc"] == 0
    assert out["session_details"] == {"rel_err_y_ptr": 0.0}
    assert out["check"] == {"valid": True, "k": 3, "reason": None}
    assert out["time_shape"] == {"baseline": [3, 3], "candidate": [3, 3], "baseline_aa": [3, 3]}
    assert out["wrong_arch"] == "cubin is for sm_80 but this GPU is sm_90"
    assert out["worker_load"] == {"ok": True, "kernel": "fault_demo", "arch": 90}
    assert out["worker_check"] == {"ok": True, "valid": True, "k": 2, "reason": None}
    assert out["worker_time_ok"] is True
    # the tune report's peers: what ships timed interleaved with torch.softmax, its output checked
    assert out["peers"] == {"labels": ["torch_softmax"], "agree": [True], "samples": [2], "kernel_rounds": 2,
                            "kernel_ms": True}
    assert out["no_peers"] == {"peers": []} and out["worker_peers"] == {"ok": True, "peers": []}
    assert out["worker_wrong_arch"] == {"ok": False, "kind": "candidate",
                                        "error": "cubin is for sm_80 but this GPU is sm_90"}
    assert out["worker_bad_config"]["kind"] == "usage" and "out of range" in out["worker_bad_config"]["error"]
    record = json.loads((tmp_path / "bench.json").read_text())
    assert record["device"]["gpu"].startswith("Fake H200") and record["command"]
    assert {"copy", "matmul_bf16"} <= set(record["ceilings"])
    names = [k["name"] for k in record["kernels"]]
    assert names == ["softmax", "tma_matmul_4096"]
    for k in record["kernels"]:
        assert "error" not in k, k
        assert k["aa"]["ci"][0] <= k["aa"]["ratio"] <= k["aa"]["ci"][1]
        assert len(k["samples_ms"]["a"]) == 2
        assert all(t["rel_err"] and max(t["rel_err"].values()) < 1e-2 for t in k["autotune"])
    assert (tmp_path / "bench.md").exists() and not (tmp_path / "bench.partial.json").exists()
    # Peers ran in the same run (on CPU tensors here: torch's CPU kernels stand in for cuBLAS; plumbing only).
    peers = {k["name"]: {p["label"]: p for p in k["peers"]} for k in record["kernels"]}
    assert set(peers["softmax"]) == {"torch_softmax"} and set(peers["tma_matmul_4096"]) == {"cublas"}
    for by_label in peers.values():
        for p in by_label.values():
            assert p["available"] and p["agrees"] and p["ratio"] > 0 and len(p["samples_ms"]) == 2, p
    assert "peer/kernel" in (tmp_path / "bench.md").read_text()
