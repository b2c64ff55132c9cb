"""Direct launch (kbuild.runtime.direct) on the CPU: what it refuses to launch, and when Triton's run takes over.

The launch itself needs a GPU: tests/runtime/test_runtime_coldstart_gpu.py (fresh processes, no host compiler,
bit-identical to Triton) and tests/runtime/test_runtime_gpu.py (in-process calls) run it on the H200.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from runtime_helpers import FakeCuda, direct_stand_ins

from kbuild.runtime import direct
from kbuild.settings.variables import Override


def _md(**kw: Any) -> Any:
    base = {"name": "k", "shared": 0, "num_warps": 4, "num_ctas": 1, "global_scratch_size": 0,
            "profile_scratch_size": 0, "tensordesc_meta": None}
    return SimpleNamespace(**{**base, **kw})


SIG = {"x_ptr": "*fp16", "n": "i32", "eps": "fp32", "BLOCK": "constexpr", "stride": "i64"}


def test_plain_pointers_and_scalars_are_launchable() -> None:
    assert direct.launchable(SIG, _md()) is None


@pytest.mark.parametrize("sig, md, why", [
    ({**SIG, "t": ("*fp16", "i32")}, _md(), "argument t is a tuple"),
    ({**SIG, "h": "fp16"}, _md(), "argument h has type fp16"),
    ({**SIG, "d": "tensordesc<fp16[64, 64]>"}, _md(), "argument d has type tensordesc"),
    (SIG, _md(global_scratch_size=128), "global_scratch memory"),
    (SIG, _md(profile_scratch_size=8), "profile_scratch memory"),
    (SIG, _md(tensordesc_meta=[{}]), "tensor descriptors"),
    (SIG, _md(num_ctas=16), "non-portable"),
])
def test_what_triton_launches_instead(sig: dict[str, Any], md: Any, why: str) -> None:
    found = direct.launchable(sig, md)
    assert found is not None and why in found


def test_the_launch_setting_is_read_per_value_and_a_bad_one_turns_it_off(kbuild_env: Override,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    assert direct.direct_enabled()  # the default
    kbuild_env.set(runtime_launch="triton")
    assert not direct.direct_enabled()
    kbuild_env.set(runtime_launch="direct")
    assert direct.direct_enabled()
    kbuild_env.set(runtime="off")
    assert not direct.direct_enabled()
    kbuild_env.set(runtime=None)
    kbuild_env.set(runtime_launch="ctypes")
    assert not direct.direct_enabled()
    assert "KBUILD_RUNTIME_LAUNCH" in caplog.text


def test_without_cuda_initialised_triton_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import triton.knobs as knobs

    from kbuild.runtime import loader

    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", loader.cache_hook)
    assert direct.plain_triton_reason() == "torch has not initialised CUDA"  # this machine has no GPU
    knobs.runtime.launch_enter_hook.add(_hook)  # a HookChain, as Triton 3.6 has it: active once it has a call
    try:
        assert direct.plain_triton_reason() == "launch hooks are set"
    finally:
        knobs.runtime.launch_enter_hook.remove(_hook)
    assert direct.plain_triton_reason() == "torch has not initialised CUDA"
    monkeypatch.setattr(knobs.runtime, "kernel_load_start_hook", _hook)  # a plain callable
    assert direct.plain_triton_reason() == "kernel load hooks are set"


def _hook(*args: Any) -> None:
    pass


def test_install_wraps_jit_run_once_and_uninstall_restores_it() -> None:
    from triton.runtime.jit import JITFunction

    from kbuild.runtime.state import STATE

    before = JITFunction.run
    direct.install()
    direct.install()
    try:
        assert JITFunction.run is direct.direct_run
        assert STATE.original_jit_run is before
    finally:
        direct.uninstall()
    assert JITFunction.run is before


# ----------------------------------------------------------------------------------------------
# The direct path through Triton's real binder and kbuild's real index, on the CPU. Stand-ins (labelled): torch's
# CUDA queries (an sm_90 device 0) and libcuda (FakeCuda records the module load and decodes the launch's
# parameters from the addresses the packing produced). Triton's driver is replaced by one that fails on any use:
# the direct path must not touch it (on a GPU, its first use builds C modules with gcc).


@pytest.fixture
def direct_cpu() -> Any:
    with direct_stand_ins() as fake:
        yield fake


def _softmax_call(kernels: Any, rows: int, cols: int) -> tuple[Any, Any, Any]:
    import torch

    x = torch.empty(rows * cols, dtype=torch.float16).view(rows, cols)
    out = torch.empty_like(x)
    compiled = kernels.softmax[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=1024, num_warps=4,
                                        num_stages=3)
    return x, out, compiled


def test_a_shipped_call_is_launched_directly_without_triton_driver_or_compiler(
        jit_settings: Any, tuned_builds: list[Any], kernels: Any, tmp_path: Any, direct_cpu: FakeCuda) -> None:
    import triton.compiler

    import kbuild.runtime
    from kbuild.build.package_data import write_package_data

    shipped = write_package_data(jit_settings, tuned_builds, tmp_path / "kbx_jit")
    entry = next(e for e in shipped.index["entries"].values() if e["target"]["cc"] == 90 and e["kernel"] == "softmax")
    cubin = (shipped.data_dir / entry["cubin"]).read_bytes()
    compiles: list[int] = []
    original_compile = triton.compiler.compile
    triton.compiler.compile = lambda *a, **k: compiles.append(1)  # type: ignore[assignment]
    try:
        assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
        x, out, compiled = _softmax_call(kernels, 64, 1024)
        x2, out2, _ = _softmax_call(kernels, 32, 1024)  # the same specialisation: no second load
    finally:
        triton.compiler.compile = original_compile
    assert compiles == []
    assert direct_cpu.loaded == [cubin] and direct_cpu.names == [compiled.name.encode()]
    md = compiled.metadata
    first, second = direct_cpu.launches
    assert first == {"grid": (64, 1, 1), "block": 32 * md.num_warps, "shared": md.shared, "stream": 77, "attrs": 0,
                     "args": [out.data_ptr(), x.data_ptr(), 1024, 1024, 1024, 0, 0]}
    assert second["grid"] == (32, 1, 1) and second["args"][:2] == [out2.data_ptr(), x2.data_ptr()]
    assert [e.stage for e in kbuild.runtime.events()] == ["zero-jit", "direct-launch"]


def test_a_call_without_a_shipped_kernel_goes_to_triton(jit_settings: Any, tuned_builds: list[Any], kernels: Any,
                                                        tmp_path: Any, direct_cpu: FakeCuda) -> None:
    import kbuild.runtime
    from kbuild.build.package_data import write_package_data

    shipped = write_package_data(jit_settings, tuned_builds, tmp_path / "kbx_jit")
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    with pytest.raises(AssertionError, match="Triton's driver was used"):
        _softmax_call(kernels, 64, 1000)  # n_cols not divisible by 16: another specialisation, Triton's run
    assert direct_cpu.loaded == [] and direct_cpu.launches == []
