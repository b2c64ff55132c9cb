"""Specs that replay what ``kbuild record --capture`` kept (issue 35, part 1): a real workload (Liger-Kernel
0.8.5's cross-entropy with ignored labels, a kernel on strided views, an index gather; CPU tensors, ``--mode
cpu``) recorded with and without ``--capture``, the labels and indices replayed exactly, a call past the bound
refused with its size, and the reference path of each spec run under Triton's interpreter. Slow: two recordings
and an interpreter run (about 20 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kbuild.cli import main
from kbuild.errors import UsageError
from kbuild.record import capture

BENCH = Path(__file__).resolve().parent


def _record(tmp_path: Path, out: str, *args: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        mp.delenv("PYTHONPATH", raising=False)
        assert main(["record", "--mode", "cpu", "--target", "sm_90", "--out", out, *args, "--",
                     sys.executable, str(BENCH / "workload_capture.py"), "--big"]) == 0


@pytest.mark.slow
def test_a_recorded_workload_s_labels_and_indices_are_replayed_and_the_recording_is_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _record(tmp_path, "plain.json")
    _record(tmp_path, "rec.json", "--capture", "3", "--capture-mib", "1")
    assert (tmp_path / "plain.json").read_bytes() == (tmp_path / "rec.json").read_bytes()
    index = json.loads((tmp_path / "rec.captures" / "index.json").read_text())
    per_spec = sorted(len(v) for v in index["captures"].values())
    assert per_spec == [1, 3]  # the gather's one call; cross-entropy's 12, 24 and 150,000 rows
    skipped = [e for v in index["captures"].values() for e in v if "skipped" in e]
    assert [e["sample"]["args"]["Y_ptr"]["shape"] for e in skipped] == [[150_000]]

    monkeypatch.syspath_prepend(str(BENCH))
    import workload_capture

    from kbuild.bench.recorded import recorded_ref, verdicts
    from kbuild.bench.spec import load_spec
    from kbuild.record.format import load

    rec = load(str(tmp_path / "rec.json"))
    got = {v.function: v for v in verdicts(rec, captures=capture.load(tmp_path / "rec.captures"))}
    assert {f: v.status for f, v in got.items()} == {
        "liger_kernel.ops.cross_entropy:liger_cross_entropy_kernel": "replayed",
        "recorded_kernels:gather_rows": "replayed", "recorded_kernels:scale_strided": "generated"}
    made = workload_capture.labels(big=True)
    by = {k.name: k for k in rec.kernels.values()}
    ce = next(iter(by["liger_cross_entropy_kernel"].specializations.values()))
    rows24 = next(i for i, s in enumerate(ce.samples) if s["args"]["Y_ptr"]["shape"] == [24])
    for i, want in ((None, made[0]), (rows24, made[2])):  # default: the first captured call (12 rows); 24 rows
        spec = load_spec(recorded_ref(tmp_path / "rec.json", by["liger_cross_entropy_kernel"].function, ce.id,
                                      sample=i))
        assert torch.equal(spec.make_inputs(7, "cpu")["Y_ptr"], want)
    big = next(i for i, s in enumerate(ce.samples) if s["args"]["Y_ptr"]["shape"] == [150_000])
    with pytest.raises(UsageError, match=r"the call was not captured: the call's integer and bool tensors hold 1\.1"):
        load_spec(recorded_ref(tmp_path / "rec.json", by["liger_cross_entropy_kernel"].function, ce.id, sample=big))
    gather = next(iter(by["gather_rows"].specializations.values()))
    spec = load_spec(recorded_ref(tmp_path / "rec.json", by["gather_rows"].function, gather.id))
    assert torch.equal(spec.make_inputs(0, "cpu")["idx_ptr"], made[-1])
    scale = next(iter(by["scale_strided"].specializations.values()))
    inputs = load_spec(recorded_ref(tmp_path / "rec.json", by["scale_strided"].function, scale.id)).make_inputs(
        0, "cpu")
    assert (list(inputs["x_ptr"].stride()), list(inputs["y_ptr"].stride())) == ([6, 2], [5, 1])

    # The reference path of each, under Triton's interpreter: outputs probed, bit-exact against itself.
    env = {**os.environ, "PYTHONPATH": str(BENCH)}
    res = subprocess.run([sys.executable, str(BENCH / "interpret_recorded.py"), "--recording",
                          str(tmp_path / "rec.json"), *sorted(got)], capture_output=True, text=True, timeout=600,
                         check=False, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    want = {"liger_kernel.ops.cross_entropy:liger_cross_entropy_kernel": ["X_ptr", "loss_ptr"],
            "recorded_kernels:gather_rows": ["out_ptr"], "recorded_kernels:scale_strided": ["y_ptr"]}
    for function, outputs in want.items():
        r = out[function]
        assert r["outputs"] == outputs and r["self_agrees"] and r["bit_exact"]["valid"], function
        assert r["judged"]["recorded"]["ok"] and not r["judged"]["three"]["ok"], function
    assert out["recorded_kernels:scale_strided"]["shapes"]["y_ptr"] == [[4, 3], "torch.float32", [5, 1]]
    assert out["liger_kernel.ops.cross_entropy:liger_cross_entropy_kernel"]["inplace"] == ["X_ptr", "loss_ptr"]
