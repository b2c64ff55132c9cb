"""The real worker on a real GPU (marked ``gpu``; skipped without one). The parent process never touches CUDA."""

from __future__ import annotations

import pytest
from gpu_marks import needs_sm90

from kbuild.bench.spec import compile_spec, load_spec
from kbuild.tune.measure.backend import K_ACCEPT, KernelRef
from kbuild.tune.measure.client import WorkerClient
from kbuild.tune.measure.cubin import without_reuse, without_waits

pytestmark = needs_sm90

SPEC = "kbuild.bench.kernels.softmax:softmax"


@pytest.fixture(scope="module")
def baseline() -> bytes:
    spec = load_spec(SPEC, small=True)
    return compile_spec(spec, spec.configs[0], 90).kernel


def test_check_and_time_on_the_gpu(baseline: bytes) -> None:
    with WorkerClient(timeout_s=60) as c:
        info = c.load(KernelRef(SPEC, small=True), baseline)
        assert info.arch == 90 and info.details["rel_err_y_ptr"] < 1e-2
        assert c.check(baseline, k=K_ACCEPT).valid
        good, _ = without_reuse(baseline)
        res = c.check(good, k=K_ACCEPT)
        assert res.valid and res.k == K_ACCEPT
        bad, _ = without_waits(baseline)
        broken = c.check(bad)
        assert not broken.valid, "a kernel with every scoreboard wait removed must not pass"
        t = c.time(good, rounds=4, reps=10)
        assert t.valid and 0.5 < t.ratio < 2.0 and 0.8 < t.aa_ratio < 1.25
        assert t.ci[0] <= t.ratio <= t.ci[1]
        assert len(t.samples["baseline"]) == 4 and len(t.samples["baseline"][0]) == 10


def test_worker_survives_a_faulting_candidate(baseline: bytes) -> None:
    import sys
    from pathlib import Path

    bench_dir = str(Path(__file__).resolve().parents[2] / "benchmarks")
    sys.path.insert(0, bench_dir)
    try:
        spec = load_spec("gpu_bench_faults:spec", python_path=[bench_dir])
        base = compile_spec(spec, spec.configs[0], 90).kernel
        oob = compile_spec(spec, spec.configs[1], 90).kernel
        past_end = compile_spec(spec, spec.configs[3], 90).kernel
    finally:
        sys.path.remove(bench_dir)
    with WorkerClient(timeout_s=60) as c:
        c.load(KernelRef("gpu_bench_faults:spec", python_path=(bench_dir,)), base)
        res = c.check(oob)
        assert not res.valid and c.restarts == 1
        guard = c.check(past_end)
        assert not guard.valid and "guard band" in (guard.reason or "")
        assert c.check(base, k=K_ACCEPT).valid
