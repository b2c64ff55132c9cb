"""kbuild emit: deterministic C sources from real cubins, compiling with gcc against Triton's cuda.h."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hooks_helpers import CMAKE_EXAMPLE, build_env, copy_project, kbuild_cli

from kbuild.cache import Artefact
from kbuild.emit import EmitError, EmitKernel, cuda_include_dir, render_sources
from kbuild.targets import parse_target
from kbuild.templates import render_text

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def artefact(target: str, params: list[dict], **meta: object) -> Artefact:
    cubin = f"cubin {target}".encode()
    full = {"symbol": "k", "num_warps": 4, "shared": 0, "params": params, "created_at": "x", **meta}
    return Artefact.create(key=hashlib.sha256(cubin).hexdigest(), cubin=cubin, meta=full)


PARAMS = [{"name": "x", "type": "*fp16", "constexpr": False}, {"name": "n", "type": "i32", "constexpr": False},
          {"name": "B", "type": "constexpr", "constexpr": True}]


def test_render_is_deterministic_and_sorted():
    k1 = EmitKernel("b", "m:b", ((parse_target("sm_90"), artefact("sm_90", PARAMS)),
                                 (parse_target("sm_80"), artefact("sm_80", PARAMS))))
    k2 = EmitKernel("a", "m:a", ((parse_target("sm_80"), artefact("sm_80", PARAMS)),))
    one = render_sources([k1, k2])
    two = render_sources([k2, EmitKernel("b", "m:b", tuple(reversed(k1.images)))])
    assert one == two
    c = one["kbuild_kernels.c"].decode()
    assert c.index("kbi_a[") < c.index("kbi_b[")
    assert c.index("kbc_sm_80_b[") < c.index("kbc_sm_90a_b[")
    h = one["kbuild_kernels.h"].decode()
    assert "CUresult kbuild_a(CUstream stream, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z, " \
           "CUdeviceptr x, int32_t n);" in h
    assert "/tmp" not in c and "/work" not in c  # no paths
    # the two trailing scratch pointers of Triton 3.6 kernels are passed, as 0
    assert "void *kbl_args[4] = {&kbp_x, &kbp_n, &kbl_global_scratch, &kbl_profile_scratch};" in c


@pytest.mark.parametrize(("meta", "message"), [
    ({"global_scratch_size": 256}, "global scratch"),
    ({"num_ctas": 2}, "num_ctas = 2"),
])
def test_unsupported_kernels_are_refused_by_name(meta: dict, message: str):
    k = EmitKernel("bad", "m:bad", ((parse_target("sm_90"), artefact("sm_90", PARAMS, **meta)),))
    with pytest.raises(EmitError, match=rf"kernel 'bad' \(sm_90, key [0-9a-f]{{12}}\): .*{message}"):
        render_sources([k])


def test_unsupported_parameter_types_and_disagreeing_targets_are_refused():
    bad = [{"name": "d", "type": "tensordesc<fp16[64]>", "constexpr": False}]
    with pytest.raises(EmitError, match="parameter 'd' has type"):
        render_sources([EmitKernel("k", "m:k", ((parse_target("sm_80"), artefact("sm_80", bad)),))])
    other = [{"name": "x", "type": "*fp32", "constexpr": False}]
    k = EmitKernel("k", "m:k", ((parse_target("sm_80"), artefact("sm_80", PARAMS)),
                                (parse_target("sm_90"), artefact("sm_90", other))))
    with pytest.raises(EmitError, match="disagree on the parameter list"):
        render_sources([k])


def test_template_renderer_rejects_missing_and_unused_values():
    assert render_text("a @X@ b", {"X": 1}) == "a 1 b"
    with pytest.raises(KeyError, match="no value for Y"):
        render_text("@X@ @Y@", {"X": 1})
    with pytest.raises(ValueError, match="without a placeholder: Z"):
        render_text("@X@", {"X": 1, "Z": 2})


@pytest.fixture(scope="module")
def emitted(session_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("emit")
    proc = kbuild_cli("emit", "--config", str(CMAKE_EXAMPLE / "pyproject.toml"), "--out-dir", str(out), "--json",
                      env=build_env(session_store))
    assert proc.returncode == 0, proc.stderr
    assert "untuned: no sm_90 GPU on this machine" in proc.stderr or "untuned" in proc.stderr
    return out


def test_emit_writes_sources_and_manifest_from_real_cubins(emitted: Path, session_store: Path, tmp_path: Path):
    assert sorted(p.name for p in emitted.iterdir()) == ["kbuild.json", "kbuild_kernels.c", "kbuild_kernels.h"]
    manifest = json.loads((emitted / "kbuild.json").read_text())
    assert [(e["kernel"], e["target"], e["state"]) for e in manifest["kernels"]] == [
        (k, t, "baseline") for k in ("layernorm", "matmul_leaky_relu", "softmax") for t in ("sm_80", "sm_90")]
    # A second emit (from another directory, all hits) gives the same bytes.
    again = tmp_path / "again"
    proc = kbuild_cli("emit", "--config", str(CMAKE_EXAMPLE / "pyproject.toml"), "--out-dir", str(again),
                      env=build_env(session_store), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name in ("kbuild.json", "kbuild_kernels.c", "kbuild_kernels.h"):
        assert (again / name).read_bytes() == (emitted / name).read_bytes(), name
    # --from-manifest emits exactly the same sources without running the pipeline.
    from_manifest = tmp_path / "from-manifest"
    proc = kbuild_cli("emit", "--config", str(CMAKE_EXAMPLE / "pyproject.toml"), "--out-dir", str(from_manifest),
                      "--from-manifest", str(emitted / "kbuild.json"), env=build_env(session_store))
    assert proc.returncode == 0, proc.stderr
    for name in ("kbuild.json", "kbuild_kernels.c", "kbuild_kernels.h"):
        assert (from_manifest / name).read_bytes() == (emitted / name).read_bytes(), name


@needs_gcc
def test_generated_c_compiles_with_gcc_against_tritons_cuda_h(emitted: Path, tmp_path: Path):
    inc = str(cuda_include_dir())
    assert (Path(inc) / "cuda.h").is_file()
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-I", inc, "-c",
                    str(emitted / "kbuild_kernels.c"), "-o", str(tmp_path / "k.o")], check=True)
    # and as C++ (e.g. for torch BuildExtension projects that compile every source with g++)
    if shutil.which("g++"):
        subprocess.run(["g++", "-x", "c++", "-Wall", "-Werror", "-fPIC", "-I", inc, "-c",
                        str(emitted / "kbuild_kernels.c"), "-o", str(tmp_path / "k_cxx.o")], check=True)
    syms = subprocess.run(["nm", "-g", "--defined-only", str(tmp_path / "k.o")], capture_output=True, text=True,
                          check=True).stdout
    for name in ("kbuild_softmax", "kbuild_layernorm", "kbuild_matmul_leaky_relu", "kbuild_last_error"):
        assert f" {name}\n" in syms
    # the cubins are embedded: the object is bigger than all six cubins together
    manifest = json.loads((emitted / "kbuild.json").read_text())
    assert (tmp_path / "k.o").stat().st_size > sum(e["cubin_bytes"] for e in manifest["kernels"])


def test_list_sources_imports_nothing_and_names_a_missing_module(tmp_path: Path, session_store: Path):
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "p")
    proc = kbuild_cli("emit", "--config", str(project / "pyproject.toml"), "--list-sources", env=build_env(session_store))
    assert proc.returncode == 0, proc.stderr
    listed = {Path(p).name for p in proc.stdout.split()}
    assert {"pyproject.toml", "kernels.py", "__init__.py"} <= listed
    shutil.rmtree(project / "kbx_demo")
    proc = kbuild_cli("emit", "--config", str(project / "pyproject.toml"), "--list-sources", env=build_env(session_store))
    assert proc.returncode == 2
    assert f"{project / 'pyproject.toml'}: [tool.kbuild.kernels][0].source: kernel 'matmul_leaky_relu'" in proc.stderr
