"""Run every suite kernel (small sizes) in Triton's CPU interpreter and print its error against the reference.

Run as a script in its own process: ``TRITON_INTERPRET`` must be set before Triton is imported.
Prints one JSON line: {kernel: {output: relative error}} for the default configuration.
"""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"

import builtins
import json

import numpy as np
import triton.runtime.interpreter as interpreter


class _IntMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, builtins.int)


class _Int(metaclass=_IntMeta):
    """numpy 2: ``int()`` of a one-element 1-d array is an error; Triton 3.6's interpreter relies on it."""

    def __new__(cls, x: object = 0, *args: object) -> int:  # type: ignore[misc]
        if isinstance(x, np.ndarray) and x.size == 1:
            x = x.reshape(())
        return builtins.int(x, *args)  # type: ignore[call-overload,no-any-return]


interpreter.int = _Int  # type: ignore[attr-defined]

from kbuild.bench.kernels import SUITE  # noqa: E402
from kbuild.bench.spec import load_spec, validate_inputs  # noqa: E402


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
