"""The floors of the house: which of kbuild's packages may import which (each package's docstring says what it owns).

Read from the source with :mod:`ast` (every ``import``, also those inside functions), so a lazy import
that only runs on a GPU machine counts too. The source folders are found through pyproject's
``wheel.packages`` table, the same map the wheel is built from.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]

#: Lower floors never import higher ones: bench times kernels with the device floor, tune drives bench
#: specs and the device floor through its measurement worker.
FLOORS = ("kbuild.device", "kbuild.bench", "kbuild.tune")


@cache
def package_dirs() -> dict[str, Path]:
    """Import package → source folder, from ``[tool.scikit-build] wheel.packages``."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["scikit-build"]["wheel"]["packages"]
    return {dest.replace("/", "."): ROOT / src for dest, src in table.items()}


def file_of(module: str) -> Path | None:
    """The source file of a kbuild module, or None (not kbuild's, or no such module)."""
    best = max((p for p in package_dirs() if module == p or module.startswith(p + ".")), key=len, default=None)
    if best is None:
        return None
    base = package_dirs()[best].joinpath(*module[len(best):].split(".")[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def modules_under(package: str) -> dict[str, Path]:
    """Every module of ``package`` (itself included) → its file."""
    init = file_of(package)
    assert init is not None, f"{package} not found"
    if init.name != "__init__.py":
        return {package: init}
    out = {}
    for f in sorted(init.parent.rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        parts = f.relative_to(init.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((package, *parts))] = f
    return out


@cache
def imports_of(module: str, path: Path, *, top_level_only: bool = False) -> frozenset[str]:
    """Absolute names ``module`` imports (``from a import b`` gives ``a`` and ``a.b``)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    nodes: Iterator[ast.AST] = iter(tree.body) if top_level_only else ast.walk(tree)
    out: set[str] = set()
    for node in nodes:
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
    return frozenset(out)


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def closure(start: str) -> set[str]:
    """Every module ``start`` loads when imported: top-level imports, followed through kbuild's own modules."""
    seen, todo = set(), [start]
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        path = file_of(mod)
        if path is None:
            continue
        parents = [mod.rsplit(".", i)[0] for i in range(1, mod.count("."))]  # importing a.b.c runs a.b first
        todo.extend(parents)
        todo.extend(imports_of(mod, path, top_level_only=True))
    return seen


@pytest.mark.parametrize("floor", FLOORS[:-1])
def test_a_floor_never_imports_the_floors_above_it(floor: str) -> None:
    above = FLOORS[FLOORS.index(floor) + 1:]
    bad = sorted(f"{mod} imports {name}" for mod, path in modules_under(floor).items()
                 for name in imports_of(mod, path) for up in above if within(name, up))
    assert not bad, bad


def test_the_device_floor_imports_nothing_of_kbuild_but_errors() -> None:
    bad = sorted(f"{mod} imports {name}" for mod, path in modules_under("kbuild.device").items()
                 for name in imports_of(mod, path)
                 if within(name, "kbuild") and name != "kbuild" and not within(name, "kbuild.device")
                 and not within(name, "kbuild.errors"))
    assert not bad, bad


def test_bench_and_tune_time_kernels_with_the_same_device_code() -> None:
    """The measurement worker and ``kbuild bench`` both stand on kbuild.device (no copy of the timing code)."""
    assert "kbuild.device.timing" in imports_of("kbuild.tune.measure.session", file_of("kbuild.tune.measure.session"))
    assert "kbuild.device.timing" in imports_of("kbuild.bench.runner", file_of("kbuild.bench.runner"))


def _outside(package: str) -> dict[str, Path]:
    """Every module of kbuild (all of ``wheel.packages``) that is not ``package`` or below it."""
    return {mod: path for top in package_dirs() if not within(top, package)
            for mod, path in modules_under(top).items() if not within(mod, package)}


def test_nothing_below_the_build_adapters_imports_them() -> None:
    """``kbuild.hooks`` (the PEP 517 backend, the setuptools plugin) adapts build systems to ``kbuild.build`` and
    stands above every other module: none imports it, not even lazily inside a function."""
    bad = sorted(f"{mod} imports {name}" for mod, path in _outside("kbuild.hooks").items()
                 for name in imports_of(mod, path) if within(name, "kbuild.hooks"))
    assert not bad, bad


#: What may import the build core: the build-system adapters, the CLI's verbs and the distributed prewarm.
BUILD_USERS = ("kbuild.hooks", "kbuild.commands", "kbuild.prewarm")


def test_only_the_adapters_the_verbs_and_the_prewarm_import_the_build_core() -> None:
    """``kbuild.build`` orchestrates the lower floors (settings, compile, key, store, tune, emit, the run time's
    index); none of them imports it back."""
    bad = sorted(f"{mod} imports {name}" for mod, path in _outside("kbuild.build").items()
                 if not any(within(mod, user) for user in BUILD_USERS)
                 for name in imports_of(mod, path) if within(name, "kbuild.build"))
    assert not bad, bad


def test_the_key_does_not_import_the_tuner() -> None:
    """The tuner version reaches the key as data; importing kbuild.key loads nothing of kbuild.tune."""
    direct = imports_of("kbuild.key", file_of("kbuild.key"))
    assert not [n for n in direct if within(n, "kbuild.tune")]
    assert not [n for n in closure("kbuild.key") if within(n, "kbuild.tune")]


def test_the_store_never_imports_triton_or_torch() -> None:
    cache_modules = modules_under("kbuild.cache")
    bad = sorted(f"{mod} imports {name}" for mod, path in cache_modules.items() for name in imports_of(mod, path)
                 if within(name, "triton") or within(name, "torch"))
    assert not bad, bad
    loaded = set().union(*(closure(m) for m in cache_modules))
    assert not [n for n in loaded if within(n, "triton") or within(n, "torch")]
    # And at run time, in a fresh interpreter: importing every module of the store loads neither.
    code = ("import importlib, sys\n"
            f"for m in {sorted(cache_modules)!r}:\n    importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


def test_the_walker_sees_what_it_must() -> None:
    """The helpers above are not vacuous: they find known imports, relative and lazy ones included."""
    assert len(modules_under("kbuild.bench")) > 5 and "kbuild.bench.kernels.softmax" in modules_under("kbuild.bench")
    session = imports_of("kbuild.tune.measure.session", file_of("kbuild.tune.measure.session"))
    assert {"kbuild.tune.measure.oracle", "kbuild.bench.spec"} <= session  # relative / absolute
    worker = imports_of("kbuild.tune.measure.worker", file_of("kbuild.tune.measure.worker"))
    assert "kbuild.tune.measure.session" in worker  # imported inside handle()
    assert "kbuild.tune.measure.session" not in imports_of("kbuild.tune.measure.worker",
                                                           file_of("kbuild.tune.measure.worker"),
                                                           top_level_only=True)
    assert "kbuild.settings.model" in closure("kbuild.key") and file_of("kbuild.cache.store") == ROOT / "cache" / "store.py"
    backend = imports_of("kbuild.hooks.backend", file_of("kbuild.hooks.backend"))
    assert {"kbuild.hooks.setuptools_plugin", "kbuild.build.plan"} <= backend  # lazy, relative and absolute
    assert "kbuild.hooks.backend" not in _outside("kbuild.hooks") and "kbuild.build.plan" in _outside("kbuild.hooks")
