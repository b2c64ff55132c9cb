"""Run the correctness oracle on CPU through Triton's interpreter, with the fault demo's kernel variants.

A script (``TRITON_INTERPRET`` must be set before Triton is imported): prints one JSON line mapping
each variant to the oracle's verdict. Variants that crash or hang (MODE 1, 2) are not run here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared interpreter switch
import dataclasses
import json
from typing import Any

import triton_interpreter  # noqa: F401  (must come before anything imports triton)

from kbuild.bench.spec import Tolerance, load_spec
from kbuild.tune.measure.oracle import Oracle

BENCH = str(Path(__file__).resolve().parents[2] / "benchmarks")


class Variant:
    """Launches the spec's function with another value of one constexpr (a stand-in for another cubin)."""

    def __init__(self, fn: Any, index: int, value: Any) -> None:
        self.fn, self.index, self.value = fn, index, value

    def __getitem__(self, grid: tuple[int, int, int]) -> Any:
        def run(*args: Any) -> None:
            args = (*args[: self.index], self.value, *args[self.index + 1:])
            self.fn[grid](*args)

        return run


def main() -> int:
    spec = load_spec("gpu_bench_faults:spec", small=True, python_path=[BENCH])
    cfg = spec.configs[0]
    index = spec.arg_names().index("MODE")
    oracle = Oracle(spec, cfg, device="cpu")
    base = Variant(spec.fn, index, 0)
    out: dict[str, Any] = {"sanity": oracle.baseline_sanity(base)}
    for mode in (0, 3, 4, 5):
        out[f"mode{mode}"] = oracle.check(base, Variant(spec.fn, index, mode), 3, seed=1)
    loose = Oracle(dataclasses.replace(spec, outputs={"y_ptr": Tolerance(atol=0.6)}), cfg, device="cpu")
    out["mode4_tolerance"] = loose.check(base, Variant(spec.fn, index, 4), 3, seed=1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
