"""The kernel pipeline: specs → compile → key → store → (tune) → result per kernel × target.

Each phase is a function of its own module, run in this order by :func:`run_pipeline`, so that bad input never
leaves anything in the store:

1. **specs and keys** (:func:`kbuild.build.resolve.specs_and_keys`): import every kernel, check its declaration
   against the function, compute its keys (cheap; no compilation), or take the keys from the memo of an
   earlier build; the recordings' specialisations too (:mod:`kbuild.build.recorded`, never from the memo),
   each key built once. Any error stops here.
2. **store** (:func:`look_up_tuned`): a stored tuning result ships as is (unless ``tune = "off"``).
   Memo keys whose baselines the store lacks are resolved in full now.
3. **require** (:func:`kbuild.build.tuning.require_tuned`): under ``tune = "require"``, fail before anything is
   compiled or written, listing every kernel × target that would ship untuned.
4. **compile** (:func:`kbuild.build.baselines.compile_baselines`): the rest get their stored baseline, or one
   compiled now. A compile error stops here, still before any write, and so does a wgmma register race under
   ``wgmma_hazards = "error"`` (:func:`kbuild.build.hazards.refuse_wgmma_hazards`: in a new compile or a stored
   artefact); then the new baselines are put into the writable store tiers.
5. **tune** (:func:`kbuild.build.tuning.tune_missing`): for each kernel × target without a tuning result, when
   ``tune`` is not ``off``, a GPU of that architecture is here and the kernel has a ``bench`` spec, the tuner
   (:func:`kbuild.build.tuning.tune_build`, measuring in an isolated worker) searches within the budget and
   its result is put under the tuned key right away (so an interrupted build keeps what finished).
   The result is the tuned cubin when the acceptance rule took it, else the baseline with the
   reason ("baseline kept"): either way the search is not repeated. Otherwise the baseline ships
   and the status line says why.

Modes (``tune`` in the settings): ``off`` never looks for tuned entries; ``auto`` ships the
baseline where no tuned entry exists and says why; ``require`` fails as above.

``locked=PATH`` (``--locked``): use exactly the artefacts pinned in ``kbuild.lock``; nothing is
compiled, and one error lists every missing or stale entry (:func:`kbuild.cache.check_lock`).

**The build entry point** is :func:`kbuild.build.plan.plan`, which runs this pipeline as a build does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from kbuild.declarations.kernel import KernelSettings
from kbuild.errors import StoreError, UsageError
from kbuild.settings.model import Settings
from kbuild.targets import Target

from .baselines import compile_baselines
from .hazards import refuse_wgmma_hazards
from .kernel_build import KernelBuild, Tuner
from .recorded import RecordingReport, collapse, recorded_builds
from .resolve import resolve_and_remember, select_kernels, select_targets, specs_and_keys
from .tunable import can_tune, tuned_status
from .tuning import require_tuned, tune_build, tune_missing

log = logging.getLogger(__name__)


def strict_store_error(settings: Settings, exc: Exception) -> StoreError:
    """A remote tier failed under ``--strict``: the error, naming the config file and the remote entry."""
    from kbuild.cache.url import redact_url

    entry = "remotes"
    for i, remote in enumerate(settings.remotes):
        if redact_url(remote.url) in str(exc):
            entry = f"remotes[{i}] ({redact_url(remote.url)})"
            break
    return StoreError(f"{settings.config_file}: {entry}: store tier unavailable and --strict is set: {exc}\n"
                      "  next step: bring the remote back, or build without --strict (a warning and a miss)")


def look_up_tuned(builds: Sequence[KernelBuild], store: Any) -> None:
    """Phase store, first half: each build whose tuned entry is stored ships it."""
    for b in builds:
        found = store.get(b.tuned_key.hex) if b.tuned_key is not None else None
        if found is not None:
            b.artefact, b.hit, b.tuned = found, True, True
            b.status = tuned_status(found)


def baselines_stored(builds: Sequence[KernelBuild], store: Any) -> bool:
    """Whether the store holds the baseline of every build that has no tuned entry (a memo build can go on)."""
    return all(b.tuned or store.contains(b.baseline_key.hex) for b in builds)


def resolve_builds(settings: Settings, kspecs: Sequence[KernelSettings], targets: Sequence[Target], *,
                   recordings: bool = True, memo: bool = False
                   ) -> tuple[list[KernelBuild], bool, list[KernelBuild], RecordingReport | None]:
    """Every kernel × target a build takes, keyed: the declarations ``kspecs`` (with ``memo``: from the memo when
    its fingerprint holds), then, with ``recordings``, the specialisations ``[tool.kbuild] recordings`` declare,
    once per key (:func:`kbuild.build.recorded.collapse`). ``(builds, keys from the memo, recorded builds, what
    the build made of the recordings)``; the last two empty/None without recordings. The build and the Ray
    prewarm's driver resolve alike through this."""
    builds, from_memo = specs_and_keys(settings, kspecs, targets, memo=memo) if kspecs else ([], False)
    if not (recordings and settings.recordings):
        return builds, from_memo, [], None
    recorded, said = recorded_builds(settings, targets)
    return collapse(builds, recorded, said), from_memo, recorded, said


def run_pipeline(settings: Settings, store: Any = None, *, kernels: Sequence[str] | None = None,
                 targets: Sequence[Target | str] | None = None,
                 on_step: Callable[[KernelBuild], None] | None = None,
                 locked: str | os.PathLike[str] | None = None, memo: bool = False,
                 tune_on_miss: bool = False, tuner: Tuner | None = None,
                 strict: bool | None = None,
                 on_recordings: Callable[[RecordingReport], None] | None = None) -> list[KernelBuild]:
    """Resolve, look up, compile and store every kernel × target. Returns the builds in order.

    ``store`` defaults to the settings' tiered store, opened only after every kernel resolved, so
    bad input does not even create an empty store directory; ``strict`` (default: ``settings.strict``)
    is how it treats a remote tier that is down.

    ``memo``: take the keys from the memo of an earlier resolve when its fingerprint holds
    (:mod:`kbuild.build.memo`; the build hooks use it so that all-hit builds import no Triton).
    Should any baseline be missing from the store, the kernels are resolved in full before anything
    is compiled.

    ``tune_on_miss``: this run ships what it finds (the build hooks set it; ``kbuild compile`` and
    ``kbuild tune`` do not): run the tune phase, and under ``tune = "require"`` fail before compiling
    when some kernel × target has no tuning result and cannot get one here. ``tuner`` replaces
    :func:`kbuild.build.tuning.tune_build` (tests; other measurement setups).

    ``[tool.kbuild] recordings`` (not with ``kernels``: the names are hand-written ones): every recorded
    specialisation is built too, for every target, after the hand-written ones and once per key
    (:mod:`kbuild.build.recorded`); ``on_recordings`` hears what the build made of them.
    """
    from kbuild.cache import open_store

    kspecs, tlist = select_kernels(settings, kernels), select_targets(settings, targets)
    builds, from_memo, recorded, said = resolve_builds(settings, kspecs, tlist, recordings=not kernels, memo=memo)
    if said is not None and on_recordings is not None:
        on_recordings(said)
    if store is None:
        store = open_store(settings, strict=settings.strict if strict is None else strict)
    if locked is not None:
        builds = _from_lock(builds, store, locked, on_step, subset=bool(kernels or targets))
        refuse_wgmma_hazards(settings, builds)
        return builds
    look_up_tuned(builds, store)
    if from_memo and not baselines_stored(builds, store):
        log.debug("memo keys miss the store; resolving in full")
        builds = resolve_and_remember(settings, kspecs, tlist)
        if said is not None:
            builds = collapse(builds, recorded, said)
        look_up_tuned(builds, store)
    if tune_on_miss:
        require_tuned(settings, builds)

    def report(b: KernelBuild) -> None:  # a build the tune phase takes is reported by it
        if on_step is not None and (b.tuned or not (tune_on_miss and can_tune(settings, b))):
            on_step(b)

    new = compile_baselines(settings, builds, store, report)
    refuse_wgmma_hazards(settings, builds)
    for art in new:  # only after everything compiled (and nothing refused)
        store.put(art)
    if tune_on_miss:
        tune_missing(settings, builds, store, tuner or tune_build, on_step)
    return builds


def _from_lock(builds: list[KernelBuild], store: Any, lock: str | os.PathLike[str],
               on_step: Callable[[KernelBuild], None] | None, *, subset: bool) -> list[KernelBuild]:
    """``--locked``: every build gets exactly its pinned artefact, or one error lists every problem."""
    from kbuild.cache import check_lock, read_lock

    pins = read_lock(lock)
    if subset:  # building some kernels/targets only: pins of the others are not stale
        wanted = {(b.spec.name, b.target.name) for b in builds}
        pins = [p for p in pins if (p.kernel, p.target) in wanted]
    pinned = {(p.kernel, p.target): p.key for p in pins}
    expected = []
    for b in builds:
        pin = pinned.get((b.spec.name, b.target.name))
        use_tuned = b.tuned_key is not None and pin == b.tuned_key.hex
        expected.append((b.spec.name, b.target.name, b.tuned_key.hex if use_tuned and b.tuned_key else b.baseline_key.hex))
    try:
        found = check_lock(expected, store, lock=pins)
    except UsageError as exc:  # LockMismatchError names "kbuild.lock" when given entries; name the real file
        problems = getattr(exc, "problems", None)
        if problems is None:
            raise
        from kbuild.cache import LockMismatchError

        raise LockMismatchError(str(lock), problems) from None
    for b in builds:
        art = found[(b.spec.name, b.target.name)]
        b.artefact, b.hit = art, True
        b.tuned = b.tuned_key is not None and art.key == b.tuned_key.hex
        b.status = f"locked: {tuned_status(art)}" if b.tuned else "locked: baseline"
        if on_step is not None:
            on_step(b)
    return builds


__all__ = ["baselines_stored", "look_up_tuned", "run_pipeline", "strict_store_error"]
