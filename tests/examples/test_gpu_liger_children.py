"""The child scripts benchmarks/gpu_liger.py starts on the GPU machine name only what they define or import.

They run only on a GPU (fresh processes, one per first call, one per steady-state dtype), so a CPU dry run never
executes them: on the H200 the steady-state child's ``digest`` raised NameError (``hashlib`` was imported by the
first-call child only) and no steady-state figure came back. ruff's undefined-name rule (F821) reads each rendered
child here instead.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from script_helpers import load_benchmark


def test_every_child_script_defines_what_it_uses(tmp_path: Path) -> None:
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (the dev extra has it)")
    g = load_benchmark("gpu_liger")
    children = {
        "first_call.py": g._FIRST_CALL.format(calls=g._CALLS, op="swiglu", dtype="fp16"),  # type: ignore[attr-defined]
        "steady.py": g._STEADY.format(calls=g._CALLS, dtype="bf16", rounds=3, reps=10),  # type: ignore[attr-defined]
    }
    for name, code in children.items():
        (tmp_path / name).write_text(code)
    proc = subprocess.run([ruff, "check", "--no-cache", "--isolated", "--select", "F821,F822,F823", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
