"""The kernel pipeline: specs → compile → key → store → (tune) → result per kernel × target.

Each phase is a function, run in this order by :func:`run_pipeline`, so that bad input never leaves
anything in the store:

1. **specs and keys** (:func:`specs_and_keys`): import every kernel, check its declaration against
   the function, compute its keys (cheap; no compilation), or take the keys from the memo of an
   earlier build. Any error stops here.
2. **store** (:func:`look_up_tuned`): a stored tuning result ships as is (unless ``tune = "off"``).
   Memo keys whose baselines the store lacks are resolved in full now.
3. **require** (:func:`require_tuned`): under ``tune = "require"``, fail before anything is compiled
   or written, listing every kernel × target that would ship untuned.
4. **compile** (:func:`compile_baselines`): the rest get their stored baseline, or one compiled
   now. A compile error stops here, still before any write, and so does a wgmma register race under
   ``wgmma_hazards = "error"`` (:func:`refuse_wgmma_hazards`: in a new compile or a stored artefact);
   then the new baselines are put into the writable store tiers.
5. **tune** (:func:`tune_missing`): for each kernel × target without a tuning result, when ``tune``
   is not ``off``, a GPU of that architecture is here and the kernel has a ``bench`` spec, the tuner
   (:func:`kbuild.tune.api.tune`, measuring in an isolated worker) searches within the budget and
   its result is put under the tuned key right away (so an interrupted build keeps what finished).
   The result is the tuned cubin when the acceptance rule took it, else the baseline with the
   reason ("baseline kept"): either way the search is not repeated. Otherwise the baseline ships
   and the status line says why.

Modes (``tune`` in the settings): ``off`` never looks for tuned entries; ``auto`` ships the
baseline where no tuned entry exists and says why; ``require`` fails as above.

``locked=PATH`` (``--locked``): use exactly the artefacts pinned in ``kbuild.lock``; nothing is
compiled, and one error lists every missing or stale entry (:func:`kbuild.cache.check_lock`).

**The build entry point** is :func:`plan`: the PEP 517 backend, the setuptools plugin and ``kbuild
emit`` all call it, and get a :class:`BuildPlan` (the results, the kernels to emit, the manifest);
:func:`replay` makes the same object from a manifest an earlier step planned.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbuild import __version__
from kbuild.compile import compile_kernel, compiler_options, load_jit_function, portable_options, source_hash
from kbuild.compile.triton_aot import ast_source_args, kernel_index, load_source
from kbuild.config import KernelSettings, Settings, check_grid_names
from kbuild.device.probe import has_gpu
from kbuild.errors import ConfigError, KBuildError, KernelSourceError, StoreError, UntunedError, UsageError
from kbuild.key import KernelKey, compiler_component, kernel_key, tuner_component
from kbuild.targets import Target, parse_target
from kbuild.toolchain import ptxas_version, triton_version
from kbuild.tune import TUNER_VERSION

log = logging.getLogger(__name__)


@dataclass
class KernelBuild:
    """One kernel × target through the pipeline."""

    spec: KernelSettings
    target: Target
    baseline_key: KernelKey
    tuned_key: KernelKey | None
    fn: Any = field(repr=False)
    artefact: Any = None  # kbuild.cache.Artefact once found or made
    hit: bool = False
    tuned: bool = False
    """Whether the shipped artefact is the one under the tuned key (a tuning result)."""
    status: str = ""
    space: list[dict[str, Any]] = field(default_factory=list)
    """The kernel's configuration space, resolved (an ``@triton.autotune`` source's configs read), the default
    first (:meth:`kbuild.config.KernelSettings.search_space`'s shape): what a tuner searches."""

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
        from kbuild.space import normalize_point, point_id

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


def select_targets(settings: Settings, targets: Sequence[str] | None) -> list[Target]:
    """The targets named on the command line (``--targets``, parsed here), else the project's."""
    if not targets:
        return list(settings.parsed_targets)
    out: list[Target] = []
    for name in targets:
        try:
            t = parse_target(name)
        except ValueError as exc:
            raise UsageError(f"--targets: {exc}") from None
        if t not in out:
            out.append(t)
    return out


def select_kernels(settings: Settings, names: Sequence[str] | None) -> list[KernelSettings]:
    if not settings.kernels:
        raise UsageError(f"{settings.config_file}: [tool.kbuild.kernels]: no kernels declared")
    return [settings.kernel(n) for n in names] if names else list(settings.kernels)


def resolve(settings: Settings, kernels: Sequence[KernelSettings], targets: Sequence[Target]) -> list[KernelBuild]:
    """Phase 1: import and check every kernel and compute its keys. Raises before anything is written.

    An ``@triton.autotune`` source (or ``autotune = true``) is resolved here: the build's ``spec`` is the
    declaration with the default configuration filled in and the autotuner's configs as ``configs``
    (:func:`resolve_space`), and ``space`` the resolved points."""
    builds = []
    toolchain = {"triton_version": triton_version(), "ptxas_version": ptxas_version()}
    tuner = tuner_component(settings, version=TUNER_VERSION) if settings.tune != "off" else None
    for declared in kernels:
        spec, space, fn = resolve_declaration(settings, declared)
        shash = source_hash(fn)
        dist = source_distribution(spec, fn)
        for target in targets:
            baseline, tuned = _keys(spec, target, shash, toolchain, tuner, space, dist)
            builds.append(KernelBuild(spec=spec, target=target, baseline_key=baseline, tuned_key=tuned, fn=fn,
                                      space=space))
    return builds


def resolve_declaration(settings: Settings, declared: KernelSettings) -> tuple[KernelSettings, list[dict[str, Any]], Any]:
    """Import ``declared.source`` and resolve the declaration against it: the ``@triton.jit`` function under any
    ``@triton.autotune``/``@triton.heuristics`` layers (:func:`kbuild.compile.triton_aot.unwrap`), parameter
    defaults filled in (:func:`~kbuild.compile.triton_aot.complete_declaration`), the configuration space
    (:func:`resolve_space`) and the heuristics' values put into every point
    (:func:`~kbuild.compile.triton_aot.evaluate_heuristics`). Returns (the resolved spec, its space, the function);
    errors name the key, before anything is compiled."""
    import dataclasses

    from kbuild.compile.triton_aot import complete_declaration, evaluate_heuristics, unwrap
    from kbuild.space import autotune_configs

    layers = unwrap(load_source(settings, declared))
    skip: set[str] = set()
    if layers.autotuner is not None and not (declared.space or declared.configs):
        with contextlib.suppress(ValueError):
            skip = {n for e in autotune_configs(layers.autotuner) for n in e}
    spec = complete_declaration(settings, declared, layers, skip)
    spec, space = resolve_space(settings, spec, layers.autotuner)
    if layers.heuristics:
        given = dict(declared.constexprs)
        section = "space" if spec.space else "configs"
        space = [evaluate_heuristics(settings, spec, layers, space[0], declared=given)] + [
            evaluate_heuristics(settings, spec, layers, p, declared={**given, **_config_values(spec, p)}, where=section)
            for p in space[1:]]
        default = space[0]
        spec = dataclasses.replace(spec, constexprs=dict(default["constexprs"]))
    fn = layers.jit
    ast_source_args(settings, spec, fn)  # validates the declaration against the function
    _check_space_against(settings, spec, fn, space)
    return spec, space, fn


def _config_values(spec: KernelSettings, point: dict[str, Any]) -> dict[str, Any]:
    """The constexprs a point of ``spec``'s space sets itself (those that differ from the default's)."""
    return {n: v for n, v in point["constexprs"].items() if spec.constexprs.get(n, object()) != v}


def source_distribution(spec: KernelSettings, fn: Any) -> dict[str, str] | None:
    """``{"name", "version"}`` of the installed distribution whose files hold the kernel's module (a kernel
    imported from site-packages, :func:`kbuild.distributions.distribution_of`); None for a kernel of the project
    (its key stays what it was)."""
    import sys

    from kbuild.distributions import distribution_of

    mod = sys.modules.get(getattr(fn, "__module__", "") or spec.module)
    path = getattr(mod, "__file__", None)
    if not isinstance(path, str):
        return None
    return distribution_of(path, spec.module.partition(".")[0])


def _keys(spec: KernelSettings, target: Target, shash: str, toolchain: dict[str, str], tuner: dict[str, Any] | None,
          space: list[dict[str, Any]], dist: dict[str, str] | None = None) -> tuple[KernelKey, KernelKey | None]:
    compiler = compiler_component(options=portable_options(compiler_options(target, spec)), **toolchain)
    common: dict[str, Any] = {"spec": spec, "target": target, "source_hash": shash, "function": spec.function,
                              "compiler": compiler, "distribution": dist}
    baseline = kernel_key(**common, tuner=None)
    tuned = kernel_key(**common, tuner=tuner, space=space) if tuner is not None else None
    return baseline, tuned


def resolve_space(settings: Settings, spec: KernelSettings, obj: Any) -> tuple[KernelSettings, list[dict[str, Any]]]:
    """The declaration with its configuration space resolved, and the space's points (default first).

    ``obj`` is the ``@triton.autotune`` object of ``spec.source`` (None: there is none). An ``@triton.autotune`` object gives its configs when the declaration
    has no ``space`` or ``configs`` of its own (:func:`kbuild.space.autotune_configs`; the default is chosen by
    :func:`kbuild.space.autotune_default`); ``autotune = true`` over a plain ``@triton.jit`` function is an error
    naming the key."""
    import dataclasses

    from kbuild.space import SpaceError, autotune_configs, autotune_default, expand

    base = f"[tool.kbuild.kernels][{kernel_index(settings, spec)}]"
    autotuner = obj if obj is not None and hasattr(obj, "configs") else None
    if spec.autotune and autotuner is None:
        raise KernelSourceError(settings.config_file, f"{base}.autotune",
                                f"autotune = true, but {spec.source!r} is not an @triton.autotune object")
    try:
        if autotuner is None or spec.space or spec.configs:
            return spec, spec.search_space() if not spec.autotune else [spec.default_config()]
        entries = autotune_configs(autotuner)
        default = autotune_default(spec.default_config(), entries)
        space = expand(default, configs=entries, runtime=spec.signature, require_declared=False)
    except SpaceError as exc:
        raise KernelSourceError(settings.config_file, f"{base}.{exc.key}", exc.detail) from None
    resolved = dataclasses.replace(spec, constexprs=dict(default["constexprs"]), num_warps=default["num_warps"],
                                   num_stages=default["num_stages"], maxnreg=default["maxnreg"],
                                   num_ctas=default["num_ctas"], ptx_options=default.get("ptx_options") or "",
                                   configs=entries, autotune=False)
    return resolved, space


def _check_space_against(settings: Settings, spec: KernelSettings, fn: Any, space: list[dict[str, Any]]) -> None:
    """Every point's constexprs are the function's constexpr parameters, and the grid reads integers in every
    point (the autotuner's configs are known only now)."""
    base = f"[tool.kbuild.kernels][{kernel_index(settings, spec)}]"
    constexpr_params = {p.name for p in fn.params if p.is_constexpr}
    for point in space[1:]:
        unknown = sorted(set(point["constexprs"]) - constexpr_params)
        if unknown:
            section = "space" if spec.space else "configs"
            raise KernelSourceError(settings.config_file, f"{base}.{section}.{unknown[0]}",
                                    f"{spec.function}() has no constexpr parameter {unknown[0]!r}")
    if spec.grid:
        from kbuild.grid import parse_grid

        grid = parse_grid(spec.grid)
        check_grid_names(spec, grid, space,
                         lambda i, m: ConfigError(settings.config_file, f"{base}.grid[{i}]", m))


def resolve_memoized(settings: Settings, kernels: Sequence[KernelSettings],
                     targets: Sequence[Target]) -> list[KernelBuild] | None:
    """Phase 1 from the memo of an earlier full resolve (:mod:`kbuild.hooks.memo`), or None.

    The builds carry no imported function (``fn`` is None): fine for store lookups, not for compiling.
    """
    from kbuild.hooks import memo

    entries = memo.load(settings, kernels, targets)
    if entries is None:
        return None
    by_id = {(e["kernel"], e["target"]): e for e in entries}
    builds = []
    for spec in kernels:
        for target in targets:
            e = by_id.get((spec.name, target.name))
            if e is None:
                return None
            resolved, space = e.get("spec"), e.get("space")
            if not isinstance(resolved, dict) or not isinstance(space, list) or not space:
                return None
            builds.append(KernelBuild(spec=KernelSettings(**resolved), target=target,
                                      baseline_key=KernelKey(e["baseline"]),
                                      tuned_key=KernelKey(e["tuned"]) if e["tuned"] is not None else None, fn=None,
                                      space=space))
    return builds


def _resolve_and_remember(settings: Settings, kernels: Sequence[KernelSettings],
                          targets: Sequence[Target]) -> list[KernelBuild]:
    from kbuild.hooks import memo

    builds = resolve(settings, kernels, targets)
    memo.save(settings, kernels, targets, builds)
    return builds


def untuned_reason(settings: Settings, target: Target) -> str:
    if settings.tune == "off":
        return "untuned: tune = \"off\""
    if not has_gpu(target.cc):
        return f"untuned: no {target.name} GPU on this machine"
    return "untuned: the kernel has no bench spec ([tool.kbuild.kernels] bench = \"pkg.mod:callable\")"


def can_tune(settings: Settings, b: KernelBuild) -> bool:
    return settings.tune != "off" and b.tuned_key is not None and bool(b.spec.bench) and has_gpu(b.target.cc)


def _tuned_status(art: Any) -> str:
    speedup = art.meta.get("speedup")
    if art.meta.get("tuned"):
        return f"tuned ×{speedup:.3f}" if isinstance(speedup, (int, float)) else "tuned"
    reason = art.meta.get("tune_decision") or "no schedule beat the baseline"
    return f"tuned: {reason}"


#: ``tuner(settings, build) -> Artefact`` (the result to store under ``build.tuned_key``).
Tuner = Callable[[Settings, KernelBuild], Any]


def gpu_tuner(settings: Settings, b: KernelBuild, *, pool: Any = None) -> Any:
    """Tune ``b`` on this machine's GPU within the settings' budget; the artefact to store.

    A kernel with a configuration space gets the two-level search (:func:`kbuild.tune.two_level.tune_two_level`:
    its declared space on the GPU, then the SASS schedule of the best configurations); one without gets the SASS
    level alone on its baseline. ``pool``: where level 1 compiles its candidates
    (a :data:`kbuild.tune.level1.compile.CompilerFactory`; default, a process pool here)."""
    from kbuild.tune.api import tune
    from kbuild.tune.measure.backend import KernelRef
    from kbuild.tune.measure.client import WorkerClient

    assert b.tuned_key is not None and b.spec.bench
    base = b.artefact
    python_path = tuple(str(settings.project_dir / p) for p in settings.python_path)
    if len(b.space) > 1:
        return _two_level_tuner(settings, b, python_path, pool=pool)
    ref = KernelRef(spec=b.spec.bench, python_path=python_path)
    backend = WorkerClient()
    started = time.time()
    try:
        result = tune(base.cubin, kernel=base.meta.get("symbol"), backend=backend, kernel_ref=ref,
                      algorithms=(settings.algorithm,), evaluations=settings.budget.evaluations,
                      seconds=settings.budget.seconds, seed=settings.seed, kinds=tuple(settings.kinds))
    finally:
        backend.close()
    return tuned_artefact(b, result.cubin, accepted=result.decision.accepted, speedup=result.decision.speedup,
                          reason=result.decision.reason, report=result.report(), seconds=time.time() - started)


def _two_level_tuner(settings: Settings, b: KernelBuild, python_path: tuple[str, ...], *, pool: Any = None,
                     measure: str = "gpu") -> Any:
    """Both levels on ``b``'s declared space: measured on this machine's GPU (``measure="gpu"``), or judged by the
    CPU cost model at both levels (``"model"``: :class:`kbuild.tune.level1.ModelConfigMeasurer`, then the SASS
    search without a GPU). ``pool``: where level 1 compiles (:func:`gpu_tuner`)."""
    from kbuild.bench.spec import Config, load_spec
    from kbuild.tune.level1 import GpuConfigMeasurer, ModelConfigMeasurer
    from kbuild.tune.measure.backend import KernelRef
    from kbuild.tune.measure.client import WorkerClient
    from kbuild.tune.two_level import project_spec, tune_two_level

    assert b.spec.bench
    bench_ref = b.spec.bench
    spec = project_spec(load_spec(bench_ref, python_path=python_path), b.space)
    compiled: dict[str, Any] = {}

    def baseline(config: Config) -> tuple[bytes, str, dict[str, Any]]:
        art = compiled.setdefault(config.label(), compile_config(settings, b, config.as_dict()))
        return art.cubin, str(art.meta.get("symbol")), {}

    started = time.time()
    measurer: Any
    backend: Any
    if measure == "model":
        measurer, backend = ModelConfigMeasurer(spec, arch=b.target.cc, python_path=python_path, pool=pool), None
    else:
        measurer = GpuConfigMeasurer(spec, python_path=python_path, pool=pool)
        backend = WorkerClient()
    try:
        result = tune_two_level(spec, b.target.cc, measurer=measurer, backend=backend,
                                kernel_ref=lambda c: KernelRef(spec=bench_ref, config=c.as_dict(),
                                                               python_path=python_path),
                                baseline=baseline, evaluations=settings.budget.evaluations,
                                seconds=settings.budget.seconds, algorithms=(settings.algorithm,), seed=settings.seed,
                                kinds=tuple(settings.kinds))
    finally:
        if backend is not None:
            backend.close()
        measurer.close()
    default = result.config.label() == result.default.label()
    total = result.gains.get("final") or result.gains.get("total")
    reason = (result.final or {}).get("reason") or (
        result.level2[result.config.label()].decision.reason if result.config.label() in result.level2 else "")
    return tuned_artefact(b, result.cubin, accepted=result.accepted, speedup=total, reason=str(reason),
                          report=result.report(), seconds=time.time() - started,
                          base=None if default else compiled.get(result.config.label()) or
                          compile_config(settings, b, result.config.as_dict()),
                          gains={"level1": float(result.gains.get("level1") or 1.0),
                                 "level2": float(result.gains.get("level2") or 1.0)})


def tuned_artefact(b: KernelBuild, cubin: bytes, *, accepted: bool, speedup: float | None, reason: str,
                   report: dict[str, Any] | None = None, seconds: float = 0.0, base: Any = None,
                   gains: dict[str, float] | None = None) -> Any:
    """The artefact of a tuning result for ``b`` (stored under its tuned key).

    ``base``: the untouched compile of the chosen configuration (:func:`compile_config`) when it is not the
    default; its metadata (``config``, shared memory, ``num_warps``, constexprs...) describe ``cubin``. Without
    it, or when not ``accepted`` (the baseline ships), the baseline's. ``gains``: ``{"level1": ×, "level2": ×}``
    (the configuration's gain over the default, and the SASS schedule's over the configuration), which the
    manifest and ``kbuild inspect`` show."""
    from kbuild.cache import Artefact
    from kbuild.device.probe import local_gpus

    assert b.tuned_key is not None
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


def config_spec(spec: KernelSettings, config: dict[str, Any]) -> KernelSettings:
    """``spec`` declared at the point ``config`` (its space left out): what compiles that configuration."""
    import dataclasses

    return dataclasses.replace(spec, constexprs=dict(config["constexprs"]), num_warps=config["num_warps"],
                               num_stages=config["num_stages"], maxnreg=config["maxnreg"],
                               num_ctas=config["num_ctas"], ptx_options=config.get("ptx_options") or "", space={},
                               configs=[], autotune=False)


def compile_config(settings: Settings, b: KernelBuild, config: dict[str, Any]) -> Any:
    """The untouched compile of ``b``'s kernel at the configuration ``config`` (a point of ``b.space``, or any
    dict :func:`kbuild.space.normalize_point` accepts), for ``b.target``, through the baseline compile path:
    deterministic, no GPU. Its key is the baseline key a declaration of that point would have (the default's
    compile has ``b.baseline_key``); its ``meta["config"]`` is the point. Not stored: the tuner decides.
    A config the kernel cannot take (an unknown constexpr, a bad value) is a :class:`UsageError`."""
    from kbuild.space import SpaceError, normalize_point

    try:
        point = normalize_point(config)
    except SpaceError as exc:
        raise UsageError(f"compile_config({b.spec.name}, {b.target.name}): {exc}") from None
    fn = b.fn if b.fn is not None else load_jit_function(settings, b.spec)
    spec = config_spec(b.spec, point)
    ast_source_args(settings, spec, fn)
    toolchain = {"triton_version": triton_version(), "ptxas_version": ptxas_version()}
    key, _ = _keys(spec, b.target, source_hash(fn), toolchain, None, [point], source_distribution(spec, fn))
    cb = KernelBuild(spec=spec, target=b.target, baseline_key=key, tuned_key=None, fn=fn, space=[point])
    return _compile_baseline(settings, cb)


# ---------------------------------------------------------------------------------------------
# The phases, in the order run_pipeline runs them.

def specs_and_keys(settings: Settings, kernels: Sequence[KernelSettings], targets: Sequence[Target], *,
                   memo: bool) -> tuple[list[KernelBuild], bool]:
    """Phases specs and key: every kernel × target with its keys, and whether they came from the memo.

    With ``memo``, the keys of an earlier full resolve are taken when its fingerprint holds (no Triton
    import); otherwise every kernel is imported and checked, and the memo is written for the next build.
    """
    if memo:
        builds = resolve_memoized(settings, kernels, targets)
        if builds is not None:
            return builds, True
        return _resolve_and_remember(settings, kernels, targets), False
    return resolve(settings, kernels, targets), False


def look_up_tuned(builds: Sequence[KernelBuild], store: Any) -> None:
    """Phase store, first half: each build whose tuned entry is stored ships it."""
    for b in builds:
        found = store.get(b.tuned_key.hex) if b.tuned_key is not None else None
        if found is not None:
            b.artefact, b.hit, b.tuned = found, True, True
            b.status = _tuned_status(found)


def baselines_stored(builds: Sequence[KernelBuild], store: Any) -> bool:
    """Whether the store holds the baseline of every build that has no tuned entry (a memo build can go on)."""
    return all(b.tuned or store.contains(b.baseline_key.hex) for b in builds)


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


def compile_baselines(settings: Settings, builds: Sequence[KernelBuild], store: Any,
                      on_step: Callable[[KernelBuild], None] | None = None) -> list[Any]:
    """Phases store (second half) and compile: each build without a tuned entry gets its stored baseline, or
    one compiled now; ``on_step`` hears of each build in turn. Returns the new artefacts; nothing is written
    yet. The compiles run one after another in one child process (:class:`kbuild.compile.workers.CompileProcess`),
    each stopped past ``compile_timeout``."""
    from kbuild.compile.workers import CompileProcess

    new: list[Any] = []
    with CompileProcess() as process:
        for b in builds:
            if not b.tuned:
                _find_or_compile(settings, b, store, new, process)
            if on_step is not None:
                on_step(b)
    return new


def _find_or_compile(settings: Settings, b: KernelBuild, store: Any, new: list[Any], process: Any = None) -> None:
    found = store.get(b.baseline_key.hex)
    if found is None and b.fn is None:  # a memo build whose entry vanished since the check: import it now
        (fresh,) = resolve(settings, [settings.kernel(b.spec.name)], [b.target])
        b.fn, b.baseline_key, b.tuned_key = fresh.fn, fresh.baseline_key, fresh.tuned_key
        b.spec, b.space = fresh.spec, fresh.space
        found = store.get(b.baseline_key.hex)
    if found is not None:
        b.artefact, b.hit = found, True
    else:
        b.artefact = _compile_baseline(settings, b, process)
        new.append(b.artefact)
    b.status = untuned_reason(settings, b.target)


def _compile_baseline(settings: Settings, b: KernelBuild, process: Any = None) -> Any:
    from kbuild.cache import Artefact

    started = time.time()
    ck = compile_kernel(settings, b.spec, b.target, fn=b.fn, process=process)
    meta = dict(ck.metadata)
    meta.update({
        "key": b.baseline_key.hex,
        "key_components": b.baseline_key.components,
        "config": b.default_config,
        "tuned": False,
        "compile_seconds": round(ck.compile_seconds, 3),
        "kbuild_version": __version__,
        "created": round(started, 3),
    })
    return Artefact.create(key=b.baseline_key.hex, cubin=ck.cubin, meta=meta)


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
        b.artefact, b.tuned, b.hit = art, True, False
        b.status = _tuned_status(art)
        if on_step is not None:
            on_step(b)


def run_pipeline(settings: Settings, store: Any = None, *, kernels: Sequence[str] | None = None,
                 targets: Sequence[str] | None = None,
                 on_step: Callable[[KernelBuild], None] | None = None,
                 locked: str | os.PathLike[str] | None = None, memo: bool = False,
                 tune_on_miss: bool = False, tuner: Tuner | None = None,
                 strict: bool | None = None) -> list[KernelBuild]:
    """Resolve, look up, compile and store every kernel × target. Returns the builds in order.

    ``store`` defaults to the settings' tiered store, opened only after every kernel resolved, so
    bad input does not even create an empty store directory; ``strict`` (default: ``settings.strict``)
    is how it treats a remote tier that is down.

    ``memo``: take the keys from the memo of an earlier resolve when its fingerprint holds
    (:mod:`kbuild.hooks.memo`; the build hooks use it so that all-hit builds import no Triton).
    Should any baseline be missing from the store, the kernels are resolved in full before anything
    is compiled.

    ``tune_on_miss``: this run ships what it finds (the build hooks set it; ``kbuild compile`` and
    ``kbuild tune`` do not): run the tune phase, and under ``tune = "require"`` fail before compiling
    when some kernel × target has no tuning result and cannot get one here. ``tuner`` replaces
    :func:`gpu_tuner` (tests; other measurement setups).
    """
    from kbuild.cache import open_store

    kspecs, tlist = select_kernels(settings, kernels), select_targets(settings, targets)
    builds, from_memo = specs_and_keys(settings, kspecs, tlist, memo=memo)
    if store is None:
        store = open_store(settings, strict=settings.strict if strict is None else strict)
    if locked is not None:
        builds = _from_lock(builds, store, locked, on_step, subset=bool(kernels or targets))
        refuse_wgmma_hazards(settings, builds)
        return builds
    look_up_tuned(builds, store)
    if from_memo and not baselines_stored(builds, store):
        log.debug("memo keys miss the store; resolving in full")
        builds = _resolve_and_remember(settings, kspecs, tlist)
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
        tune_missing(settings, builds, store, tuner or gpu_tuner, on_step)
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
        b.status = f"locked: {_tuned_status(art)}" if b.tuned else "locked: baseline"
        if on_step is not None:
            on_step(b)
    return builds


# ---------------------------------------------------------------------------------------------
# The build entry point: the PEP 517 backend, the setuptools plugin and ``kbuild emit`` all plan here.

@dataclass
class BuildPlan:
    """What a build ships: each kernel × target's result, the kernels to emit and the wheel manifest."""

    settings: Settings
    kernels: list[Any]
    """The :class:`kbuild.emit.EmitKernel` list, for :func:`kbuild.emit.render_sources`."""
    manifest: dict[str, Any]
    """The wheel manifest (:mod:`kbuild.hooks.manifest`)."""
    builds: list[KernelBuild] = field(default_factory=list)
    """The pipeline's results; empty for a plan replayed from a manifest."""
    locked: bool = False

    def status_lines(self) -> list[str]:
        """One line per kernel × target that ships no accepted tuning result, saying why."""
        return [f"kbuild: {b.spec.name} {b.target.name}: {b.status}" for b in self.builds if not b.improved]

    def files(self, *, prefix: str = "kbuild_", basename: str = "kbuild_kernels") -> dict[str, bytes]:
        """The C sources and ``kbuild.json``, by file name (:func:`kbuild.emit.write_files` writes them)."""
        from kbuild.emit import render_sources

        from .manifest import MANIFEST_NAME, manifest_bytes

        files = render_sources(self.kernels, prefix=prefix, basename=basename,
                               config_name=Path(self.settings.config_file).name)
        files[MANIFEST_NAME] = manifest_bytes(self.manifest)
        return files


def plan(settings: Settings, store: Any = None, *, targets: Sequence[str] | None = None,
         lock_file: str | os.PathLike[str] | None = None, tuner: Tuner | None = None,
         on_step: Callable[[KernelBuild], None] | None = None) -> BuildPlan:
    """Plan a build: the pipeline as a build runs it (memo, tune on a miss) and what it ships.

    ``settings.locked`` (or a ``lock_file``) builds exactly the artefacts pinned in the lock file;
    ``settings.strict`` makes a remote tier that is down an error naming it. ``store`` defaults to the
    settings' store, opened and closed here. ``targets`` builds part of the project (as ``kbuild emit
    --targets``): under ``locked`` the pins of other targets are then not stale.
    """
    from kbuild.cache import TierUnavailableError, open_store
    from kbuild.emit import kernels_from_builds

    from .manifest import build_manifest

    lock = Path(lock_file) if lock_file is not None else (
        settings.project_dir / "kbuild.lock" if settings.locked else None)
    try:
        with contextlib.ExitStack() as stack:
            if store is None:
                store = stack.enter_context(open_store(settings, strict=settings.strict))
            builds = run_pipeline(settings, store, targets=targets, locked=lock, memo=True, tune_on_miss=True,
                                  tuner=tuner, on_step=on_step)
    except TierUnavailableError as exc:
        raise strict_store_error(settings, exc) from None
    return BuildPlan(settings=settings, kernels=kernels_from_builds(builds),
                     manifest=build_manifest(builds, tune=settings.tune), builds=builds, locked=lock is not None)


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
