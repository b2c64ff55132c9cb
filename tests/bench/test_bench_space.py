"""The suite's level-1 search spaces (issue 15): :func:`kbuild.bench.space.grid_space` and every spec's ``space``.

Static checks on CPU (sizes, validity, labels, grids, the autotune list inside the space), and ahead-of-time
compiles of a seeded sample of each space for sm_90 (a few points fast; a wider sample behind KBUILD_SLOW_TESTS).
"""

from __future__ import annotations

import dataclasses
import os
import random
import re

import pytest

from kbuild.bench.kernels import SUITE
from kbuild.bench.space import grid_space
from kbuild.bench.spec import BenchSpecError, Config, compile_spec, load_spec, validate_spec
from kbuild.errors import UsageError
from kbuild.tune.measure.cubin import cubin_arch

#: Per-kernel bounds of the space (the level-1 searcher should need about a quarter of it) and the suite's
#: total (exhaustive sweeps must stay runnable on the GPU at ~1-3 s of compile per config on 16 cores).
MIN_POINTS, MAX_POINTS, MAX_TOTAL = 48, 300, 1500

SPECS = {name: load_spec(ref) for name, ref in SUITE.items()}
SMALL_SPECS = {name: load_spec(ref, small=True) for name, ref in SUITE.items()}


def _power_of_two(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0


# -- grid_space --------------------------------------------------------------------------------------


def test_grid_space_is_the_cartesian_product_in_a_fixed_order() -> None:
    pts = grid_space({"BLOCK_M": [64, 128], "BLOCK_N": [32]}, num_warps=[4, 8], num_stages=[2], maxnreg=[0, 232])
    assert [p.label() for p in pts] == [
        "BLOCK_M=64,BLOCK_N=32,w4,s2", "BLOCK_M=64,BLOCK_N=32,w4,s2,r232",
        "BLOCK_M=64,BLOCK_N=32,w8,s2", "BLOCK_M=64,BLOCK_N=32,w8,s2,r232",
        "BLOCK_M=128,BLOCK_N=32,w4,s2", "BLOCK_M=128,BLOCK_N=32,w4,s2,r232",
        "BLOCK_M=128,BLOCK_N=32,w8,s2", "BLOCK_M=128,BLOCK_N=32,w8,s2,r232"]
    assert pts[0].maxnreg is None and pts[1].maxnreg == 232  # 0 means "ptxas decides", like None
    assert pts[0] == Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=2)


def test_grid_space_without_constexprs_and_with_a_filter() -> None:
    assert [p.label() for p in grid_space({}, num_warps=[1, 2], num_stages=[1])] == ["w1,s1", "w2,s1"]
    keep = grid_space({"BLOCK_M": [64, 128], "BLOCK_N": [64, 128]},
                      keep=lambda c: int(c.constexprs["BLOCK_M"]) % int(c.constexprs["BLOCK_N"]) == 0)
    assert [p.label() for p in keep] == ["BLOCK_M=64,BLOCK_N=64,w4,s3", "BLOCK_M=128,BLOCK_N=64,w4,s3",
                                         "BLOCK_M=128,BLOCK_N=128,w4,s3"]
    assert len(grid_space({"A": [1, 2, 3]}, num_warps=[4, 8], num_stages=[2, 3], num_ctas=[1, 2])) == 24


@pytest.mark.hostile(fault="an empty or repeated axis in a grid space", outcome="clean error")
@pytest.mark.parametrize(("kwargs", "axis"), [
    ({"constexprs": {"BLOCK_M": []}}, "constexprs['BLOCK_M']"),
    ({"constexprs": {"BLOCK_M": [64, 64]}}, "constexprs['BLOCK_M']"),
    ({"constexprs": {}, "num_warps": []}, "num_warps"),
    ({"constexprs": {}, "maxnreg": [None, 0]}, "maxnreg"),
    ({"constexprs": {"NAME": "abc"}}, "constexprs['NAME']"),
])
def test_grid_space_rejects_empty_and_repeated_axes(kwargs: dict[str, object], axis: str) -> None:
    with pytest.raises(UsageError, match="axis " + re.escape(axis)):
        grid_space(**kwargs)  # type: ignore[arg-type]


# -- the suite's spaces ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SUITE))
def test_space_is_declared_sized_and_valid(name: str) -> None:
    spec = SPECS[name]
    assert MIN_POINTS <= len(spec.space) <= MAX_POINTS, len(spec.space)
    validate_spec(spec)  # every point covers the parameters exactly once, warps/stages/maxnreg in range
    labels = [c.label() for c in spec.space]
    assert len(set(labels)) == len(labels), "two points of the space share a label"
    space = spec.search_space()
    assert [c.label() for c in spec.configs] == [c.label() for c in space[:len(spec.configs)]]
    assert set(labels) <= {c.label() for c in space}
    # The autotune list is part of the neighbourhood (the search must be able to return what ships today).
    assert all(c in spec.space for c in spec.configs), [c.label() for c in spec.configs if c not in spec.space]
    # A space varies something beyond the autotune list: more than one value of warps or of the register cap.
    assert len({c.num_warps for c in spec.space}) >= 2
    assert len({c.maxnreg for c in spec.space}) >= 2 or name == "tma_matmul_4096"


def test_suite_total_stays_sweepable() -> None:
    total = sum(len(s.search_space()) for s in SPECS.values())
    assert total <= MAX_TOTAL, total


@pytest.mark.parametrize("name", list(SUITE))
@pytest.mark.parametrize("small", [False, True], ids=["full", "small"])
def test_every_point_fits_the_problem(name: str, small: bool) -> None:
    """Grids positive; every block size a power of two (tl.arange); the kernel's shape constraints hold."""
    spec = (SMALL_SPECS if small else SPECS)[name]
    assert spec.space == (SMALL_SPECS if not small else SPECS)[name].space  # the space does not depend on size
    for cfg in spec.search_space():
        consts = spec.all_constexprs(cfg)
        grid = spec.grid(consts)
        assert len(grid) == 3 and all(isinstance(g, int) and g >= 1 for g in grid), (cfg.label(), grid)
        for key, value in cfg.constexprs.items():
            assert key.startswith(("BLOCK_", "GROUP_")) and _power_of_two(value), (cfg.label(), key)
        if "HEAD_DIM" in consts:  # attention: unmasked loads need BLOCK_M | seq, and BLOCK_N | seq
            seq = 256 if small else 4096
            assert seq % int(consts["BLOCK_M"]) == 0 and seq % int(consts["BLOCK_N"]) == 0
        if name == "tma_matmul_4096":  # TMA boxes: ≤ 256 per dimension, inner dimension ≥ 16 bytes
            assert all(int(consts[k]) <= 256 for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
            assert int(consts["BLOCK_K"]) * 2 >= 16 and int(consts["BLOCK_N"]) * 2 >= 16


def test_causal_attention_keeps_its_known_wrong_points() -> None:
    """Points where BLOCK_N does not divide BLOCK_M stay in the causal space (the searcher must reject them)."""
    for name in ("flash_attn_d64_causal", "flash_attn_d128_causal"):
        bad = [c for c in SPECS[name].space if int(c.constexprs["BLOCK_M"]) % int(c.constexprs["BLOCK_N"])]
        assert 0 < len(bad) < len(SPECS[name].space) // 2


def test_a_bad_point_in_a_space_is_caught_by_validation() -> None:
    spec = SPECS["softmax"]
    bad = dataclasses.replace(spec, space=[*spec.space, Config({"BLOCK_N": 1024}, num_warps=4, num_stages=1)])
    with pytest.raises(BenchSpecError, match="parameters given more than once"):
        validate_spec(bad)


# -- ahead-of-time compiles of sampled points --------------------------------------------------------------


def _sample(name: str, k: int, seed: int) -> list[Config]:
    """``k`` points of the space, seeded; always one with a register cap when the space has one."""
    space = SPECS[name].space
    rng = random.Random(f"{name}:{seed}")
    picked = rng.sample(list(space), k)
    capped = [c for c in space if c.maxnreg]
    if capped and not any(c.maxnreg for c in picked):
        picked[-1] = rng.choice(capped)
    return picked


@pytest.fixture(scope="module")
def triton_cache(tmp_path_factory: pytest.TempPathFactory) -> object:
    old = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton-space"))
    yield
    if old is None:
        os.environ.pop("TRITON_CACHE_DIR", None)
    else:
        os.environ["TRITON_CACHE_DIR"] = old


def _compile_ok(name: str, cfg: Config) -> None:
    kernel = compile_spec(SPECS[name], cfg, 90)
    assert cubin_arch(kernel.kernel) == 90
    ptx = kernel.asm["ptx"]
    assert f".reqntid {32 * cfg.num_warps}" in ptx
    assert (f".maxnreg {cfg.maxnreg}" in ptx) == bool(cfg.maxnreg), cfg.label()  # the cap reaches ptxas


@pytest.mark.usefixtures("triton_cache")
@pytest.mark.parametrize("name", ["softmax", "matmul_leakyrelu_512x512x2048"])
def test_sampled_points_compile_for_sm90(name: str) -> None:
    for cfg in _sample(name, 2, 0):
        _compile_ok(name, cfg)


@pytest.mark.slow
@pytest.mark.usefixtures("triton_cache")
@pytest.mark.skipif(not os.environ.get("KBUILD_SLOW_TESTS"), reason="set KBUILD_SLOW_TESTS=1 (about 30 s)")
@pytest.mark.parametrize("name", list(SUITE))
def test_random_sample_of_every_space_compiles_for_sm90(name: str) -> None:
    for cfg in _sample(name, 4, 1):
        _compile_ok(name, cfg)
