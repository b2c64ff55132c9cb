"""Issue 32, item 2: a global constexpr reassigned at import time must never be served from the memo.

The memo may reuse a kernel's key only when each global value Triton folds into the kernel is proven to be
a literal that nothing can rebind. Here the literal in the defining module is rebound at import time from an
environment variable the fingerprint does not cover: by the kernels' package (``shared_consts.SCALE = ...`` in
its ``__init__.py``) or by the defining module itself (``globals()["SCALE"] = ...``). ``KBX_SCALE=3`` twice,
then ``KBX_SCALE=5``: the third build must ship what a fresh build with ``KBX_SCALE=5`` ships, through
``kbuild emit`` (the C launchers' manifest) and through ``pip wheel`` (the package data of the wheel).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from hooks_helpers import build_env, kbuild_cli, pip_wheel

KERNEL = """import triton
import triton.language as tl

import shared_consts


@triton.jit
def scale(x_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    m = o < n
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=m) * shared_consts.SCALE, mask=m)
"""

LITERAL = "import triton.language as tl\n\nSCALE = tl.constexpr(2.0)\n"

CASES = {
    # The package that holds the kernels rebinds the other module's literal when it is imported.
    "package-init-assigns-attribute": {
        "shared_consts.py": LITERAL,
        "kbxs/__init__.py": "import os\n\nimport triton.language as tl\n\nimport shared_consts\n\n"
                            "shared_consts.SCALE = tl.constexpr(float(os.environ[\"KBX_SCALE\"]))\n",
    },
    # The defining module rebinds its own literal through its namespace dictionary.
    "globals-in-defining-module": {
        "shared_consts.py": LITERAL + "\nimport os\n\nglobals()[\"SCALE\"] = tl.constexpr(float(os.environ[\"KBX_SCALE\"]))\n",
        "kbxs/__init__.py": "",
    },
}

PYPROJECT = """[build-system]
requires = ["kbuild", "setuptools>=64"]
build-backend = "kbuild.hooks.backend"

[project]
name = "kbxs"
version = "0.1.0"

[tool.setuptools.packages.find]
include = ["kbxs", "kbxs.*"]

[tool.kbuild]
ship = "package-data"
targets = ["sm_80"]
tune = "off"

[[tool.kbuild.kernels]]
name = "scale"
source = "kbxs.k:scale"
signature = { x_ptr = "*fp32:16", n = "i32" }
constexprs = { BLOCK = 128 }
"""


def make_project(base: Path, case: str) -> tuple[Path, Path]:
    """The project (its kernels' package) and, outside it, the shared module's folder (on PYTHONPATH)."""
    project, shared = base / "proj", base / "shared"
    (project / "kbxs").mkdir(parents=True)
    shared.mkdir()
    (project / "pyproject.toml").write_text(PYPROJECT)
    (project / "kbxs" / "k.py").write_text(KERNEL)
    for name, text in CASES[case].items():
        (shared / name if name == "shared_consts.py" else project / name).write_text(text)
    return project, shared


def emitted_cubin(project: Path, store: Path, out: Path, **env: str) -> str:
    proc = kbuild_cli("emit", "--config", str(project / "pyproject.toml"), "--out-dir", str(out),
                      env=build_env(store, **env))
    assert proc.returncode == 0, proc.stderr
    (kernel,) = json.loads((out / "kbuild.json").read_text())["kernels"]
    return str(kernel["cubin_sha256"])


def wheel_cubin(project: Path, store: Path, out: Path, **env: str) -> str:
    pip_wheel(project, out, build_env(store, **env))
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        index = json.loads(zf.read("kbxs/_kbuild/index.json"))
    (entry,) = index["entries"].values()
    return str(entry["cubin_sha256"])


@pytest.mark.hostile(fault="stale memo", outcome="served correct bytes")
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_constexpr_reassigned_at_import_is_not_served_from_the_memo_by_emit(tmp_path: Path, case: str):
    project, shared = make_project(tmp_path, case)
    store, env = tmp_path / "store", {"PYTHONPATH": str(shared), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    three = [emitted_cubin(project, store, tmp_path / f"out{i}", KBX_SCALE="3", **env) for i in range(2)]
    five = emitted_cubin(project, store, tmp_path / "out5", KBX_SCALE="5", **env)
    fresh = emitted_cubin(project, tmp_path / "fresh-store", tmp_path / "fresh", KBX_SCALE="5", **env)
    assert three[0] == three[1] != fresh
    assert five == fresh, "the memo shipped the SCALE=3 cubin for KBX_SCALE=5"


@pytest.mark.slow
@pytest.mark.hostile(fault="stale memo", outcome="served correct bytes")
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_constexpr_reassigned_at_import_is_not_served_from_the_memo_by_pip_wheel(tmp_path: Path, case: str):
    project, shared = make_project(tmp_path, case)
    store, env = tmp_path / "store", {"PYTHONPATH": str(shared), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    three = [wheel_cubin(project, store, tmp_path / f"w{i}", KBX_SCALE="3", **env) for i in range(2)]
    five = wheel_cubin(project, store, tmp_path / "w5", KBX_SCALE="5", **env)
    fresh = wheel_cubin(project, tmp_path / "fresh-store", tmp_path / "fresh", KBX_SCALE="5", **env)
    assert three[0] == three[1] != fresh
    assert five == fresh, "the memo shipped the SCALE=3 cubin for KBX_SCALE=5"


# ------------------------------------------------------------------------------------------------
# The proof itself (no compile): which sources let the memo trust ``shared_consts.SCALE = 2.0``.

REBINDERS = {
    # What another module of the project may do to the defining module's literal.
    "attribute assignment": ("", "import sc_mod\nsc_mod.SCALE = 3.0\n"),
    "augmented assignment": ("", "import sc_mod as s\ns.SCALE += 1\n"),
    "attribute deletion": ("", "import sc_mod\ndel sc_mod.SCALE\n"),
    "setattr by name": ("", "import sc_mod\nsetattr(sc_mod, 'SCALE', 3.0)\n"),
    "setattr by computed name": ("", "import sc_mod\nsetattr(sc_mod, 'SCA' + 'LE', 3.0)\n"),
    "monkeypatch by dotted name": ("", "def f(mp):\n    mp.setattr('sc_mod.SCALE', 3.0)\n"),
    "vars of the module": ("", "import sc_mod\nvars(sc_mod)['SCALE'] = 3.0\n"),
    "__dict__ of the module": ("", "import sc_mod\nsc_mod.__dict__.update(SCALE=3.0)\n"),
    "exec": ("", "exec('import sc_mod; sc_mod.SCALE = 3.0')\n"),
    "setattr fetched by name": ("", "import builtins, sc_mod\ngetattr(builtins, 'setattr')(sc_mod, 'SCALE', 3)\n"),
    "builtins module": ("", "import builtins as b\nimport sc_mod\nb.exec('sc_mod.SCALE = 3.0')\n"),
    # What the defining module may do to itself.
    "globals() in the defining module": ("globals()['SCALE'] = 3.0\n", ""),
    "global statement in the defining module": ("def f():\n    global SCALE\n    SCALE = 3.0\n", ""),
    "its own module object": ("import sys\nsys.modules[__name__].SCALE = 3.0\n", ""),
}
HARMLESS = {
    "nothing": ("", ""),
    "another attribute": ("", "import sc_mod\nsc_mod.OTHER = 3.0\nsetattr(sc_mod, 'OTHER2', 1)\n"),
    "a method named eval": ("", "def f(model):\n    model.eval()\n    return 'eval'\n"),
    "globals() in another module": ("", "X = 1\nglobals()['Y'] = 2\n"),
}


def _proven(tmp_path: Path, defining_extra: str, other: str) -> tuple[bool, str]:
    import importlib
    import sys

    from kbuild.build.provenance import Provenance

    (tmp_path / "sc_mod.py").write_text("SCALE = 2.0\n" + defining_extra)
    (tmp_path / "sc_other.py").write_text(other)
    sys.path.insert(0, str(tmp_path))
    try:
        for name in ("sc_mod", "sc_other"):
            sys.modules.pop(name, None)
        importlib.import_module("sc_mod")
        proof = Provenance([str(tmp_path / "sc_mod.py"), str(tmp_path / "sc_other.py")])
        return proof.proven("sc_mod", "SCALE"), proof.why
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("sc_mod", "sc_other"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize("case", sorted(REBINDERS))
def test_a_literal_that_some_code_can_rebind_is_not_proven(tmp_path: Path, case: str):
    proven, why = _proven(tmp_path, *REBINDERS[case])
    assert not proven, case
    assert "SCALE" in why


@pytest.mark.parametrize("case", sorted(HARMLESS))
def test_a_literal_nothing_rebinds_is_proven(tmp_path: Path, case: str):
    assert _proven(tmp_path, *HARMLESS[case])[0], case


def test_the_code_that_computes_keys_is_derived_from_its_imports():
    """Issue 33: the hand-kept list missed kbuild/declarations/space.py and kbuild/declarations/signature.py, so an edit of either
    left a memo in use. The list is now the import closure of the source of the code that computes keys (lazy imports included)."""
    import kbuild.build.resolve
    import kbuild.declarations.signature
    import kbuild.declarations.space
    import kbuild.key
    from kbuild.build.memo import _kbuild_code

    code = _kbuild_code()
    assert code is not None
    for mod in (kbuild.declarations.space, kbuild.declarations.signature, kbuild.key, kbuild.build.resolve):
        assert mod.__file__ is not None, mod.__name__
        assert str(Path(mod.__file__).resolve()) in {str(Path(f).resolve()) for f in code}, mod.__name__
    assert not [f for f in code if "/tests/" in f]


def test_only_files_whose_module_ran_are_read_for_rebinding(tmp_path: Path):
    """A file of the kernels' package that nothing imported never ran: its ``setattr`` (Liger's monkey_patch.py)
    cannot have rebound a value, and must not cost the memo."""
    import kbuild.build.memo as memo
    from kbuild.build.memo import _loaded_files

    never = tmp_path / "never_imported.py"
    never.write_text("setattr(object, 'x', 1)\n")
    assert _loaded_files([memo.__file__, str(never)]) == [memo.__file__]
