"""Level 1 on the CPU: configurations compiled in the process pool, handed over as cubin + metadata, and
ranked by the cost model (a CPU estimate, not a measurement: every result says so)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from kbuild.bench.spec import BenchSpec, Config, ast_source, compile_spec, load_spec
from kbuild.runtime.handover import kernel_from_payload
from kbuild.settings.sources import settings_from_table
from kbuild.tune.level1 import ModelConfigMeasurer, search_configs
from kbuild.tune.level1.compile import CompilePool
from kbuild.tune.measure.backend import MODEL_BACKEND

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


@pytest.mark.hostile(fault="unbounded Triton compile", outcome="degraded with warning")
def test_a_configuration_compile_past_the_deadline_is_stopped_and_the_pool_goes_on(small_spec: BenchSpec) -> None:
    """Level 1 compiles each configuration under ``compile_timeout`` (issue 32: Triton's passes have no deadline
    of their own). A 0.05 s limit is shorter than a spawned worker's start (it imports Triton and the spec):
    that configuration fails naming the limit, within the limit and the stop's grace, and only its worker is
    stopped; the next configuration, under a generous limit, compiles in a fresh worker."""
    import time

    from kbuild.compile.workers import STOP_GRACE

    first, second = small_spec.configs[0], EXTRA
    with CompilePool(small_spec, 90, jobs=1, small=True, timeout=0.05) as pool:
        started = time.monotonic()
        stopped = pool.result(first)
        elapsed = time.monotonic() - started
        assert stopped.payload is None and stopped.error is not None
        assert "ran past 0.05 s (compile_timeout)" in stopped.error
        assert elapsed < 0.05 + STOP_GRACE + 5, f"took {elapsed:.1f} s"
        pool.timeout = 300.0
        fresh = pool.result(second)
    assert fresh.error is None and fresh.payload is not None


@pytest.mark.hostile(fault="unbounded Triton compile", outcome="degraded with warning")
def test_compile_configs_with_a_timeout_stops_one_configuration_and_compiles_the_next() -> None:
    """What a Ray compile shard runs (``compile_configs`` with the node's ``compile_timeout``): each configuration
    in a child stopped past the limit. 0.05 s is shorter than a fresh child's start (it imports Triton and the
    spec), so the first fails naming the limit; the second runs in the fresh child that follows
    (compiled, or stopped the same way): results in order, nothing raises."""
    configs = [c.as_dict() for c in load_spec(REF, small=True).configs[:2]]
    from kbuild.tune.level1.compile import compile_configs

    out = compile_configs(REF, True, (), configs, 90, timeout=0.05)
    assert [c.label for c in out] == [Config.from_dict(c).label() for c in configs]
    assert out[0].payload is None and out[0].error and "ran past 0.05 s (compile_timeout)" in out[0].error
    assert out[1].payload is not None or "ran past 0.05 s (compile_timeout)" in (out[1].error or "")
    ok = compile_configs(REF, True, (), configs[:1], 90, timeout=300.0)
    assert ok[0].error is None and ok[0].payload is not None


def test_the_requests_compile_timeout_reaches_level_1s_compiles(small_spec: BenchSpec) -> None:
    """The tuning request carries ``compile_timeout`` (issue 33): a measurer hands it to its process pool, and to
    a pool made elsewhere (the Ray compile shards) through the factory."""
    request = settings_from_table({"compile_timeout": 12.5}).tune_request(jobs=1)
    measurer = ModelConfigMeasurer(small_spec, jobs=request.jobs, small=True, compile_timeout=request.compile_timeout)
    try:
        assert isinstance(measurer.pool, CompilePool) and measurer.pool.timeout == 12.5 and measurer.pool.jobs == 1
    finally:
        measurer.close()
    made: list[float | None] = []

    def factory(spec: BenchSpec, arch: int, timeout: float | None) -> CompilePool:
        made.append(timeout)
        return CompilePool(spec, arch, jobs=0, timeout=timeout)

    ModelConfigMeasurer(small_spec, pool=factory, compile_timeout=request.compile_timeout).close()
    assert made == [12.5]


def test_a_build_hands_its_compile_timeout_to_level_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tune_build`` makes the request once from the settings and level 1's measurer gets its ``compile_timeout``
    and ``jobs`` (before, it compiled under the setting's default whatever the project set)."""
    import kbuild.bench.spec
    import kbuild.tune.level1
    import kbuild.tune.two_level
    from kbuild.build.tuning import tune_build

    seen: dict[str, object] = {}

    class Stop(Exception):
        pass

    def measurer(spec: object, **kwargs: object) -> None:
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(kbuild.bench.spec, "load_spec", lambda ref, python_path=(): ref)
    monkeypatch.setattr(kbuild.tune.two_level, "project_spec", lambda spec, points: spec)
    monkeypatch.setattr(kbuild.tune.level1, "ModelConfigMeasurer", measurer)
    b = SimpleNamespace(tuned_key=object(), artefact=object(), space=[{}, {}], spec=SimpleNamespace(bench="m:f"),
                        target=SimpleNamespace(cc=90))
    with pytest.raises(Stop):
        tune_build(settings_from_table({"compile_timeout": 12.5}), b, measure="model")  # type: ignore[arg-type]
    assert seen["compile_timeout"] == 12.5 and seen["jobs"] is None
