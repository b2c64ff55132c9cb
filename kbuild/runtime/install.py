"""Enabling a package's tuned cubins: its index loaded into the run time's state, the loading paths put into Triton.

:func:`enable` (what a package's generated ``_kbuild/__init__.py`` calls) loads ``<package>/_kbuild/index.json``
into :data:`kbuild.runtime.state.STATE` and installs, once for all packages, the loading paths in the order they
fall back to each other: the post-compile substitution (:mod:`.hook`), then zero-JIT loading and the autotuner
answer (:mod:`.loader`), then the direct launcher (:mod:`.direct`). :func:`disable` takes a package's index out,
and the loading paths out of Triton once no package is left. The loading paths are imported by the first
:func:`enable` that installs them: importing kbuild.runtime (a package that ships no index, ``KBUILD_RUNTIME=off``)
loads none of them. The first :func:`enable` also registers the coverage report written at exit
(``KBUILD_RUNTIME_REPORT``, :mod:`.coverage`).

Under ``KBUILD_RUNTIME=strict``, a package that ships no readable index cannot answer anything, so :func:`enable`
raises :class:`~kbuild.runtime.coverage.CoverageError` for it instead of returning False.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from kbuild.runtime.coverage import CoverageError, register_at_exit
from kbuild.runtime.index import DATA_DIR, INDEX_FILE, load_index
from kbuild.runtime.state import RUNTIME_ENV, STATE, current_report, runtime_disabled, strict

log = logging.getLogger("kbuild.runtime")


def enable(package: str, *, data_dir: str | Path | None = None) -> bool:
    """Substitute the tuned cubins shipped in ``package`` (its ``_kbuild/index.json``) from now on.

    ``data_dir`` is the folder holding ``index.json`` (default: ``<package dir>/_kbuild``, found
    without importing the package again). Returns whether the hook is active for the package;
    False (with a debug log line) when ``KBUILD_RUNTIME=off``, when the package ships no index, or
    when the index is unreadable (a warning). Never raises for those; calling it twice is harmless."""
    if runtime_disabled():
        log.debug("%s=off: not enabling tuned cubins for %s", RUNTIME_ENV, package)
        return False
    register_at_exit(current_report)
    folder = Path(data_dir) if data_dir is not None else _package_data_dir(package)
    if folder is None or not (folder / INDEX_FILE).is_file():
        log.debug("%s ships no %s/%s: Triton's own cubins are used", package, DATA_DIR, INDEX_FILE)
        if strict():
            raise CoverageError(f"KBUILD_RUNTIME=strict: package {package} ships no {DATA_DIR}/{INDEX_FILE}, so "
                                "every call of its kernels would compile (build it with ship = \"package-data\")")
        return False
    try:
        index = load_index(folder / INDEX_FILE)
    except Exception as exc:  # a damaged index must not break the package's import
        log.warning("ignoring the tuned cubins of %s: %s", package, exc)
        if strict():
            raise CoverageError(f"KBUILD_RUNTIME=strict: the index of package {package} cannot be read: "
                                f"{' '.join(str(exc).split())}") from None
        return False
    from kbuild.runtime import direct, hook, loader

    try:
        hook.install()
    except Exception as exc:  # no triton, or a Triton without the hook
        log.debug("cannot hook into Triton (%s): Triton's own cubins are used", exc)
        return False
    try:
        loader.install()
        direct.install()
    except Exception as exc:  # the post-compile substitution still works
        log.debug("cannot install the zero-JIT loader (%s): kernels are compiled, then substituted", exc)
    STATE.enable_index(package, index)
    _preload()
    log.debug("enabled %d tuned cubin(s) of %s from %s", len(index.entries), package, folder)
    return True


def _preload() -> None:
    """Import now, with the package, what a shipped kernel's first call would otherwise import inside the call: its
    key's source hash (:func:`kbuild.compile.triton_aot.source_hash`), the cubin's ELF check (:mod:`kbuild.sass.elf`)
    and the launcher hand-over (:mod:`.handover`), once per process: with stand-ins for the GPU on this project's CPU
    machine the first call's host side is 5.8 ms with them imported here, 25.9 ms without (bytecode cached;
    ``benchmarks/results/runtime_first_call_cpu.json``)."""
    import kbuild.compile.triton_aot
    import kbuild.runtime.handover
    import kbuild.sass.elf  # noqa: F401


def disable(package: str | None = None) -> None:
    """Stop substituting for ``package`` (all packages when None); the hooks go when none is left.

    Kernels already substituted keep their cubin (Triton may have loaded it)."""
    from kbuild.runtime import direct, hook, loader

    with STATE.lock:
        STATE.disable_index(package)
        if not STATE.indexes:
            direct.uninstall()
            loader.uninstall()
            hook.uninstall()


def enabled_packages() -> list[str]:
    """The packages whose tuned cubins are enabled, sorted."""
    with STATE.lock:
        return sorted(STATE.indexes)


def _package_data_dir(package: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        if (Path(loc) / DATA_DIR / INDEX_FILE).is_file():
            return Path(loc) / DATA_DIR
    return None


__all__ = ["disable", "enable", "enabled_packages"]
