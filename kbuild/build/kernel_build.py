"""One kernel × target as the build sees it: :class:`KernelBuild`, and the :data:`Tuner` that tunes one.

A :class:`KernelBuild` is made when a declaration is resolved (:func:`kbuild.build.resolve.resolve`, or from the
memo: :func:`kbuild.build.resolve.resolve_memoized`) and filled in as the pipeline runs
(:mod:`kbuild.build.pipeline`): the artefact it ships, whether the store had it, whether that is a tuning result,
and the status line that says why. The manifest (:mod:`kbuild.build.manifest`), the C launchers
(:mod:`kbuild.build.plan`), the package data (:mod:`kbuild.build.package_data`), the prewarm and the CLI read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kbuild.declarations.kernel import KernelSettings
from kbuild.key import KernelKey
from kbuild.settings.model import Settings
from kbuild.targets import Target

if TYPE_CHECKING:  # kbuild.cache is imported where a store is opened
    from kbuild.cache import Artefact


@dataclass(frozen=True)
class RecordedBuild:
    """What a kernel × target made from a recording (:mod:`kbuild.build.recorded`) carries beside its declaration."""

    recordings: tuple[str, ...]
    """The recordings that hold its specialisation (as ``[tool.kbuild] recordings`` names them)."""
    imported_as: dict[str, Any] = field(default_factory=dict)
    """The module-level values set back to the recording machine's while it is keyed and compiled
    (:func:`kbuild.compile.folded.imported_as`); empty when this machine imports the kernel alike."""
    autotuned: bool = False
    """Its kernel was called through an ``@triton.autotune`` object."""
    autotune_key: list[Any] | None = None
    """The tuning key whose choice this configuration is, for this target (the index's ``autotune.key``)."""
    also_keys: tuple[tuple[Any, ...], ...] = ()
    """Other tuning keys whose measured choice is this same configuration (the index's ``autotune.also_keys``)."""
    choice: str | None = None
    """Where that choice came from: ``"recording"``, ``"triton-cache"`` (:mod:`kbuild.build.choices`); None: none
    (Triton's autotuner benchmarks on the first call, from the shipped cubins)."""
    notes: tuple[str, ...] = ()
    """What the index entry and the build report say about it."""
    derived: Any = field(default=None, compare=False, repr=False)
    """The level-1 space derived for it where the build tunes it (a
    :class:`kbuild.tune.level1.derive.DerivedSpace`; its points are :attr:`KernelBuild.space`): the tune phase prunes
    it on the CPU before measuring (:func:`kbuild.build.tuning.tune_build`); None: not tuned from a recording."""
    output_check: Any = field(default=None, compare=False, repr=False)
    """The check of its block-size candidates (a :class:`kbuild.tune.level1.output_check.RecordedOutputCheck`), run
    by the tune phase before pruning, where the space is searched; None: no candidate."""

    def manifest(self) -> dict[str, Any]:
        """The manifest entry's ``recorded`` field (nothing that depends on this machine)."""
        return {"recordings": list(self.recordings), "imported_as_recorded": bool(self.imported_as),
                "autotune": ({"choice": self.choice, "key": self.autotune_key,
                              **({"also_keys": [list(k) for k in self.also_keys]} if self.also_keys else {})}
                             if self.autotuned else None)}


@dataclass
class KernelBuild:
    """One kernel × target through the pipeline."""

    spec: KernelSettings
    """The declaration, resolved against its function (defaults, autotuner configs, heuristics filled in)."""
    target: Target
    baseline_key: KernelKey
    """The key of the untuned compile."""
    tuned_key: KernelKey | None
    """The key a tuning result is stored under (it also covers the tuner's settings); None under ``tune = "off"``."""
    fn: Any = field(repr=False)
    """The ``@triton.jit`` function (a ``JITFunction``); None for a build from the memo (nothing imported)."""
    artefact: Artefact | None = None
    """What the build ships, once found in the store or made (a baseline compile or a tuning result)."""
    hit: bool = False
    """Whether the shipped artefact came from the store (not compiled or tuned by this run)."""
    tuned: bool = False
    """Whether the shipped artefact is the one under the tuned key (a tuning result)."""
    status: str = ""
    """One line on what ships and why (:mod:`kbuild.build.tunable`)."""
    space: list[dict[str, Any]] = field(default_factory=list)
    """The kernel's configuration space, resolved (an ``@triton.autotune`` source's configs read), the default
    first (:meth:`kbuild.declarations.kernel.KernelSettings.search_space`'s shape): what a tuner searches."""
    recorded: RecordedBuild | None = None
    """Made from a recorded specialisation (``[tool.kbuild] recordings``); None for a hand-written declaration."""

    @property
    def import_setup(self) -> Any:
        """The context its kernel is keyed and compiled in (:data:`kbuild.compile.triton_aot.ImportSetup`), or None."""
        if self.recorded is None or not self.recorded.imported_as:
            return None
        from kbuild.compile.folded import ImportedAs

        return ImportedAs(self.recorded.imported_as)

    @property
    def shipped(self) -> Artefact:
        """:attr:`artefact`, for code that runs once the pipeline gave every build one (an ``AssertionError``
        before)."""
        assert self.artefact is not None, f"{self.spec.name} / {self.target.name}: no artefact yet"
        return self.artefact

    @property
    def default_config(self) -> dict[str, Any]:
        """The configuration that ships untuned."""
        return self.space[0] if self.space else self.spec.default_config()

    @property
    def config(self) -> dict[str, Any] | None:
        """The configuration of the shipped artefact (``meta["config"]``; an artefact from before configuration
        spaces is the default's compile); None before there is one."""
        if self.artefact is None:
            return None
        stored = self.artefact.meta.get("config")
        return stored if isinstance(stored, dict) else self.default_config

    @property
    def is_default_config(self) -> bool:
        """Whether the shipped artefact is the default configuration's compile (tuned or not)."""
        from kbuild.declarations.space import normalize_point, point_id

        config = self.config
        if config is None:
            return True
        try:
            return point_id(normalize_point(config)) == point_id(normalize_point(self.default_config))
        except ValueError:
            return False

    @property
    def improved(self) -> bool:
        """A tuning result whose cubin differs from the baseline (the acceptance rule took it)."""
        return self.tuned and bool(self.artefact is not None and self.artefact.meta.get("tuned"))

    @property
    def state(self) -> str:
        """``tuned`` (an accepted schedule ships), ``baseline-kept`` (tuned, nothing passed the acceptance
        rule) or ``baseline`` (never tuned)."""
        return "tuned" if self.improved else ("baseline-kept" if self.tuned else "baseline")

    @property
    def key(self) -> KernelKey:
        """The key of the artefact this build ships."""
        return self.tuned_key if (self.tuned and self.tuned_key is not None) else self.baseline_key

    def as_json(self) -> dict[str, Any]:
        """The build as ``kbuild compile --json`` and ``kbuild prewarm --json`` print it."""
        art = self.artefact
        return {
            "kernel": self.spec.name,
            "target": self.target.name,
            "arch": self.target.arch,
            "key": self.key.hex,
            "baseline_key": self.baseline_key.hex,
            "tuned_key": self.tuned_key.hex if self.tuned_key else None,
            "cubin_sha256": art.cubin_sha256 if art is not None else None,
            "cubin_bytes": len(art.cubin) if art is not None else None,
            "symbol": art.meta.get("symbol") if art is not None else None,
            "tuned": self.tuned,
            "store_hit": self.hit,
            "status": self.status,
        }


#: ``tuner(settings, build) -> Artefact`` (the result to store under ``build.tuned_key``).
Tuner = Callable[[Settings, KernelBuild], "Artefact"]


__all__ = ["KernelBuild", "Tuner"]
