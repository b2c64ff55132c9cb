"""kbuild.runtime on a real GPU (marked ``gpu``; skipped without an sm_90 GPU).

A rewritten cubin (every operand-reuse flag cleared: other machine code, same arithmetic) is shipped
as the "tuned" artefact; an ordinary ``kernel[grid](...)`` launch must load exactly those bytes and
give outputs bit-identical to Triton's own cubin, which it gets back once kbuild.runtime is disabled.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from gpu_marks import needs_sm90

import kbuild.runtime
from kbuild.settings.variables import Override

pytestmark = needs_sm90


def _launch(kernels: Any, x: Any) -> tuple[Any, Any]:
    import torch

    kernels.softmax.device_caches.clear()
    out = torch.full_like(x, float("nan"))
    compiled = kernels.softmax[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1], BLOCK=1024,
                                             num_warps=4, num_stages=3)
    torch.cuda.synchronize()
    return out, compiled


@pytest.mark.parametrize("launch", ["direct", "triton"])
def test_shipped_cubin_runs_in_a_plain_jit_launch(jit_settings: Any, baseline_builds: list[Any], kernels: Any,
                                                  tmp_path: Path, launch: str, kbuild_env: Override) -> None:
    """``direct``: kbuild.runtime.direct launches the bytes (no Triton launcher); ``triton``: Triton's launcher."""
    import torch

    kbuild_env.set(runtime_launch=launch)

    from kbuild.build.package_data import write_package_data
    from kbuild.cache import Artefact
    from kbuild.key import KernelKey, tuner_component
    from kbuild.tune import TUNER_VERSION
    from kbuild.tune.measure.cubin import without_reuse

    (base,) = [b for b in baseline_builds if b.target.cc == 90]
    rewritten, flags = without_reuse(base.artefact.cubin)
    assert flags > 0 and rewritten != base.artefact.cubin
    build = dataclasses.replace(base)
    build.tuned_key = KernelKey({**base.baseline_key.components,
                                 "tuner": tuner_component(dataclasses.replace(jit_settings, tune="auto"),
                                                           version=TUNER_VERSION)})
    build.tuned = True
    build.artefact = Artefact.create(key=build.tuned_key.hex, cubin=rewritten,
                                     meta={**base.artefact.meta, "tuned": True, "speedup": 1.0,
                                           "key": build.tuned_key.hex})
    shipped = write_package_data(jit_settings, [build], tmp_path / "kbx_jit")

    x = torch.randn((4096, 1024), device="cuda", dtype=torch.float16) * 3
    theirs, triton_kernel = _launch(kernels, x)
    assert triton_kernel.kernel != rewritten

    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    ours, kernel = _launch(kernels, x)
    events = kbuild.runtime.events()
    assert [e.stage for e in events] == (["zero-jit", "direct-launch"] if launch == "direct" else ["zero-jit"])
    assert events[0].substituted and events[0].target == "sm_90a"
    assert kernel.kernel == rewritten  # these bytes were loaded and ran
    # direct: loaded by kbuild's driver binding (its direct-launch event says so; since issue 34 part 0 the kernel
    # keeps the module and function handles, so that Triton's later calls find it loaded); triton: by Triton's driver
    assert kernel.module and kernel.function
    assert launch != "direct" or "loaded without a host compiler" in events[1].reason
    assert not torch.isnan(ours).any()
    assert torch.equal(ours.view(torch.int16), theirs.view(torch.int16))

    kbuild.runtime.disable()
    again, plain = _launch(kernels, x)
    assert plain.kernel == triton_kernel.kernel
    assert torch.equal(again.view(torch.int16), theirs.view(torch.int16))
