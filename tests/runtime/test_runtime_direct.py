"""Direct launch (kbuild.runtime.direct) on the CPU: what it refuses to launch, and when Triton's run takes over.

The launch itself needs a GPU: tests/runtime/test_runtime_coldstart_gpu.py (fresh processes, no host compiler,
bit-identical to Triton) and tests/runtime/test_runtime_gpu.py (in-process calls) run it on the H200.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kbuild.runtime import direct


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


def test_the_launch_setting_is_read_per_value_and_a_bad_one_turns_it_off(monkeypatch: pytest.MonkeyPatch,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("KBUILD_RUNTIME", raising=False)
    monkeypatch.delenv("KBUILD_RUNTIME_LAUNCH", raising=False)
    assert direct._direct_enabled()  # the default
    monkeypatch.setenv("KBUILD_RUNTIME_LAUNCH", "triton")
    assert not direct._direct_enabled()
    monkeypatch.setenv("KBUILD_RUNTIME_LAUNCH", "direct")
    assert direct._direct_enabled()
    monkeypatch.setenv("KBUILD_RUNTIME", "off")
    assert not direct._direct_enabled()
    monkeypatch.delenv("KBUILD_RUNTIME")
    monkeypatch.setenv("KBUILD_RUNTIME_LAUNCH", "ctypes")
    assert not direct._direct_enabled()
    assert "KBUILD_RUNTIME_LAUNCH" in caplog.text


def test_without_cuda_initialised_triton_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import triton.knobs as knobs

    from kbuild.runtime import loader

    monkeypatch.delenv("KBUILD_RUNTIME_LAUNCH", raising=False)
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", loader._cache_hook)
    assert direct._plain_triton() == "torch has not initialised CUDA"  # this machine has no GPU
    knobs.runtime.launch_enter_hook.add(_hook)  # a HookChain, as Triton 3.6 has it: active once it has a call
    try:
        assert direct._plain_triton() == "launch hooks are set"
    finally:
        knobs.runtime.launch_enter_hook.remove(_hook)
    assert direct._plain_triton() == "torch has not initialised CUDA"
    monkeypatch.setattr(knobs.runtime, "kernel_load_start_hook", _hook)  # a plain callable
    assert direct._plain_triton() == "kernel load hooks are set"


def _hook(*args: Any) -> None:
    pass


def test_install_wraps_jit_run_once_and_uninstall_restores_it() -> None:
    from triton.runtime.jit import JITFunction

    before = JITFunction.run
    direct.install()
    direct.install()
    try:
        assert JITFunction.run is direct._direct_run
        assert direct._direct.original_run is before
    finally:
        direct.uninstall()
    assert JITFunction.run is before
