"""Specs made from Liger-Kernel's H100 recording, run on CPU through Triton's interpreter.

A script (``TRITON_INTERPRET`` must be set before Triton is imported): ``interpret_recorded.py [--recording FILE]
FUNCTION...`` (default: the H100 recording). For each kernel named (``module:qualname``), the spec of its smallest
recorded call is loaded by reference (as the measurement worker
loads it), settled on the CPU (its outputs probed by running the recorded configuration), and its reference path
run: twice on the same inputs (it must agree with itself bit for bit), through the bit-exact oracle with the
recorded configuration as baseline and candidate, and as level 1 judges a configuration (relative error against
the reference within the dtype's tolerance) for the recorded configuration, for one whose outputs are off by a
quarter of the tolerance, and for one off by three times it; and the kernel's peers (torch) run on the same inputs
and checked against the reference. Prints one JSON line.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared interpreter switch
import importlib
import json
from typing import Any

import triton_interpreter

from kbuild.bench import recorded_inputs as ri
from kbuild.bench.peers import peers_for, prepare
from kbuild.bench.recorded import recorded_ref, samples_of
from kbuild.bench.spec import load_spec, settled
from kbuild.record.format import load
from kbuild.tune.measure.oracle import Oracle

RECORDING = Path(__file__).resolve().parents[2] / "benchmarks/results/h100/issue36-s2/record/liger.recording.json"


class Kernel:
    """The recorded configuration as the oracle launches a kernel (``kernel[grid](*args)``), each output then
    scaled by ``1 + off`` times its tolerance (a stand-in for another configuration's rounding)."""

    def __init__(self, spec: Any, off: float = 0.0) -> None:
        self.spec, self.off = spec, off

    def __getitem__(self, grid: Any) -> Any:
        def run(*args: Any) -> None:
            self.spec.fn[grid](*args)
            if self.off:
                for name in self.spec.outputs:
                    t = args[self.spec.arg_names().index(name)]
                    if t.is_floating_point():
                        t.mul_(1 + self.off * self.spec.reference_tols[name])

        return run


def rel_err(a: Any, b: Any) -> float:
    return float((a.double() - b.double()).norm() / max(float(b.double().norm()), 1e-30))


def main(argv: list[str]) -> int:
    recording = RECORDING
    if argv[:1] == ["--recording"]:
        recording, argv = Path(argv[1]), argv[2:]
    functions = argv
    triton_interpreter.scalars_as_fp32()
    rec = load(str(recording))
    out: dict[str, Any] = {}
    for function in functions:
        kernel = next(k for k in rec.kernels.values() if k.function == function)
        triton_interpreter.libdevice_as_tl_math(importlib.import_module(kernel.module))
        spec_id, index = min(((ri.tensor_bytes(s), sp.id, i) for sp in kernel.specializations.values()
                              for i, s in enumerate(samples_of(kernel, sp))))[1:]
        spec = load_spec(recorded_ref(recording, function, spec_id, sample=index))
        before = {"outputs": sorted(spec.outputs), "inplace": sorted(spec.inplace)}
        spec = settled(spec, "cpu")
        assert spec.reference is not None, function  # a recorded spec's reference runs the recorded configuration
        inputs = spec.make_inputs(3, "cpu")
        first, second = spec.reference(inputs), spec.reference(inputs)
        same = all(bool((first[n] == second[n]).all()) or bool(first[n].isnan().all()) for n in spec.outputs)
        cfg = spec.configs[0]
        oracle = Oracle(spec, cfg, device="cpu")
        bit_exact = oracle.check(Kernel(spec), Kernel(spec), 2, seed=1)
        judged = {}
        for label, off in (("recorded", 0.0), ("quarter", 0.25), ("three", 3.0)):
            outs, problem = oracle.run_once(Kernel(spec, off), inputs, 3)
            judged[label] = {"problem": problem,
                             "errors": {n: rel_err(outs[n], first[n]) for n in spec.outputs},
                             "ok": problem is None and all(rel_err(outs[n], first[n]) <= spec.reference_tols[n]
                                                           for n in spec.outputs)}
        peers = {}
        for peer in peers_for(spec):  # a package kernel's peers (torch), on the same inputs, against the reference
            want = {n: t.clone() for n, t in spec.reference(spec.make_inputs(3, "cpu")).items()}
            peers[peer.label] = prepare(peer, spec, spec.make_inputs(3, "cpu"), want).record
        shapes = {n: [list(v.shape), str(v.dtype), list(v.stride())] for n, v in inputs.items() if hasattr(v, "shape")}
        out[function] = {"spec": spec_id, "sample": index, "before": before, "outputs": sorted(spec.outputs),
                         "inplace": sorted(spec.inplace), "tols": dict(spec.reference_tols),
                         "self_agrees": same, "bit_exact": bit_exact, "judged": judged, "shapes": shapes,
                         "recorded": samples_of(kernel, kernel.specializations[spec_id])[index]["args"],
                         "provenance": dict(spec.provenance), "peers": peers}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
