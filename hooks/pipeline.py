"""The kernel pipeline: specs → compile → key → store → (tune) → result per kernel × target.

Run in three phases so that bad input never leaves anything in the store:

1. **resolve**: import every kernel, check its declaration against the function, compute its
   keys (cheap; no compilation). Any error stops here.
2. **lookup / compile**: a tuned entry is looked up first (unless ``tune = "off"``), then the
   baseline; misses are compiled. A compile error stops here, still before any write.
3. **put**: the new baseline artefacts go into the writable store tiers.

Tuning on a miss arrives with the tuner (issue 6); until then every result is the baseline and
the status line says why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kbuild import __version__
from kbuild.compile import compile_kernel, compiler_options, load_jit_function, portable_options, source_hash
from kbuild.compile.triton_aot import ast_source_args
from kbuild.config import KernelSettings, Settings
from kbuild.errors import UsageError
from kbuild.gpu import has_gpu
from kbuild.key import KernelKey, compiler_component, kernel_key, tuner_component
from kbuild.targets import Target, parse_target
from kbuild.toolchain import ptxas_version, triton_version

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
    status: str = ""

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


def select_targets(settings: Settings, targets: Sequence[str] | None) -> list[Target]:
    names = list(targets) if targets else list(settings.targets)
    out: list[Target] = []
    for name in names:
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
    """Phase 1: import and check every kernel and compute its keys. Raises before anything is written."""
    builds = []
    toolchain = {"triton_version": triton_version(), "ptxas_version": ptxas_version()}
    tuner = tuner_component(settings) if settings.tune != "off" else None
    for spec in kernels:
        fn = load_jit_function(settings, spec)
        ast_source_args(settings, spec, fn)  # validates the declaration against the function
        shash = source_hash(fn)
        for target in targets:
            compiler = compiler_component(options=portable_options(compiler_options(target, spec)), **toolchain)
            common: dict[str, Any] = {"spec": spec, "target": target, "source_hash": shash,
                                      "function": spec.function, "compiler": compiler}
            baseline = kernel_key(**common, tuner=None)
            tuned = kernel_key(**common, tuner=tuner) if tuner is not None else None
            builds.append(KernelBuild(spec=spec, target=target, baseline_key=baseline, tuned_key=tuned, fn=fn))
    return builds


def untuned_reason(settings: Settings, target: Target) -> str:
    if settings.tune == "off":
        return "untuned: tune = \"off\""
    if not has_gpu(target.cc):
        return f"untuned: no {target.name} GPU on this machine"
    return "untuned: tuning on a store miss is not available in this kbuild version yet"


def run_pipeline(settings: Settings, store: Any = None, *, kernels: Sequence[str] | None = None,
                 targets: Sequence[str] | None = None,
                 on_step: Callable[[KernelBuild], None] | None = None) -> list[KernelBuild]:
    """Resolve, look up, compile and store every kernel × target. Returns the builds in order.

    ``store`` defaults to the settings' tiered store, opened only after every kernel resolved, so
    bad input does not even create an empty store directory.
    """
    from kbuild.cache import Artefact, open_store

    builds = resolve(settings, select_kernels(settings, kernels), select_targets(settings, targets))
    if store is None:
        store = open_store(settings)
    new: list[Any] = []
    for b in builds:
        found = store.get(b.tuned_key.hex) if b.tuned_key is not None else None
        if found is not None:
            b.artefact, b.hit, b.tuned = found, True, True
            speedup = found.meta.get("speedup")
            b.status = f"tuned ×{speedup:.3f}" if isinstance(speedup, (int, float)) else "tuned"
        else:
            found = store.get(b.baseline_key.hex)
            if found is not None:
                b.artefact, b.hit = found, True
            else:
                started = time.time()
                ck = compile_kernel(settings, b.spec, b.target, fn=b.fn)
                meta = dict(ck.metadata)
                meta.update({
                    "key": b.baseline_key.hex,
                    "key_components": b.baseline_key.components,
                    "tuned": False,
                    "compile_seconds": round(ck.compile_seconds, 3),
                    "kbuild_version": __version__,
                    "created": round(started, 3),
                })
                b.artefact = Artefact.create(key=b.baseline_key.hex, cubin=ck.cubin, meta=meta)
                new.append(b.artefact)
            b.status = untuned_reason(settings, b.target)
        if on_step is not None:
            on_step(b)
    for art in new:  # phase 3: only after everything compiled
        store.put(art)
    return builds
