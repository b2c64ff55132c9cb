"""``kbuild record --mode gpu`` on a real sm_90 GPU (``pytest -m gpu tests/record``; skipped elsewhere).

The same workloads recorded on the GPU (Triton's own hooks, kernels compiled, autotuned and launched) and on the
CPU (``--mode cpu --target sm_90 --sm-count <the GPU's>``, CPU tensors) give the same specialisations; the GPU run
adds the autotuners' measured choices and the device's SM count, and Liger's declared entries key as recorded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gpu_marks import needs_sm90
from test_record import HERE, _declared, _key_of, _liger_installed, _matching

from kbuild.cli import main
from kbuild.record import format as fmt

pytestmark = needs_sm90


def _record(tmp_path: Path, name: str, mode: str, *workload: str, extra: tuple[str, ...] = ()) -> fmt.Recording:
    out = tmp_path / f"{name}.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        assert main(["record", "--mode", mode, "--out", str(out), *extra, "--", sys.executable, *workload]) == 0
    return fmt.load(str(out))


def test_gpu_and_cpu_recordings_of_one_workload_agree(tmp_path: Path) -> None:
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    script = str(HERE / "workload_kernels.py")
    gpu = _record(tmp_path, "gpu", "gpu", script, "--cuda")
    cpu = _record(tmp_path, "cpu", "cpu", script, extra=("--target", "sm_90"))
    # rows_per_program is ceil(n_rows / SMs) on the GPU and n_rows on the CPU: its specialisation may differ
    assert {k.name: set(k.specializations) for k in gpu.kernels.values() if k.name != "rows"} == \
        {k.name: set(k.specializations) for k in cpu.kernels.values() if k.name != "rows"}
    by = {k.name: k for k in gpu.kernels.values()}
    for name in ("scale", "shift"):
        assert by[name].tunings and all(t["source"] == "measured" and t["choice"] in (0, 1) and t["sm_count"] == sms
                                        for t in by[name].tunings)
    (rows,) = by["rows"].specializations.values()
    assert all(s["grid"] == [sms] and s["sm_count"] == sms for s in rows.samples) and rows.calls == 2
    from kbuild.record.machine import sm_dependent

    assert "ceil(n_rows / sm_count)" in sm_dependent(rows.samples, rows.constexprs)["rows_per_program"]


def test_liger_on_the_gpu_records_what_examples_liger_declares(tmp_path: Path) -> None:
    if not _liger_installed():
        pytest.skip("needs liger-kernel==0.8.5")
    gpu = _record(tmp_path, "liger", "gpu", str(HERE / "workload_liger.py"), "--cuda")
    for b in _declared(HERE / "liger_handwritten"):
        if b.target.name != "sm_90":
            continue
        found = _matching(gpu, b)
        assert found is not None, b.spec.name
        assert _key_of(gpu, *found, b) == b.baseline_key.hex, b.spec.name
    (dyt,) = [k for k in gpu.kernels.values() if k.name == "_dyt_fwd_kernel"]
    assert dyt.tunings and all(t["choice"] is not None and t["source"] in ("measured", "triton-cache")
                               for t in dyt.tunings)
