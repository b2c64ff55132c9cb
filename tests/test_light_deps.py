"""Light dependencies (issue 16, item 4): the core runs on triton and a few small packages; tuning is ``kbuild[tune]``.

* An AST check that no core module imports an optional package while it is being imported (function bodies
  and ``if TYPE_CHECKING:`` excepted), followed through kbuild's own modules.
* pyproject.toml's extras and :data:`kbuild.extras.EXTRAS` agree; the core dependencies hold none of them.
* Without the extra (faked here by hiding its packages from :func:`importlib.util.find_spec`): the tuning verbs
  stop with one line naming ``pip install 'kbuild[tune]'`` (exit 2), and a build under ``tune = "auto"`` ships
  the baseline saying why.
* The real thing, in a fresh venv (no system site-packages) holding only pyproject's core ``dependencies`` and
  kbuild's wheel (``--no-deps``): the core imports, ``kbuild compile`` and ``kbuild emit`` build a small project,
  torch/gymnasium/stable_baselines3/sb3_contrib/optuna/numpy are not installed, the tuning verbs name the extra,
  and the pipeline under ``tune = "auto"`` with a GPU stood in for (``has_gpu`` patched, labelled) ships the
  baseline because the extra is missing.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib
from hostile_helpers import assert_clean_error
from test_layering import file_of, modules_under

import kbuild.extras
from kbuild.cli import COMMAND_MODULES, VERB_EXTRAS, main
from kbuild.errors import MissingDependencyError

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

#: What the core must never import at import time: the tune extra, the remote tier's client, plots.
OPTIONAL = (*kbuild.extras.EXTRAS["tune"], *kbuild.extras.EXTRAS["remote"], "matplotlib")
#: The packages whose modules are not core (the tuner, the benchmark suite, the SASS engine, GPU timing) ...
NOT_CORE = ("kbuild.tune", "kbuild.bench", "kbuild.sass", "kbuild.device")
#: ... except the parts the core imports: TUNER_VERSION (a key component), the GPU probe and the CUDA driver binding
#: under it (the run time's direct launcher uses it too), and the verbs' parsers.
CORE_EXCEPTIONS = ("kbuild.tune", "kbuild.device", "kbuild.device.probe", "kbuild.device.cuda", *COMMAND_MODULES)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def core_modules() -> list[str]:
    mods: set[str] = set()
    for package in ("kbuild", "kbuild.hooks", "kbuild.cache", "kbuild.templates"):
        mods.update(modules_under(package))
    return sorted(m for m in mods if m in CORE_EXCEPTIONS or not any(_within(m, p) for p in NOT_CORE))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_time_imports(module: str, path: Path) -> set[str]:
    """Absolute names ``module`` imports while it is imported: every statement outside function bodies (module
    level, class bodies, ``with``/``try``/``if`` blocks), ``if TYPE_CHECKING:`` left out."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join([*base, node.module] if node.module else base)
                else:
                    source = node.module or ""
                out.add(source)
                out.update(f"{source}.{a.name}" for a in node.names if a.name != "*")
            for field in ("body", "orelse", "finalbody", "handlers"):
                child = getattr(node, field, None)
                if isinstance(child, list):
                    visit([c for c in child if isinstance(c, ast.stmt)] +
                          [s for h in child if isinstance(h, ast.ExceptHandler) for s in h.body])

    visit(ast.parse(path.read_text(), str(path)).body)
    return out


def optional_imports_at_import_time(start: str) -> list[str]:
    """``A -> B -> pkg`` chains from ``start`` to an optional package, through kbuild modules' import-time imports."""
    found: list[str] = []
    seen: set[str] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [(start, (start,))]
    while todo:
        mod, chain = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        if mod.split(".")[0] in OPTIONAL:
            found.append(" -> ".join(chain))
            continue
        path = file_of(mod)
        if path is None:
            continue
        parents = [mod.rsplit(".", i)[0] for i in range(1, mod.count("."))]
        todo.extend((n, (*chain, n)) for n in [*parents, *import_time_imports(mod, path)])
    return found


def test_the_core_imports_no_optional_package_at_import_time() -> None:
    mods = core_modules()
    assert {"kbuild.cli", "kbuild.runtime", "kbuild.hooks.backend", "kbuild.build.pipeline", "kbuild.cache",
            "kbuild.compile.triton_aot", "kbuild.emit", "kbuild.commands.emit", "kbuild.sass.cli"} <= set(mods)
    bad = sorted(chain for m in mods for chain in optional_imports_at_import_time(m))
    assert not bad, "\n".join(bad)


def test_the_import_graph_check_finds_an_optional_import(tmp_path: Path) -> None:
    """The check above can fail: a top-level ``import torch`` and one inside a ``with`` block are found, a lazy one
    in a function and one under ``if TYPE_CHECKING:`` are not."""
    src = tmp_path / "m.py"
    src.write_text(textwrap.dedent("""\
        from typing import TYPE_CHECKING
        import torch
        with open(__file__):
            from optuna import samplers
        if TYPE_CHECKING:
            import numpy
        def f():
            import gymnasium
        class C:
            import redis
        """))
    assert import_time_imports("pkg.m", src) >= {"torch", "optuna", "optuna.samplers", "redis"}
    assert not import_time_imports("pkg.m", src) & {"numpy", "gymnasium"}


def _import_name(requirement: str) -> str:
    name = requirement.split(";")[0].split("[")[0]
    for sep in "<>=!~ ":
        name = name.split(sep)[0]
    return name.strip().lower().replace("-", "_")


def test_pyproject_extras_match_kbuild_extras() -> None:
    project = PYPROJECT["project"]
    extras = project["optional-dependencies"]
    for extra, names in kbuild.extras.EXTRAS.items():
        assert sorted(_import_name(r) for r in extras[extra]) == sorted(names), extra
    core = {_import_name(r) for r in project["dependencies"]}
    assert "triton" in core and "packaging" in core
    heavy = set(OPTIONAL) | {"scikit_build_core"}
    assert not core & heavy, core & heavy
    # scripts/setup-venv installs .[dev]: it must bring the tuner (the test suite tunes on the cost model).
    assert any(r.replace(" ", "").startswith("kbuild[") and "tune" in r.split("[")[1] for r in extras["dev"])


@pytest.fixture
def without_tune_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stands in for an environment without ``kbuild[tune]``: find_spec answers "not installed" for torch and
    gymnasium, and the tuner's entry modules are re-imported (their guard runs at import)."""
    real = kbuild.extras._importable
    monkeypatch.setattr(kbuild.extras, "_importable", lambda n: n not in ("torch", "gymnasium") and real(n))
    for mod in ("kbuild.tune.api", "kbuild.tune.level1"):
        monkeypatch.delitem(sys.modules, mod, raising=False)


def test_missing_lists_what_find_spec_cannot_find(without_tune_extra: None) -> None:
    assert kbuild.extras.missing("tune") == ["torch", "gymnasium"]
    with pytest.raises(MissingDependencyError, match=r"pip install 'kbuild\[tune\]'") as info:
        kbuild.extras.require("tune", "kbuild tune")
    assert "torch, gymnasium are not installed" in str(info.value)
    assert info.value.exit_code == 2


def test_needs_turns_a_missing_module_of_the_extra_into_the_error() -> None:
    with pytest.raises(MissingDependencyError, match=r"numpy is not installed.*kbuild\[tune\]"), \
            kbuild.extras.needs("tune", "x"):
        raise ModuleNotFoundError("No module named 'numpy.linalg'", name="numpy.linalg")
    with pytest.raises(ModuleNotFoundError), kbuild.extras.needs("tune", "x"):  # not the extra's: unchanged
        raise ModuleNotFoundError("No module named 'nope'", name="nope")


@pytest.mark.hostile(fault="missing optional dependency", outcome="clean error")
@pytest.mark.parametrize("argv", [["tune", "--config", "pyproject.toml"], ["prewarm"], ["bench"],
                                  ["sass", "show", "x.cubin"]])
def test_tuning_verbs_without_the_extra_name_it(argv: list[str], without_tune_extra: None,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert VERB_EXTRAS[argv[0]] == "tune"
    code = main(argv)
    _, err = capsys.readouterr()
    assert_clean_error(code, err, names=[f"kbuild {argv[0]}", "pip install 'kbuild[tune]'", "torch"])


@pytest.mark.hostile(fault="missing optional dependency", outcome="degraded with warning")
def test_auto_build_without_the_extra_ships_the_baseline_saying_why(without_tune_extra: None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from kbuild.build import tunable
    from kbuild.build.tuning import tune_build, tune_missing

    monkeypatch.setattr(tunable, "has_gpu", lambda cc: True)  # stands in for a GPU: only the tuner's import runs
    # stand-ins (SimpleNamespace) for the settings and the KernelBuild: only the fields the tuner reads
    b = SimpleNamespace(tuned=False, tuned_key=object(), spec=SimpleNamespace(name="k", bench="m:f"),
                        target=SimpleNamespace(cc=90, name="sm_90"), status="", space=[])
    tune_missing(SimpleNamespace(tune="auto"), [b], None, tune_build, None)  # type: ignore[arg-type, list-item]
    assert not b.tuned
    assert b.status.startswith("untuned: ") and "pip install 'kbuild[tune]'" in b.status, b.status
    with pytest.raises(MissingDependencyError, match=r"kbuild\[tune\]"):
        tune_missing(SimpleNamespace(tune="require"), [b], None, tune_build, None)  # type: ignore[arg-type, list-item]
    b.space = [{}, {}]  # a configuration space: the two-level tuner, whose level-1 import is guarded the same way
    with pytest.raises(MissingDependencyError, match=r"kbuild\[tune\]"):
        tune_build(SimpleNamespace(project_dir=Path(), python_path=[]), b)  # type: ignore[arg-type]


# --- the fresh venv ---------------------------------------------------------------------------------------------

KERNEL = """import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)
"""

PROBE = """
import importlib.util, json, sys
import kbuild, kbuild.runtime, kbuild.hooks.backend, kbuild.hooks.setuptools_plugin, kbuild.build.pipeline
import kbuild.cache, kbuild.emit, kbuild.cli
kbuild.cli.build_parser()  # imports every verb's module
heavy = sys.argv[1].split(",")
print(json.dumps({"file": kbuild.__file__, "loaded": sorted(m for m in sys.modules if m.split(".")[0] in heavy),
                  "installed": [h for h in heavy if importlib.util.find_spec(h) is not None]}))
"""

AUTO_BUILD = """
import json, sys
from kbuild.settings.sources import load_settings
from kbuild.build import pipeline, tunable
tunable.has_gpu = lambda cc: True  # STAND-IN for an sm_90 GPU (this machine may have none): the tuner's import runs
builds = pipeline.run_pipeline(load_settings(sys.argv[1]), tune_on_miss=True)
print(json.dumps([{"tuned": b.tuned, "status": b.status, "cubin": len(b.artefact.cubin)} for b in builds]))
"""


@pytest.fixture(scope="module")
def light_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with pyproject's core dependencies only, and kbuild's wheel installed with --no-deps (the wheel's
    folder, a wheelhouse, is ``<venv>/../wheel``)."""
    base = tmp_path_factory.mktemp("light")
    wheels = base / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(ROOT)], check=True, capture_output=True, text=True, timeout=300)
    (whl,) = wheels.glob("kbuild-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)  # no system site-packages
    py = str(venv / "bin" / "python")
    env = _env()
    for args in (list(PYPROJECT["project"]["dependencies"]), ["--no-deps", str(whl)]):
        proc = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args], env=env,
                              capture_output=True, text=True, timeout=600, cwd=base)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return venv


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KBUILD_", "PYTHON", "VIRTUAL_ENV")) and k != "PIP_REQUIRE_VIRTUALENV"}
    env["PYTHONNOUSERSITE"] = "1"
    env.update(extra)
    return env


def _project(root: Path, *, tune: str, bench: bool) -> Path:
    (root / "lk").mkdir(parents=True)
    (root / "lk" / "__init__.py").write_text("")
    (root / "lk" / "k.py").write_text(KERNEL)
    bench_line = "bench = 'lk.k:scale_bench'\n" if bench else ""
    (root / "pyproject.toml").write_text(
        f"[project]\nname = 'lk'\nversion = '0'\n[tool.kbuild]\ntargets = ['sm_90']\ntune = '{tune}'\n"
        "[[tool.kbuild.kernels]]\nname = 'scale'\nsource = 'lk.k:scale'\n" + bench_line +
        "signature = { x_ptr = '*fp32:16', n = 'i32' }\nconstexprs = { BLOCK = 128 }\n")
    return root / "pyproject.toml"


@pytest.mark.slow
def test_a_fresh_venv_with_only_the_core_builds_and_names_the_extra(light_venv: Path, tmp_path: Path) -> None:
    py, kb = str(light_venv / "bin" / "python"), str(light_venv / "bin" / "kbuild")
    env = _env(KBUILD_STORE=str(tmp_path / "store"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
               TRITON_CACHE_DIR=str(tmp_path / "triton"))

    def run(*argv: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)

    heavy = ",".join(OPTIONAL)
    probe = run(py, "-c", PROBE, heavy)
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert seen["file"].startswith(str(light_venv)), seen["file"]  # the wheel, not the checkout
    assert seen["loaded"] == [] and seen["installed"] == [], seen

    config = _project(tmp_path / "p", tune="auto", bench=False)
    compiled = run(kb, "compile", "--config", str(config), "--json", "--no-progress")
    assert compiled.returncode == 0, compiled.stderr
    (row,) = json.loads(compiled.stdout)
    assert row["kernel"] == "scale" and row["cubin_bytes"] > 1000
    emitted = run(kb, "emit", "--config", str(config), "--out-dir", str(tmp_path / "gen"))
    assert emitted.returncode == 0, emitted.stderr
    assert (tmp_path / "gen" / "kbuild.json").is_file() and list((tmp_path / "gen").glob("*.c")), \
        sorted(p.name for p in (tmp_path / "gen").iterdir())

    for argv in (["tune", "--config", str(config)], ["prewarm", "--config", str(config)], ["bench"],
                 ["sass", "stats", str(tmp_path / "none.cubin")]):
        proc = run(kb, *argv)
        assert_clean_error(proc.returncode, proc.stderr, names=[f"kbuild {argv[0]}", "pip install 'kbuild[tune]'"])

    # tune = "auto", a bench spec and (stood-in) GPU: the tuner cannot be imported, the baseline ships saying why.
    auto = run(py, "-c", AUTO_BUILD, str(_project(tmp_path / "q", tune="auto", bench=True)))
    assert auto.returncode == 0, auto.stderr
    (b,) = json.loads(auto.stdout)
    assert not b["tuned"] and b["cubin"] > 1000
    assert b["status"].startswith("untuned: ") and "pip install 'kbuild[tune]'" in b["status"], b


@pytest.mark.slow
def test_an_isolated_build_of_the_jit_example_installs_no_torch(light_venv: Path, tmp_path: Path) -> None:
    """The issue's target: ``pip wheel`` of examples/jit-package with build isolation (kbuild from a wheelhouse, as
    one uses it before it is on an index) installs the core and setuptools into the build environment, nothing of
    the tune extra, and builds the wheel."""
    project = tmp_path / "jit-package"
    shutil.copytree(ROOT / "examples" / "jit-package", project,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info"))
    wheelhouse = light_venv.parent / "wheel"
    env = _env(KBUILD_STORE=str(tmp_path / "store"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
               TRITON_CACHE_DIR=str(tmp_path / "triton"),
               PIP_FIND_LINKS=" ".join(filter(None, [os.environ.get("PIP_FIND_LINKS", ""), str(wheelhouse)])))
    proc = subprocess.run([str(light_venv / "bin" / "python"), "-m", "pip", "wheel", "-v", "--no-deps",
                           "--disable-pip-version-check", "-w", str(tmp_path / "out"), str(project)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    installed = [line.split("Successfully installed", 1)[1].split() for line in log.splitlines()
                 if "Successfully installed" in line]
    names = {dist.rsplit("-", 1)[0].lower().replace("-", "_") for batch in installed for dist in batch}
    assert {"kbuild", "triton", "setuptools"} <= names, installed
    assert not names & {*OPTIONAL, "scikit_build_core"}, names
    assert list((tmp_path / "out").glob("kbx_jit-*.whl"))
