"""The CPU's prune of a derived space against the GPU's own figures (issue 35, part 2; needs an sm_90 GPU).

Every point the CPU compiled is loaded on the GPU with the CUDA driver (kbuild's binding,
:mod:`kbuild.device.cuda`) and its figures compared with what the prune used: registers per thread
(``CU_FUNC_ATTRIBUTE_NUM_REGS``) with ptxas's report, local memory (``CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES``) with
ptxas's stack frame, resident blocks per SM (``cuOccupancyMaxActiveBlocksPerMultiprocessor``) with
:mod:`kbuild.tune.level1.occupancy`; a point pruned for shared memory is refused by the driver (its dynamic shared
memory is over the block's opt-in maximum).
"""

from __future__ import annotations

import ctypes
import dataclasses
from typing import Any

import pytest
from gpu_marks import needs_sm90

pytestmark = needs_sm90

pytest.importorskip("optuna")

from kbuild.bench.spec import Config  # noqa: E402
from kbuild.targets import parse_target  # noqa: E402
from kbuild.tune.level1.derive import DerivedSpace, derive_space  # noqa: E402
from kbuild.tune.level1.prune import Pruned, prune  # noqa: E402
from kbuild.tune.level1.space import Space  # noqa: E402
from kbuild.tune.level1.subject import from_bench  # noqa: E402

SM90 = parse_target("sm_90")
CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3
CU_FUNC_ATTRIBUTE_NUM_REGS = 4
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


def _suite(name: str) -> DerivedSpace:
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import load_spec

    return derive_space(from_bench(load_spec(SUITE[name]), SM90))


def _on_gpu(pruned: Pruned) -> dict[str, int]:
    """Load every compiled point and compare; returns how many points of each verdict were compared."""
    import torch

    from kbuild.device.cuda import CudaError, driver

    torch.cuda.init()
    cu = driver()
    cu.make_current(cu.device(0))
    seen: dict[str, int] = {}
    for v in pruned.verdicts:
        c = v.compiled
        if c.cubin is None or c.ptxas is None:
            continue
        module = cu.load_module(c.cubin)
        try:
            fn = cu.get_function(module, c.ptxas.function)
            if v.reason == "shared-memory":
                with pytest.raises(CudaError):
                    cu.set_function_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, c.shared)
                seen["shared-memory"] = seen.get("shared-memory", 0) + 1
                continue
            if c.shared > 48 * 1024:
                cu.set_function_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, c.shared)
            assert cu.function_attribute(fn, CU_FUNC_ATTRIBUTE_NUM_REGS) == c.ptxas.registers, c.label
            assert (cu.function_attribute(fn, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES) > 0) == (c.ptxas.stack > 0), c.label
            if c.num_ctas == 1 and v.occupancy is not None:
                blocks = ctypes.c_int()
                cu.check(cu.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    ctypes.byref(blocks), fn, ctypes.c_int(c.num_warps * 32), ctypes.c_size_t(c.shared)),
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor")
                assert blocks.value == v.occupancy.blocks_per_sm, (c.label, blocks.value, v.occupancy)
            kind = v.reason or "kept"
            seen[kind] = seen.get(kind, 0) + 1
        finally:
            cu.unload_module(module)
    return seen


@pytest.mark.parametrize("name", ["rmsnorm", "softmax", "layernorm", "matmul_leakyrelu_512x512x2048"])
def test_the_gpu_agrees_with_the_prune_of_a_derived_space(name: str) -> None:
    pruned = prune(_suite(name), keep_code=True)
    seen = _on_gpu(pruned)
    assert seen.get("kept", 0) == len(pruned.kept), seen


def test_a_shared_memory_prune_is_refused_by_the_driver() -> None:
    d = _suite("matmul_leakyrelu_4096")
    base = d.default
    big = Config({**base.constexprs, "BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128}, 8, 4)
    pruned = prune(dataclasses.replace(d, space=Space.of([base, big])), jobs=0, keep_code=True)
    assert [v.reason for v in pruned.verdicts] == [None, "shared-memory"]
    assert _on_gpu(pruned) == {"kept": 1, "shared-memory": 1}


def test_recorded_liger_kernels_agree_with_the_gpu() -> None:
    pytest.importorskip("liger_kernel")
    from pathlib import Path

    from kbuild.record.format import load
    from kbuild.tune.level1.subject import find_kernels, from_recording, pick_specialization

    path = Path(__file__).resolve().parents[2] / "benchmarks/results/h100/issue36-s2/record/liger.recording.json"
    rec = load(str(path))
    totals: dict[str, Any] = {}
    for kernel in find_kernels(rec, ["element_mul_kernel", "_rms_norm_forward_kernel", "_swiglu_forward_kernel"],
                               where=str(path)):
        spec = pick_specialization(kernel, SM90)
        assert spec is not None
        for kind, n in _on_gpu(prune(derive_space(from_recording(rec, kernel, spec)), keep_code=True)).items():
            totals[kind] = totals.get(kind, 0) + n
    assert totals.get("kept") and totals.get("spills") and totals.get("occupancy"), totals
