"""The tune phase: tuning one build (:func:`tune_build`), the artefact of its result, and the phase that runs it.

:func:`tune_build` is the one entry for tuning one kernel × target: a kernel with a configuration space gets the
two-level search (:func:`kbuild.tune.two_level.tune_two_level`: the space, then the SASS schedule of the best
configurations), one without gets the SASS level alone on its baseline (:func:`kbuild.tune.api.tune`); measured on
this machine's GPU in an isolated worker (``measure="gpu"``, what a build and ``kbuild prewarm`` run) or judged by
the CPU cost model (``measure="model"``, the distributed prewarm's stand-in). The result is an artefact for the
build's tuned key (:func:`tuned_artefact`): the tuned cubin when the acceptance rule took it, else the baseline
with the reason.

:func:`require_tuned` (``tune = "require"``) fails before anything is compiled; :func:`tune_missing` tunes what
can be tuned here and stores each result at once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kbuild import __version__
from kbuild.errors import KBuildError, UntunedError
from kbuild.settings.model import Settings, TuneRequest

from .baselines import compile_config
from .hazards import wgmma_hazard_error
from .kernel_build import KernelBuild, Tuner
from .tunable import can_tune, tuned_status, untuned_reason

if TYPE_CHECKING:  # kbuild.cache is imported where an artefact is made
    from kbuild.cache import Artefact

log = logging.getLogger(__name__)


def require_tuned(settings: Settings, builds: Sequence[KernelBuild]) -> None:
    """``tune = "require"``: fail, before anything is compiled or written, listing every kernel × target
    that has no tuning result and cannot get one on this machine."""
    if settings.tune != "require":
        return
    missing = [b for b in builds if not b.tuned and not can_tune(settings, b)]
    if missing:
        lines = "\n".join(f"  - {b.spec.name} / {b.target.name}: {untuned_reason(settings, b.target)}"
                          for b in missing)
        raise UntunedError(f"{settings.config_file}: tune = \"require\": {len(missing)} kernel × target "
                           f"would ship untuned:\n{lines}\n  next step: prewarm the store on a GPU machine of "
                           "each target, or set tune = \"auto\"")


def tune_build(settings: Settings, b: KernelBuild, *, measure: Literal["gpu", "model"] = "gpu",
               pool: Any = None) -> Artefact:
    """Tune ``b`` within the settings' budget (algorithm, seed, edit kinds); the artefact to store under its tuned key.

    ``b`` carries its baseline (``b.artefact``). A kernel with a configuration space (more than one point in
    ``b.space``) gets both levels, one without the SASS level alone on its baseline. ``measure="gpu"``: measured on
    this machine's GPU (the kernel's ``bench`` spec, in an isolated worker,
    :class:`kbuild.tune.measure.client.WorkerClient`); ``"model"``: judged by the CPU cost model at every level
    (by the acceptance rule the SASS level then ships the baseline; level 1's choice ships its configuration's
    untouched compile). ``pool``: where level 1 compiles its candidates (a
    :data:`kbuild.tune.level1.compile.CompilerFactory`; default, a process pool here). Without the ``[tune]``
    extra, a :class:`~kbuild.errors.MissingDependencyError` naming it. The settings' tuning request
    (:meth:`~kbuild.settings.model.Settings.tune_request`) is made here, once, and handed whole to the tuner."""
    from kbuild.tune.api import tune

    assert b.tuned_key is not None and b.artefact is not None
    python_path = tuple(str(settings.project_dir / p) for p in settings.python_path)
    request = settings.tune_request()
    if len(b.space) > 1:
        return _tune_two_level(settings, b, request, python_path, pool=pool, measure=measure)
    base = b.artefact
    started = time.time()
    peers: dict[str, Any] = {}
    if measure == "model":
        result = tune(base.cubin, request.replace(policy=None), kernel=base.meta.get("symbol"), backend=None)
    else:
        from kbuild.tune.measure.backend import KernelRef
        from kbuild.tune.measure.client import WorkerClient

        assert b.spec.bench
        ref = KernelRef(spec=b.spec.bench, python_path=python_path)
        backend = WorkerClient()
        try:
            result = tune(base.cubin, request, kernel=base.meta.get("symbol"), backend=backend, kernel_ref=ref)
            peers = backend.peers(result.cubin)  # the loaded kernel's peers, if its spec has any
        finally:
            backend.close()
    report = result.report()
    if peers.get("peers") or peers.get("error"):
        report["peers"] = peers
    return tuned_artefact(b, result.cubin, accepted=result.decision.accepted, speedup=result.decision.speedup,
                          reason=result.decision.reason, report=report, seconds=time.time() - started)


def _tune_two_level(settings: Settings, b: KernelBuild, request: TuneRequest, python_path: tuple[str, ...], *,
                    pool: Any = None, measure: str = "gpu") -> Artefact:
    """Both levels on ``b``'s declared space within ``request``: measured on this machine's GPU (``measure="gpu"``),
    or judged by the CPU cost model at both levels (``"model"``: :class:`kbuild.tune.level1.ModelConfigMeasurer`,
    then the SASS search without a GPU). ``pool``: where level 1 compiles (:func:`tune_build`), each configuration
    under the request's ``compile_timeout``."""
    from kbuild.bench.peers import time_beside_peers
    from kbuild.bench.spec import Config, load_spec
    from kbuild.tune.level1 import GpuConfigMeasurer, ModelConfigMeasurer
    from kbuild.tune.measure.backend import KernelRef
    from kbuild.tune.measure.client import WorkerClient
    from kbuild.tune.two_level import project_spec, tune_two_level

    assert b.spec.bench
    bench_ref = b.spec.bench
    loaded = load_spec(bench_ref, python_path=python_path)  # a recorded call no spec can be made of is refused
    points, space_report = _pruned_space(b, request, python_path)  # before its space is compiled
    spec = project_spec(loaded, points)
    compiled: dict[str, Artefact] = {}

    def baseline(config: Config) -> tuple[bytes, str, dict[str, Any]]:
        art = compiled.setdefault(config.label(), compile_config(settings, b, config.as_dict()))
        return art.cubin, str(art.meta.get("symbol")), {}

    started = time.time()
    measurer: Any
    backend: Any
    if measure == "model":
        measurer = ModelConfigMeasurer(spec, arch=b.target.cc, python_path=python_path, pool=pool, jobs=request.jobs,
                                       compile_timeout=request.compile_timeout)
        backend = None
    else:
        measurer = GpuConfigMeasurer(spec, python_path=python_path, pool=pool, jobs=request.jobs,
                                     compile_timeout=request.compile_timeout)
        backend = WorkerClient()
    try:
        result = tune_two_level(spec, b.target.cc, request, measurer=measurer, backend=backend,
                                kernel_ref=lambda c: KernelRef(spec=bench_ref, config=c.as_dict(),
                                                               python_path=python_path),
                                baseline=baseline)
        peers = time_beside_peers(spec, backend, KernelRef(spec=bench_ref, config=result.config.as_dict(),
                                                           python_path=python_path),
                                  lambda: baseline(result.config)[0], result.cubin)
    finally:
        if backend is not None:
            backend.close()
        measurer.close()
    default = result.config.label() == result.default.label()
    total = result.gains.get("final") or result.gains.get("total")
    reason = (result.final or {}).get("reason") or (
        result.level2[result.config.label()].decision.reason if result.config.label() in result.level2 else "")
    report = result.report()
    if space_report is not None:
        report["space"] = space_report
    if peers is not None:
        report["peers"] = peers
    return tuned_artefact(b, result.cubin, accepted=result.accepted, speedup=total, reason=str(reason),
                          report=report, seconds=time.time() - started,
                          base=None if default else compiled.get(result.config.label()) or
                          compile_config(settings, b, result.config.as_dict()),
                          gains={"level1": float(result.gains.get("level1") or 1.0),
                                 "level2": float(result.gains.get("level2") or 1.0)})


def _pruned_space(b: KernelBuild, request: TuneRequest, python_path: tuple[str, ...] = ()
                  ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """``b.space``, less what the CPU prunes before any GPU time is spent, where the space was derived for a
    recorded kernel (:func:`kbuild.tune.level1.prune.prune`: compile errors, shared memory, occupancy, spills,
    wgmma races, duplicate machine code), and the report of it (``{derived, size, kept, pruned, points}``; None for a
    declared space, which is searched as declared)."""
    recorded = getattr(b, "recorded", None)
    derived = recorded.derived if recorded is not None else None
    if recorded is None or derived is None:
        return list(b.space), None
    from kbuild.declarations.space import OPTION_KEYS
    from kbuild.tune.level1.prune import prune
    from kbuild.usercode import on_path

    space = list(b.space)
    with on_path(python_path):  # the compile processes import the project's kernel (they start with this sys.path)
        if recorded.output_check is not None:  # block sizes shown safe by checking outputs, here where it is searched
            from kbuild.tune.level1.derive import derive_space

            derived = derive_space(derived.subject, fn=b.fn, check_outputs=recorded.output_check)
            space = derived.servable_points(b.spec.constexprs, b.spec.num_ctas)
            for c in derived.output_checks:
                log.info("%s / %s: constexprs %s %s: %s", b.spec.name, b.target.name, c["constexprs"],
                         "shown safe" if c["accepted"] else "left out", c["why"])
        pruned = prune(derived, jobs=request.jobs, timeout=request.compile_timeout)

    # a point is its options and the values of the constexprs the derived space varies (a point of b.space states
    # every constexpr; a pruned configuration only those)
    varied = sorted({n for v in pruned.verdicts for n in v.config.constexprs})

    def ident(p: Any) -> tuple[Any, ...]:
        get = p.get if isinstance(p, dict) else lambda n: getattr(p, n)
        cx = get("constexprs") or {}
        return (*(get(n) for n in OPTION_KEYS), *(json.dumps(cx.get(n), sort_keys=True, default=str) for n in varied))

    kept = {ident(v.config) for v in pruned.verdicts if v.kept}
    points = [p for i, p in enumerate(space) if i == 0 or ident(p) in kept]  # the default is always searched
    report = pruned.as_dict()
    report["searched"] = len(points)
    return points, report


def tuned_artefact(b: KernelBuild, cubin: bytes, *, accepted: bool, speedup: float | None, reason: str,
                   report: dict[str, Any] | None = None, seconds: float = 0.0, base: Artefact | None = None,
                   gains: dict[str, float] | None = None) -> Artefact:
    """The artefact of a tuning result for ``b`` (stored under its tuned key).

    ``base``: the untouched compile of the chosen configuration (:func:`kbuild.build.baselines.compile_config`) when
    it is not the default; its metadata (``config``, shared memory, ``num_warps``, constexprs...) describe
    ``cubin``. Without it, or when not ``accepted`` (the baseline ships), the baseline's. ``gains``:
    ``{"level1": ×, "level2": ×}`` (the configuration's gain over the default, and the SASS schedule's over the
    configuration), which the manifest and ``kbuild inspect`` show."""
    from kbuild.cache import Artefact
    from kbuild.device.probe import local_gpus

    assert b.tuned_key is not None and b.artefact is not None
    src = base if (accepted and base is not None) else b.artefact
    meta = {k: v for k, v in src.meta.items() if k not in ("key", "key_components", "created", "created_at")}
    meta.setdefault("config", b.default_config)
    gpu = next((g.name for g in local_gpus() if g.cc == b.target.cc), None)
    meta.update({"key": b.tuned_key.hex, "key_components": b.tuned_key.components, "tuned": bool(accepted),
                 "baseline_key": b.baseline_key.hex, "baseline_cubin_sha256": b.artefact.cubin_sha256,
                 "speedup": speedup, "tune_decision": reason, "tune_seconds": round(seconds, 3), "gpu_name": gpu,
                 "kbuild_version": __version__})
    if src is not b.artefact:
        meta["config_cubin_sha256"] = src.cubin_sha256
    if gains is not None:
        meta["gains"] = {str(k): float(v) for k, v in gains.items()}
    if report is not None:
        meta["tune_report"] = report
    return Artefact.create(key=b.tuned_key.hex, cubin=cubin if accepted else b.artefact.cubin, meta=meta)


def tune_missing(settings: Settings, builds: Sequence[KernelBuild], store: Any, tuner: Tuner,
                 on_step: Callable[[KernelBuild], None] | None) -> None:
    """Phase tune: each build without a tuning result that can be tuned here is; each result is stored at once
    (an interrupted build keeps what finished). A failure ships the baseline under ``auto`` (nothing is
    stored, so the next build tries again) and stops the build under ``require``."""
    for b in builds:
        if b.tuned or not can_tune(settings, b):
            continue
        try:
            art = tuner(settings, b)
        except KBuildError as exc:
            if settings.tune == "require":
                raise
            log.warning("tuning %s for %s failed; shipping the baseline: %s", b.spec.name, b.target.name, exc)
            b.status = f"untuned: tuning failed: {exc}"
            if on_step is not None:
                on_step(b)
            continue
        found = art.meta.get("wgmma_register_hazards") if settings.wgmma_hazards == "error" else None
        if found:  # the tuner chose a configuration whose compile has the race
            raise wgmma_hazard_error(settings, b, "the cubin of the configuration the tuner chose",
                                     [str(h) for h in found])
        store.put(art)
        if settings.reports:
            write_tune_report(settings.project_path(settings.reports), b, art)
        b.artefact, b.tuned, b.hit = art, True, False
        b.status = tuned_status(art)
        if on_step is not None:
            on_step(b)


def write_tune_report(folder: Path, b: KernelBuild, art: Artefact) -> list[Path]:
    """``<kernel>.<target>.tune.json`` and ``.tune.html`` of ``b``'s tuning result ``art`` in ``folder`` (the
    ``reports`` setting), ``b.artefact`` being the baseline it was tuned from; the paths written. A report that
    cannot be written is a warning: the build goes on (the report stays in the artefact's metadata)."""
    from kbuild.canonical import canonical_json
    from kbuild.fsutil import write_atomic
    from kbuild.tune.report_html import write_report_html

    assert b.artefact is not None
    report = dict(art.meta.get("tune_report") or {})
    report.setdefault("kernel", b.spec.name)
    report.update(target=b.target.name, gpu=art.meta.get("gpu_name"))
    stem = f"{b.spec.name}.{b.target.name}.tune"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / f"{stem}.json", canonical_json(report) + b"\n")
        write_report_html(report, b.artefact.cubin, art.cubin, folder / f"{stem}.html",
                          kernel_symbol=str(art.meta.get("symbol") or "") or None)
    except (OSError, ValueError, KBuildError) as exc:
        log.warning("%s / %s: the tune report could not be written to %s: %s", b.spec.name, b.target.name, folder, exc)
        return []
    return [folder / f"{stem}.json", folder / f"{stem}.html"]


__all__ = ["require_tuned", "tune_build", "tune_missing", "tuned_artefact", "write_tune_report"]
