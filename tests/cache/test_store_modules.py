"""The store package's own layout (issue 14): its modules import each other without a circle, lazy imports
included, and ``store.py`` is the interface alone.

Read from the source with the walker of ``tests/test_layering.py`` (every ``import``, also those inside
functions).
"""

from __future__ import annotations

import graphlib

from test_layering import imports_of, modules_under


def _edges() -> dict[str, set[str]]:
    """Module of kbuild.cache → the modules of kbuild.cache it imports (anywhere in its body)."""
    modules = modules_under("kbuild.cache")
    return {mod: {name for name in imports_of(mod, path) if name in modules and name != mod}
            for mod, path in modules.items()}


def test_the_store_modules_import_each_other_without_a_circle() -> None:
    edges = _edges()
    # The package's __init__ imports its modules; that is how a package works, not a circle, as long as
    # no module imports the package back. Every other edge counts.
    assert not [m for m, deps in edges.items() if "kbuild.cache" in deps], "a module imports kbuild.cache itself"
    graph = {m: deps - {"kbuild.cache"} for m, deps in edges.items() if m != "kbuild.cache"}
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import circle in kbuild.cache: {' -> '.join(exc.args[1])}") from None
    assert order.index("kbuild.cache.record") < order.index("kbuild.cache.tier") < order.index("kbuild.cache.open")


def test_the_interface_module_imports_no_implementation() -> None:
    """``store.py`` holds the protocols; the tier, the composition and the backends import it, never the reverse."""
    assert _edges()["kbuild.cache.store"] <= {"kbuild.cache.record"}


def test_the_walker_sees_lazy_imports() -> None:
    """Not vacuous: ``open_store`` imports the local backend inside the function, and that edge is seen."""
    assert "kbuild.cache.local" in _edges()["kbuild.cache.open"]
    assert "kbuild.cache.http" in _edges()["kbuild.cache.open"]
