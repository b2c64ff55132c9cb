"""Fixtures for kbuild.runtime: the JIT example project, "tuned" artefacts, and a fake CUDA driver.

The fake driver lets Triton's real JIT path (``JITFunction.run`` with ``warmup=True``: binder,
specialisation, ``triton.compile`` with ptxas, ``jit_post_compile_hook``) run on a machine without
a GPU; only the launch is skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import JIT_EXAMPLE, FakeDriver, make_tuned


@pytest.fixture
def fake_gpu() -> Iterator[Callable[[int], FakeDriver]]:
    from triton.runtime.driver import driver

    saved = driver._active

    def use(cc: int) -> FakeDriver:
        fake = FakeDriver(cc)
        driver.set_active(fake)
        return fake

    try:
        yield use
    finally:
        driver._active = saved


@pytest.fixture(autouse=True)
def _clean_runtime(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import kbuild.runtime
    from kbuild.runtime.state import STATE

    # One Triton cache for the whole session: each test still goes through _do_compile (the
    # in-memory caches are cleared), but a repeated specialisation is a disk-cache hit.
    monkeypatch.setenv("TRITON_CACHE_DIR", str(_session_triton_cache(tmp_path_factory)))
    yield
    kbuild.runtime.disable()
    kbuild.runtime.reset_events()
    STATE.cubins.clear()
    _forget_kernels()


def _forget_kernels() -> None:
    """Clear Triton's in-memory kernel caches of the example's functions: since issue 34 a shipped kernel lives in
    Triton's own ``kernel_cache``, and ``create_binder`` keeps the ``triton.compile`` of the moment (which a test
    may have replaced) as the function's ``compile``."""
    import sys

    from triton.runtime.jit import JITFunction

    module = sys.modules.get("kbx_jit.kernels")
    for obj in vars(module).values() if module is not None else ():
        jit = obj if isinstance(obj, JITFunction) else getattr(obj, "fn", None)  # an autotuner's function too
        if isinstance(jit, JITFunction):
            jit.device_caches.clear()
            jit.__dict__.pop("compile", None)


_TRITON_CACHE: list[Path] = []


def _session_triton_cache(factory: pytest.TempPathFactory) -> Path:
    if not _TRITON_CACHE:
        _TRITON_CACHE.append(factory.mktemp("triton-jit-cache"))
    return _TRITON_CACHE[0]


@pytest.fixture(scope="session")
def jit_settings(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from kbuild.settings.sources import load_settings

    settings = load_settings(JIT_EXAMPLE / "pyproject.toml")
    return dataclasses.replace(settings, store=tmp_path_factory.mktemp("store"), tune="off")


@pytest.fixture(scope="session")
def baseline_builds(jit_settings: Any) -> list[Any]:
    """The example's softmax compiled ahead of time for sm_90 and sm_80 (baselines)."""
    from kbuild.build.pipeline import run_pipeline

    return run_pipeline(jit_settings, kernels=["softmax"], targets=["sm_90", "sm_80"])


@pytest.fixture(scope="session")
def block_2048_build(jit_settings: Any) -> Any:
    """The same softmax declared with BLOCK=2048, compiled for sm_90 (a second specialisation, as a package
    shipping both sizes has)."""
    from kbuild.build.pipeline import run_pipeline

    softmax = jit_settings.kernel("softmax")
    wide = dataclasses.replace(softmax, name="softmax_2048", constexprs={"BLOCK": 2048})
    settings = dataclasses.replace(jit_settings, kernels=[*jit_settings.kernels, wide])
    (build,) = run_pipeline(settings, kernels=["softmax_2048"], targets=["sm_90"])
    return build


@pytest.fixture
def tuned_builds(jit_settings: Any, baseline_builds: list[Any]) -> list[Any]:
    return [make_tuned(jit_settings, dataclasses.replace(b)) for b in baseline_builds]


@pytest.fixture
def kernels(jit_settings: Any) -> Any:
    """The example's kernels module (imported the way the pipeline imports it)."""
    import sys

    from kbuild.compile import load_jit_function

    load_jit_function(jit_settings, jit_settings.kernel("softmax"))
    return sys.modules["kbx_jit.kernels"]
