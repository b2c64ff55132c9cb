"""The content key: sha256 of canonical JSON over everything that changes the shipped bytes.

Components (README, "The key"):

* ``kernel``: Triton's source hash of the function and its callees, the function name, and
  every :class:`~kbuild.declarations.kernel.KernelSettings` field marked ``key`` (signature, constexprs,
  num_warps, num_stages) — collected from the settings model, not listed here — and, for a kernel
  imported from an installed package rather than the project, that distribution's name and version
  (``kernel.distribution``; absent for project kernels, whose keys stay as they were);
* ``compiler``: Triton's version, its parsed backend options (paths reduced to file names),
  the ptxas version and line info (off);
* ``target``: the exact architecture ptxas builds for (``sm_90a`` is not ``sm_90``);
* ``tuner``: ``null`` for a baseline, else the tuner version (passed in by the caller,
  :data:`kbuild.tune.TUNER_VERSION`: this module sits below the tuner and does not import it),
  every :class:`~kbuild.settings.model.Settings`/:class:`~kbuild.settings.model.BudgetSettings` field marked ``key``
  (algorithm, seed, budget) and, for a kernel with a configuration space, the space's points.

Left out on purpose: checkout path, time, host name, GPU model and driver (they do not change
compiled bytes; tuning results record them in metadata instead).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from kbuild.canonical import canonical_json
from kbuild.declarations.kernel import KernelSettings
from kbuild.settings.fields import key_fields
from kbuild.settings.model import BudgetSettings, Settings
from kbuild.targets import Target

#: Bumped when the layout of the components changes.
KEY_SCHEMA = 1


def digest(components: dict[str, Any]) -> str:
    """sha256 of the components' canonical JSON, non-ASCII characters escaped (the key's spelling since
    ``KEY_SCHEMA`` 1: :func:`kbuild.canonical.canonical_json`)."""
    return hashlib.sha256(canonical_json(components, ascii_only=True)).hexdigest()


def _declared(obj: Any, cls: type) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in key_fields(cls)}


def tuner_component(settings: Settings, *, version: int) -> dict[str, Any]:
    """The ``tuner`` component of a tuned key: ``version`` is :data:`kbuild.tune.TUNER_VERSION`."""
    out: dict[str, Any] = {"version": version}
    out.update(_declared(settings, Settings))
    out["budget"] = _declared(settings.budget, BudgetSettings)
    return out


@dataclass(frozen=True)
class KernelKey:
    """The components and the resulting hex key of one kernel × target (baseline or tuned)."""

    components: dict[str, Any]

    @property
    def hex(self) -> str:
        return digest(self.components)

    @property
    def tuned(self) -> bool:
        return self.components["tuner"] is not None

    def flat(self) -> dict[str, Any]:
        """Components as dotted paths, for ``kbuild explain``."""
        out: dict[str, Any] = {}

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict) and value and prefix.count(".") < 1:
                for k in sorted(value):
                    walk(f"{prefix}.{k}" if prefix else k, value[k])
            else:
                out[prefix] = value

        walk("", self.components)
        return out


def space_component(space: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The configuration space as the tuned key holds it: the points sorted by their canonical JSON (the
    order a grid is written in does not move the key); None for a kernel without a space (one point: the
    default, already in the kernel component), so that its keys stay what they were."""
    if not space or len(space) < 2:
        return None
    return sorted(space, key=lambda p: canonical_json(p, ascii_only=True))


def kernel_key(*, spec: KernelSettings, target: Target, source_hash: str, function: str,
               compiler: dict[str, Any], tuner: dict[str, Any] | None,
               space: list[dict[str, Any]] | None = None, distribution: dict[str, str] | None = None) -> KernelKey:
    """Assemble the components. ``compiler`` comes from :func:`compiler_component`.

    The kernel component is the default configuration's (``maxnreg`` and ``num_ctas`` reach the key through
    the compiler options); ``space`` (:meth:`kbuild.declarations.kernel.KernelSettings.search_space`, resolved) goes into a
    tuned key only, as ``tuner.space``: a different space may choose a different configuration, while the
    baseline is the default's compile whatever the space. ``distribution``: ``{"name", "version"}`` of the
    installed package the kernel comes from (None: the project's own kernel, no entry)."""
    kernel: dict[str, Any] = {"source_hash": source_hash, "function": function}
    kernel.update(_declared(spec, KernelSettings))
    if distribution is not None:
        kernel["distribution"] = dict(distribution)
    # Normalise whitespace in type strings so "*fp16 :16" and "*fp16:16" agree.
    kernel["signature"] = {k: "".join(v.split()) for k, v in kernel["signature"].items()}
    points = space_component(space)
    if tuner is not None and points is not None:
        tuner = {**tuner, "space": points}
    return KernelKey({
        "schema": KEY_SCHEMA,
        "kernel": kernel,
        "compiler": compiler,
        "target": {"arch": target.arch, "cc": target.cc},
        "tuner": tuner,
    })


def compiler_component(*, triton_version: str, ptxas_version: str, options: dict[str, Any]) -> dict[str, Any]:
    return {"triton": triton_version, "backend": "cuda", "ptxas": ptxas_version, "line_info": False,
            "options": options}


__all__ = ["KernelKey", "compiler_component", "digest", "kernel_key", "space_component", "tuner_component"]
