"""The house as a graph of modules (issue 33): no circle, no import from a lower layer into a higher one, and no
private name imported across modules.

Every module of kbuild is read: the folders of pyproject's ``wheel.packages`` with their mapping applied
(``kbuild/``, and ``hooks/``, ``cache/``, ``templates/`` installed as ``kbuild.hooks``, ``kbuild.cache`` and
``kbuild.templates``). Every import in a module is an arrow, read with :mod:`ast`: at the top, inside a function (a
lazy import that only runs on a GPU machine counts as much as any), under ``if TYPE_CHECKING:``. ``from a import b``
is an arrow to the module ``a.b`` when there is one, else to ``a``; a relative import is resolved in its package.
Importing ``a.b`` runs ``a/__init__.py`` first, but that is not an arrow of the importer's.

The layers are :data:`LAYERS`, from the ground up, after the README's layout and ``ARCHITECTURE.md``'s boundaries.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from test_layering import ROOT, package_dirs

#: kbuild's layers, from the ground up: a module may import the modules of its own layer and of the layers below it,
#: never one above. Each entry names a package (every module below it) or a module; ``kbuild`` alone is the
#: package's ``__init__.py`` (``__version__``). A module no entry names fails :func:`test_every_module_has_a_layer`:
#: a new package is placed here when it is made.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # What every part reads: errors, the architecture table and targets, files, JSON, the console, user code.
    ("ground", ("kbuild", "kbuild.errors", "kbuild.arch", "kbuild.targets", "kbuild.canonical", "kbuild.console",
                "kbuild.fsutil", "kbuild.jsonio", "kbuild.usercode", "kbuild.extras", "kbuild.distributions",
                "kbuild.templates", "kbuild.cmake")),
    # The grammar of a kernel declaration: signature, variants, space, grid.
    ("declarations", ("kbuild.declarations",)),
    # The settings model and its sources; the external tools it names; the JSON schema generated from it.
    ("settings", ("kbuild.settings", "kbuild.toolchain", "kbuild.schema")),
    # This process's GPU; the SASS engine (cubins and instructions, nothing of RL, stores or builds).
    ("device and SASS", ("kbuild.device", "kbuild.sass")),
    # Compiling declarations to baseline cubins, the content key, the artefact store.
    ("compile, key, store", ("kbuild.compile", "kbuild.key", "kbuild.cache")),
    # What stands on compiled kernels: the C launchers, the bench suite and tile language, the run time, and the
    # recorder of a real run's specialisations (keyed as the run time keys a call).
    ("emit, bench, run time, record", ("kbuild.emit", "kbuild.bench", "kbuild.tile", "kbuild.runtime",
                                       "kbuild.record")),
    # The bounded search: level 1 (configurations) and level 2 (SASS), and their measurement.
    ("tune", ("kbuild.tune",)),
    # CUDA C++ through kbuild-nvcc: cached steps, tuned kernels.
    ("nvcc", ("kbuild.nvcc",)),
    # The build core, the only layer that knows all the others.
    ("build", ("kbuild.build",)),
    # kbuild prewarm --ray, over the build core.
    ("prewarm", ("kbuild.prewarm",)),
    # The faces: the CLI and its verbs, the build-system adapters.
    ("faces", ("kbuild.commands", "kbuild.cli", "kbuild.__main__", "kbuild.hooks")),
)


@dataclass(frozen=True)
class Import:
    """One arrow: ``module`` imports ``target`` at ``line``."""

    module: str
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.module} (line {self.line}) imports {self.target}"


@cache
def modules() -> dict[str, Path]:
    """Every module of kbuild → its file, the folder mapping applied."""
    from test_layering import modules_under

    return {mod: path for package in package_dirs() for mod, path in modules_under(package).items()}


def _source(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module ``node`` imports from (a relative import resolved in ``module``'s package)."""
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _kbuild_module(name: str) -> str | None:
    """The kbuild module ``name`` is, or is inside (``kbuild.cache.Artefact`` → ``kbuild.cache``); None if not
    kbuild's."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def imports_in(module: str, path: Path, source: str | None = None) -> Iterator[Import]:
    """The arrows of ``module`` to other kbuild modules, each with its line (lazy and ``TYPE_CHECKING`` ones too)."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    for node in ast.walk(tree):
        names: list[str]
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _source(module, path, node)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules() else base for a in node.names]
        else:
            continue
        for name in names:
            target = _kbuild_module(name)
            if target is not None and target != module:
                yield Import(module, node.lineno, target)


@cache
def graph() -> tuple[Import, ...]:
    """Every arrow of the house (one per line of a module and module it imports)."""
    return tuple(dict.fromkeys(i for module, path in sorted(modules().items()) for i in imports_in(module, path)))


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the entry that names ``module`` most closely, or None."""
    best: tuple[int, int] | None = None
    for index, (_, names) in enumerate(LAYERS):
        for name in names:
            inside = module == name or (name != "kbuild" and module.startswith(name + "."))
            if inside and (best is None or len(name) > best[1]):
                best = (index, len(name))
    return None if best is None else best[0]


def circles(arrows: tuple[Import, ...]) -> list[list[str]]:
    """The circles of the graph (its strongly connected parts of more than one module; Tarjan's algorithm)."""
    edges: dict[str, set[str]] = {}
    for a in arrows:
        edges.setdefault(a.module, set()).add(a.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in modules() if layer_of(m) is None)
    assert not unplaced, f"place these in LAYERS (tests/test_import_graph.py): {unplaced}"


def test_no_module_imports_a_higher_layer() -> None:
    up = [f"{a}: from layer {LAYERS[lm][0]!r} up to {LAYERS[lt][0]!r}" for a in graph()
          if (lm := layer_of(a.module)) is not None and (lt := layer_of(a.target)) is not None and lt > lm]
    assert not up, "\n".join(up)


def test_no_circle_between_modules() -> None:
    found = circles(graph())
    detail = ["circle of " + ", ".join(part) + ": " + "; ".join(str(a) for a in graph()
                                                               if a.module in part and a.target in part)
              for part in found]
    assert not found, "\n".join(detail)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_names_taken(module: str, path: Path, source: str | None = None) -> list[str]:
    """Where ``module`` takes a private name (a leading underscore; dunder names are not private) of another kbuild
    module: ``from m import _name``, an import of a private module, or ``m._name`` on a module it imported."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    found: list[str] = []
    bound: dict[str, str] = {}  # a name this module binds to a kbuild module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = _source(module, path, node)
            if _kbuild_module(base) is None:
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                if _private(a.name) or any(_private(part) for part in base.split(".")):
                    found.append(f"{module} (line {node.lineno}): from {base} import {a.name}")
                if full in modules():
                    bound[a.asname or a.name] = full
        elif isinstance(node, ast.Import):
            for a in node.names:
                if _kbuild_module(a.name) is None:
                    continue
                if any(_private(part) for part in a.name.split(".")):
                    found.append(f"{module} (line {node.lineno}): import {a.name}")
                bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain: list[str] = []
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                owner = ".".join([bound[value.id], *chain])
                if owner in modules() and owner != module:
                    found.append(f"{module} (line {node.lineno}): {owner}.{node.attr}")
    return found


def test_no_private_name_is_imported_across_modules() -> None:
    """A name with a leading underscore is its module's own; another module that needs it gets a public name with a
    docstring, or the code moves to where it belongs. Not even within a package."""
    found = [hit for module, path in sorted(modules().items()) for hit in private_names_taken(module, path)]
    assert not found, "\n".join(found)


def test_the_readers_see_what_they_must() -> None:
    """The graph and the scanners are not vacuous: the folder mapping, relative, lazy and TYPE_CHECKING imports, a
    circle, a private name taken each way."""
    assert modules()["kbuild.cache.store"] == ROOT / "cache" / "store.py"
    assert modules()["kbuild.hooks.backend"] == ROOT / "hooks" / "backend.py"
    arrows = {(a.module, a.target) for a in graph()}
    assert ("kbuild.cache.tier", "kbuild.cache.store") in arrows  # relative: from .store import ...
    assert ("kbuild.hooks.backend", "kbuild.build.plan") in arrows  # lazy, inside a function
    assert ("kbuild.tune.measure.worker", "kbuild.tune.measure.session") in arrows  # lazy, relative
    assert ("kbuild.nvcc.tuned", "kbuild.settings.model") in arrows  # under TYPE_CHECKING
    assert ("kbuild.settings.model", "kbuild.declarations.kernel") in arrows
    assert layer_of("kbuild") == 0 and layer_of("kbuild.settings.model") == layer_of("kbuild.toolchain")
    assert layer_of("kbuild.hooks.backend") == len(LAYERS) - 1 and layer_of("kbuild.nowhere") is None
    assert circles((Import("a", 1, "b"), Import("b", 2, "c"), Import("c", 3, "a"), Import("c", 4, "d"))) == [
        ["a", "b", "c"]]
    path = ROOT / "kbuild" / "build" / "example.py"
    code = ("from kbuild.runtime.direct import _cuda\nfrom . import _memo\nimport kbuild.runtime.state as state\n"
            "state._loader\nfrom kbuild.runtime import direct\ndirect._record()\nimport kbuild\n"
            "kbuild.runtime.direct._state\n")
    taken = private_names_taken("kbuild.build.example", path, code)
    assert sorted(t.split(": ", 1)[1] for t in taken) == [
        "from kbuild.build import _memo", "from kbuild.runtime.direct import _cuda", "kbuild.runtime.direct._record",
        "kbuild.runtime.direct._state", "kbuild.runtime.state._loader"], taken
    fine = "from __future__ import annotations\nfrom kbuild import __version__\nimport os\nos._exit\nself._x\n"
    assert private_names_taken("kbuild.build.example", path, fine) == []


@pytest.mark.parametrize("module", ["kbuild.settings.model", "kbuild.declarations.kernel", "kbuild.toolchain",
                                    "kbuild.compile.triton_aot", "kbuild.declarations.variants"])
def test_the_settings_and_the_grammar_stand_below_what_reads_them(module: str) -> None:
    """Issue 33's back-arrows: the compile path, the toolchain and the variants imported the settings module, which
    imported the declaration grammar up in kbuild.compile and the Ray address up in kbuild.prewarm."""
    for a in graph():
        if a.module == module:
            assert layer_of(a.target) is not None and layer_of(a.target) <= layer_of(module), a  # type: ignore[operator]
