"""Installed distributions: which one provides a module, the files it installed, its ``RECORD``, its version.

The one place kbuild asks :mod:`importlib.metadata` which installed distribution a module comes from:

* the key of a kernel imported from site-packages names the distribution that installed its module
  (:func:`distribution_of`, read by :func:`kbuild.build.resolve.resolve`), and the run time answers a call with
  such an entry only while that version is installed (:func:`installed_version`, read by
  :mod:`kbuild.runtime.keys`);
* the memo fingerprints the code of an installed distribution by its ``RECORD``, which lists the sha256 of every
  file it installed (:func:`providers`, :func:`located_files`, :func:`record_file`, read by
  :mod:`kbuild.build.memo`), and the build's dependency list names that ``RECORD`` too
  (:func:`kbuild.emit.installed_sources`).

Only :func:`installed_version` is cached (per process): every other answer is read afresh, so a package installed
while the process runs (a second build in the same interpreter) is seen.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import os
from collections.abc import Mapping, Sequence


def owners() -> Mapping[str, Sequence[str]]:
    """Top-level module name → the names of the installed distributions that provide it. It walks every installed
    distribution: a caller that asks about many modules reads it once and hands it to :func:`providers`."""
    return md.packages_distributions()


def providers(top: str, table: Mapping[str, Sequence[str]] | None = None) -> list[md.Distribution]:
    """The installed distributions that provide the top-level module or package ``top``, those that can be found.
    ``table``: :func:`owners`, when the caller has read it already."""
    table = owners() if table is None else table
    found = []
    for name in table.get(top, []):
        try:
            found.append(md.distribution(name))
        except md.PackageNotFoundError:
            continue
    return found


def located_files(dist: md.Distribution) -> list[str]:
    """Where each file ``dist`` installed is (its ``RECORD`` rows located on disk; not normalised)."""
    return [str(dist.locate_file(f)) for f in dist.files or []]


def record_file(dist: md.Distribution) -> str | None:
    """Where ``dist``'s ``<name>.dist-info/RECORD`` is (not normalised); None when its file list names none."""
    for f in dist.files or []:
        if f.name == "RECORD" and f.parent.name.endswith(".dist-info"):
            return str(dist.locate_file(f))
    return None


def distribution_of(path: str, top: str) -> dict[str, str] | None:
    """``{"name", "version"}`` of the installed distribution, among those that provide the top-level module ``top``,
    that installed the file ``path`` (compared by real path); None when none did (a module of the project)."""
    real = os.path.realpath(path)
    for dist in providers(top):
        if any(os.path.realpath(f) == real for f in located_files(dist)):
            return {"name": str(dist.metadata["Name"]), "version": str(dist.version)}
    return None


@functools.lru_cache(maxsize=64)
def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (None: not installed); looked up once per process."""
    try:
        return str(md.version(name))
    except md.PackageNotFoundError:
        return None


__all__ = ["distribution_of", "installed_version", "located_files", "owners", "providers", "record_file"]
