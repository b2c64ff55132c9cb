"""ptxas options as a configuration dimension (issue 15 item 1, kbuild/declarations/space.py ``check_ptx_options``): the
grammar in [tool.kbuild.kernels] (a kernel field, a grid axis, a config entry), the flags refused with exit 2
naming file and key, hypothesis properties of the normalisation, and real sm_90 compiles on the CPU showing
that a flag changes the cubin and the key, through the declaration, the pipeline's per-config compile and
the level-1 compile pool."""

from __future__ import annotations

import copy
import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbuild.bench.space import grid_space
from kbuild.bench.spec import Config, compile_spec, load_spec
from kbuild.commands.inspect import config_cell
from kbuild.declarations.space import (
    SpaceError,
    check_ptx_options,
    expand,
    label,
    make_point,
    normalize_point,
)
from kbuild.errors import ConfigError, UsageError
from kbuild.key import space_component
from kbuild.settings.sources import load_settings, settings_from_table
from kbuild.tune.level1.compile import CompilePool
from kbuild.tune.level1.space import Space

BASE: dict[str, Any] = {"targets": ["sm_90"], "kernels": [{"name": "mm", "source": "p.m:mm", "signature": {"a": "*fp16", "M": "i32"},
                                           "constexprs": {"BLOCK_M": 64}, "num_warps": 4}]}


def kernel(**extra):  # type: ignore[no-untyped-def]
    tbl = copy.deepcopy(BASE)
    tbl["kernels"][0].update(extra)
    return settings_from_table(tbl, where="pyproject.toml", environ={}).kernels[0]


# --- the grammar --------------------------------------------------------------------------------------------


def test_unset_ptx_options_leave_points_as_they_were() -> None:
    k = kernel()
    assert k.ptx_options == ""
    assert k.default_config() == {"constexprs": {"BLOCK_M": 64}, "num_warps": 4, "num_stages": 3, "maxnreg": None,
                                  "num_ctas": 1}


def test_a_declared_value_is_normalised_and_is_the_default_point() -> None:
    k = kernel(ptx_options="  -O 2   --allow-expensive-optimizations true ")
    assert k.ptx_options == "-O2 --allow-expensive-optimizations=true"
    assert k.default_config()["ptx_options"] == k.ptx_options
    assert label(k.default_config()) == "BLOCK_M=64,w4,s3,ptx[-O2 --allow-expensive-optimizations=true]"


def test_a_grid_axis_multiplies_and_holds_the_default_as_empty() -> None:
    space = kernel(space={"BLOCK_M": [64, 128], "ptx_options": ["", "-O2", "-O0 -dlcm=cg"]}).search_space()
    assert len(space) == 6
    assert "ptx_options" not in space[0]
    assert sorted({p.get("ptx_options", "") for p in space}) == ["", "-O0 -dlcm=cg", "-O2"]
    for p in space:  # the level-1 tuner's Config carries it both ways
        assert normalize_point(Config.from_dict(p).as_dict()) == p


def test_a_config_list_entry_may_set_it() -> None:
    space = kernel(configs=[{"BLOCK_M": 128, "ptx_options": "--register-usage-level=10"}]).search_space()
    assert [p.get("ptx_options") for p in space] == [None, "--register-usage-level=10"]


def test_equal_spellings_are_one_point() -> None:
    """``-O 2`` and ``-O2`` normalise to one text, so a grid holding both has one point for them."""
    assert len(kernel(space={"ptx_options": ["", "-O2", "-O 2"]}).search_space()) == 2


@pytest.mark.hostile(fault="ptxas flag that breaks kbuild's assumptions", outcome="clean error")
@pytest.mark.parametrize("extra, key, fragment", [
    ({"ptx_options": "-arch=sm_80"}, "ptx_options", "target architecture"),
    ({"ptx_options": "--gpu-name sm_80"}, "ptx_options", "target architecture"),
    ({"ptx_options": "-o /tmp/x.cubin"}, "ptx_options", "what ptxas reads or writes"),
    ({"ptx_options": "--output-file=x"}, "ptx_options", "what ptxas reads or writes"),
    ({"ptx_options": "-c"}, "ptx_options", "what ptxas reads or writes"),
    ({"ptx_options": "--compile-only"}, "ptx_options", "what ptxas reads or writes"),
    ({"ptx_options": "--options-file f"}, "ptx_options", "what ptxas reads or writes"),
    ({"ptx_options": "-g"}, "ptx_options", "debug code"),
    ({"ptx_options": "--device-debug"}, "ptx_options", "debug code"),
    ({"ptx_options": "-lineinfo"}, "ptx_options", "line info off"),
    ({"ptx_options": "--maxrregcount=64"}, "ptx_options", "use maxnreg"),
    ({"ptx_options": "-maxrregcount 64"}, "ptx_options", "use maxnreg"),
    ({"ptx_options": "--maxntid=128"}, "ptx_options", "launch bounds"),
    ({"ptx_options": "--fmad=false"}, "ptx_options", "changes results"),
    ({"ptx_options": "-O2 -Xfoo"}, "ptx_options", "not one kbuild passes"),
    ({"ptx_options": "O2"}, "ptx_options", "not a ptxas flag"),
    ({"ptx_options": "-O2 '-O3'"}, "ptx_options", "not a ptxas flag"),
    ({"ptx_options": "-O7"}, "ptx_options", "0 to 3"),
    ({"ptx_options": "-allow-expensive-optimizations=maybe"}, "ptx_options", "true or false"),
    ({"ptx_options": "-dlcm"}, "ptx_options", "needs a value"),
    ({"ptx_options": "--warn-on-spills=1"}, "ptx_options", "takes no value"),
    ({"space": {"ptx_options": ["", "-g"]}}, "space.ptx_options[1]", "debug code"),
    ({"space": {"ptx_options": ["-O2"]}}, "space.ptx_options", "default '' (ptx_options) is not in the list"),
    ({"space": {"ptx_options": ["", 2]}}, "space.ptx_options[1]", "expected a string"),
    ({"configs": [{"ptx_options": "--gpu-name=sm_100"}]}, "configs[0].ptx_options", "target architecture"),
])
def test_refused_flags_are_config_errors_naming_file_and_key(extra, key, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as info:
        kernel(**extra)
    text = str(info.value)
    assert text.startswith(f"pyproject.toml: [tool.kbuild.kernels][0].{key}: "), text
    assert fragment in text and info.value.exit_code == 2


def test_a_bad_manifest_or_bench_config_is_refused_too() -> None:
    with pytest.raises(SpaceError, match=r"config\.ptx_options: ptxas flag '-g' is refused"):
        normalize_point({"constexprs": {}, "num_warps": 4, "num_stages": 3, "ptx_options": "-g"})
    with pytest.raises(UsageError, match="grid_space: ptx_options: ptxas flag '-arch' is refused"):
        grid_space({}, ptx_options=[None, "-arch=sm_80"])


# --- properties ---------------------------------------------------------------------------------------------

_FLAG = st.sampled_from(["-O0", "-O1", "-O2", "-O3", "-O 1", "--opt-level=2", "--opt-level 0", "-v", "-w",
                         "--allow-expensive-optimizations=true", "-allow-expensive-optimizations false",
                         "--register-usage-level=5", "-regUsageLevel 0", "-dlcm=ca", "--def-store-cache wb",
                         "--dont-merge-basicblocks", "--warn-on-spills", "--minnctapersm 2"])
_REFUSED = st.sampled_from(["-g", "--device-debug", "-arch=sm_80", "--gpu-name=sm_90a", "-o", "--output-file=a",
                            "-c", "--compile-only", "--maxrregcount=32", "--fmad=true", "-lineinfo", "--machine=64",
                            "--maxntid=64", "--entry=k", "--preserve-relocs", "-ewp"])


@settings(max_examples=80, deadline=None)
@given(st.lists(_FLAG, max_size=5), st.sampled_from([" ", "  ", "\t", " \n "]))
def test_normalising_is_idempotent_and_whitespace_blind(flags: list[str], sep: str) -> None:
    once = check_ptx_options(sep.join(flags), "k")
    assert once == check_ptx_options(" ".join(flags), "k")
    assert check_ptx_options(once or "", "k") == once
    assert (once is None) == (not flags)
    if once:  # what Triton does with it: split on single spaces; no empty words reach ptxas
        assert all(once.split(" ")) and len(once.split(" ")) == len(flags)


@settings(max_examples=80, deadline=None)
@given(st.lists(_FLAG, max_size=3), _REFUSED, st.lists(_FLAG, max_size=3))
def test_a_refused_flag_anywhere_is_an_error_naming_the_key(before: list[str], bad: str, after: list[str]) -> None:
    with pytest.raises(SpaceError) as info:
        check_ptx_options(" ".join([*before, bad, *after]), "space.ptx_options[3]")
    assert info.value.key == "space.ptx_options[3]" and "refused" in info.value.detail


@settings(max_examples=40, deadline=None)
@given(st.lists(_FLAG, min_size=1, max_size=4, unique=True), st.integers(1, 3))
def test_a_grid_with_a_ptx_axis_is_its_product_default_first(flags: list[str], warps: int) -> None:
    axis = ["", *flags]
    distinct = {check_ptx_options(f, "k") for f in axis}
    space: dict[str, list[Any]] = {"ptx_options": axis, "num_warps": [4, 8, 16][:warps]}
    points = expand(make_point({"B": 1}, 4, 3), space=space)
    assert points[0] == make_point({"B": 1}, 4, 3)
    assert len(points) == len(distinct) * warps
    assert {p.get("ptx_options") for p in points} == distinct


# --- real compiles for sm_90, no GPU --------------------------------------------------------------------------

KSRC = """
import triton, triton.language as tl
@triton.jit
def axpy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 3.0 + tl.load(y_ptr + offs, mask=m), mask=m)
"""


def _project(tmp_path: Path) -> Path:
    pkg = tmp_path / "ptxpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "k.py").write_text(KSRC)
    decl = ("name = '{name}'\nsource = 'ptxpkg.k:axpy'\nsignature = {{ x_ptr = '*fp32:16', y_ptr = '*fp32:16', "
            "n = 'i32' }}\nconstexprs = {{ BLOCK = 256 }}\n{extra}\n")
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'ptxpkg'\nversion = '0'\n[tool.kbuild]\ntargets = ['sm_90']\ntune = 'off'\n"
        + "[[tool.kbuild.kernels]]\n" + decl.format(name="plain", extra="")
        + "[[tool.kbuild.kernels]]\n" + decl.format(name="o0", extra="ptx_options = '-O0'")
        + "[[tool.kbuild.kernels]]\n" + decl.format(name="spaced", extra="space = { ptx_options = ['', '-O0'] }"))
    return tmp_path / "pyproject.toml"


@pytest.fixture(scope="module")
def ptx_builds(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from kbuild.build.resolve import resolve, select_targets
    from kbuild.compile import compile_kernel

    config = _project(tmp_path_factory.mktemp("ptx"))
    for name in [m for m in sys.modules if m == "ptxpkg" or m.startswith("ptxpkg.")]:
        del sys.modules[name]
    s = load_settings(config, environ={})
    builds = {b.spec.name: b for b in resolve(s, s.kernels, select_targets(s, None))}
    compiled = {n: compile_kernel(s, b.spec, b.target, fn=b.fn) for n, b in builds.items() if n != "spaced"}
    return s, builds, compiled


def test_a_ptx_option_changes_the_cubin_and_the_key(ptx_builds) -> None:  # type: ignore[no-untyped-def]
    _, builds, compiled = ptx_builds
    plain, o0 = compiled["plain"], compiled["o0"]
    assert plain.cubin.startswith(b"\x7fELF") and o0.cubin.startswith(b"\x7fELF")
    assert plain.cubin != o0.cubin  # ptxas really ran with -O0
    assert builds["plain"].baseline_key.hex != builds["o0"].baseline_key.hex
    options = builds["o0"].baseline_key.components["compiler"]["options"]
    assert options["ptx_options"] == "-O0"
    assert builds["plain"].baseline_key.components["compiler"]["options"]["ptx_options"] is None
    assert o0.metadata["triton_metadata"]["ptx_options"] == "-O0"  # what the runtime compares a call against


def test_the_pipeline_compiles_a_space_point_with_its_flags(ptx_builds) -> None:  # type: ignore[no-untyped-def]
    from kbuild.build.baselines import compile_config

    s, builds, compiled = ptx_builds
    spaced = builds["spaced"]
    assert [p.get("ptx_options") for p in spaced.space] == [None, "-O0"]
    # The space is in the tuned key only; the baseline is the default's compile.
    assert spaced.baseline_key.hex != builds["o0"].baseline_key.hex
    assert spaced.baseline_key.hex == builds["plain"].baseline_key.hex
    assert sorted(str(p.get("ptx_options")) for p in space_component(spaced.space) or []) == ["-O0", "None"]
    art = compile_config(s, spaced, spaced.space[1])
    assert art.cubin == compiled["o0"].cubin
    assert art.key == builds["o0"].baseline_key.hex  # the key a declaration of that point has
    assert art.meta["config"]["ptx_options"] == "-O0"
    assert config_cell({"config": art.meta["config"], "default_config": False}) == "BLOCK=256,w4,s3,ptx[-O0]"


def test_level1_space_and_compile_pool_carry_ptx_options() -> None:
    spec = load_spec("kbuild.bench.kernels.softmax:softmax", small=True)
    base = spec.configs[0]
    configs = [dataclasses.replace(base, ptx_options=p) for p in (None, "-O0")]
    space = Space.of(configs)
    assert space.grid and space.dimensions == {"ptx_options": ("", "-O0")}
    assert space.config(space.params(configs[1])) == configs[1]
    assert configs[1].label().endswith(",ptx[-O0]")
    with CompilePool(spec, 90, jobs=1, small=True) as pool:  # a spawned process: the config crosses as a dict
        pool.submit(configs)
        default, o0 = pool.result(configs[0]), pool.result(configs[1])
    assert default.payload is not None and o0.payload is not None, (default.error, o0.error)
    assert default.payload.cubin != o0.payload.cubin
    assert o0.payload.cubin == compile_spec(spec, configs[1], 90).asm["cubin"]


def test_kbuild_compile_refuses_a_bad_flag_with_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "pyproject.toml"
    config.write_text("[tool.kbuild]\ntargets = ['sm_90']\n[[tool.kbuild.kernels]]\nname = 'a'\n"
                      "source = 'p.k:a'\nsignature = { n = 'i32' }\nptx_options = '-O3 --gpu-name=sm_80'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBUILD_")}
    proc = subprocess.run([sys.executable, "-m", "kbuild", "compile", "--config", str(config), "--no-progress",
                           "--json"], env={**env, "KBUILD_STORE": str(tmp_path / "store")}, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    assert f"{config}: [tool.kbuild.kernels][0].ptx_options: ptxas flag '--gpu-name' is refused" in proc.stderr
    assert proc.stdout == ""  # nothing reported, nothing compiled
    assert not (tmp_path / "store").exists()


#: One spelling per allowed flag, with a value where it takes one.
EVERY_ALLOWED = ["-O1", "--allow-expensive-optimizations=true", "--register-usage-level=0", "--minnctapersm=2",
                 "-dlcm=cg", "--def-store-cache=wt", "--disable-optimizer-constants", "--dont-merge-basicblocks",
                 "--return-at-end", "--warn-on-spills", "--warn-on-local-memory-usage",
                 "--warn-on-double-precision-use", "-w", "-v"]


def test_every_allowed_flag_is_accepted_by_tritons_ptxas() -> None:
    """The allow-list is checked against the ptxas Triton bundles: each flag compiles, and the ones that steer
    code generation change the softmax cubin (``-O3`` is ptxas's default: same bytes)."""
    assert all(check_ptx_options(f, "k") == f for f in EVERY_ALLOWED)  # already in normal spelling
    spec = load_spec("kbuild.bench.kernels.softmax:softmax", small=True)
    base = spec.configs[0]
    cubins = {f: compile_spec(spec, dataclasses.replace(base, ptx_options=check_ptx_options(f, "k")), 90).asm["cubin"]
              for f in ["", "-O3", *EVERY_ALLOWED]}
    assert cubins["-O3"] == cubins[""]
    for flag in ("-O1", "--register-usage-level=0", "--minnctapersm=2", "-dlcm=cg", "--def-store-cache=wt"):
        assert cubins[flag] != cubins[""], flag
