"""Level 1 on the CPU: configurations compiled in the process pool, handed over as cubin + metadata, and
ranked by the cost model (a CPU estimate, not a measurement: every result says so)."""

from __future__ import annotations

import dataclasses

import pytest

from kbuild.bench.spec import BenchSpec, Config, ast_source, compile_spec, load_spec
from kbuild.tune.level1 import ModelConfigMeasurer, search_configs
from kbuild.tune.level1.compile import CompilePool
from kbuild.tune.measure.backend import MODEL_BACKEND
from kbuild.tune.measure.handover import kernel_from_payload

REF = "kbuild.bench.kernels.matmul:matmul_512x512x2048"
#: tl.dot needs K tiles of at least 16: Triton refuses this one.
NO_COMPILE = Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 8, "GROUP_M": 8}, num_warps=2, num_stages=2)
EXTRA = Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=2)


@pytest.fixture(scope="module")
def small_spec() -> BenchSpec:
    spec = load_spec(REF, small=True)
    return dataclasses.replace(spec, space=[*spec.configs, EXTRA, NO_COMPILE])


def test_a_kernel_compiled_in_the_pool_is_the_one_compiled_here(small_spec: BenchSpec) -> None:
    config = small_spec.configs[0]
    with CompilePool(small_spec, 90, jobs=1, small=True) as pool:
        pool.submit([config, NO_COMPILE])
        there = pool.result(config)
        failed = pool.result(NO_COMPILE)
        assert pool.submitted == 2
    here = compile_spec(small_spec, config, 90)
    assert there.payload is not None and there.error is None
    assert there.payload.cubin == here.asm["cubin"]  # deterministic: line info off, private cache, both sides
    rebuilt = kernel_from_payload(ast_source(small_spec, config), there.payload)
    assert rebuilt.kernel == here.asm["cubin"]
    assert rebuilt.name == here.name
    for field in ("shared", "num_warps", "num_stages", "name", "hash"):
        assert getattr(rebuilt.metadata, field) == getattr(here.metadata, field), field
    assert rebuilt.metadata.target == here.metadata.target
    assert failed.payload is None and failed.error  # Triton refused it; the pool reports, never raises
    assert there.shared == here.metadata.shared > 0


def test_cost_model_search_runs_end_to_end_and_labels_every_result(small_spec: BenchSpec) -> None:
    measurer = ModelConfigMeasurer(small_spec, jobs=2, small=True)
    try:
        ex = search_configs(small_spec, measurer, method="exhaustive", rounds=2, reps=2)
    finally:
        measurer.close()
    assert ex.backend == MODEL_BACKEND == "cost-model (CPU estimate, not a measurement)"
    by_label = {t.label: t for t in ex.trials}
    assert by_label[NO_COMPILE.label()].status == "compile-error" and by_label[NO_COMPILE.label()].error
    ok = [t for t in ex.trials if t.status == "ok"]
    assert len(ok) == len(small_spec.configs) + 1
    for t in ok:
        assert t.rel_err is None and "nothing was executed" in t.details["note"]
        assert t.median_ms and t.median_ms > 0 and t.details["waves"] >= 1
    # The model is deterministic: the winner is the smallest estimate, and its samples are all equal.
    assert ex.best_ms == min(t.median_ms for t in ok if t.median_ms is not None)
    assert ex.gain >= 1.0
    assert ex.compiles == len(small_spec.search_space())
    racing = search_configs(small_spec, ModelConfigMeasurer(small_spec, jobs=0, small=True), method="racing",
                            rounds=2, reps=2, seed=1)
    assert racing.best.label() in {t.label for t in ok}
    assert racing.evaluations <= racing.budget
