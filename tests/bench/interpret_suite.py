"""Run every suite kernel (small sizes) in Triton's CPU interpreter and print its error against the reference.

Run as a script in its own process: ``TRITON_INTERPRET`` must be set before Triton is imported.
Prints one JSON line: {kernel: {output: relative error}} for the default configuration.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared interpreter switch
import json

import triton_interpreter  # noqa: F401  (must come before anything imports triton)

from kbuild.bench.kernels import SUITE
from kbuild.bench.spec import load_spec, validate_inputs


def main(names: list[str]) -> int:
    out = {}
    for name in names or list(SUITE):
        spec = load_spec(SUITE[name], small=True)
        x = spec.make_inputs(5, "cpu")
        validate_inputs(spec, x)
        assert spec.reference is not None
        ref = spec.reference(x)
        cfg = spec.configs[0]
        consts = spec.all_constexprs(cfg)
        for o in spec.outputs:
            x[o].fill_(float("nan"))
        spec.fn[spec.grid(consts)](**x, **consts)
        out[name] = {o: float((x[o].double() - ref[o].double()).norm() / ref[o].double().norm()) for o in spec.outputs}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
