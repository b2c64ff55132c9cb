"""benchmarks/gpu_runtime_steady.py (issue 34, item 0): its CPU dry run, its summary, and (marked ``gpu``) a short
real run on an sm_90 GPU.

The dry run builds examples/jit-package for sm_90 on the CPU (real Triton compiles), checks the index and compiles
the child's program. The GPU test runs one round of every variant: the outputs must be the same bytes, the shipped
kernel must be launched by Triton's launcher where Triton's cache has it and by kbuild's otherwise, and nothing
may be built with the host compiler on the ``on-own-launcher`` side; on the ``on-hand-over`` side only Triton's
launchers, in the background, after the first calls.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from gpu_marks import needs_sm90
from script_helpers import load_benchmark

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_runtime_steady.py"


def test_the_dry_run_builds_the_example_and_checks_the_child(tmp_path: Path) -> None:
    out = tmp_path / "dry.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--dry-run"], capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["dry_run"] and doc["build"]["index_version"] == 2
    assert doc["build"]["kernels"] == ["matmul_leaky_relu", "softmax"]
    assert doc["variants"] == ["off", "on", "on-own-launcher", "on-hand-over"]


def _sample(host: float, digest: str = "d", launcher: str = "L") -> dict[str, Any]:
    row = {"host_us": [host, host + 2], "event_us": [host / 2], "wall_us": [host + 1], "first_call_s": 0.01,
           "second_call_s": 0.001, "out_sha256": digest, "launcher": launcher}
    return {"rows": {"softmax": row, "matmul": row}}


def test_the_summary_gives_medians_ratios_and_bit_identity() -> None:
    script = load_benchmark("gpu_runtime_steady")
    samples = {"off": [_sample(10.0), _sample(12.0)], "on": [_sample(10.0)],
               "on-own-launcher": [_sample(11.0, launcher="kbuild"), {"error": "boom"}]}
    row = script.summarise(samples)["softmax"]
    assert row["median"]["off"]["host_us"] == 12.0  # median of 10, 12, 12, 14
    assert row["ratio_to_off"]["on"]["host_us"] == pytest.approx(11.0 / 12.0)
    assert row["ratio_to_off"]["on-own-launcher"]["event_us"] == pytest.approx(5.5 / 5.5)
    assert row["bit_identical"] and row["children"] == {"off": 2, "on": 1, "on-own-launcher": 1}
    assert row["launchers"]["on-own-launcher"] == ["kbuild"]
    samples["on"].append(_sample(10.0, digest="other"))
    assert not script.summarise(samples)["matmul"]["bit_identical"]


@needs_sm90[0]
@needs_sm90[1]
def test_one_round_on_the_gpu(tmp_path: Path) -> None:
    out = tmp_path / "steady.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--rounds", "1", "--inner", "3",
                           "--calls", "100"], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert not doc["errors"] and "rows" in doc["strict"]
    for op, row in doc["summary"].items():
        assert row["bit_identical"], op
        assert row["launchers"] == {"off": ["triton.backends.nvidia.driver.CudaLauncher"],
                                    "on": ["triton.backends.nvidia.driver.CudaLauncher"],
                                    "on-own-launcher": ["kbuild.runtime.direct.direct_launch"],
                                    "on-hand-over": ["triton.backends.nvidia.driver.CudaLauncher"]}, op
    (own,) = doc["samples"]["on-own-launcher"]
    assert own["built"] == [] and own["stages"].count("zero-jit") == 2
    (handed,) = doc["samples"]["on-hand-over"]  # Triton's launchers only, built after the first calls
    assert handed["built"] == ["__triton_launcher", "__triton_launcher"] and handed["stages"].count("hand-over") == 2
    assert all(all(s["rows"][op]["kbuild_kernel"] == [True] for op in ("softmax", "matmul"))
               for v in ("on", "on-own-launcher") for s in doc["samples"][v])
