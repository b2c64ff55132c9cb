"""Every suite kernel compiles ahead of time on this CPU-only machine: sm_80 and sm_90 (sm_90-only kernels
only for sm_90). Cubins are compiled once per module (2-core CI: ~15 s) and shared by the tests."""

from __future__ import annotations

import os

import pytest

from kbuild.bench.kernels import SUITE
from kbuild.bench.spec import BenchSpecError, compile_spec, load_spec
from kbuild.tune.measure.cubin import cubin_arch, text_sections

TARGETS = [(name, arch) for name, ref in SUITE.items() for arch in load_spec(ref, small=True).archs]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], object]:
    old = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton-suite"))
    try:
        out = {}
        for name, arch in TARGETS:
            spec = load_spec(SUITE[name])
            out[(name, arch)] = compile_spec(spec, spec.configs[0], arch)
        return out
    finally:
        if old is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = old


def test_every_kernel_has_both_targets_unless_sm90_only() -> None:
    names = {n for n, _ in TARGETS}
    assert names == set(SUITE)
    assert ("tma_matmul_4096", 80) not in TARGETS and ("tma_matmul_4096", 90) in TARGETS
    assert len(TARGETS) == 2 * len(SUITE) - 1


@pytest.mark.parametrize(("name", "arch"), TARGETS)
def test_suite_kernel_compiles(compiled: dict[tuple[str, int], object], name: str, arch: int) -> None:
    kernel = compiled[(name, arch)]
    cubin = kernel.kernel  # type: ignore[attr-defined]
    assert cubin_arch(cubin) == arch
    secs = text_sections(cubin)
    assert len(secs) == 1 and secs[0].size > 0 and secs[0].size % 16 == 0
    assert kernel.metadata.target.arch == arch  # type: ignore[attr-defined]


def test_sm90_only_kernel_refuses_sm80() -> None:
    spec = load_spec(SUITE["tma_matmul_4096"], small=True)
    with pytest.raises(BenchSpecError, match="does not support sm_80"):
        compile_spec(spec, spec.configs[0], 80)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("KBUILD_SLOW_TESTS"), reason="set KBUILD_SLOW_TESTS=1 (about 30 s)")
@pytest.mark.parametrize("name", list(SUITE))
def test_whole_configuration_space_compiles_for_sm90(name: str) -> None:
    spec = load_spec(SUITE[name])
    for arch in spec.archs:
        for cfg in spec.configs:
            assert cubin_arch(compile_spec(spec, cfg, arch).kernel) == arch
