"""``kbuild tile``: the report, ``--json``, clean errors, and a written Gluon module compiled by ``kbuild``'s own
pipeline as a declared ``[[tool.kbuild.kernels]]`` entry (sm_90, no GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kbuild.build.resolve import resolve, select_targets
from kbuild.cli import main
from kbuild.compile import compile_kernel
from kbuild.settings.sources import load_settings


def test_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tile", "kbuild.tile.kernels:softmax_tile", "--block", "N=4096", "--warps", "4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["blocks"] == {"M": 1, "N": 4096}
    assert [v["num_warps"] for v in doc["variants"]] == [4, 4, 4]
    costs = [v["cost"] for v in doc["variants"]]
    assert costs == sorted(costs)
    assert doc["variants"][0]["layouts"] == ["BlockedLayout([1, 8], [1, 32], [1, 4], [1, 0])"]
    assert doc["synthesis_seconds"] < 5


@pytest.mark.parametrize(("argv", "fragment"), [
    (["nope.mod:f", "--block", "N=64"], "cannot import module 'nope.mod' (No module named 'nope')"),
    (["kbuild.tile.kernels:softmax_tile"], "kbuild.tile.kernels:softmax_tile: a row-wise tile program needs --block N="),
    (["kbuild.tile.kernels:softmax_tile", "--block", "K=4"], "--block 'K=4': expected M=<int> or N=<int>"),
    (["kbuild.tile.kernels:softmax_tile", "--block", "N=96"], "softmax_tile: BLOCK_N = 96 is not a power of two"),
    (["kbuild.tile.kernels:softmax_tile", "--block", "N=64", "--warps", "3"], "warps [3] must be powers of two"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tile", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and fragment in err, err


def test_written_module_compiles_as_a_declared_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    pkg = tmp_path / "tilepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    assert main(["tile", "kbuild.tile.kernels:rmsnorm_tile", "--block", "N=4096", "--variants", "1",
                 "--write", str(pkg / "k.py")]) == 0
    capsys.readouterr()
    assert main(["tile", "kbuild.tile.kernels:rmsnorm_tile", "--block", "N=4096", "--write", str(pkg)]) == 2
    assert "--write" in capsys.readouterr().err  # a directory: one line, exit 2, nothing written
    source = (pkg / "k.py").read_text()
    assert "@gluon.jit" in source and str(Path.cwd()) not in source  # no checkout path in what is hashed
    sig = {"x_ptr": "*fp16:16", "w_ptr": "*fp16:16", "y_ptr": "*fp16:16", "stride_x": "i32:16", "stride_y": "i32:16",
           "eps": "fp32", "n_rows": "i32", "n_cols": "i32:16"}
    table = ", ".join(f'{k} = "{v}"' for k, v in sig.items())
    (tmp_path / "pyproject.toml").write_text(
        "[tool.kbuild]\ntargets = ['sm_90']\n[[tool.kbuild.kernels]]\nname = \"rmsnorm\"\n"
        f"source = \"tilepkg.k:rmsnorm_tile\"\nsignature = {{ {table} }}\n"
        "constexprs = { BLOCK_M = 1, BLOCK_N = 4096 }\nnum_warps = 4\nnum_stages = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = load_settings(tmp_path / "pyproject.toml", environ={})
    (build,) = resolve(settings, settings.kernels, select_targets(settings, ["sm_90"]))
    compiled = compile_kernel(settings, build.spec, build.target, fn=build.fn)
    assert compiled.cubin[:4] == b"\x7fELF"
    assert compiled.metadata["symbol"] == "rmsnorm_tile" and compiled.metadata["num_warps"] == 4
    sys.modules.pop("tilepkg.k", None)
    sys.modules.pop("tilepkg", None)


def test_mma_program_report_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tile", "kbuild.tile.kernels:gemm_tile", "--problem", "4096,4096,4096", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["arch"] == 90 and doc["problem"] == [4096, 4096, 4096] and doc["synthesis_seconds"] < 5
    first = doc["variants"][0]
    assert first["copy"] == "tma" and first["layouts"]["acc"].startswith("gl.NVMMADistributedLayout(version=[3, 0]")
    assert "swizzle_byte_width=128" in first["layouts"]["a"]
    for argv, fragment in [([], "--problem M,N,K is required for an mma program"),
                           (["--problem", "64,x,64"], "--problem '64,x,64': expected three positive integers")]:
        assert main(["tile", "kbuild.tile.kernels:gemm_tile", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and fragment in err, err


def test_written_gemm_compiles_as_a_declared_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pkg = tmp_path / "gemmpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    assert main(["tile", "kbuild.tile.kernels:gemm_tile", "--problem", "4096,4096,4096", "--variants", "1",
                 "--write", str(pkg / "k.py")]) == 0
    capsys.readouterr()
    (tmp_path / "pyproject.toml").write_text(
        "[tool.kbuild]\ntargets = ['sm_90']\n[[tool.kbuild.kernels]]\nname = \"gemm\"\n"
        "source = \"gemmpkg.k:gemm_tile\"\nsignature = { a_ptr = \"*fp16:16\", b_ptr = \"*fp16:16\", "
        "c_ptr = \"*fp16:16\", M = \"i32\", N = \"i32:16\", K = \"i32:16\" }\n"
        "constexprs = { BLOCK_M = 128, BLOCK_N = 256, BLOCK_K = 64, STAGES = 3, GROUP_M = 8, PERSISTENT = 1, "
        "VARIANT = 0 }\n"
        "num_warps = 8\nnum_stages = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = load_settings(tmp_path / "pyproject.toml", environ={})
    (build,) = resolve(settings, settings.kernels, select_targets(settings, ["sm_90"]))
    compiled = compile_kernel(settings, build.spec, build.target, fn=build.fn)
    assert compiled.cubin[:4] == b"\x7fELF" and compiled.metadata["num_warps"] == 8
    sys.modules.pop("gemmpkg.k", None)
    sys.modules.pop("gemmpkg", None)
