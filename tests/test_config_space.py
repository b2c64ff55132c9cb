"""Configuration spaces in [tool.kbuild.kernels] (kbuild/declarations/space.py via kbuild/settings/, issue 15): the grammar,
errors naming file and key, and the expansion (hypothesis: a grid is its product, default first, each point once)."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbuild.bench.spec import Config
from kbuild.declarations.space import expand, make_point, normalize_point
from kbuild.errors import ConfigError
from kbuild.settings.sources import settings_from_table

BASE: dict[str, Any] = {"targets": ["sm_90"], "kernels": [{"name": "mm", "source": "p.m:mm", "signature": {"a": "*fp16", "M": "i32"},
                                           "constexprs": {"BLOCK_M": 64, "BLOCK_N": 64}, "num_warps": 4}]}


def kernel(**extra):
    tbl = copy.deepcopy(BASE)
    tbl["kernels"][0].update(extra)
    return settings_from_table(tbl, where="pyproject.toml", environ={}).kernels[0]


def test_no_space_is_the_default_alone():
    assert kernel().search_space() == [{"constexprs": {"BLOCK_M": 64, "BLOCK_N": 64}, "num_warps": 4,
                                        "num_stages": 3, "maxnreg": None, "num_ctas": 1}]


def test_grid_space_points_round_trip_through_bench_config():
    space = kernel(space={"BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "num_warps": [4, 8],
                          "num_stages": [2, 3, 4], "maxnreg": [0, 128, 232]}).search_space()
    assert len(space) == 2 * 3 * 2 * 3 * 3 and space[0]["constexprs"] == {"BLOCK_M": 64, "BLOCK_N": 64}
    assert {p["maxnreg"] for p in space} == {None, 128, 232}
    for p in space[:20]:
        c = Config.from_dict(p)
        assert normalize_point(c.as_dict()) == p


def test_a_config_list_fills_from_the_default_and_puts_it_first():
    space = kernel(configs=[{"BLOCK_M": 128, "num_warps": 8}, {"BLOCK_N": 32}]).search_space()
    assert [(p["constexprs"]["BLOCK_M"], p["constexprs"]["BLOCK_N"], p["num_warps"]) for p in space] == [
        (64, 64, 4), (128, 64, 8), (64, 32, 4)]
    assert len(kernel(configs=[{"BLOCK_M": 64}, {"BLOCK_M": 128}]).search_space()) == 2  # the default once


@pytest.mark.hostile(fault="bad configuration space", outcome="clean error")
@pytest.mark.parametrize("extra, key, fragment", [
    ({"space": {"BLOCK_M": [128]}}, "space.BLOCK_M", "default 64 (constexprs.BLOCK_M) is not in the list"),
    ({"space": {"num_warps": [8]}}, "space.num_warps", "default 4 (num_warps)"),
    ({"space": {"num_warps": [4, 6]}}, "space.num_warps[1]", "power of two"),
    ({"space": {"num_stages": [3, 9]}}, "space.num_stages[1]", "1 to 8"),
    ({"space": {"maxnreg": [0, 300]}}, "space.maxnreg[1]", "16 to 255"),
    ({"space": {"num_ctas": [1, 3]}}, "space.num_ctas[1]", "power of two"),
    ({"space": {"BLOCK_K": [32]}}, "space.BLOCK_K", "no default value"),
    ({"space": {"M": [1]}}, "space.M", "runtime parameter"),
    ({"space": {"BLOCK_M": []}}, "space.BLOCK_M", "non-empty list"),
    ({"space": {"BLOCK_M": [64]}, "configs": [{"BLOCK_M": 64}]}, "space", "not both"),
    ({"configs": [{"num_warps": 5}]}, "configs[0].num_warps", "power of two"),
    ({"configs": [{"BLOCK_K": 5}]}, "configs[0].BLOCK_K", "no default value"),
    ({"autotune": True, "configs": [{"BLOCK_M": 64}]}, "autotune", "leave out space and configs"),
    ({"maxnreg": 8}, "maxnreg", "16 to 255"),
    ({"space": {"BLOCK_M": [64, 128], "BLOCK_N": list(range(64, 64 + 2100))}}, "space", "at most 4096"),
])
def test_bad_spaces_are_config_errors_naming_file_and_key(extra, key, fragment):
    with pytest.raises(ConfigError) as info:
        kernel(**extra)
    text = str(info.value)
    assert text.startswith(f"pyproject.toml: [tool.kbuild.kernels][0].{key}: "), text
    assert fragment in text and info.value.exit_code == 2


def test_maxnreg_zero_means_ptxas_decides():
    assert kernel(maxnreg=0).maxnreg is None
    assert kernel(maxnreg=128).default_config()["maxnreg"] == 128


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "maxnreg"]),
                       st.integers(0, 4), min_size=1))
def test_a_grid_expands_to_its_product_default_first_each_point_once(extra_counts):
    values = {"BLOCK_M": [64, 16, 32, 128, 256], "BLOCK_N": [64, 8, 16, 512, 1024], "num_warps": [4, 1, 2, 8, 16],
              "num_stages": [3, 1, 2, 4, 5], "maxnreg": [0, 16, 64, 128, 255]}
    space = {k: values[k][:n + 1] for k, n in extra_counts.items()}
    default = make_point({"BLOCK_M": 64, "BLOCK_N": 64}, 4, 3)
    points = expand(default, space=space)
    assert points[0] == default
    assert len(points) == math.prod(len(v) for v in space.values())
    assert len({repr(sorted(p.items())) for p in points}) == len(points)
