"""Declarations that fit real code (issue 16, part 3): @triton.heuristics, parameter defaults, dtype constexprs,
None arguments, variants, and kernels imported from an installed package.

Real Triton AOT compiles for sm_90/sm_80 on this CPU machine (no GPU); small kernels only.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from kbuild.build.resolve import resolve, select_targets
from kbuild.compile import compile_kernel
from kbuild.errors import ConfigError, KernelSourceError
from kbuild.settings.sources import load_settings
from kbuild.settings.variables import Override

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def defaults(x_ptr, n, stride=1, m=16, COMPUTE: tl.constexpr = True, OUT: tl.constexpr = tl.float32,
             BLOCK: tl.constexpr = 64):
    o = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + o * stride, mask=o < n).to(OUT)
    if COMPUTE:
        v = v * 2
    tl.store(x_ptr + o * stride, v.to(x_ptr.dtype.element_ty), mask=o < n + m)


@triton.jit
def dtyped(x_ptr, y_ptr, n, X_dtype: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + o, mask=o < n).to(X_dtype)
    tl.store(y_ptr + o, v, mask=o < n)


@triton.jit
def optional(x_ptr, b_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + o, mask=o < n)
    if b_ptr is not None:
        v += tl.load(b_ptr + o, mask=o < n)
    tl.store(x_ptr + o, v, mask=o < n)


@triton.heuristics({"EVEN": lambda a: a["BLOCK"] % 128 == 0, "HAS_B": lambda a: a["b_ptr"] is not None})
@triton.jit
def heur(x_ptr, b_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr, HAS_B: tl.constexpr):
    o = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + o, mask=o < n)
    if HAS_B:
        v += tl.load(b_ptr + o, mask=o < n)
    if EVEN:
        v = v * 2
    tl.store(x_ptr + o, v, mask=o < n)


@triton.heuristics({"BIG": lambda a: a["n"] > 1024})
@triton.jit
def reads_runtime(x_ptr, n, BIG: tl.constexpr):
    o = tl.arange(0, 64)
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n) * (2 if BIG else 1), mask=o < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)],
                 key=["n"])
@triton.heuristics({"EVEN": lambda a: a["BLOCK"] % 128 == 0})
@triton.jit
def tuned_heur(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    o = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + o, mask=o < n)
    tl.store(x_ptr + o, v * 2 if EVEN else v, mask=o < n)


heur_over_tuned = triton.heuristics({"EVEN": lambda a: a["BLOCK"] % 128 == 0})(triton.autotune(
    configs=[triton.Config({"BLOCK": 128})], key=["n"])(tuned_heur.fn.fn))
'''

_counter = [0]


def project(tmp_path: Path, decl: str, targets: str = "['sm_90']") -> Path:
    """A project whose package (a fresh module name per call: no stale import) holds :data:`KERNELS`."""
    _counter[0] += 1
    name = f"kbx_decl{_counter[0]}"
    pkg = tmp_path / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "k.py").write_text(KERNELS)
    decl = decl.replace("PKG", name)
    (tmp_path / "pyproject.toml").write_text(f"[tool.kbuild]\ntargets={targets}\ntune='off'\n{decl}\n")
    return tmp_path / "pyproject.toml"


def resolved(cfg: Path, targets: list[str] | None = None):
    s = load_settings(cfg, environ={})
    return s, resolve(s, s.kernels, select_targets(s, targets))


def kernel(name: str, source: str, body: str = "") -> str:
    return f'[[tool.kbuild.kernels]]\nname = "{name}"\nsource = "PKG.k:{source}"\n{textwrap.dedent(body)}\n'


# ---------------------------------------------------------------------------------------------- defaults

def test_parameter_defaults_need_not_be_declared_and_are_specialised_as_triton_does(tmp_path: Path):
    cfg = project(tmp_path, kernel("d", "defaults", 'signature = { x_ptr = "*fp16:16", n = "i32" }'))
    s, builds = resolved(cfg)
    spec = builds[0].spec
    # runtime defaults: 1 is Triton's constant 1, 16 is an i32 divisible by 16 (native_specialize_impl)
    assert spec.signature == {"x_ptr": "*fp16:16", "n": "i32", "stride": "i32:1", "m": "i32:16"}
    assert spec.constexprs == {"COMPUTE": True, "OUT": {"dtype": "fp32"}, "BLOCK": 64}
    ck = compile_kernel(s, spec, builds[0].target, fn=builds[0].fn)
    assert ck.cubin.startswith(b"\x7fELF")
    params = {p["name"]: p for p in ck.metadata["params"]}
    assert params["stride"]["constexpr"] and not params["m"]["constexpr"]
    assert ck.metadata["constexprs"]["OUT"] == {"dtype": "fp32"}  # JSON-safe in the artefact


def test_declared_values_override_defaults_and_change_the_key(tmp_path: Path):
    base = 'signature = { x_ptr = "*fp16:16", n = "i32" }'
    cfg = project(tmp_path, kernel("d", "defaults", base) + kernel(
        "e", "defaults", 'signature = { x_ptr = "*fp16:16", n = "i32", stride = "i32" }\nconstexprs = { COMPUTE = false }'))
    _, builds = resolved(cfg)
    d, e = builds
    assert e.spec.signature["stride"] == "i32" and e.spec.constexprs["COMPUTE"] is False
    assert e.spec.constexprs["BLOCK"] == 64
    assert d.baseline_key.hex != e.baseline_key.hex


# ---------------------------------------------------------------------------------------------- dtypes

def test_dtype_constexprs_compile_and_key_by_dtype(tmp_path: Path):
    decl = "".join(kernel(n, "dtyped", f'signature = {{ x_ptr = "*fp32:16", y_ptr = "*{d}:16", n = "i32" }}\n'
                                       f'constexprs = {{ X_dtype = {{ dtype = "{d}" }}, BLOCK = 64 }}')
                   for n, d in (("h", "fp16"), ("b", "bf16")))
    cfg = project(tmp_path, decl, targets="['sm_80', 'sm_90']")
    s, builds = resolved(cfg)
    assert len(builds) == 4
    keys = {(b.spec.name, b.target.name): b.baseline_key for b in builds}
    assert keys[("h", "sm_90")].hex != keys[("b", "sm_90")].hex
    assert keys[("h", "sm_90")].components["kernel"]["constexprs"]["X_dtype"] == {"dtype": "fp16"}
    _, again = resolved(cfg)  # stable
    assert [b.baseline_key.hex for b in again] == [b.baseline_key.hex for b in builds]
    cubins = {}
    for b in builds:
        cubins[(b.spec.name, b.target.name)] = compile_kernel(s, b.spec, b.target, fn=b.fn).cubin
    assert cubins[("h", "sm_90")] != cubins[("b", "sm_90")]


@pytest.mark.parametrize(("value", "fragment"), [
    ('{ dtype = "fp17" }', "not a Triton element type"),
    ('{ dtype = "fp16", extra = "x" }', "the one key 'dtype'"),
    ('"None"', "declare it under signature as \"none\""),
])
def test_bad_constexpr_values_name_the_key(tmp_path: Path, value: str, fragment: str):
    cfg = project(tmp_path, kernel("a", "dtyped", f'constexprs = {{ X_dtype = {value} }}'))
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, environ={})
    assert err.value.key == "[tool.kbuild.kernels][0].constexprs.X_dtype"
    assert fragment in str(err.value)


# ---------------------------------------------------------------------------------------------- None

def test_a_none_argument_is_the_constant_none(tmp_path: Path):
    sig = '{ x_ptr = "*fp32:16", b_ptr = "%s", n = "i32" }'
    cfg = project(tmp_path, kernel("none", "optional", f"signature = {sig % 'none'}\nconstexprs = {{ BLOCK = 64 }}")
                  + kernel("ptr", "optional", f"signature = {sig % '*fp32:16'}\nconstexprs = {{ BLOCK = 64 }}"))
    s, builds = resolved(cfg)
    none, ptr = (compile_kernel(s, b.spec, b.target, fn=b.fn) for b in builds)
    b_none = next(p for p in none.metadata["params"] if p["name"] == "b_ptr")
    assert b_none == {"name": "b_ptr", "type": "constexpr", "constexpr": True}
    assert none.metadata["constexprs"]["b_ptr"] is None
    assert none.cubin != ptr.cubin  # the `if b_ptr is not None` branch is gone
    assert builds[0].baseline_key.components["kernel"]["signature"]["b_ptr"] == "none"


def test_the_string_None_as_a_type_is_an_error(tmp_path: Path):
    cfg = project(tmp_path, kernel("a", "optional", 'signature = { x_ptr = "*fp32", b_ptr = "None", n = "i32" }'))
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, environ={})
    assert err.value.key == "[tool.kbuild.kernels][0].signature.b_ptr"
    assert '"none"' in str(err.value)


# ---------------------------------------------------------------------------------------------- heuristics

def test_heuristics_are_evaluated_on_the_declared_arguments(tmp_path: Path):
    cfg = project(tmp_path, kernel("h", "heur", 'signature = { x_ptr = "*fp32:16", b_ptr = "none", n = "i32" }\n'
                                               'constexprs = { BLOCK = 128 }')
                  + kernel("g", "heur", 'signature = { x_ptr = "*fp32:16", b_ptr = "*fp32", n = "i32" }\n'
                                        'constexprs = { BLOCK = 64 }'))
    s, builds = resolved(cfg)
    h, g = builds
    assert h.spec.constexprs == {"BLOCK": 128, "EVEN": True, "HAS_B": False}
    assert g.spec.constexprs == {"BLOCK": 64, "EVEN": False, "HAS_B": True}
    assert compile_kernel(s, h.spec, h.target, fn=h.fn).cubin.startswith(b"\x7fELF")


def test_a_declared_value_that_contradicts_a_heuristic_names_the_key(tmp_path: Path):
    cfg = project(tmp_path, kernel("h", "heur", 'signature = { x_ptr = "*fp32:16", b_ptr = "none", n = "i32" }\n'
                                               'constexprs = { BLOCK = 128, EVEN = false }'))
    with pytest.raises(KernelSourceError) as err:
        resolved(cfg)
    assert err.value.key == "[tool.kbuild.kernels][0].constexprs.EVEN"
    assert "heuristics gives True" in str(err.value)


def test_a_heuristic_on_a_runtime_value_must_be_declared(tmp_path: Path):
    cfg = project(tmp_path, kernel("r", "reads_runtime", 'signature = { x_ptr = "*fp32:16", n = "i32" }'))
    with pytest.raises(KernelSourceError) as err:
        resolved(cfg)
    assert err.value.key == "[tool.kbuild.kernels][0].constexprs.BIG"
    assert "'n'" in str(err.value)
    cfg.write_text(cfg.read_text().replace('n = "i32" }', 'n = "i32" }\nconstexprs = { BIG = true }'))
    _, builds = resolved(cfg)
    assert builds[0].spec.constexprs == {"BIG": True}


@pytest.mark.parametrize("source", ["tuned_heur", "heur_over_tuned"])
def test_heuristics_with_autotune_in_either_order(tmp_path: Path, source: str):
    cfg = project(tmp_path, kernel("t", source, 'signature = { x_ptr = "*fp32:16", n = "i32" }'))
    s, builds = resolved(cfg)
    (b,) = builds
    for point in b.space:  # every configuration gets the heuristic's value for its BLOCK
        assert point["constexprs"]["EVEN"] == (point["constexprs"]["BLOCK"] % 128 == 0)
    assert compile_kernel(s, b.spec, b.target, fn=b.fn).cubin.startswith(b"\x7fELF")
    if source == "tuned_heur":
        assert [p["constexprs"]["BLOCK"] for p in b.space] == [64, 128]


# ---------------------------------------------------------------------------------------------- variants

VARIANTS = kernel("dt", "dtyped", '''
    signature = { x_ptr = "*fp32:16", y_ptr = "*{dtype}:16", n = "i32" }
    constexprs = { X_dtype = { dtype = "{dtype}" } }
    variants = { BLOCK = [64, 128], dtype = ["fp16", "bf16"] }''')


def test_variants_expand_to_named_entries_that_compile(tmp_path: Path):
    from kbuild.emit import c_name_problem

    cfg = project(tmp_path, VARIANTS)
    s, builds = resolved(cfg)
    names = [b.spec.name for b in builds]
    assert names == ["dt_BLOCK_64_dtype_fp16", "dt_BLOCK_64_dtype_bf16", "dt_BLOCK_128_dtype_fp16",
                     "dt_BLOCK_128_dtype_bf16"]
    assert all(c_name_problem(n) is None for n in names)
    assert s.kernel("dt[BLOCK=128,dtype=bf16]").name == "dt_BLOCK_128_dtype_bf16"
    last = builds[-1].spec
    assert last.signature["y_ptr"] == "*bf16:16" and last.constexprs == {"X_dtype": {"dtype": "bf16"}, "BLOCK": 128}
    assert len({b.baseline_key.hex for b in builds}) == 4
    assert compile_kernel(s, last, builds[-1].target, fn=builds[-1].fn).cubin.startswith(b"\x7fELF")


@pytest.mark.parametrize(("variants", "key", "fragment"), [
    ("{ BLOCK = [], dtype = ['fp16'] }", "variants.BLOCK", "non-empty list"),
    ("{ BLOCK = [64, 64], dtype = ['fp16'] }", "variants.BLOCK[1]", "listed twice"),
    ("{ BLOCK = [64] }", "signature.y_ptr", "placeholder {dtype}"),
    ("{ BLOCK = [64], dtype = ['fp16', 'fp99'] }", "signature.y_ptr", "not a Triton type"),
])
def test_bad_variants_name_the_key(tmp_path: Path, variants: str, key: str, fragment: str):
    cfg = project(tmp_path, VARIANTS.replace('{ BLOCK = [64, 128], dtype = ["fp16", "bf16"] }', variants))
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, environ={})
    assert err.value.key == f"[tool.kbuild.kernels][0].{key}"
    assert fragment in str(err.value)


# ---------------------------------------------------------------------------------------------- installed package

INSTALLED = '''
import triton
import triton.language as tl


@triton.jit
def bump(x_ptr, n, BLOCK: tl.constexpr = 64):
    o = tl.arange(0, BLOCK)
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n) + 1, mask=o < n)
'''


def install_fake_package(site: Path, version: str, src: str = INSTALLED) -> None:
    """A distribution ``kbx-installed`` as pip lays one out (package, dist-info with METADATA and RECORD) in a
    directory on sys.path; a stand-in for ``pip install --target`` without the network or a build."""
    import hashlib
    import shutil

    for old in site.glob("kbx_installed*"):
        shutil.rmtree(old)
    pkg = site / "kbx_installed_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text(src)
    info = site / f"kbx_installed-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: kbx-installed\nVersion: {version}\n")
    (info / "top_level.txt").write_text("kbx_installed_pkg\n")
    rows = [f"{p.relative_to(site)},sha256={hashlib.sha256(p.read_bytes()).hexdigest()},{p.stat().st_size}"
            for p in sorted([*pkg.glob("*.py"), info / "METADATA", info / "top_level.txt"])]
    (info / "RECORD").write_text("\n".join([*rows, f"{info.name}/RECORD,,"]) + "\n")


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    install_fake_package(site, "0.1")
    monkeypatch.syspath_prepend(str(site))
    for m in [m for m in sys.modules if m.startswith("kbx_installed_pkg")]:
        monkeypatch.delitem(sys.modules, m)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(
        "[tool.kbuild]\ntargets=['sm_90']\ntune='off'\n[[tool.kbuild.kernels]]\nname='bump'\n"
        "source='kbx_installed_pkg.kernels:bump'\nsignature={x_ptr='*fp32:16', n='i32'}\n")
    return site


def test_an_installed_package_kernel_is_keyed_by_its_distribution(installed: Path, tmp_path: Path):
    from kbuild.emit import kernel_sources

    cfg = tmp_path / "proj" / "pyproject.toml"
    s, builds = resolved(cfg)
    comp = builds[0].baseline_key.components["kernel"]
    assert comp["distribution"] == {"name": "kbx-installed", "version": "0.1"}
    assert comp["constexprs"] == {"BLOCK": 64}
    sources = kernel_sources(s)
    assert (installed / "kbx_installed-0.1.dist-info" / "RECORD").resolve() in sources
    assert (installed / "kbx_installed_pkg" / "kernels.py").resolve() in sources
    first = builds[0].baseline_key.hex
    install_fake_package(installed, "0.2")  # same source, new version: a new key
    for m in [m for m in sys.modules if m.startswith("kbx_installed_pkg")]:
        del sys.modules[m]
    _, builds2 = resolved(cfg)
    assert builds2[0].baseline_key.components["kernel"]["distribution"]["version"] == "0.2"
    assert builds2[0].baseline_key.hex != first


def test_a_project_kernel_has_no_distribution_in_its_key(tmp_path: Path):
    cfg = project(tmp_path, kernel("d", "defaults", 'signature = { x_ptr = "*fp16:16", n = "i32" }'))
    _, builds = resolved(cfg)
    assert "distribution" not in builds[0].baseline_key.components["kernel"]


def test_kbuild_emit_builds_an_installed_package_kernel(installed: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, kbuild_env: Override):
    from kbuild.cli import main

    kbuild_env.set(store=tmp_path / "store")
    out = tmp_path / "out"
    rc = main(["emit", "--config", str(tmp_path / "proj" / "pyproject.toml"), "--out-dir", str(out)])
    assert rc == 0
    c = (out / "kbuild_kernels.c").read_text()
    assert "kbuild_bump" in c
    # the memo (kbuild/build/memo.py) fingerprints the installed distribution through its RECORD: a second build takes
    # the keys from it without importing the kernel

    memos = list((tmp_path / "store" / "memo").glob("*.json"))
    assert memos and "kbx-installed" in memos[0].read_text()

    def no_resolve(*a: object, **k: object) -> None:
        raise AssertionError("resolved in full although the memo holds")

    monkeypatch.setattr("kbuild.build.resolve.resolve", no_resolve)
    assert main(["emit", "--config", str(tmp_path / "proj" / "pyproject.toml"), "--out-dir", str(out)]) == 0
    # a new version of the package invalidates the memo: resolved in full again
    install_fake_package(installed, "0.2")
    with pytest.raises(AssertionError, match="resolved in full"):
        main(["emit", "--config", str(tmp_path / "proj" / "pyproject.toml"), "--out-dir", str(out)])
