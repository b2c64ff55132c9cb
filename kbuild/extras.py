"""kbuild's optional extras at run time: which import packages each one provides, and the error when one is missing.

The core (compile, store, build hooks, emit, manifest, inspect, runtime, and the CLI's verbs that build)
needs Triton and a few small packages only. The tuner, the benchmark suite and the SASS engine need the
``tune`` extra (``pip install 'kbuild[tune]'``: torch, gymnasium, stable-baselines3, sb3-contrib, optuna,
numpy); ``remote`` adds the Redis tier; ``ray`` the distributed prewarm (``kbuild prewarm --ray``).
pyproject.toml's ``[project.optional-dependencies]`` is the install side of the same table
(tests/test_light_deps.py checks the two agree).

Nothing here imports an optional package until asked to: :func:`missing` asks the import system where a package
would come from (:func:`importlib.util.find_spec`), which runs none of its code; :func:`import_extra` imports one
for a command that needs it, turning a failed import into the same kind of error.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kbuild.errors import MissingDependencyError

#: extra → the top-level import names it provides (distribution names differ: stable-baselines3 is
#: ``stable_baselines3``).
EXTRAS: dict[str, tuple[str, ...]] = {
    "tune": ("torch", "gymnasium", "stable_baselines3", "sb3_contrib", "optuna", "numpy"),
    "remote": ("redis",),
    "ray": ("ray",),
}


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken installation, or a module with __spec__ None
        return False


def missing(extra: str) -> list[str]:
    """The import names of ``extra`` that cannot be imported here (empty: the extra is installed)."""
    return [name for name in EXTRAS[extra] if not _importable(name)]


def missing_error(extra: str, what: str, names: list[str]) -> MissingDependencyError:
    """The error for ``what`` (e.g. ``kbuild tune``) when ``names`` of ``extra`` are not installed."""
    return MissingDependencyError(
        f"{what} needs kbuild's [{extra}] extra, and {', '.join(names)} "
        f"{'is' if len(names) == 1 else 'are'} not installed; install it with: pip install 'kbuild[{extra}]'")


def import_extra(extra: str, module: str, what: str) -> Any:
    """``module`` (a package of ``extra``) imported for ``what``: a :class:`MissingDependencyError` (exit status 2)
    when it is not installed (:func:`require`), and also when importing it fails (a broken or partial
    installation: the error's first line), never a traceback."""
    require(extra, what)
    try:
        return importlib.import_module(module)
    except (Exception, SystemExit) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise MissingDependencyError(
            f"{what} needs {module} (kbuild's [{extra}] extra), which is installed but fails to import: "
            f"{type(exc).__name__}: {first}; reinstall it with: pip install --force-reinstall 'kbuild[{extra}]'"
        ) from None


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingDependencyError` (exit status 2) naming ``pip install 'kbuild[extra]'`` unless every
    package of ``extra`` is importable."""
    names = missing(extra)
    if names:
        raise missing_error(extra, what, names)


@contextmanager
def needs(extra: str, what: str) -> Iterator[None]:
    """Guard a module's imports of an extra's packages: checks the whole extra first (:func:`require`), and
    turns a :class:`ModuleNotFoundError` for one of its packages inside the block into the same error.

    ::

        with needs("tune", "kbuild's tuner"):
            import numpy as np
    """
    require(extra, what)
    try:
        yield
    except ModuleNotFoundError as exc:
        root = (exc.name or "").partition(".")[0]
        if root in EXTRAS[extra]:
            raise missing_error(extra, what, [root]) from exc
        raise
