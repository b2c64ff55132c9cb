"""Phase 1 of the pipeline: which kernels and targets, each declaration checked and resolved, and its keys.

:func:`resolve` imports every kernel, checks its declaration against the function (parameters, signature,
constexprs, grid), resolves its configuration space (an ``@triton.autotune`` source's configs, the
``@triton.heuristics`` values) and computes its keys (:mod:`kbuild.key`): cheap, no compilation, and any error
stops the build here, before anything is written. :func:`specs_and_keys` takes the keys from the memo of an
earlier build instead when its fingerprint holds (:mod:`kbuild.build.memo`: an all-hit build then imports no
Triton), and writes the memo after a full resolve.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from kbuild.compile import compiler_options, portable_options, source_hash
from kbuild.compile.triton_aot import ast_source_args, kernel_index, load_source
from kbuild.declarations.kernel import KernelSettings, check_grid_names
from kbuild.errors import ConfigError, KernelSourceError, UsageError
from kbuild.key import KernelKey, compiler_component, kernel_key, tuner_component
from kbuild.settings.model import Settings
from kbuild.targets import Target, parse_target
from kbuild.toolchain import ptxas_version, triton_version
from kbuild.tune import TUNER_VERSION

from .kernel_build import KernelBuild


def select_targets(settings: Settings, targets: Sequence[Target | str] | None) -> list[Target]:
    """The targets to build: ``targets``, else the project's (:attr:`kbuild.settings.model.Settings.parsed_targets`);
    each once, in order. A :class:`~kbuild.targets.Target` is taken as it is (the settings parsed it already); a name
    comes from the command line (``--targets``) and is parsed here, a bad one a :class:`UsageError` naming the
    option."""
    if not targets:
        return list(settings.parsed_targets)
    out: list[Target] = []
    for given in targets:
        if isinstance(given, Target):
            t = given
        else:
            try:
                t = parse_target(given)
            except ValueError as exc:
                raise UsageError(f"--targets: {exc}") from None
        if t not in out:
            out.append(t)
    return out


def select_kernels(settings: Settings, names: Sequence[str] | None) -> list[KernelSettings]:
    """The declarations to build: those ``names`` (``--kernel``), else every one; none declared (and no
    ``recordings`` to declare them) is a :class:`UsageError`."""
    if not settings.kernels and not (settings.recordings and not names):
        raise UsageError(f"{settings.config_file}: [tool.kbuild.kernels]: no kernels declared (and no recordings)")
    return [settings.kernel(n) for n in names] if names else list(settings.kernels)


def resolve(settings: Settings, kernels: Sequence[KernelSettings], targets: Sequence[Target]) -> list[KernelBuild]:
    """Phase 1: import and check every kernel and compute its keys. Raises before anything is written.

    An ``@triton.autotune`` source (or ``autotune = true``) is resolved here: the build's ``spec`` is the
    declaration with the default configuration filled in and the autotuner's configs as ``configs``
    (:func:`resolve_space`), and ``space`` the resolved points."""
    builds = []
    tools = toolchain_versions()
    tuner = tuner_component(settings, version=TUNER_VERSION) if settings.tune != "off" else None
    for declared in kernels:
        spec, space, fn = resolve_declaration(settings, declared)
        shash = source_hash(fn)
        dist = source_distribution(spec, fn)
        for target in targets:
            baseline, tuned = kernel_keys(spec, target, shash, tools, tuner, space, dist)
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
    from kbuild.declarations.space import autotune_configs

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


def toolchain_versions() -> dict[str, str]:
    """The toolchain's part of every key: Triton's and ptxas' versions (:mod:`kbuild.toolchain`)."""
    return {"triton_version": triton_version(), "ptxas_version": ptxas_version()}


def kernel_keys(spec: KernelSettings, target: Target, shash: str, tools: dict[str, str], tuner: dict[str, Any] | None,
                space: list[dict[str, Any]], dist: dict[str, str] | None = None) -> tuple[KernelKey, KernelKey | None]:
    """The baseline key of ``spec`` for ``target`` and its tuned key (None without a ``tuner`` component): the
    kernel's source hash ``shash``, the compiler (``tools``, :func:`toolchain_versions`; the options ``spec`` compiles with),
    the installed distribution ``dist`` it comes from (:func:`source_distribution`), and for the tuned key the tuner
    and the configuration ``space`` it searches (:func:`kbuild.key.kernel_key`)."""
    compiler = compiler_component(options=portable_options(compiler_options(target, spec)), **tools)
    common: dict[str, Any] = {"spec": spec, "target": target, "source_hash": shash, "function": spec.function,
                              "compiler": compiler, "distribution": dist}
    baseline = kernel_key(**common, tuner=None)
    tuned = kernel_key(**common, tuner=tuner, space=space) if tuner is not None else None
    return baseline, tuned


def resolve_space(settings: Settings, spec: KernelSettings, obj: Any) -> tuple[KernelSettings, list[dict[str, Any]]]:
    """The declaration with its configuration space resolved, and the space's points (default first).

    ``obj`` is the ``@triton.autotune`` object of ``spec.source`` (None: there is none). An ``@triton.autotune`` object gives its configs when the declaration
    has no ``space`` or ``configs`` of its own (:func:`kbuild.declarations.space.autotune_configs`; the default is chosen by
    :func:`kbuild.declarations.space.autotune_default`); ``autotune = true`` over a plain ``@triton.jit`` function is an error
    naming the key."""
    import dataclasses

    from kbuild.declarations.space import SpaceError, autotune_configs, autotune_default, expand

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
        from kbuild.declarations.grid import parse_grid

        grid = parse_grid(spec.grid)
        check_grid_names(spec, grid, space,
                         lambda i, m: ConfigError(settings.config_file, f"{base}.grid[{i}]", m))


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
        return resolve_and_remember(settings, kernels, targets), False
    return resolve(settings, kernels, targets), False


def resolve_memoized(settings: Settings, kernels: Sequence[KernelSettings],
                     targets: Sequence[Target]) -> list[KernelBuild] | None:
    """Phase 1 from the memo of an earlier full resolve (:mod:`kbuild.build.memo`), or None.

    The builds carry no imported function (``fn`` is None): fine for store lookups, not for compiling.
    """
    from . import memo

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


def resolve_and_remember(settings: Settings, kernels: Sequence[KernelSettings],
                         targets: Sequence[Target]) -> list[KernelBuild]:
    """A full :func:`resolve`, and the memo written for the next build (best effort)."""
    from . import memo

    builds = resolve(settings, kernels, targets)
    memo.save(settings, kernels, targets, builds)
    return builds


__all__ = ["kernel_keys", "resolve", "resolve_and_remember", "resolve_declaration", "resolve_memoized",
           "resolve_space", "select_kernels", "select_targets", "source_distribution", "specs_and_keys",
           "toolchain_versions"]
