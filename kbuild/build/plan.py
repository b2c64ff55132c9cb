"""The build entry point: :func:`plan` runs the pipeline as a build does and says what the build ships.

The PEP 517 backend (:mod:`kbuild.hooks.backend`), the setuptools plugin (:mod:`kbuild.hooks.setuptools_plugin`)
and ``kbuild emit`` all plan here, and get a :class:`BuildPlan`: the results, the kernels to emit (C launchers,
:mod:`kbuild.emit`) and the wheel manifest (:mod:`kbuild.build.manifest`). :func:`replay` makes the same object from
a manifest an earlier step planned (the backend's, handed to the CMake or setuptools step).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbuild.settings.model import Settings
from kbuild.targets import Target

from .kernel_build import KernelBuild, Tuner
from .pipeline import run_pipeline, strict_store_error
from .recorded import RecordingReport

if TYPE_CHECKING:  # kbuild.emit renders C; it is imported where sources are rendered
    from kbuild.emit import EmitKernel


@dataclass
class BuildPlan:
    """What a build ships: each kernel × target's result, the kernels to emit and the wheel manifest."""

    settings: Settings
    kernels: list[EmitKernel]
    """The kernels to emit, for :func:`kbuild.emit.render_sources` (:func:`kernels_from_builds`)."""
    manifest: dict[str, Any]
    """The wheel manifest (:mod:`kbuild.build.manifest`)."""
    builds: list[KernelBuild] = field(default_factory=list)
    """The pipeline's results; empty for a plan replayed from a manifest."""
    locked: bool = False
    recordings: RecordingReport | None = None
    """What the build made of ``[tool.kbuild] recordings`` (None: the project names none)."""

    def status_lines(self) -> list[str]:
        """What the recordings gave and did not (:class:`~kbuild.build.recorded.RecordingReport`), then one line per
        kernel × target that ships no accepted tuning result, saying why."""
        lines = []
        r = self.recordings
        if r is not None:
            lines.append(f"kbuild: recordings {', '.join(r.recordings)}: {r.specializations} specialisation(s) → "
                         f"{r.declarations} declaration(s); {r.built} kernel × target built from them, {r.collapsed} "
                         f"declared by hand too, {r.not_built} not built")
            lines += [f"kbuild: recordings: {line}" for line in r.lines]
        return lines + [f"kbuild: {b.spec.name} {b.target.name}: {b.status}" for b in self.builds if not b.improved]

    def files(self, *, prefix: str = "kbuild_", basename: str = "kbuild_kernels") -> dict[str, bytes]:
        """The C sources and ``kbuild.json``, by file name (:func:`kbuild.emit.write_files` writes them)."""
        from kbuild.emit import render_sources

        from .manifest import MANIFEST_NAME, manifest_bytes

        files = render_sources(self.kernels, prefix=prefix, basename=basename,
                               config_name=Path(self.settings.config_file).name)
        files[MANIFEST_NAME] = manifest_bytes(self.manifest)
        return files


def plan(settings: Settings, store: Any = None, *, targets: Sequence[Target | str] | None = None,
         lock_file: str | os.PathLike[str] | None = None, tuner: Tuner | None = None,
         on_step: Callable[[KernelBuild], None] | None = None) -> BuildPlan:
    """Plan a build: the pipeline as a build runs it (memo, tune on a miss) and what it ships.

    ``settings.locked`` (or a ``lock_file``) builds exactly the artefacts pinned in the lock file;
    ``settings.strict`` makes a remote tier that is down an error naming it. ``store`` defaults to the
    settings' store, opened and closed here. ``targets`` builds part of the project (as ``kbuild emit
    --targets``): under ``locked`` the pins of other targets are then not stale.
    """
    from kbuild.cache import TierUnavailableError, open_store

    from .manifest import build_manifest

    lock = Path(lock_file) if lock_file is not None else (
        settings.project_dir / "kbuild.lock" if settings.locked else None)
    try:
        with contextlib.ExitStack() as stack:
            if store is None:
                store = stack.enter_context(open_store(settings, strict=settings.strict))
            reports: list[RecordingReport] = []
            builds = run_pipeline(settings, store, targets=targets, locked=lock, memo=True, tune_on_miss=True,
                                  tuner=tuner, on_step=on_step, on_recordings=reports.append)
    except TierUnavailableError as exc:
        raise strict_store_error(settings, exc) from None
    return BuildPlan(settings=settings, kernels=kernels_from_builds(builds),
                     manifest=build_manifest(builds, tune=settings.tune), builds=builds, locked=lock is not None,
                     recordings=reports[-1] if reports else None)


def replay(settings: Settings, manifest: dict[str, Any], *, where: str, store: Any = None) -> BuildPlan:
    """The plan a manifest already made (the backend's, handed to the CMake or setuptools step): exactly the
    artefacts it names, from the store; one error lists every one the store lacks."""
    from kbuild.cache import TierUnavailableError, open_store

    from .manifest import manifest_kernels

    try:
        with contextlib.ExitStack() as stack:
            if store is None:
                store = stack.enter_context(open_store(settings, strict=settings.strict))
            kernels = manifest_kernels(manifest, store, where=where)
    except TierUnavailableError as exc:
        raise strict_store_error(settings, exc) from None
    return BuildPlan(settings=settings, kernels=kernels, manifest=manifest)


def kernels_from_builds(builds: Iterable[KernelBuild]) -> list[EmitKernel]:
    """The kernels to emit: the pipeline's results grouped by kernel, each target's artefact an image."""
    from kbuild.emit import EmitKernel

    grouped: dict[str, list[Any]] = {}
    sources: dict[str, str] = {}
    grids: dict[str, tuple[str, ...]] = {}
    for b in builds:
        grouped.setdefault(b.spec.name, []).append((b.target, b.artefact))
        sources[b.spec.name] = b.spec.source
        grids[b.spec.name] = tuple(b.spec.grid)
    return [EmitKernel(name, sources[name], tuple(images), grids[name]) for name, images in grouped.items()]


__all__ = ["BuildPlan", "kernels_from_builds", "plan", "replay"]
