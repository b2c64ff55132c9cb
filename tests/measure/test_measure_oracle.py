"""The correctness oracle (poison, guard bands, input integrity, bitwise comparison) on CPU via Triton's interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_oracle_catches_each_kind_of_wrong_candidate() -> None:
    script = Path(__file__).with_name("interpret_oracle.py")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["sanity"]["rel_err_y_ptr"] < 1e-6
    assert out["mode0"] == {"valid": True, "k": 3, "reason": None}
    assert not out["mode3"]["valid"] and "past the end of output 'y_ptr' (guard band)" in out["mode3"]["reason"]
    assert not out["mode4"]["valid"] and "differ bitwise from the baseline" in out["mode4"]["reason"]
    assert out["mode4"]["k"] == 1
    assert not out["mode5"]["valid"] and "modified input 'x_ptr'" in out["mode5"]["reason"]
    assert out["mode4_tolerance"]["valid"]
