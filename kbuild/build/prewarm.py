"""Prewarm: on a GPU machine, fill the writable store tiers with every kernel × target's result.

For each kernel × target the store lacks, compile the baseline and, where a GPU of that target is
here and the kernel has a bench spec, tune it within the project's budget. Every result is put
into the writable tiers the moment it exists, so an interrupted prewarm loses at most the kernel
in progress and a re-run resumes; a re-run after a complete one finds everything and does nothing.

The keys are the ones the project's builds look up, so CI machines without a GPU then ship the
tuned code. This is the pipeline of :mod:`kbuild.build.pipeline` with tuning on a miss switched on; the
distributed one (``kbuild prewarm --ray``) is :mod:`kbuild.prewarm`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from kbuild.errors import UsageError
from kbuild.settings.model import RemoteSettings, Settings
from kbuild.targets import Target

from .kernel_build import KernelBuild, Tuner
from .pipeline import run_pipeline


def with_remote(settings: Settings, url: str | None) -> Settings:
    """The settings with ``url`` as a writable remote tier (a prewarm machine is trusted to write)."""
    if not url:
        return settings
    remotes = [r for r in settings.remotes if r.url != url] + [RemoteSettings(url=url, writable=True)]
    return dataclasses.replace(settings, remotes=remotes)


def prewarm(settings: Settings, *, targets: Sequence[Target | str] | None = None, kernels: Sequence[str] | None = None,
            remote: str | None = None, strict: bool = False, tuner: Tuner | None = None,
            on_step: Callable[[KernelBuild], None] | None = None) -> list[KernelBuild]:
    """Prewarm the settings' store (and ``remote``, written to as well) for ``kernels`` × ``targets`` (default: all):
    the pipeline with tuning on a miss (:func:`kbuild.build.pipeline.run_pipeline`); the builds in order.
    ``strict``: a remote tier that is down is an error, not a warning; ``tuner`` replaces
    :func:`kbuild.build.tuning.tune_build`; ``on_step`` hears of each build. ``tune = "off"`` is a
    :class:`UsageError` (builds would never look the results up)."""
    if settings.tune == "off":
        raise UsageError(f"{settings.config_file}: tune: \"off\" means builds never look up tuned results, so there "
                         f"is nothing to prewarm; set tune = \"auto\" (or KBUILD_TUNE=auto)")
    from kbuild.cache import open_store

    settings = with_remote(settings, remote)
    store = open_store(settings, strict=strict)
    return run_pipeline(settings, store, kernels=kernels, targets=targets, tune_on_miss=True, tuner=tuner,
                        on_step=on_step)


def action(b: KernelBuild) -> str:
    """What prewarm did for one kernel × target: found, tuned, or only compiled (and why)."""
    if b.tuned:
        return "found" if b.hit else "tuned"
    return "baseline found" if b.hit else "baseline compiled"


def summary(b: KernelBuild) -> dict[str, Any]:
    """One kernel × target of a prewarm for a table or ``--json``: :meth:`KernelBuild.as_json` with its
    :func:`action` and, for a tuning result, the measured speedup."""
    doc = b.as_json()
    doc["action"] = action(b)
    doc["speedup"] = b.artefact.meta.get("speedup") if b.tuned and b.artefact is not None else None
    return doc
