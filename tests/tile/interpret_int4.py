"""Run the plain Triton int4 GEMM (the tile int4 kernel's baseline) in Triton's CPU interpreter at small sizes
and print one JSON line: its relative error against the torch reference, per configuration and problem.

Run as a script in its own process: ``TRITON_INTERPRET`` must be set before Triton is imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared interpreter switch
import json

import triton_interpreter  # noqa: F401  (must come before anything imports triton)

from kbuild.bench.kernels.int4_matmul import CONFIGS, int4_matmul
from kbuild.bench.spec import validate_inputs

#: (M, N, K): a ragged token count (the row mask) and two scale groups along K
PROBLEMS = [(16, 128, 256), (5, 128, 256)]


def main() -> int:
    out = {}
    for m, n, k in PROBLEMS:
        spec = int4_matmul(m=m, n=n, k=k)
        x = spec.make_inputs(7, "cpu")
        validate_inputs(spec, x)
        assert spec.reference is not None
        want = spec.reference(x)["y_ptr"].double()
        for cfg in CONFIGS[:2]:  # the small-tile configurations (the interpreter is slow at 128 x 256 tiles)
            consts = spec.all_constexprs(cfg)
            x["y_ptr"].fill_(float("nan"))
            spec.fn[spec.grid(consts)](**x, **consts)
            err = float((x["y_ptr"].double() - want).norm() / want.norm())
            out[f"{m}x{n}x{k}[{cfg.label()}]"] = err
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
