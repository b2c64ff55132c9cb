"""Peers in ``kbuild bench`` (issue 15): the registry, running and checking peers, the ratio arithmetic, the
tables, and pinning the configuration to time (``--config``/``--configs-from``).

On CPU the peers run on CPU tensors (torch's CPU kernels stand in for cuBLAS/cuDNN: this checks the plumbing
and the outputs, not speed); timing samples here are synthetic numbers, labelled as such.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kbuild.bench import peers, report
from kbuild.bench.kernels import SUITE
from kbuild.bench.runner import resolve_config
from kbuild.bench.spec import BenchSpecError, Config, load_spec

SMALL = {name: load_spec(ref, small=True) for name, ref in SUITE.items()}
ATTENTION = [n for n in SUITE if n.startswith("flash_attn")]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kbuild.bench", *args], capture_output=True, text=True,
                          timeout=120, check=False)


# -- registry ------------------------------------------------------------------------------------------


def test_every_suite_kernel_has_peers_with_unique_labels() -> None:
    assert set(peers.PEERS) == set(SUITE)
    for name, spec in SMALL.items():
        ps = peers.peers_for(spec)
        assert ps, name
        labels = [p.label for p in ps]
        assert len(set(labels)) == len(labels), name
        assert all(p.label.isidentifier() and p.name for p in ps)
    assert peers.peers_for(load_spec("kbuild.bench.kernels.softmax:softmax")) == peers.PEERS["softmax"]


def test_attention_peers_are_the_three_sdpa_backends() -> None:
    from torch.nn.attention import SDPBackend

    for name in ATTENTION:
        ps = peers.PEERS[name]
        assert [p.label for p in ps] == ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient"]
        for p, backend in zip(ps, ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"), strict=True):
            assert backend in p.name and hasattr(SDPBackend, backend)


def test_matmuls_have_cublas_and_the_fused_ones_the_composite() -> None:
    for name in ("matmul_leakyrelu_4096", "matmul_leakyrelu_512x512x2048", "bmm_64x1024", "tma_matmul_4096"):
        assert "cublas" in [p.label for p in peers.PEERS[name]]
    fused = {p.label: p for p in peers.PEERS["matmul_leakyrelu_4096"]}
    assert fused["cublas"].reference is not None and "LeakyReLU" in fused["cublas"].note
    assert fused["cublas_leaky_relu"].reference is None
    assert [p.label for p in peers.PEERS["rmsnorm_swiglu"]] == ["torch_composite"]


def test_a_kernel_outside_the_suite_has_no_peers() -> None:
    import dataclasses

    assert peers.peers_for(dataclasses.replace(SMALL["softmax"], name="my_softmax")) == []


# -- running and checking (CPU tensors) ----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SUITE))
def test_peers_run_on_the_specs_inputs_and_agree(name: str) -> None:
    spec = SMALL[name]
    x = spec.make_inputs(0, "cpu")
    ref = spec.reference(x) if spec.reference else None
    records = [peers.prepare(p, spec, x, ref) for p in peers.peers_for(spec)]
    available = [r for r in records if r.fn is not None]
    assert available, [r.record for r in records]
    for r in available:
        rec = r.record
        assert rec["available"] and rec["agrees"], rec
        assert set(rec["rel_err"]) <= set(spec.outputs) and max(rec["rel_err"].values()) < 1e-2
        assert r.fn is not None
        out = r.fn()  # the thunk runs again (this is what is timed)
        for key, value in out.items():
            assert tuple(value.shape) == tuple(x[key].shape), (name, key)
    for r in records:
        if r.fn is None:  # e.g. SDPA's cuDNN backend has no CPU kernel: unavailable with torch's reason
            assert r.record["available"] is False and r.record["reason"], r.record


def test_layernorm_peer_checks_all_three_outputs() -> None:
    spec = SMALL["layernorm"]
    x = spec.make_inputs(1, "cpu")
    rec = peers.prepare(peers.PEERS["layernorm"][0], spec, x, spec.reference(x)).record  # type: ignore[misc]
    assert set(rec["rel_err"]) == {"y_ptr", "mean_ptr", "rstd_ptr"}


def test_bare_gemm_is_checked_against_a_at_b_not_the_fused_reference() -> None:
    spec = SMALL["matmul_leakyrelu_512x512x2048"]
    x = spec.make_inputs(0, "cpu")
    gemm = peers.PEERS[spec.name][0]
    rec = peers.prepare(gemm, spec, x, spec.reference(x)).record  # type: ignore[misc]
    assert rec["agrees"] and "note" in rec
    # Against the fused reference (LeakyReLU applied) the bare GEMM would be far off: the override matters.
    out = gemm.build(spec, x)()
    assert peers.rel_err(out["c_ptr"], spec.reference(x)["c_ptr"]) > 0.1  # type: ignore[misc]


@pytest.mark.hostile(fault="a peer that computes something else", outcome="degraded with warning")
def test_a_disagreeing_peer_is_reported() -> None:
    spec = SMALL["softmax"]
    x = spec.make_inputs(0, "cpu")
    wrong = peers.Peer("wrong", "softmax of the wrong axis",
                       lambda s, x: lambda: {"y_ptr": __import__("torch").softmax(x["x_ptr"].float(), dim=0)})
    prepared = peers.prepare(wrong, spec, x, spec.reference(x))  # type: ignore[misc]
    assert prepared.fn is not None and prepared.record["available"] is True
    assert prepared.record["agrees"] is False and prepared.record["rel_err"]["y_ptr"] > spec.reference_tol


@pytest.mark.hostile(fault="a peer that raises (backend refuses the shape)", outcome="degraded with warning")
def test_a_failing_peer_is_unavailable_with_the_reason_and_warnings() -> None:
    import warnings

    def build(spec: Any, x: Any) -> Any:
        def run() -> dict[str, Any]:
            warnings.warn("Flash attention kernel not used because: head_dim 999", UserWarning, stacklevel=1)
            raise RuntimeError("No available kernel. Aborting execution.")

        return run

    spec = SMALL["softmax"]
    rec = peers.prepare(peers.Peer("broken", "broken", build), spec, spec.make_inputs(0, "cpu"), None)
    assert rec.fn is None and rec.record["available"] is False
    assert rec.record["reason"].startswith("RuntimeError: No available kernel")
    assert "head_dim 999" in rec.record["reason"]


def test_summarize_ratio_arithmetic() -> None:
    # Synthetic samples (not measurements): 3 rounds × 4 reps; the peer takes 1.5× the kernel's time.
    kernel = [[1.0, 1.0, 1.02, 0.98], [1.0, 1.01, 0.99, 1.0], [1.0, 1.0, 1.0, 1.0]]
    peer = [[v * 1.5 for v in r] for r in kernel]
    s = peers.summarize(kernel, peer)
    assert s["ratio"] == pytest.approx(1.5) and s["median_ms"] == pytest.approx(1.5)
    lo, hi = s["ratio_ci"]
    assert lo <= s["ratio"] <= hi and hi - lo < 0.05
    faster = peers.summarize(kernel, [[v * 0.8 for v in r] for r in kernel])
    assert faster["ratio"] == pytest.approx(0.8) and faster["ratio_ci"][1] < 1.0
    with pytest.raises(ValueError, match="same number of rounds"):
        peers.summarize(kernel, peer[:2])


# -- tables -----------------------------------------------------------------------------------------------


def fake_report() -> dict[str, Any]:
    """A bench record with synthetic numbers (not measured), three peer outcomes for one kernel."""
    kernel = {"name": "flash_attn_d64", "best_label": "BLOCK_M=128,BLOCK_N=64,w4,s3", "time_ms": 2.0,
              "tflops": 400.0, "gbps": 100.0, "bound": "compute", "pct_of_ceiling": 50.0,
              "aa": {"ratio": 1.0, "ci": [0.99, 1.01], "spread_pct": 0.2},
              "peers": [
                  {"label": "sdpa_flash", "name": "flash", "available": True, "rel_err": {"o_ptr": 3e-4},
                   "tol": 0.02, "agrees": True, "median_ms": 2.5, "ratio": 1.25, "ratio_ci": [1.2, 1.3]},
                  {"label": "sdpa_cudnn", "name": "cudnn", "available": True, "rel_err": {"o_ptr": 0.5},
                   "tol": 0.02, "agrees": False, "median_ms": 1.0, "ratio": 0.5, "ratio_ci": [0.49, 0.51]},
                  {"label": "sdpa_efficient", "name": "eff", "available": False,
                   "reason": "RuntimeError: No available kernel"}]}
    return {"device": {"gpu": "NVIDIA H200", "driver": "580"},
            "ceilings": {"copy": {"gbps": 4300.0}, "matmul_bf16": {"tflops": 790.0}},
            "kernels": [kernel, {"name": "softmax", "best_label": "w8,s1", "time_ms": 0.25, "tflops": 5.4,
                                 "gbps": 4100.0, "bound": "memory", "pct_of_ceiling": 95.3,
                                 "aa": {"ratio": 1.0, "ci": [1.0, 1.0], "spread_pct": 0.1}}],
            "skipped": []}


def test_peer_table_lists_every_outcome() -> None:
    rep = fake_report()
    rows = report.peer_rows(rep)
    assert [r[2] for r in rows] == ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient"]
    assert all(len(r) == len(report.PEER_COLUMNS) for r in rows)
    flash, cudnn, eff = rows
    assert flash[:5] == ["flash_attn_d64", "2.0000", "sdpa_flash", "2.5000", "1.250x [1.200, 1.300]"]
    assert flash[6] == "ok"
    assert cudnn[6].startswith("DISAGREES") and cudnn[5] == "5.0e-01"
    assert eff[3] == "-" and eff[6] == "unavailable: RuntimeError: No available kernel"
    # The fastest peer is the fastest one that agrees with the reference (the wrong, faster one is not it).
    assert report.fastest_peer(rep["kernels"][0])["label"] == "sdpa_flash"  # type: ignore[index]
    main = report.rows(rep)
    assert main[0][-1] == "sdpa_flash 1.25x" and main[1][-1] == "-"
    assert all(len(r) == len(report.COLUMNS) for r in main)
    md = report.markdown_table(rep)
    assert "| flash_attn_d64 | 2.0000 | sdpa_cudnn | 1.0000 | 0.500x [0.490, 0.510] | 5.0e-01 | DISAGREES" in md
    assert md.count("\n|---|") == 2


def test_no_peer_table_without_peers() -> None:
    rep = fake_report()
    del rep["kernels"][0]["peers"]
    assert report.peer_rows(rep) == [] and "Peers" not in report.markdown_table(rep)


# -- pinning the configuration to time ----------------------------------------------------------------------


def test_resolve_config_by_label_and_by_object() -> None:
    spec = SMALL["matmul_leakyrelu_512x512x2048"]
    wanted = "BLOCK_M=64,BLOCK_N=64,BLOCK_K=128,GROUP_M=8,w4,s3,r232"
    cfg = resolve_config(spec, wanted)
    assert cfg.label() == wanted and cfg.maxnreg == 232 and cfg in spec.space
    obj = resolve_config(spec, cfg.as_dict())
    assert obj == cfg
    with pytest.raises(BenchSpecError, match=r"not a configuration label.*close: BLOCK_M=64"):
        resolve_config(spec, "BLOCK_M=64,BLOCK_N=64,BLOCK_K=128,GROUP_M=8,w4,s3,r233")
    with pytest.raises(BenchSpecError, match="not covered"):
        resolve_config(spec, {"constexprs": {"BLOCK_M": 64}, "num_warps": 4})
    with pytest.raises(BenchSpecError, match="maxnreg"):
        resolve_config(spec, Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, maxnreg=300).as_dict())


def test_help_lists_the_new_options() -> None:
    res = run_cli("--help")
    assert res.returncode == 0
    for opt in ("--peers", "--no-peers", "--config", "--configs-from"):
        assert opt in res.stdout


def test_a_valid_pin_gets_as_far_as_the_gpu_check() -> None:
    res = run_cli("softmax", "--config", "softmax=w4,s1,r64")
    assert res.returncode == 2 and "no sm_90 GPU here" in res.stderr


@pytest.mark.hostile(fault="a bad --config or --configs-from", outcome="clean error")
@pytest.mark.parametrize(("args", "message"), [
    (["softmax", "--config", "softmax"], "expected KERNEL=LABEL"),
    (["softmax", "--config", "softmax=w3,s1"], "'w3,s1' is not a configuration label"),
    (["softmax", "--config", "rmsnorm=w8,s1"], "not one of the kernels this run benchmarks"),
    (["softmax", "--config", "nope=w8,s1"], "'nope' is not a suite kernel"),
])
def test_bad_pins_are_usage_errors(args: list[str], message: str) -> None:
    res = run_cli(*args)
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.hostile(fault="a bad --configs-from file", outcome="clean error")
@pytest.mark.parametrize(("doc", "message"), [
    ("[1, 2]", "expected a JSON object"),
    ("{not json", "not valid JSON"),
    ('{"softmax": {"num_warps": 3, "num_stages": 1}}', "key 'softmax'"),
    ('{"softmax": 7}', "expected a label or a config object"),
    ('{"nope": "w8,s1"}', "key 'nope': 'nope' is not a suite kernel"),
    ('{"kernels": [{"name": "softmax", "best_label": "w8,s9"}]}', "kernels[0].best_label: 'w8,s9' is not"),
    ('{"kernels": [{"name": 5, "best_label": "w8,s1"}]}', "kernels[0]: name and best_label must be strings"),
])
def test_bad_configs_file_is_a_usage_error(tmp_path: Path, doc: str, message: str) -> None:
    path = tmp_path / "ships.json"
    path.write_text(doc)
    res = run_cli("softmax", "--configs-from", str(path), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and message in res.stderr and str(path) in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()


def test_configs_file_for_kernels_not_run_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "ships.json"
    path.write_text(json.dumps({"softmax": "w4,s1,r64", "rmsnorm": {"constexprs": {}, "num_warps": 8,
                                                                   "num_stages": 1}}))
    res = run_cli("softmax", "--configs-from", str(path))
    assert res.returncode == 2 and "no sm_90 GPU here" in res.stderr, res.stderr


def test_a_bench_record_can_say_what_to_time(tmp_path: Path) -> None:
    """A previous bench.json (or a tune record) names each kernel's configuration by its best_label."""
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"kernels": [{"name": "softmax", "best_label": "w16,s1,r32"},
                                            {"name": "rmsnorm", "error": "no configuration compiled"}]}))
    res = run_cli("softmax", "--configs-from", str(path))
    assert res.returncode == 2 and "no sm_90 GPU here" in res.stderr, res.stderr


def test_a_recorded_package_kernel_finds_its_peers_by_function() -> None:
    """A spec made from a recording is named ``<kernel>@<id>``, not a suite name: its peers come by its function
    (``FUNCTION_PEERS``), built on the kernel's own parameter names (Liger-Kernel 0.8.5's, as recorded)."""
    import types

    import torch

    from kbuild.bench.peers import FUNCTION_PEERS, function_of, peers_for

    def spec_of(function: str, **constexprs: object) -> object:
        module, qualname = function.split(":")
        fn = types.SimpleNamespace(fn=types.SimpleNamespace(__module__=module, __qualname__=qualname))
        return types.SimpleNamespace(name=f"{qualname}@0123abcd", fn=fn, constexprs=constexprs)

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 64, generator=g), torch.randn(4, 64, generator=g)
    swiglu = spec_of("liger_kernel.ops.swiglu:_swiglu_forward_kernel", n_cols=64)
    assert function_of(swiglu) == "liger_kernel.ops.swiglu:_swiglu_forward_kernel"  # type: ignore[arg-type]
    (peer,) = peers_for(swiglu)  # type: ignore[arg-type]
    out = peer.build(swiglu, {"a_ptr": a, "b_ptr": b, "gate_multiplier": 1.0})()  # type: ignore[arg-type]
    assert torch.allclose(out["c_ptr"], a * torch.sigmoid(a) * b)
    geglu = spec_of("liger_kernel.ops.geglu:_geglu_tanh_forward_kernel", n_cols=64)
    (peer,) = peers_for(geglu)  # type: ignore[arg-type]
    tanh_gelu = 0.5 * a * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (a + 0.044715 * a**3)))
    assert torch.allclose(peer.build(geglu, {"a": a, "b": b})()["c"], tanh_gelu * b, atol=1e-6)  # type: ignore[arg-type]
    rms = spec_of("liger_kernel.ops.rms_norm:_rms_norm_forward_kernel")
    (peer,) = peers_for(rms)  # type: ignore[arg-type]
    w = torch.randn(64, generator=g)
    y = peer.build(rms, {"X_ptr": a, "W_ptr": w, "eps": 1e-6, "offset": 1.0})()["Y_ptr"]  # type: ignore[arg-type]
    assert torch.allclose(y, a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w), atol=1e-5)
    assert set(FUNCTION_PEERS) >= {"liger_kernel.ops.layer_norm:_layer_norm_forward_kernel"}
    assert peers_for(spec_of("liger_kernel.ops.utils:element_mul_kernel")) == []  # type: ignore[arg-type]
