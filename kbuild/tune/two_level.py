"""Two levels, one budget: the launch configuration first, then the SASS schedule of the best ones.

:func:`tune_two_level` is what ``kbuild tune``, ``kbuild prewarm`` and a build with ``tune = "auto"``
run for one kernel × target:

1. **Level 1** (:mod:`kbuild.tune.level1`): search the kernel's configuration space (tiles, warps,
   stages, ``maxnreg``) on the target GPU with a sample-efficient racing search. Every candidate's
   output is checked against the bench spec's reference within its tolerance (configurations change
   the summation order, so bit-exactness across configurations is not the rule); the best of the
   kernel's own autotune list is measured in the same run, as the baseline of every gain.
2. **Level 2** (:func:`kbuild.tune.api.tune`): the best ``top`` configurations each get a SASS search,
   where every candidate stays **bit-exact** against that configuration's untouched cubin, and the
   acceptance rule (:mod:`kbuild.tune.accept`) decides what ships.
3. **What ships** is the configuration whose level-1 time divided by its accepted level-2 speedup is
   the smallest; on a GPU it is then timed side by side with the autotune list's best in one fresh
   interleaved run (``final``), the figure the manifest and reports claim.

A configuration whose cubin has a wgmma register race (triton-lang/triton#9433) is never chosen by level 1
(status ``"racy"``). When the default itself is racy, level 1 measures the gain against the best race-free entry
of the autotune list, so a race-free configuration ships; when no entry is race-free, it searches nothing and the
default ships (level 2 keeps its untouched cubin for the same reason): no gain over a baseline whose outputs depend
on timing can be verified, and ``reason`` (the report's ``decision``) says so.

The budget (evaluations and seconds) is shared: level 1 gets ``LEVEL1_SHARE`` of the evaluations,
level 2 the rest, split between the configurations it searches.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kbuild.bench.spec import BenchSpec, Config
from kbuild.settings.model import TuneRequest

LEVEL1_SHARE = 0.3
#: Rounds per configuration of level 1's exhaustive sweep (``search_configs``' default).
SWEEP_ROUNDS = 8
"""Fraction of the evaluation budget that level 1 may spend."""
LEVEL1_SECONDS_SHARE = 0.45
"""Fraction of the seconds after which level 1 proposes no new configuration (compiles dominate it)."""
LEVEL1_BATCH = 16
"""Configurations proposed (and compiled in parallel) per screening batch."""


@dataclass
class TwoLevelResult:
    kernel: str
    arch: int
    backend: str
    default: Config
    """The configuration that ships untuned (the spec's first autotune entry, or the declared one)."""
    config: Config
    """The configuration that ships."""
    baseline: bytes = field(repr=False)
    """The shipped configuration's untouched cubin."""
    cubin: bytes = field(repr=False)
    """What ships: the accepted schedule of ``config``, else ``baseline``."""
    symbol: str
    metadata: dict[str, Any]
    """Triton's metadata of the shipped configuration's compile (shared memory, warps, ...)."""
    level1: Any
    """The :class:`kbuild.tune.level1.Level1Result`, or None when level 1 was skipped."""
    level2: dict[str, Any]
    """Configuration label → :class:`kbuild.tune.api.TuneResult` of each level-2 search."""
    gains: dict[str, float | None]
    """``level1`` (autotune best → shipped config), ``level2`` (its accepted SASS speedup, 1.0 when none),
    ``total`` (their product) and ``final`` (the side-by-side re-timing on a GPU, None on the cost model)."""
    final: dict[str, Any] | None
    seconds: float
    reason: str | None = None
    """Why the default ships without a search when it does for a reason (its cubin has a wgmma register race)."""

    @property
    def accepted(self) -> bool:
        """Whether anything but the default ships: a better configuration or an accepted schedule."""
        return self.config.label() != self.default.label() or self.cubin != self.baseline

    def report(self) -> dict[str, Any]:
        chosen = self.level2.get(self.config.label())
        return {
            "kernel": self.kernel, "target": f"sm_{self.arch}", "backend": self.backend,
            "default_config": self.default.as_dict(), "default_label": self.default.label(),
            "config": self.config.as_dict(), "config_label": self.config.label(),
            "gains": self.gains, "final": self.final, "seconds": round(self.seconds, 2), "decision": self.reason,
            "level1": self.level1.as_dict() if self.level1 is not None else None,
            "level2": {label: r.report() for label, r in self.level2.items()},
            "shipped_schedule": "tuned" if chosen is not None and chosen.accepted else "untouched",
            "evaluations": (self.level1.evaluations if self.level1 is not None else 0)
            + sum(r.report()["evaluations"] for r in self.level2.values()),
        }


def choose(level1_ms: dict[str, float], level2_speedup: dict[str, float]) -> str:
    """The configuration to ship: the smallest level-1 time divided by its accepted level-2 speedup.
    ``level2_speedup`` holds accepted speedups only (a configuration without one counts 1.0)."""
    return min(level1_ms, key=lambda label: (level1_ms[label] / level2_speedup.get(label, 1.0), label))


def level1_budget(space_size: int, evaluations: int, rounds: int = 8, fraction: float = 0.25, top: int = 2) -> int:
    """Level 1's evaluations: a quarter of the exhaustive sweep (``space_size × rounds``), or, where that is less, what
    racing needs to screen every configuration once and run its rungs (:func:`kbuild.tune.level1.search.
    screen_all_cost`: on an 18-point space a quarter, 36, left room to screen none but the default); at most
    ``LEVEL1_SHARE`` of the kernel's whole budget."""
    from kbuild.tune.level1.search import screen_all_cost

    wanted = max(int(fraction * space_size * rounds), screen_all_cost(space_size, rounds=rounds, top=top))
    return max(1, min(wanted, int(evaluations * LEVEL1_SHARE)))


Baseline = Callable[[Config], tuple[bytes, str, dict[str, Any]]]
"""``config -> (untouched cubin, kernel symbol, Triton metadata)``: what level 2 tunes for a configuration."""


def spec_baseline(spec: BenchSpec, arch: int) -> Baseline:
    """Level 2's baseline for a configuration compiled from the bench spec itself (the suite)."""
    from kbuild.bench.spec import compile_spec

    def build(config: Config) -> tuple[bytes, str, dict[str, Any]]:
        kernel = compile_spec(spec, config, arch)
        return kernel.asm["cubin"], kernel.metadata.name, metadata_of(kernel)

    return build


def tune_two_level(spec: BenchSpec, arch: int, request: TuneRequest, *, measurer: Any, backend: Any | None,
                   kernel_ref: Callable[[Config], Any] | None, baseline: Baseline | None = None,
                   default: Config | None = None, on_progress: Callable[[str], None] | None = None) -> TwoLevelResult:
    """Level 1 over ``spec.search_space()`` with ``measurer`` (a :class:`kbuild.tune.level1.ConfigMeasurer`; its
    ``request.method``), then level 2 on the best ``request.top`` configurations with ``backend`` (a SASS
    measurement backend; None: the CPU cost model), whose kernels the worker finds through ``kernel_ref(config)``
    and whose untouched cubins come from ``baseline(config)`` (default: compiled from the spec); both within
    ``request``'s evaluations and seconds. See the module docstring."""
    from kbuild.tune.api import tune
    from kbuild.tune.level1 import search_configs

    started = time.monotonic()
    say = on_progress or (lambda msg: None)
    default = default or spec.configs[0]
    build = baseline or spec_baseline(spec, arch)
    space = spec.search_space()
    evaluations, seconds, top = request.evaluations, request.seconds, request.top
    l1_evals = level1_budget(len(space), evaluations, top=top)
    method = request.method
    if method == "racing" and len(space) * SWEEP_ROUNDS <= int(evaluations * LEVEL1_SHARE):
        # a space whose whole sweep fits level 1's share is swept: racing on a quarter of it screens too few points
        # (an 8-point space gets 16 evaluations, one point's rounds)
        method, l1_evals = "exhaustive", len(space) * SWEEP_ROUNDS
    say(f"{spec.name}: level 1 over {len(space)} configurations ({method}), ≤ {l1_evals} evaluations")
    l1 = search_configs(spec, measurer, method=method, evaluations=l1_evals, seed=request.seed, top=top,
                        batch=LEVEL1_BATCH, seconds=seconds * LEVEL1_SECONDS_SHARE, default=default)
    racy_default = l1.decision  # the default's cubin is racy: it ships, nothing else is claimed
    if racy_default:
        say(f"{spec.name}: {racy_default}")
    ms = {t.label: float(t.median_ms) for t in l1.trials if t.status == "ok" and t.median_ms is not None}
    tops = [c for c in l1.top if c.label() in ms][:top] or [l1.best]
    left_evals = max(evaluations - l1.evaluations, len(tops))
    level2: dict[str, Any] = {}
    baselines: dict[str, tuple[bytes, str, dict[str, Any]]] = {}
    for i, cfg in enumerate(tops):
        label = cfg.label()
        baselines[label] = cubin, symbol, _ = build(cfg)
        share_e = max(1, left_evals // (len(tops) - i))
        share_s = max(1.0, (seconds - (time.monotonic() - started)) / (len(tops) - i))
        say(f"{spec.name}: level 2 on {label}, ≤ {share_e} evaluations, ≤ {share_s:.0f} s")
        r = tune(cubin, request.replace(evaluations=share_e, seconds=share_s), kernel=symbol, backend=backend,
                 kernel_ref=kernel_ref(cfg) if kernel_ref is not None else None)
        level2[label] = r
        left_evals -= sum(s.evaluations for s in r.searches.values())
    speedups = {label: float(r.decision.speedup) for label, r in level2.items()
                if r.accepted and r.decision.speedup is not None}
    chosen = choose({label: ms.get(label, math.inf) for label in level2}, speedups)
    cfg = next(c for c in tops if c.label() == chosen)
    cubin, symbol, metadata = baselines[chosen]
    shipped = level2[chosen].cubin
    level1_gain = l1.autotune_best_ms / ms[chosen] if chosen in ms and l1.autotune_best_ms else None
    level2_gain = speedups.get(chosen, 1.0)
    final = None
    if backend is not None and hasattr(measurer, "time_shipped") and not racy_default:
        say(f"{spec.name}: what ships ({chosen}) against the autotune best ({l1.autotune_best.label()}), side by side")
        final = measurer.time_shipped(l1.autotune_best, cfg, shipped)
    if final is not None and (cfg.label() != l1.autotune_best.label() or shipped != cubin):
        ok, why = final_beats_reference(final)
        final["accepted"], final["reason"] = ok, why
        if not ok:
            say(f"{spec.name}: {why}; the autotune best ships untouched")
            cfg = l1.autotune_best
            cubin, symbol, metadata = build(cfg)
            shipped = cubin
            level1_gain, level2_gain = 1.0, 1.0
    gains: dict[str, float | None] = {
        "level1": level1_gain, "level2": level2_gain,
        "total": level1_gain * level2_gain if level1_gain is not None else None,
        "final": final.get("speedup") if final else None,
    }
    return TwoLevelResult(spec.name, arch, getattr(measurer, "backend", "?"), default, cfg, cubin, shipped, symbol,
                          metadata, l1, level2, gains, final, time.monotonic() - started, racy_default or None)


def final_beats_reference(final: dict[str, Any]) -> tuple[bool, str]:
    """The acceptance rule for what ships against the autotune best, from the side-by-side timing: the lower
    end of the speedup's 95% interval must beat 1 by more than the A/A spread of the same run (the rule of
    :func:`kbuild.tune.accept.decide`, for a change of configuration)."""
    if "error" in final:
        return False, f"the side-by-side timing failed ({final['error']})"
    lo = final["speedup_ci"][0]
    aa_lo, aa_hi = final["aa_ci"]
    spread = max(abs(1.0 - aa_lo), abs(aa_hi - 1.0), abs(1.0 - final["aa_ratio"]))
    if lo > 1.0 + spread:
        return True, f"{final['speedup']:.3f}× (95% CI from {lo:.3f}×) beats the A/A spread of {spread:.2%}"
    return False, (f"{final['speedup']:.3f}× (95% CI from {lo:.3f}×) does not beat the A/A spread of {spread:.2%} "
                   f"side by side")


def project_spec(spec: BenchSpec, points: Sequence[dict[str, Any]]) -> BenchSpec:
    """A project kernel's bench spec with its declared space (``[tool.kbuild.kernels]``, resolved by the
    pipeline: :attr:`kbuild.build.kernel_build.KernelBuild.space`, the default first) as the level-1 space. The
    default is the whole autotune list: a project's gains are against what ships untuned."""
    import dataclasses

    configs = [Config.from_dict(p) for p in points]
    varying = {k for c in configs for k in c.constexprs}
    return dataclasses.replace(spec, constexprs={k: v for k, v in spec.constexprs.items() if k not in varying},
                               configs=configs[:1], space=configs)


def metadata_of(kernel: Any) -> dict[str, Any]:
    """The launch-relevant part of a Triton ``CompiledKernel``'s metadata, JSON-ready."""
    md = kernel.metadata
    keep = ("name", "num_warps", "num_ctas", "shared", "num_stages", "maxnreg")
    return {k: getattr(md, k) for k in keep if hasattr(md, k)}
