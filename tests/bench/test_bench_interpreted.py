"""The suite kernels compute what their references say, checked in Triton's CPU interpreter (small sizes)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from kbuild.bench.kernels import SUITE
from kbuild.bench.spec import load_spec


def test_suite_kernels_match_their_references_in_the_interpreter() -> None:
    script = Path(__file__).with_name("interpret_suite.py")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    errors = json.loads(res.stdout.strip().splitlines()[-1])
    assert set(errors) == set(SUITE)
    for name, outs in errors.items():
        tol = load_spec(SUITE[name], small=True).reference_tol
        for out, err in outs.items():
            assert not math.isnan(err), f"{name}.{out}: NaN (an output element left unwritten?)"
            assert err < tol / 10, f"{name}.{out}: relative error {err:.3g}"
