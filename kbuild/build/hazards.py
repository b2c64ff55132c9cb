"""``wgmma_hazards = "error"``: a build whose cubin has a wgmma register race is refused, before anything is stored.

:func:`kbuild.compile.compile_kernel` records the races it finds in ``meta["wgmma_register_hazards"]``
(:mod:`kbuild.sass.hazards`); the pipeline refuses a build that would ship such a cubin (a new compile, a stored
one, or the configuration a tuner chose).
"""

from __future__ import annotations

from collections.abc import Sequence

from kbuild.errors import ConfigError
from kbuild.settings.model import Settings

from .kernel_build import KernelBuild


def refuse_wgmma_hazards(settings: Settings, builds: Sequence[KernelBuild]) -> None:
    """``wgmma_hazards = "error"``: fail when the artefact a build ships records a wgmma register race
    (``meta["wgmma_register_hazards"]``, which :func:`kbuild.compile.compile_kernel` writes): one compiled now,
    one from the store (compiled by an earlier build under ``"warn"``) or a stored tuning result of such a kernel.
    :func:`run_pipeline` calls it before anything is written."""
    if settings.wgmma_hazards != "error":
        return
    for b in builds:
        found = b.artefact.meta.get("wgmma_register_hazards") if b.artefact is not None else None
        if found:
            where = "its stored cubin (compiled earlier under \"warn\")" if b.hit else "its cubin"
            raise wgmma_hazard_error(settings, b, where, [str(h) for h in found])


def wgmma_hazard_error(settings: Settings, b: KernelBuild, where: str, hazards: list[str]) -> ConfigError:
    """The error of ``wgmma_hazards = "error"`` for ``b``, whose cubin (``where``) has wgmma register races
    (``hazards``, the first :data:`kbuild.sass.hazards.RECORDED`, as :func:`kbuild.compile.compile_kernel` records
    them)."""
    from kbuild.sass.hazards import RECORDED, WGMMA_RACE_ISSUE

    count = f"{len(hazards)} instruction(s)" if len(hazards) < RECORDED else f"{RECORDED} or more instructions"
    return ConfigError(
        settings.config_file, "wgmma_hazards",
        f"\"error\" refuses kernel {b.spec.name!r} ({b.spec.source}) for {b.target.name}: {where} has a wgmma "
        f"register race, {count} touching a wgmma operand register before the wait that retires it, first "
        f"{hazards[0]}; its results can differ from run to run on the GPU (Triton's pipelining of a wgmma with a "
        f"register operand, {WGMMA_RACE_ISSUE})"
        f"\n  next step: a Triton release that fixes {WGMMA_RACE_ISSUE}, or a kernel whose wgmma reads its A "
        f"operand from shared memory; or wgmma_hazards = \"warn\" ([tool.kbuild] in {settings.config_file}, or "
        "KBUILD_WGMMA_HAZARDS) to build it anyway, with a warning")


__all__ = ["refuse_wgmma_hazards", "wgmma_hazard_error"]
