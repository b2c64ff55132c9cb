"""Real Triton AOT compiles on a machine with no GPU: deterministic, path-independent cubins."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbuild.build.resolve import resolve, select_targets
from kbuild.compile import compile_kernel
from kbuild.errors import KernelSourceError
from kbuild.settings.sources import load_settings

ELF_MAGIC = b"\x7fELF"


def compile_all(project: Path) -> dict[tuple[str, str], tuple[bytes, dict, str]]:
    s = load_settings(project / "pyproject.toml", environ={})
    out = {}
    for b in resolve(s, s.kernels, select_targets(s, ["sm_80", "sm_90"])):
        ck = compile_kernel(s, b.spec, b.target, fn=b.fn)
        out[(b.spec.name, b.target.name)] = (ck.cubin, ck.metadata, b.baseline_key.hex)
    return out


def _forget_example_modules() -> None:
    for name in [m for m in sys.modules if m == "kbx_demo" or m.startswith("kbx_demo.")]:
        del sys.modules[name]


def test_two_checkouts_give_identical_cubins_and_keys(example_project: Path, tmp_path: Path):
    other = tmp_path / "elsewhere" / "deeper" / "checkout"
    shutil.copytree(example_project, other)
    _forget_example_modules()
    first = compile_all(example_project)
    _forget_example_modules()
    second = compile_all(other)
    _forget_example_modules()
    assert set(first) == {(k, t) for k in ("matmul_leaky_relu", "softmax", "layernorm") for t in ("sm_80", "sm_90")}
    for ident, (cubin, meta, key) in first.items():
        cubin2, _, key2 = second[ident]
        assert cubin.startswith(ELF_MAGIC)
        assert cubin == cubin2, f"{ident}: cubin bytes differ between checkouts"
        assert key == key2, f"{ident}: key differs between checkouts"
        assert str(example_project).encode() not in cubin and str(other).encode() not in cubin
        assert meta["symbol"] == ident[0]
        assert meta["arch"] == {"sm_80": "sm_80", "sm_90": "sm_90a"}[ident[1]]
        assert meta["ptxas_version"] and meta["triton_version"].startswith("3.6")
        assert meta["num_warps"] in (4, 8) and meta["shared"] >= 0
        assert [p["name"] for p in meta["params"]][:2] in (["a_ptr", "b_ptr"], ["out_ptr", "in_ptr"], ["x_ptr", "y_ptr"])
    # sm_80 and sm_90 builds really differ.
    assert first[("softmax", "sm_80")][0] != first[("softmax", "sm_90")][0]


def write_project(tmp_path: Path, kernel_src: str, decl: str) -> Path:
    pkg = tmp_path / "badpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "k.py").write_text(kernel_src)
    (tmp_path / "pyproject.toml").write_text(f"[tool.kbuild]\ntargets=['sm_90']\n[[tool.kbuild.kernels]]\n{decl}\n")
    return tmp_path / "pyproject.toml"


KSRC = """
import triton, triton.language as tl
@triton.jit
def add(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
def plain(x):
    return x
"""


@pytest.mark.parametrize(("decl", "key", "fragment"), [
    ('name="a"\nsource="badpkg.nope:add"', ".source", "cannot import module 'badpkg.nope'"),
    ('name="a"\nsource="badpkg.k:missing"', ".source", "has no attribute 'missing'"),
    ('name="a"\nsource="badpkg.k:plain"', ".source", "not a @triton.jit function"),
    ('name="a"\nsource="badpkg.k:add"\nsignature={x_ptr="*fp32"}\nconstexprs={BLOCK=128}', ".signature",
     "parameter 'n'"),
    ('name="a"\nsource="badpkg.k:add"\nsignature={x_ptr="*fp32", n="i32", m="i32"}\nconstexprs={BLOCK=128}',
     ".signature.m", "has no parameter 'm'"),
    ('name="a"\nsource="badpkg.k:add"\nsignature={x_ptr="*fp32", n="i32", BLOCK="i32"}', ".signature.BLOCK",
     "tl.constexpr parameter"),
])
def test_bad_kernel_declarations(tmp_path: Path, decl: str, key: str, fragment: str):
    sys.modules.pop("badpkg", None)
    sys.modules.pop("badpkg.k", None)
    cfg = write_project(tmp_path, KSRC, decl)
    s = load_settings(cfg, environ={})
    with pytest.raises(KernelSourceError) as err:
        resolve(s, s.kernels, select_targets(s, None))
    assert err.value.key == f"[tool.kbuild.kernels][0]{key}"
    assert fragment in str(err.value)
    assert str(err.value).startswith(str(cfg))


CONSTS_KERNEL = """import triton
import triton.language as tl

import kconsts


@triton.jit
def scale(x_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    m = o < n
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=m) * kconsts.SCALE, mask=m)
"""


@pytest.mark.hostile(fault="stale key", outcome="served correct bytes")
def test_a_module_attribute_read_by_a_kernel_is_part_of_its_key(tmp_path: Path):
    """Triton folds ``kconsts.SCALE`` into the code but leaves it out of its own hash: the key must not."""
    (tmp_path / "p" / "mykern").mkdir(parents=True)
    (tmp_path / "p" / "mykern" / "__init__.py").write_text("")
    (tmp_path / "p" / "mykern" / "k.py").write_text(CONSTS_KERNEL)
    consts = tmp_path / "p" / "kconsts.py"
    config = tmp_path / "p" / "pyproject.toml"
    config.write_text("[project]\nname = 'p'\nversion = '0'\n[tool.kbuild]\ntargets = ['sm_80']\ntune = 'off'\n"
                      "[[tool.kbuild.kernels]]\nname = 'scale'\nsource = 'mykern.k:scale'\n"
                      "signature = { x_ptr = '*fp32:16', n = 'i32' }\nconstexprs = { BLOCK = 128 }\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBUILD_")}

    def compile_json(store: Path) -> dict:
        proc = subprocess.run([sys.executable, "-m", "kbuild", "compile", "--config", str(config), "--no-progress",
                               "--json"], env={**env, "KBUILD_STORE": str(store)}, capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)[0]

    consts.write_text("import triton.language as tl\n\nSCALE = tl.constexpr(2.0)\n")
    before = compile_json(tmp_path / "store")
    consts.write_text("import triton.language as tl\n\nSCALE = tl.constexpr(3.0)\n")
    after = compile_json(tmp_path / "store")
    fresh = compile_json(tmp_path / "fresh-store")
    assert after["key"] != before["key"] and not after["store_hit"]
    assert after["key"] == fresh["key"] and after["cubin_sha256"] == fresh["cubin_sha256"] != before["cubin_sha256"]


@pytest.mark.slow
def test_a_wgmma_register_race_is_recorded_and_warned(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """kbuild compile runs kbuild.sass.hazards on sm_90 cubins with a register-operand wgmma: the suite's
    rmsnorm_swiglu, declared from the installed kbuild as a user's project would, compiles with Triton 3.6's race
    (triton-lang/triton#9433); the compile warns and records it, and ships nothing different."""
    (tmp_path / "pyproject.toml").write_text(
        "[tool.kbuild]\ntargets=['sm_90']\n[[tool.kbuild.kernels]]\nname='rs'\n"
        "source='kbuild.bench.kernels.swiglu:rmsnorm_swiglu'\n"
        "signature={x_ptr='*fp16:16', nw_ptr='*fp16:16', wg_ptr='*fp16:16', wu_ptr='*fp16:16', h_ptr='*fp16:16', "
        "M='i32', N='i32:16', K='i32:16'}\n"
        "constexprs={BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, EPS=1e-6}\nnum_warps=8\nnum_stages=3\n")
    s = load_settings(tmp_path / "pyproject.toml", environ={})
    (b,) = resolve(s, s.kernels, select_targets(s, ["sm_90"]))
    with caplog.at_level("WARNING", logger="kbuild.compile.triton_aot"):
        ck = compile_kernel(s, b.spec, b.target, fn=b.fn)
    hazards = ck.metadata["wgmma_register_hazards"]
    assert hazards and all("writes an in-flight A fragment" in h for h in hazards)
    assert "triton-lang/triton#9433" in caplog.text and "'rs'" in caplog.text
