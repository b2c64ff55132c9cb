"""The resolve memo: all-hit builds skip importing Triton, and any change to what the keys depend on
(kernel source, a jit callee in another package, a declaration, a missing artefact, a global
constexpr or a jit helper in a module outside the project, Triton's environment knobs, Triton's
version) falls back to a full resolve that gives the right keys and ships the right bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hooks_helpers import CMAKE_EXAMPLE, build_env, copy_project

PROBE = r"""
import json, sys
from kbuild.settings.sources import load_settings
from kbuild.build.pipeline import run_pipeline
exec(sys.argv[3])  # a patch of the test, run before the pipeline
s = load_settings(sys.argv[1])
builds = run_pipeline(s, memo=sys.argv[2] == "memo")
print(json.dumps({"triton_imported": "triton" in sys.modules,
                  "keys": {f"{b.spec.name}/{b.target.name}": b.key.hex for b in builds},
                  "cubins": {f"{b.spec.name}/{b.target.name}": b.artefact.cubin_sha256 for b in builds},
                  "hits": all(b.hit for b in builds)}))
"""


def probe(project: Path, store: Path, *, memo: bool = True, patch: str = "", **env: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(project / "pyproject.toml"), "memo" if memo else "full",
                           patch], capture_output=True, text=True, env=build_env(store, **env), check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_second_all_hit_run_imports_no_triton_and_gives_the_same_keys(tmp_path: Path, store: Path):
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "p")
    first = probe(project, store)
    assert first["triton_imported"] and first["hits"]
    second = probe(project, store)
    assert not second["triton_imported"]
    assert second["keys"] == first["keys"] and second["hits"]


def test_a_changed_kernel_or_declaration_invalidates_the_memo(tmp_path: Path, store: Path):
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "p")
    first = probe(project, store)
    kernels = project / "kbx_demo" / "kernels.py"
    kernels.write_text(kernels.read_text().replace("y = num / tl.sum(num, axis=0)", "y = num / (tl.sum(num, axis=0))"))
    second = probe(project, store)
    assert second["triton_imported"]  # full resolve; the new softmax was compiled
    changed = {k for k in first["keys"] if first["keys"][k] != second["keys"][k]}
    assert changed == {"softmax/sm_80", "softmax/sm_90"}
    p = project / "pyproject.toml"
    p.write_text(p.read_text().replace("GROUP_M = 8", "GROUP_M = 4"))
    third = probe(project, store)
    assert third["triton_imported"]
    assert third["keys"]["matmul_leaky_relu/sm_90"] != second["keys"]["matmul_leaky_relu/sm_90"]


def test_a_changed_callee_in_another_package_invalidates_the_memo(tmp_path: Path, store: Path):
    project = tmp_path / "proj"
    (project / "mykern").mkdir(parents=True)
    (project / "helpers").mkdir()
    (project / "helpers" / "__init__.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef twice(x):\n    return x * 2\n")
    (project / "mykern" / "__init__.py").write_text("")
    (project / "mykern" / "k.py").write_text(
        "import triton\nimport triton.language as tl\nfrom helpers import twice\n\n\n@triton.jit\n"
        "def scale(x_ptr, n, BLOCK: tl.constexpr):\n    o = tl.arange(0, BLOCK)\n    m = o < n\n"
        "    tl.store(x_ptr + o, twice(tl.load(x_ptr + o, mask=m)), mask=m)\n")
    (project / "pyproject.toml").write_text(
        "[project]\nname = 'p'\nversion = '0'\n[tool.kbuild]\ntargets = ['sm_80']\n"
        "[[tool.kbuild.kernels]]\nname = 'scale'\nsource = 'mykern.k:scale'\n"
        "signature = { x_ptr = '*fp32:16', n = 'i32' }\nconstexprs = { BLOCK = 128 }\n")
    first = probe(project, store)
    assert not probe(project, store)["triton_imported"]
    (project / "helpers" / "__init__.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef twice(x):\n    return x * 3\n")
    third = probe(project, store)
    assert third["triton_imported"]
    assert third["keys"]["scale/sm_80"] != first["keys"]["scale/sm_80"]


def test_a_missing_artefact_falls_back_to_a_full_resolve(tmp_path: Path, store: Path):
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "p")
    first = probe(project, store)
    from kbuild.cache import open_store
    from kbuild.settings.sources import settings_from_table

    with open_store(settings_from_table({"store": str(store)})) as s:
        assert s.delete(first["keys"]["layernorm/sm_80"])
    again = probe(project, store)
    assert again["triton_imported"] and again["keys"] == first["keys"]
    assert not again["hits"]  # recompiled, then stored
    assert probe(project, store)["hits"]


# ------------------------------------------------------------------------------------------------
# Issue 13: the memo must cover everything that can change the compiled code.

KERNEL = """import triton
import triton.language as tl
{imports}


@triton.jit
def scale(x_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    m = o < n
    tl.store(x_ptr + o, {expr}, mask=m)
"""


def outside_project(tmp_path: Path, imports: str, expr: str, modules: dict[str, str]) -> tuple[Path, Path]:
    """A project whose kernel reads modules that live outside it, in a directory on PYTHONPATH (as a
    shared file of a monorepo would): the project's own package files never change."""
    project, shared = tmp_path / "proj", tmp_path / "shared"
    (project / "mykern").mkdir(parents=True)
    shared.mkdir()
    (project / "mykern" / "__init__.py").write_text("")
    (project / "mykern" / "k.py").write_text(KERNEL.format(imports=imports, expr=expr))
    for name, text in modules.items():
        (shared / name).write_text(text)
    (project / "pyproject.toml").write_text(
        "[project]\nname = 'p'\nversion = '0'\n[tool.kbuild]\ntargets = ['sm_80']\ntune = 'off'\n"
        "[[tool.kbuild.kernels]]\nname = 'scale'\nsource = 'mykern.k:scale'\n"
        "signature = { x_ptr = '*fp32:16', n = 'i32' }\nconstexprs = { BLOCK = 128 }\n")
    return project, shared


def assert_memo_missed_and_correct(project: Path, store: Path, before: dict, after: dict, **env: str) -> None:
    """``after`` (a memo build after the change) resolved in full, gives the key a build without any memo
    gives, and ships the bytes a fresh compile (empty store) makes."""
    assert after["triton_imported"], "the memo was used although what the key depends on changed"
    fresh = probe(project, store.parent / "fresh-store", memo=False, **env)
    assert after["keys"] == fresh["keys"] != before["keys"]
    assert after["cubins"] == fresh["cubins"]


CONSTEXPR_CASES = {
    "from-import": ("from shared_consts import SCALE", "tl.load(x_ptr + o, mask=m) * SCALE"),
    "module-attribute": ("import shared_consts", "tl.load(x_ptr + o, mask=m) * shared_consts.SCALE"),
}


@pytest.mark.hostile(fault="stale memo", outcome="served correct bytes")
@pytest.mark.parametrize("case", sorted(CONSTEXPR_CASES))
def test_a_global_constexpr_in_a_module_outside_the_project_invalidates_the_memo(tmp_path: Path, case: str):
    imports, expr = CONSTEXPR_CASES[case]
    project, shared = outside_project(tmp_path, imports, expr, {
        "shared_consts.py": "import triton.language as tl\n\nSCALE = tl.constexpr(2.0)\n"})
    store, path = tmp_path / "store", str(shared)
    before = probe(project, store, PYTHONPATH=path)
    assert not probe(project, store, PYTHONPATH=path)["triton_imported"]  # the memo holds while nothing changes
    (shared / "shared_consts.py").write_text("import triton.language as tl\n\nSCALE = tl.constexpr(3.0)\n")
    after = probe(project, store, PYTHONPATH=path)
    assert_memo_missed_and_correct(project, store, before, after, PYTHONPATH=path)


def test_a_constexpr_computed_from_the_environment_is_never_memoized(tmp_path: Path):
    """``SCALE = tl.constexpr(float(os.environ[...]))`` can change while every file stays the same:
    no memo is written for such a kernel, so each build resolves it in full."""
    project, shared = outside_project(tmp_path, "from shared_consts import SCALE", "tl.load(x_ptr + o, mask=m) * SCALE", {
        "shared_consts.py": "import os\n\nimport triton.language as tl\n\n"
                            "SCALE = tl.constexpr(float(os.environ.get('MY_SCALE', '2')))\n"})
    store, path = tmp_path / "store", str(shared)
    before = probe(project, store, PYTHONPATH=path)
    again = probe(project, store, PYTHONPATH=path)
    assert again["triton_imported"] and again["keys"] == before["keys"]
    after = probe(project, store, PYTHONPATH=path, MY_SCALE="3")
    assert_memo_missed_and_correct(project, store, before, after, PYTHONPATH=path, MY_SCALE="3")


HELPER_CASES = {
    # The @triton.jit helper is made in one module from a function whose source lives in another.
    "jit-of-a-function-elsewhere": {
        "helper_impl.py": "def twice(x):\n    return x * {factor}\n",
        "helpers.py": "import triton\n\nimport helper_impl\n\ntwice = triton.jit(helper_impl.twice)\n",
    },
    # A helper module holding only a @triton.constexpr_function (no JITFunction in it).
    "constexpr-function": {
        "helper_impl.py": "import triton\n\n\n@triton.constexpr_function\ndef factor():\n    return {factor}.0\n",
        "helpers.py": "import triton\n\nfrom helper_impl import factor\n\n\n@triton.jit\ndef twice(x):\n"
                      "    return x * factor()\n",
    },
}


@pytest.mark.hostile(fault="stale memo", outcome="served correct bytes")
@pytest.mark.parametrize("case", sorted(HELPER_CASES))
def test_a_jit_helper_in_another_module_invalidates_the_memo(tmp_path: Path, case: str):
    files = HELPER_CASES[case]
    project, shared = outside_project(tmp_path, "from helpers import twice", "twice(tl.load(x_ptr + o, mask=m))",
                                      {name: text.format(factor=2) for name, text in files.items()})
    store, path = tmp_path / "store", str(shared)
    before = probe(project, store, PYTHONPATH=path)
    assert not probe(project, store, PYTHONPATH=path)["triton_imported"]
    (shared / "helper_impl.py").write_text(files["helper_impl.py"].format(factor=3))
    after = probe(project, store, PYTHONPATH=path)
    assert_memo_missed_and_correct(project, store, before, after, PYTHONPATH=path)


@pytest.mark.hostile(fault="stale memo", outcome="served correct bytes")
@pytest.mark.parametrize("knob", ["TRITON_DEFAULT_FP_FUSION=0", "DISABLE_PTXAS_OPT=1"])
def test_a_changed_triton_environment_knob_invalidates_the_memo(tmp_path: Path, knob: str):
    """``TRITON_DEFAULT_FP_FUSION`` reaches the backend options; ``DISABLE_PTXAS_OPT`` only ptxas's command
    line: both change the cubin, so both must change the key, and neither may be served from the memo."""
    project, _ = outside_project(tmp_path, "", "tl.load(x_ptr + o, mask=m) * 2.0 + 1.0", {})
    store = tmp_path / "store"
    before = probe(project, store)
    assert not probe(project, store)["triton_imported"]
    name, _, value = knob.partition("=")
    knob_env: dict[str, Any] = {name: value}  # an environment variable, never probe's memo= or patch=
    after = probe(project, store, **knob_env)
    assert_memo_missed_and_correct(project, store, before, after, **knob_env)
    assert after["cubins"] != before["cubins"]


FAKE_TRITON = """
import kbuild.build.memo as memo, kbuild.build.resolve as resolving
memo._triton_version = lambda: "3.6.0+other"
resolving.triton_version = lambda: "3.6.0+other"
"""


@pytest.mark.hostile(fault="stale memo", outcome="served correct bytes")
def test_a_changed_triton_version_string_invalidates_the_memo(tmp_path: Path):
    project, _ = outside_project(tmp_path, "", "tl.load(x_ptr + o, mask=m) * 2.0", {})
    store = tmp_path / "store"
    before = probe(project, store)
    assert not probe(project, store)["triton_imported"]
    after = probe(project, store, patch=FAKE_TRITON)
    assert after["triton_imported"]
    fresh = probe(project, tmp_path / "fresh", memo=False, patch=FAKE_TRITON)
    assert after["keys"] == fresh["keys"] != before["keys"]


def test_modules_the_kernels_do_not_import_do_not_decide_the_memo(tmp_path: Path, store: Path):
    """The fingerprint is the kernels' import closure, not everything in the process: a module that other
    code loaded (here one whose file is gone since, as a test runner or build tool leaves behind) neither
    blocks the memo nor invalidates it."""
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "p")
    foreign = tmp_path / "foreign"
    patch = (f"import os, sys, shutil; os.makedirs({str(foreign)!r}); sys.path.insert(0, {str(foreign)!r}); "
             f"open({str(foreign / 'unrelated_mod.py')!r}, 'w').write('X = 1\\n'); import unrelated_mod; "
             f"shutil.rmtree({str(foreign)!r})")
    first = probe(project, store, patch=patch)
    assert first["triton_imported"] and first["hits"]
    second = probe(project, store, patch=patch)
    assert not second["triton_imported"], "an unrelated, deleted module kept the memo from being written"
    assert second["keys"] == first["keys"]
