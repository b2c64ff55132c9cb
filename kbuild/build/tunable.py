"""Whether a build can be tuned on this machine, and the status line that says what it ships and why.

A build is tuned where ``tune`` is not ``off``, it has a tuned key, its kernel has a ``bench`` spec and a GPU of
its target's architecture is here (:func:`kbuild.device.probe.has_gpu`). The pipeline's phases
(:mod:`kbuild.build.baselines`, :mod:`kbuild.build.tuning`, :mod:`kbuild.build.pipeline`) write
:func:`untuned_reason` or :func:`tuned_status` into ``KernelBuild.status``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbuild.device.probe import has_gpu
from kbuild.settings.model import Settings
from kbuild.targets import Target

from .kernel_build import KernelBuild

if TYPE_CHECKING:
    from kbuild.cache import Artefact


def untuned_reason(settings: Settings, target: Target) -> str:
    """Why a build for ``target`` ships its baseline: ``tune = "off"``, no GPU of the target here, or no bench spec."""
    if settings.tune == "off":
        return "untuned: tune = \"off\""
    if not has_gpu(target.cc):
        return f"untuned: no {target.name} GPU on this machine"
    return "untuned: the kernel has no bench spec ([tool.kbuild.kernels] bench = \"pkg.mod:callable\")"


def can_tune(settings: Settings, b: KernelBuild) -> bool:
    """Whether ``b`` can be tuned on this machine (see the module docstring)."""
    return settings.tune != "off" and b.tuned_key is not None and bool(b.spec.bench) and has_gpu(b.target.cc)


def tuned_status(art: Artefact) -> str:
    """The status line of a build that ships the tuning result ``art``: its speedup, or why the baseline was kept."""
    speedup = art.meta.get("speedup")
    if art.meta.get("tuned"):
        return f"tuned ×{speedup:.3f}" if isinstance(speedup, (int, float)) else "tuned"
    reason = art.meta.get("tune_decision") or "no schedule beat the baseline"
    return f"tuned: {reason}"


__all__ = ["can_tune", "tuned_status", "untuned_reason"]
