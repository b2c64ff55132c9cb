"""Issue 34, item 3: ``kbuild inspect`` shows what a JIT package's wheel covers, and which specialisations of a
``kbuild record`` recording it answers, and why not the others.

The wheel holds the package data :func:`kbuild.build.package_data.write_package_data` writes for the example's real
softmax cubins (sm_80 and sm_90); the recording is a real ``kbuild record --mode cpu`` run of a workload calling the
example's own entry points on CPU tensors (launches recorded instead of run).
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import JIT_EXAMPLE

from kbuild.build.package_data import write_package_data
from kbuild.cli import main

_WORKLOAD = f'''
import sys
sys.path.insert(0, {str(JIT_EXAMPLE)!r})
import torch
import kbx_jit
kbx_jit.softmax(torch.randn(64, 1024).half())   # the shipped specialisation
kbx_jit.softmax(torch.randn(64, 1000).half())   # n_cols (and the strides) not divisible by 16: not shipped
kbx_jit.matmul_leaky_relu(torch.randn(256, 128).half(), torch.randn(128, 256).half())  # a function not shipped
'''


@pytest.fixture
def wheel(jit_settings: Any, baseline_builds: list[Any], tmp_path: Path) -> Path:
    data = write_package_data(jit_settings, baseline_builds, tmp_path / "pkg" / "kbx_jit")
    path = tmp_path / "kbx_jit-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for p in data.files:
            zf.writestr(f"kbx_jit/_kbuild/{p.name}", p.read_bytes())
        zf.writestr("kbx_jit/__init__.py", b"")
    return path


@pytest.fixture
def recording(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    workload = tmp_path / "workload.py"
    workload.write_text(_WORKLOAD)
    out = tmp_path / "rec.json"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert main(["record", "--mode", "cpu", "--target", "sm_90", "--out", str(out), "--", sys.executable,
                 str(workload)]) == 0
    return out


def _inspect(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = main(["inspect", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_inspect_shows_kernels_specialisations_and_targets(wheel: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, err = _inspect(capsys, str(wheel))
    assert code == 0, err
    (row,) = doc["covers"]
    assert row["function"] == "kbx_jit.kernels:softmax" and row["targets"] == ["sm_80", "sm_90"]
    assert row["constexprs"] == {"BLOCK": 1024} and row["options"] == {"num_warps": 4, "num_stages": 3,
                                                                            "num_ctas": 1}
    assert row["signature"]["n_cols"] == "i32:16" and row["zero_jit"] is True and row["autotune"] == {}
    assert main(["inspect", str(wheel)]) == 0
    assert "covers 1 kernel(s) × 1 specialisation(s) × 2 target(s) (sm_80, sm_90)" in " ".join(
        capsys.readouterr().err.split())


def test_inspect_with_a_recording_says_what_the_wheel_answers_and_why_not(
        wheel: Path, recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kbuild.record import format as fmt

    code, doc, err = _inspect(capsys, str(wheel), "--recording", str(recording))
    assert code == 1  # a recorded specialisation the wheel does not answer is a failed check
    rec = doc["recording"]
    assert (rec["specializations"], rec["answered"], rec["tunings"]) == (3, 1, 0)
    rows = {(r["function"].rpartition(":")[2], r["signature"].get("n_cols")): r for r in rec["rows"]}
    hit = rows[("softmax", "i32:16")]
    assert hit["answered"] and hit["stage"] == "zero-jit" and hit["entry"] and hit["target"] == "sm_90"
    miss = rows[("softmax", "i32")]
    assert not miss["answered"] and "kernel.signature.n_cols: call 'i32', index 'i32:16'" in \
        miss["nearest"]["differences"]
    assert miss["nearest"]["target"] == "sm_90"  # the sm_80 entry differs in the target too
    (other,) = [r for r in rec["rows"] if r["function"].endswith("matmul_leaky_relu")]
    assert other["reason"] == "the wheel ships no entry for this function"
    assert len([p for p in doc["problems"] if p.startswith("recorded ")]) == 2
    assert "kbx_jit.kernels:softmax" in err and "warning:" in err
    # The same recording without what the wheel does not cover passes.
    recorded = fmt.load(str(recording))
    for key, kernel in list(recorded.kernels.items()):
        if kernel.name != "softmax":
            del recorded.kernels[key]
            continue
        kernel.specializations = {i: s for i, s in kernel.specializations.items() if s.signature["n_cols"] == "i32:16"}
    covered = tmp_path / "covered.json"
    covered.write_text(fmt.dumps(recorded))
    code, doc, err = _inspect(capsys, str(wheel), "--recording", str(covered))
    assert code == 0, err
    assert (doc["recording"]["specializations"], doc["recording"]["answered"]) == (1, 1)
    assert main(["inspect", str(wheel), "--recording", str(covered)]) == 0
    assert "1 of 1 recorded specialisation(s)" in " ".join(capsys.readouterr().err.split())


def test_inspect_with_a_bad_recording_is_one_error_line(wheel: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "rec.json"
    bad.write_text('{"format": "kbuild-recording", "version": 99}')
    assert main(["inspect", str(wheel), "--recording", str(bad)]) == 2
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert out == "" and len(lines) == 1 and lines[0].startswith("error: ") and str(bad) in lines[0], err
