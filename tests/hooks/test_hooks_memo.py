"""The resolve memo: all-hit builds skip importing Triton, and any change to what the keys depend on
(kernel source, a jit callee in another package, a declaration, a missing artefact) falls back
to a full resolve that gives the right keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hooks_helpers import CMAKE_EXAMPLE, build_env, copy_project

PROBE = r"""
import json, sys
from kbuild.config import load_settings
from kbuild.hooks.pipeline import run_pipeline
s = load_settings(sys.argv[1])
builds = run_pipeline(s, memo=True)
print(json.dumps({"triton_imported": "triton" in sys.modules,
                  "keys": {f"{b.spec.name}/{b.target.name}": b.key.hex for b in builds},
                  "hits": all(b.hit for b in builds)}))
"""


def probe(project: Path, store: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(project / "pyproject.toml")], capture_output=True,
                          text=True, env=build_env(store), check=False)
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
    from kbuild.config import settings_from_table

    with open_store(settings_from_table({"store": str(store)})) as s:
        assert s.delete(first["keys"]["layernorm/sm_80"])
    again = probe(project, store)
    assert again["triton_imported"] and again["keys"] == first["keys"]
    assert not again["hits"]  # recompiled, then stored
    assert probe(project, store)["hits"]
