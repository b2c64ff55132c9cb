"""examples/cmake-extension end to end: scikit-build-core + kbuild_add_kernels + the backend hook.

The wheel carries untuned baselines (no GPU here), installs into a fresh venv, imports, reports
a clear error when it launches without a CUDA driver, and shows its manifest via kbuild inspect.
Two builds from two directories are byte-identical; the plain-CMake path (no backend hook) gives
the same wheel; verify-wheel confirms or names the differing members; --locked fails early on a
stale lock; a CMake project without [tool.kbuild] stops at configure naming the file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hooks_helpers import (
    CMAKE_EXAMPLE,
    build_env,
    copy_project,
    fresh_venv,
    install,
    kbuild_cli,
    pip_wheel,
    set_backend,
)

pytestmark = pytest.mark.slow

KERNELS = ("layernorm", "matmul_leaky_relu", "softmax")


@pytest.fixture(scope="module")
def built(session_store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The example built with the backend hook from two different directories."""
    out: dict[str, Path] = {}
    for name in ("first", "second"):
        base = tmp_path_factory.mktemp(f"cmake-{name}")
        project = copy_project(CMAKE_EXAMPLE, base / "deeper" / name / "kbx")
        proc = pip_wheel(project, base / "dist", build_env(session_store))
        assert "kbuild: softmax sm_90: untuned: no sm_90 GPU on this machine" in proc.stdout + proc.stderr
        (wheel,) = (base / "dist").glob("kbx_demo-*.whl")
        out[name], out[f"{name}_project"] = wheel, project
    return out


def test_wheel_holds_the_extension_and_the_manifest(built: dict[str, Path]):
    names = zipfile.ZipFile(built["first"]).namelist()
    assert any(n.startswith("kbx_demo/_kbx.") and n.endswith(".so") for n in names)
    assert "kbx_demo-0.1.0.dist-info/kbuild.json" in names
    so = next(n for n in names if n.endswith(".so"))
    data = zipfile.ZipFile(built["first"]).read(so)
    assert str(built["first_project"]).encode() not in data and b"/tmp/" not in data  # no build paths
    assert b"libcuda.so.1" in data  # the driver is opened at run time, not linked


def test_manifest_via_kbuild_inspect_lists_untuned_baselines(built: dict[str, Path], session_store: Path):
    proc = kbuild_cli("inspect", str(built["first"]), "--json", env=build_env(session_store))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads(proc.stdout)
    entries = manifest["kernels"]
    assert [(e["kernel"], e["target"]) for e in entries] == [(k, t) for k in KERNELS for t in ("sm_80", "sm_90")]
    assert all(e["state"] == "baseline" and e["speedup"] is None for e in entries)
    assert {e["arch"] for e in entries} == {"sm_80", "sm_90a"}
    # the keys and digests are the pipeline's
    compiled = kbuild_cli("compile", "--config", str(CMAKE_EXAMPLE / "pyproject.toml"), "--json", "--no-progress",
                          env=build_env(session_store))
    by_id = {(c["kernel"], c["target"]): c for c in json.loads(compiled.stdout)}
    for e in entries:
        assert e["key"] == by_id[(e["kernel"], e["target"])]["baseline_key"]
        assert e["cubin_sha256"] == by_id[(e["kernel"], e["target"])]["cubin_sha256"]
    table = kbuild_cli("inspect", str(built["first"]), env=build_env(session_store))
    assert table.returncode == 0 and "matmul_leaky_relu" in table.stderr and "baseline" in table.stderr


def test_installs_into_a_fresh_venv_imports_and_explains_a_missing_driver(built: dict[str, Path], tmp_path: Path):
    python = fresh_venv(tmp_path / "venv")
    install(python, built["first"])
    code = ("import kbx_demo._kbx as k, kbx_demo\n"
            "print(k.KERNEL_COUNT)\n"
            "try:\n    k.softmax(0, 1, 1, 1, 0, 0, 16, 16, 8)\n"
            "except RuntimeError as e:\n    print('error:', e)\n")
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(tmp_path / "no-driver")})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "3"
    if "error:" in proc.stdout:  # no NVIDIA driver on this machine
        assert "kbuild: cannot load the CUDA driver libcuda.so.1" in lines[1] and "(CUresult 3)" in lines[1]


def test_two_directories_give_byte_identical_wheels(built: dict[str, Path]):
    assert built["first"].read_bytes() == built["second"].read_bytes()


def test_plain_cmake_path_gives_the_same_wheel(built: dict[str, Path], session_store: Path, tmp_path: Path):
    # Adoption path 2: scikit-build-core's own backend; kbuild_add_kernels runs the pipeline itself.
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "plain")
    set_backend(project, "scikit_build_core.build")
    proc = pip_wheel(project, tmp_path / "dist", build_env(session_store))
    out = proc.stdout + proc.stderr
    assert "kbuild: kernels of pyproject.toml for _kbx" in out
    assert "kbuild: softmax sm_90: untuned: no sm_90 GPU on this machine" in out
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.read_bytes() == built["first"].read_bytes()


def test_verify_wheel_confirms_and_names_differing_members(built: dict[str, Path], session_store: Path):
    env = build_env(session_store)
    proc = kbuild_cli("verify-wheel", str(built["first"]), "--project", str(built["second_project"]), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["identical"] is True
    ops = built["second_project"] / "kbx_demo" / "ops.py"
    ops.write_text(ops.read_text() + "\n# a change\n")
    proc = kbuild_cli("verify-wheel", str(built["first"]), "--project", str(built["second_project"]), "--json", env=env)
    assert proc.returncode == 6, proc.stderr
    result = json.loads(proc.stdout)
    assert result["identical"] is False
    assert result["differing"] == ["kbx_demo-0.1.0.dist-info/RECORD", "kbx_demo/ops.py"]


def test_locked_build_fails_early_on_a_stale_lock(session_store: Path, tmp_path: Path):
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "locked")
    env = build_env(session_store)
    assert kbuild_cli("lock", "--config", str(project / "pyproject.toml"), env=env).returncode == 0
    # the locked build of the unchanged project works
    pip_wheel(project, tmp_path / "ok", env, config={"kbuild.locked": "true"})
    # a changed kernel makes the lock stale: the build fails before CMake runs, listing the entries
    p = project / "pyproject.toml"
    p.write_text(p.read_text().replace("num_warps = 8", "num_warps = 4", 1))
    proc = pip_wheel(project, tmp_path / "dist", build_env(session_store, KBUILD_LOCKED="1"), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "2 entries missing or stale" in out
    assert "matmul_leaky_relu / sm_80: stale" in out and "matmul_leaky_relu / sm_90: stale" in out
    assert "Configuring" not in out and not list((tmp_path / "dist").glob("*.whl"))


def test_cmake_project_without_a_kbuild_table_stops_at_configure(session_store: Path, tmp_path: Path):
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "notable")
    set_backend(project, "scikit_build_core.build")
    p = project / "pyproject.toml"
    text = p.read_text()
    p.write_text(text[:text.index("[tool.kbuild]")])
    proc = pip_wheel(project, tmp_path / "dist", build_env(session_store), check=False)
    out = " ".join((proc.stdout + proc.stderr).split())  # CMake wraps its messages
    assert proc.returncode != 0
    assert f"kbuild_add_kernels(_kbx): error: {project / 'pyproject.toml'}: [tool.kbuild]: table is missing" in out


def test_backend_picks_the_real_backend_and_asks_only_for_what_it_lacks(tmp_path: Path):
    code = ("import os, json; os.chdir(os.environ['P']); import kbuild.hooks.backend as b; "
            "print(json.dumps([b._backend_spec()[0], b.get_requires_for_build_wheel({'kbuild.locked': 'true'})]))")
    for example, backend in ((CMAKE_EXAMPLE, "scikit_build_core.build"),
                             (CMAKE_EXAMPLE.parent / "setuptools-extension", "setuptools.build_meta")):
        project = copy_project(example, tmp_path / example.name)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**build_env(tmp_path), "P": str(project)})
        name, requires = json.loads(proc.stdout.splitlines()[-1])  # setuptools prints egg_info lines first
        assert name == backend
        assert all("kbuild" not in r for r in requires)  # kbuild's own settings never reach the real backend


def test_a_custom_prefix_is_emitted_from_the_backends_manifest(session_store: Path, tmp_path: Path):
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "prefix")
    cm = project / "CMakeLists.txt"
    cm.write_text(cm.read_text().replace("kbuild_add_kernels(_kbx CONFIG pyproject.toml)",
                                         "kbuild_add_kernels(_kbx CONFIG pyproject.toml PREFIX kb2_ BASENAME kb2_kernels)"))
    src = project / "src" / "_kbx.c"
    src.write_text(src.read_text().replace("kbuild_kernels.h", "kb2_kernels.h").replace("kbuild_", "kb2_")
                   .replace("KBUILD_KERNEL_COUNT", "KB2_KERNEL_COUNT"))
    proc = pip_wheel(project, tmp_path / "dist", build_env(session_store))
    assert "kbuild: kernels of pyproject.toml for _kbx" in proc.stdout + proc.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert "kbx_demo-0.1.0.dist-info/kbuild.json" in zipfile.ZipFile(wheel).namelist()


def test_inspect_refuses_a_wheel_without_a_manifest(tmp_path: Path, session_store: Path):
    bare = tmp_path / "bare-0.1-py3-none-any.whl"
    with zipfile.ZipFile(bare, "w") as zf:
        zf.writestr("bare-0.1.dist-info/METADATA", "Name: bare\n")
    proc = kbuild_cli("inspect", str(bare), env=build_env(session_store))
    assert proc.returncode == 2
    assert f"{bare}: has no .dist-info/kbuild.json" in proc.stderr


def test_a_cmakelists_that_never_adds_the_kernels_fails_and_leaves_no_wheel(session_store: Path, tmp_path: Path):
    """Issue 34 part 4: kernels declared, ship = "extension", and a CMakeLists.txt without kbuild_add_kernels gave a
    wheel without a single kernel and exit 0; now the build fails naming the call and the setting, and no wheel is
    left in the output folder."""
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "nokernels")
    cm = project / "CMakeLists.txt"
    cm.write_text(cm.read_text().replace("kbuild_add_kernels(_kbx CONFIG pyproject.toml)", ""))
    (project / "src" / "_kbx.c").write_text(
        "#include <Python.h>\nstatic struct PyModuleDef m = {PyModuleDef_HEAD_INIT, \"_kbx\", NULL, -1, NULL};\n"
        "PyMODINIT_FUNC PyInit__kbx(void) { return PyModule_Create(&m); }\n")
    proc = pip_wheel(project, tmp_path / "dist", build_env(session_store), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    errors = [line.strip() for line in out.splitlines() if line.strip().startswith("error: pyproject.toml")]
    assert len(errors) == 1, out[-3000:]
    assert 'ship = "extension"' in errors[0] and "never calls kbuild_add_kernels" in errors[0], errors[0]
    assert list((tmp_path / "dist").glob("*.whl")) == []
