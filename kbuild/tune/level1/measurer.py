"""Measurers for level 1: is a configuration usable (compiles, launches, matches the reference), and how fast is it?

:class:`ConfigMeasurer` is the small protocol the searcher (:mod:`kbuild.tune.level1.search`) drives:

* ``prefetch(configs)``: start compiling them (returns at once; compiles run in a process pool);
* ``prepare(config)``: wait for its compile, load it, check its output against the spec's reference;
* ``time(configs, rounds, reps)``: time them interleaved in one batch (drift hits all alike);
* ``close()``.

Two implementations:

* :class:`GpuConfigMeasurer`: compiles in a :class:`~kbuild.tune.level1.compile.CompilePool` and measures
  in the isolated GPU worker (:class:`kbuild.tune.measure.client.ConfigWorkerClient`); a candidate that
  faults, hangs or runs out of resources is reported and skipped, and the worker is restarted;
* :class:`ModelConfigMeasurer`: the CPU cost model (:mod:`kbuild.tune.measure.model`) applied to each
  configuration's real cubin, scaled by waves of CTAs over the SMs; nothing runs, every result says
  ``"cost-model (CPU estimate, not a measurement)"``. It exists so that the searcher runs in CI.

Both give a configuration whose cubin has a wgmma register race (found as it compiles, :mod:`kbuild.sass.hazards`;
triton-lang/triton#9433) the verdict ``"racy"`` before anything runs: never checked, timed or chosen.

Both compile each configuration under ``compile_timeout`` seconds (the tuning request's,
:class:`kbuild.settings.model.TuneRequest`) with ``jobs`` processes, and take ``pool``, a
:data:`~kbuild.tune.level1.compile.CompilerFactory`, to compile elsewhere than in their own process pool (``kbuild
prewarm --ray``: Ray CPU tasks, :class:`kbuild.prewarm.shards.ShardPool`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from kbuild.arch import DEFAULT_SM, Architecture, architecture, find
from kbuild.bench.spec import BenchSpec, Config
from kbuild.tune.measure.backend import GPU_BACKEND, MODEL_BACKEND, KernelRef

from .compile import CompiledConfig, CompilePool, Compiler, CompilerFactory

Status = Literal["ok", "compile-error", "racy", "launch-error", "wrong-result", "timeout"]
STATUSES: tuple[Status, ...] = ("ok", "compile-error", "racy", "launch-error", "wrong-result", "timeout")


def racy(compiled: CompiledConfig) -> Prepared | None:
    """The verdict ``"racy"`` on a configuration whose cubin has a wgmma register race (``compiled.hazards``,
    found as it compiled; triton-lang/triton#9433), else None. Such a configuration is neither checked nor timed:
    its outputs depend on timing, so a tolerance check can pass by luck, and it is never chosen."""
    from kbuild.sass.hazards import WGMMA_RACE_ISSUE, recorded, summary

    if not compiled.hazards:
        return None
    return Prepared("racy", compiled.compile_s,
                    error=f"the cubin has a wgmma register race ({WGMMA_RACE_ISSUE}) at {summary(compiled.hazards)}; "
                          "its outputs depend on timing, so it is not checked, timed or chosen",
                    details={"wgmma_register_hazards": recorded(compiled.hazards)})


@dataclass(frozen=True)
class Prepared:
    """The verdict on one configuration before it is timed."""

    status: Status
    compile_s: float | None = None
    rel_err: float | None = None
    """Largest ‖out − ref‖ / ‖ref‖ over the outputs (None: not checked, e.g. the cost model)."""
    error: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TimedBatch:
    """Samples in ms per launch (``[round][rep]``) of each timed configuration, by label; ``failed``: the
    configurations that broke while timing (label -> (status, reason)), left out of ``samples``."""

    samples: Mapping[str, list[list[float]]]
    failed: Mapping[str, tuple[Status, str]] = field(default_factory=dict)


@runtime_checkable
class ConfigMeasurer(Protocol):
    backend: str

    def prefetch(self, configs: Sequence[Config]) -> None: ...

    def prepare(self, config: Config) -> Prepared: ...

    def time(self, configs: Sequence[Config], *, rounds: int, reps: int) -> TimedBatch: ...

    def close(self) -> None: ...


# ----------------------------------------------------------------------------------------------
# The cost model (CPU)

#: Assumptions of the cost model (not facts the model checks): an H100/H200-class sm_90 part.
MODEL_SMS = 132
MODEL_CLOCK_GHZ = 1.75
MODEL_WARPS_PER_SM = 64


def model_architecture(arch: int) -> Architecture:
    """The row (:mod:`kbuild.arch`) whose shared memory and registers the cost model allows a CTA on ``sm_<arch>``:
    the architecture's own where it has a :class:`~kbuild.arch.Part`, else the default architecture's."""
    row = find(arch)
    return row if row is not None and row.part is not None else architecture(DEFAULT_SM)


def model_shared_per_sm(arch: int) -> int:
    """Shared memory per SM, in bytes, that the cost model allows on ``sm_<arch>`` (:func:`model_architecture`)."""
    part = model_architecture(arch).part
    assert part is not None  # the default architecture is modelled
    return part.shared_per_sm


class ModelConfigMeasurer:
    """:class:`ConfigMeasurer` from the static cost model over each configuration's compiled cubin (CPU only).

    Per configuration: CTAs resident per SM from warps, shared memory (Triton's metadata) and ``maxnreg``;
    one wave's cycles from :func:`~kbuild.tune.measure.model.estimate_cycles` with that many warps per
    scheduler; times the number of waves of the launch grid. The model ignores loop trip counts and memory
    bandwidth, so it ranks configurations only roughly. ``prepare`` cannot check outputs (nothing runs):
    ``rel_err`` is None and ``details`` says so; a CTA needing more shared memory than an SM has is a
    ``launch-error``, as it would be on the GPU."""

    backend = MODEL_BACKEND

    def __init__(self, spec: BenchSpec, *, arch: int = DEFAULT_SM, jobs: int | None = None, small: bool = False,
                 python_path: tuple[str, ...] = (), decode: Callable[[bytes], Sequence[Any]] | None = None,
                 pool: CompilerFactory | None = None, compile_timeout: float | None = None) -> None:
        from kbuild.tune.measure.model import sass_decoder

        self.spec = spec
        self.arch = arch
        self.pool: Compiler = (pool(spec, arch, compile_timeout) if pool is not None else
                               CompilePool(spec, arch, jobs=jobs, small=small, python_path=python_path,
                                           timeout=compile_timeout))
        self.decode = decode or sass_decoder()
        self._ms: dict[str, float] = {}
        self._shared: dict[str, int] = {}

    def prefetch(self, configs: Sequence[Config]) -> None:
        self.pool.submit(configs)

    def prepare(self, config: Config) -> Prepared:
        compiled = self.pool.result(config)
        if compiled.payload is None:
            return Prepared("compile-error", compiled.compile_s, error=compiled.error)
        if (verdict := racy(compiled)) is not None:
            return verdict
        limit = model_shared_per_sm(self.arch)
        if compiled.shared > limit:
            return Prepared("launch-error", compiled.compile_s,
                            error=f"out of resources: shared memory {compiled.shared} > {limit} bytes per SM "
                                  "(cost model's static check)")
        try:
            ms, details = self._estimate(config, compiled.payload.cubin, compiled.shared)
        except Exception as exc:
            return Prepared("launch-error", compiled.compile_s, error=f"cost model cannot decode the cubin: {exc}")
        self._ms[config.label()] = ms
        return Prepared("ok", compiled.compile_s, None, None,
                        {**details, "note": "cost model: nothing was executed, output not checked"})

    def _estimate(self, config: Config, cubin: bytes, shared: int) -> tuple[float, dict[str, Any]]:
        from kbuild.tune.measure.model import estimate_cycles

        w = config.num_warps * config.num_ctas
        per_sm = [MODEL_WARPS_PER_SM // w]
        if shared:
            per_sm.append(model_shared_per_sm(self.arch) // shared)
        if config.maxnreg:
            per_sm.append(model_architecture(self.arch).registers_per_sm // (config.maxnreg * 32 * w))
        ctas_per_sm = max(1, min(per_sm))
        gx, gy, gz = self.spec.grid(self.spec.all_constexprs(config))
        ctas = gx * gy * gz
        waves = math.ceil(ctas / (MODEL_SMS * ctas_per_sm))
        resident = min(ctas_per_sm, math.ceil(ctas / MODEL_SMS))  # CTAs sharing one SM in the first wave
        warps_per_scheduler = max(1, math.ceil(resident * w / 4))
        cycles = estimate_cycles(self.decode(cubin), warps=warps_per_scheduler)
        ms = waves * cycles / (MODEL_CLOCK_GHZ * 1e6)
        return ms, {"waves": waves, "ctas_per_sm": ctas_per_sm, "wave_cycles": cycles, "shared": shared}

    def time(self, configs: Sequence[Config], *, rounds: int, reps: int) -> TimedBatch:
        out = {}
        for c in configs:
            ms = self._ms[c.label()]
            out[c.label()] = [[ms] * reps for _ in range(rounds)]
        return TimedBatch(out)

    def close(self) -> None:
        self.pool.close()


# ----------------------------------------------------------------------------------------------
# The GPU worker


def _status(text: str) -> Status:
    for s in STATUSES:
        if s == text:
            return s
    return "launch-error"


class GpuConfigMeasurer:
    """:class:`ConfigMeasurer` on the GPU: compiles in a process pool here, measures in the isolated worker.

    The worker checks each configuration once on seeded inputs (outputs poisoned, guard bands, inputs
    unmodified) against the spec's reference within ``spec.reference_tol``, then times batches interleaved
    with an L2 flush before every launch. The spec must be importable by reference (``spec.ref``)."""

    backend = GPU_BACKEND

    def __init__(self, spec: BenchSpec, *, small: bool = False, python_path: tuple[str, ...] = (),
                 jobs: int | None = None, timeout_s: float = 60.0, command: Sequence[str] | None = None,
                 pool: CompilerFactory | None = None, compile_timeout: float | None = None) -> None:
        from kbuild.errors import UsageError
        from kbuild.tune.measure.client import ConfigWorkerClient

        if not spec.ref:
            raise UsageError(f"bench spec {spec.name}: the GPU measurer needs a spec loaded by reference "
                             "(package.module:callable)")
        self.spec = spec
        self.client = ConfigWorkerClient(command=command, timeout_s=timeout_s)
        info = self.client.load_spec(KernelRef(spec.ref, small=small, python_path=python_path))
        self.arch = info.arch
        self.device = info.device
        self.pool: Compiler = (pool(spec, self.arch, compile_timeout) if pool is not None else
                               CompilePool(spec, self.arch, jobs=jobs, small=small, python_path=python_path,
                                           timeout=compile_timeout))

    def prefetch(self, configs: Sequence[Config]) -> None:
        self.pool.submit(configs)

    def prepare(self, config: Config) -> Prepared:
        compiled = self.pool.result(config)
        if compiled.payload is None:
            return Prepared("compile-error", compiled.compile_s, error=compiled.error)
        if (verdict := racy(compiled)) is not None:  # not sent to the worker: no GPU time on it
            return verdict
        reply = self.client.add(config.label(), config.as_dict(), compiled.payload)
        status: Status = reply["status"]
        return Prepared(status, compiled.compile_s, reply.get("rel_err"), reply.get("error"),
                        {k: reply[k] for k in ("registers", "spills") if k in reply})

    def time(self, configs: Sequence[Config], *, rounds: int, reps: int) -> TimedBatch:
        samples, failed = self.client.time_configs([c.label() for c in configs], rounds=rounds, reps=reps)
        return TimedBatch(samples, {k: (_status(s), why) for k, (s, why) in failed.items()})

    def time_shipped(self, reference: Config, config: Config, cubin: bytes, *, rounds: int = 15,
                     reps: int = 20) -> dict[str, Any]:
        """What ships (``config`` compiled, its cubin replaced by ``cubin``: a tuned schedule) against
        ``reference`` (the autotune list's best), checked against the spec's reference and timed interleaved in
        one fresh batch, with ``reference`` twice for the A/A control. ``speedup`` is reference time / shipped
        time."""
        import dataclasses

        from kbuild.device import stats

        compiled = self.pool.result(config)
        if compiled.payload is None:
            return {"error": f"{config.label()} does not compile: {compiled.error}"}
        key, aa = "shipped:" + config.label(), "aa:" + reference.label()
        added = self.client.add(key, config.as_dict(), dataclasses.replace(compiled.payload, cubin=cubin))
        if added["status"] != "ok":
            return {"error": f"the shipped kernel failed its check: {added.get('status')}: {added.get('error')}"}
        ref_compiled = self.pool.result(reference)
        if ref_compiled.payload is None:
            return {"error": f"{reference.label()} does not compile: {ref_compiled.error}"}
        self.client.add(aa, reference.as_dict(), ref_compiled.payload)
        samples, failed = self.client.time_configs([reference.label(), key, aa], rounds=rounds, reps=reps)
        if failed:
            return {"error": f"timing failed: {failed}"}
        ref_s, ship_s, aa_s = samples[reference.label()], samples[key], samples[aa]
        ratio, lo, hi = stats.ratio_ci(ref_s, ship_s)
        aa_ratio, aa_lo, aa_hi = stats.ratio_ci(ref_s, aa_s)
        return {"reference": reference.label(), "shipped": config.label(), "speedup": 1.0 / ratio,
                "speedup_ci": [1.0 / hi, 1.0 / lo], "aa_ratio": aa_ratio, "aa_ci": [aa_lo, aa_hi],
                "rel_err": added.get("rel_err"), "reference_ms": stats.median(ref_s),
                "shipped_ms": stats.median(ship_s), "samples_ms": {"reference": ref_s, "shipped": ship_s,
                                                                   "reference_aa": aa_s}}

    def close(self) -> None:
        self.pool.close()
        self.client.close()
