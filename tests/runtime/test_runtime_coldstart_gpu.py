"""Zero-JIT loading on a real GPU (marked ``gpu``; skipped without an sm_90 GPU).

Fresh child processes (benchmarks/gpu_runtime_coldstart.py) make the example package's first call
with kbuild.runtime on (shipped cubin, no compile) and off (Triton cold and warm cache): Triton's
compiler and the host compiler must never run on the shipped side (direct launch), outputs must be bit-identical to Triton's own
compile of the same config, and the shipped first call must beat Triton's warm-cache first call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpu_marks import needs_sm90
from script_helpers import load_benchmark

pytestmark = needs_sm90

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_runtime_coldstart.py"


def _script() -> Any:
    return load_benchmark("gpu_runtime_coldstart")


def test_first_call_in_a_fresh_process_compiles_nothing(tmp_path: Path) -> None:
    import torch

    script = _script()
    major, minor = torch.cuda.get_device_capability(0)
    built = script.build(tmp_path, major * 10 + minor, script.EXAMPLE)
    measured = script.measure(built["src"], ["softmax"], repeats=1, bytecodes=("plain",), budget_s=600)
    row = measured["rows"]["plain"]["softmax"]
    errors = [s["error"] for m in script.MODES for s in row["samples"][m] if "error" in s]
    assert not errors, errors[0]
    assert row["shipped_compiles"] == 0 and row["zero_jit"]
    assert row["direct_launch"] and row["shipped_host_builds"] == []  # no host compiler on the shipped side
    assert all(s["compiles"] >= 1 for s in row["samples"]["triton_cold"])  # the comparison really compiled
    assert row["bit_identical"]
    med = row["median_seconds"]
    assert med["shipped_warm"] < med["triton_warm"] < med["triton_cold"]
    assert med["shipped_cold"] < med["triton_warm"]
