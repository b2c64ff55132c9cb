"""Level 1 on the GPU (H200): the worker checks every configuration against the reference and times them.

Marked ``gpu``; skipped without an sm_90 GPU."""

from __future__ import annotations

import pytest
from gpu_marks import needs_sm90

from kbuild.bench.kernels import SUITE
from kbuild.bench.spec import load_spec
from kbuild.tune.level1 import GpuConfigMeasurer, search_configs
from kbuild.tune.measure.backend import GPU_BACKEND

pytestmark = needs_sm90


@pytest.mark.parametrize("name", ["softmax", "flash_attn_d64_causal"])
def test_racing_and_exhaustive_on_the_gpu(name: str) -> None:
    spec = load_spec(SUITE[name], small=True)
    measurer = GpuConfigMeasurer(spec, small=True)
    try:
        ex = search_configs(spec, measurer, method="exhaustive", rounds=4, reps=5)
        race = search_configs(spec, measurer, method="racing", rounds=4, reps=5, fraction=0.2, seed=0)
        head = measurer.time([ex.best, race.best], rounds=6, reps=10)
    finally:
        measurer.close()
    assert ex.backend == GPU_BACKEND
    for t in ex.trials:
        if t.status == "ok":
            assert t.rel_err is not None and t.rel_err <= spec.reference_tol
        elif t.status == "wrong-result":
            assert t.error and t.samples_ms == []
    assert ex.gain >= 0.97  # the autotune best is in the space; noise only
    assert race.evaluations <= race.budget
    import numpy as np

    ratio = np.median(head.samples[race.best.label()]) / np.median(head.samples[ex.best.label()])
    print(f"{name}: racing/exhaustive best {ratio:.3f}, evaluations {race.evaluations}/{ex.evaluations}, "
          f"failed {ex.failed}")
    assert ratio <= 1.05
