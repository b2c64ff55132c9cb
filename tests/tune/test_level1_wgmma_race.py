"""Level 1, two levels and the CUDA ptxas-flag variants against wgmma register races (kbuild.sass.hazards; Triton
3.6 pipelines a wgmma with a register A operand with a race, triton-lang/triton#9433): a configuration whose cubin
is racy gets the verdict "racy" and is never checked, timed or chosen, on the cost model and on the GPU measurer;
a racy default is searched past against the race-free autotune entries where the spec has an independent
reference, else kept without a search and no gain claimed; a racy ptxas variant is not accepted and a racy
CUDA baseline ships as it is.

Real cubins, compiled here for sm_90 (nvdisasm on the CPU): the suite's rmsnorm_swiglu, whose configurations
128x128x64/w8/s3 and 64x128x64/w4/s3 have the race and 128x64x64/w4/s4 has none. No CUDA C++ kernel with the race
is made here (that needs hand-written wgmma PTX whose A fragment ptxas leaves in flight): the nvcc rule is tested
on tune_kernel's decision with the racy Triton cubin's bytes as the baseline or a variant."""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

import pytest

from kbuild.bench.kernels import SUITE
from kbuild.bench.spec import BenchSpec, Config, compile_spec, load_spec
from kbuild.sass.hazards import WGMMA_RACE_ISSUE
from kbuild.settings.model import Settings, TuneRequest
from kbuild.tune.level1 import GpuConfigMeasurer, ModelConfigMeasurer, search_configs
from kbuild.tune.level1.compile import compile_one
from kbuild.tune.measure.backend import GPU_BACKEND, MODEL_BACKEND, CheckResult, TimeResult


def request(**changes: Any) -> TuneRequest:
    """The settings model's default tuning request with the SASS edit kind the tuners searched when they took keywords
    (``moves`` alone), ``changes`` over it."""
    return Settings().tune_request(**{"kinds": ("moves",), **changes})



@functools.cache
def base_spec() -> BenchSpec:
    return load_spec(SUITE["rmsnorm_swiglu"], small=True)


def racy_a() -> Config:
    return base_spec().configs[0]  # BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,w8,s3


def clean() -> Config:
    return base_spec().configs[1]  # BLOCK_M=128,BLOCK_N=64,BLOCK_K=64,w4,s4


def racy_b() -> Config:
    return base_spec().configs[2]  # BLOCK_M=64,BLOCK_N=128,BLOCK_K=64,w4,s3


def clean_small() -> Config:
    return base_spec().search_space()[3]  # BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,w4,s2


@functools.cache
def _cubin(label: str) -> tuple[bytes, str]:
    config = next(c for c in base_spec().search_space() if c.label() == label)
    k = compile_spec(base_spec(), config, 90)
    return k.asm["cubin"], k.metadata.name


def cubin(config: Config) -> tuple[bytes, str]:
    return _cubin(config.label())


def test_the_configurations_are_what_the_tests_take_them_for() -> None:
    assert compile_one(base_spec(), racy_a(), 90).hazards
    assert compile_one(base_spec(), racy_b(), 90).hazards
    c = compile_one(base_spec(), clean(), 90)
    assert c.payload is not None and c.hazards == () and c.hazard_check is None


def test_racy_configurations_are_reported_and_never_ranked_on_the_cost_model() -> None:
    spec = dataclasses.replace(base_spec(), configs=[clean()], space=[clean(), racy_a(), racy_b(), clean_small()])
    measurer = ModelConfigMeasurer(spec, jobs=0, small=True)
    try:
        r = search_configs(spec, measurer, method="exhaustive", rounds=2, reps=2)
    finally:
        measurer.close()
    by = {t.label: t for t in r.trials}
    for c in (racy_a(), racy_b()):
        t = by[c.label()]
        assert t.status == "racy" and t.samples_ms == [] and t.median_ms is None and t.score is None
        assert t.error is not None and WGMMA_RACE_ISSUE in t.error and "in-flight" in t.error
        assert t.error.split(" at ", 1)[1].startswith(t.details["wgmma_register_hazards"][0])
    ranked = {clean().label(), clean_small().label()}
    assert r.best.label() in ranked and {c.label() for c in r.top} <= ranked
    assert r.failed == {"racy": 2} and r.checks == 2  # the racy ones were not checked
    assert not r.default_races and r.decision is None
    doc = r.as_dict()
    assert doc["failed"] == {"racy": 2} and doc["default_racy"] is False and json.dumps(doc, allow_nan=False)
    racing = search_configs(spec, ModelConfigMeasurer(spec, jobs=0, small=True), method="racing", rounds=2, reps=2,
                            seed=1)
    assert racing.best.label() in ranked and {c.label() for c in racing.top} <= ranked


def two_levels_on_the_model(spec: BenchSpec) -> Any:
    """Both levels on ``spec`` with the cost model (no GPU)."""
    from kbuild.tune.two_level import tune_two_level

    measurer = ModelConfigMeasurer(spec, jobs=0, small=True)
    try:
        return tune_two_level(spec, 90, request(evaluations=40, seconds=60), measurer=measurer, backend=None,
                              kernel_ref=None)
    finally:
        measurer.close()


def test_a_racy_default_is_searched_past_against_the_race_free_autotune_entries() -> None:
    """The suite's rmsnorm_swiglu has a torch reference, and its default (128x128x64, w8) races: the race-free
    configurations are searched and checked against that reference, the gain is against the best race-free entry of
    the autotune list, and what ships is race-free (on the H100 the default was kept and 26 race-free points of its
    derived space went unsearched)."""
    spec = dataclasses.replace(base_spec(), configs=[racy_a(), clean(), racy_b()],
                               space=[racy_a(), clean(), racy_b(), clean_small()])
    assert spec.reference is not None and not spec.reference_is_a_configuration
    r = search_configs(spec, ModelConfigMeasurer(spec, jobs=0, small=True), method="exhaustive", rounds=2, reps=2)
    race_free = {clean().label(), clean_small().label()}
    assert r.default_races and r.decision is None and r.best.label() in race_free
    assert r.autotune_best == clean() and {c.label() for c in r.top} <= race_free
    assert r.failed == {"racy": 2} and any("not shipped" in n and racy_b().label() in n for n in r.notes)
    doc = r.as_dict()
    assert doc["default_racy"] is True and doc["default_races"] and doc["gain"] is not None
    json.dumps(doc, allow_nan=False)

    two = two_levels_on_the_model(spec)
    assert two.default == racy_a() and two.config.label() in race_free and two.reason is None
    assert two.gains["level1"] is not None and two.report()["decision"] is None


@pytest.mark.parametrize("why", ["no race-free autotune entry", "a recorded spec's reference"])
def test_a_racy_default_is_kept_without_a_search_and_claims_no_gain(why: str) -> None:
    """No gain can be measured when every autotune entry races, nor anything checked when the reference is the racy
    configuration's own output (a recorded spec): the default is kept, nothing is searched, no gain is claimed."""
    if why == "no race-free autotune entry":
        spec = dataclasses.replace(base_spec(), configs=[racy_a(), racy_b()], space=[racy_a(), racy_b(), clean()])
    else:
        spec = dataclasses.replace(base_spec(), configs=[racy_a(), clean()], space=[racy_a(), clean(), clean_small()],
                                   reference_is_a_configuration=True)
    r = search_configs(spec, ModelConfigMeasurer(spec, jobs=0, small=True), method="racing", rounds=2, reps=2)
    assert r.default_races and r.best == racy_a() and r.top == (racy_a(),)
    assert r.evaluations == 0 and r.launches == 0 and r.checks == 0
    assert r.decision is not None and r.decision.startswith(f"default kept: the default configuration {racy_a().label()}")
    assert WGMMA_RACE_ISSUE in r.decision and r.default_races[0] in r.decision
    doc = r.as_dict()
    assert doc["gain"] is None and doc["best_ms"] is None and doc["default_racy"] is True
    json.dumps(doc, allow_nan=False)

    two = two_levels_on_the_model(spec)
    assert two.config == two.default == racy_a() and not two.accepted and two.cubin == two.baseline
    assert two.gains["level1"] is None and two.gains["total"] is None and two.final is None
    assert two.reason == r.decision
    rep = two.report()
    assert rep["decision"] == r.decision and rep["shipped_schedule"] == "untouched"
    assert WGMMA_RACE_ISSUE in rep["level2"][racy_a().label()]["decision"]["reason"]  # level 2 kept it too


class FakeClient:
    """The GPU worker's client, as GpuConfigMeasurer drives it: every configuration it is given passes."""

    def __init__(self) -> None:
        self.added: list[str] = []

    def add(self, label, config, payload):
        self.added.append(label)
        return {"status": "ok", "rel_err": 0.0}


class Pool:
    def __init__(self, spec: BenchSpec) -> None:
        self.spec = spec

    def submit(self, configs) -> None:
        pass

    def result(self, config: Config):
        return compile_one(self.spec, config, 90)

    def close(self) -> None:
        pass


def test_the_gpu_measurer_sends_no_racy_configuration_to_the_worker() -> None:
    m = object.__new__(GpuConfigMeasurer)  # no worker process: its client is a fake that passes everything
    client = FakeClient()
    m.spec, m.pool, m.arch = base_spec(), Pool(base_spec()), 90
    m.client = client  # type: ignore[assignment]  # a stand-in for the worker's client, not a ConfigWorkerClient
    bad = m.prepare(racy_a())
    assert bad.status == "racy" and bad.error is not None and WGMMA_RACE_ISSUE in bad.error
    assert client.added == []
    assert m.prepare(clean()).status == "ok" and client.added == [clean().label()]


# ----------------------------------------------------------------------------------------------
# kbuild.nvcc.tuned: the ptxas-flag variants


def timing(ratio: float) -> TimeResult:
    return TimeResult(backend=GPU_BACKEND, ratio=ratio, ci=(ratio - 0.002, ratio + 0.002), aa_ratio=1.0,
                      aa_ci=(0.999, 1.001), baseline_ms=1.0, candidate_ms=ratio)


class FastBackend:
    """A GPU-like backend that finds every cubin bit-exact and faster (the racy one fastest), recording calls."""

    name = GPU_BACKEND

    def __init__(self, fastest: bytes = b"") -> None:
        self.fastest = fastest
        self.calls: list[tuple[str, bytes]] = []

    def load(self, kernel, baseline):
        self.calls.append(("load", baseline))

    def check(self, candidate, k=3, *, seed=None):
        self.calls.append(("check", candidate))
        return CheckResult(valid=True, backend=self.name, k=k)

    def time(self, candidate, *, rounds=8, reps=10):
        self.calls.append(("time", candidate))
        return timing(0.5 if candidate == self.fastest else 0.97)

    def close(self):
        pass


def _settings():
    from kbuild.settings.sources import settings_from_table

    return settings_from_table({"budget": {"evaluations": 4, "seconds": 60}}, where="test")


def test_a_racy_ptxas_variant_is_not_accepted_whatever_its_checks_say() -> None:
    from kbuild.nvcc.tuned import tune_kernel
    from kbuild.sass.hazards import register_wgmma_hazards

    good, symbol = cubin(clean())
    bad, bad_symbol = cubin(racy_a())
    assert bad_symbol == symbol and register_wgmma_hazards(bad, symbol) and register_wgmma_hazards(good, symbol) == []
    backend = FastBackend(fastest=bad)
    out = tune_kernel(_settings().tune_request(), cubin=good, symbol=symbol, bench="x:y", python_path=[],
                      variants={"maxrregcount=128": bad}, backend=backend)
    entry = out.report["level1"]["maxrregcount=128"]
    assert entry["status"] == "racy" and WGMMA_RACE_ISSUE in entry["reason"] and entry["wgmma_register_hazards"]
    assert ("check", bad) not in backend.calls and ("time", bad) not in backend.calls
    assert out.cubin != bad and out.config == {"maxrregcount": 0, "minnctapersm": 0}
    assert out.report["start"] == "as compiled" and register_wgmma_hazards(out.cubin, symbol) == []


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cost-model"])
def test_a_racy_cuda_baseline_ships_as_it_is_before_anything_runs(gpu: bool) -> None:
    from kbuild.nvcc.tuned import tune_kernel

    bad, symbol = cubin(racy_a())
    good, _ = cubin(clean())
    backend = FastBackend(fastest=good) if gpu else None
    out = tune_kernel(_settings().tune_request(), cubin=bad, symbol=symbol, bench="x:y", python_path=[],
                      variants={"maxrregcount=128": good}, backend=backend)
    assert out.cubin == bad and not out.accepted and out.speedup is None
    assert out.reason.startswith("baseline kept: the untouched cubin has a wgmma register race")
    assert WGMMA_RACE_ISSUE in out.reason and "in-flight" in out.reason
    assert out.report["decision"]["wgmma_register_hazards"] and out.config == {"maxrregcount": 0, "minnctapersm": 0}
    assert out.backend == (GPU_BACKEND if gpu else MODEL_BACKEND)
    if backend is not None:
        assert backend.calls == []  # not loaded, checked or timed: no budget spent
