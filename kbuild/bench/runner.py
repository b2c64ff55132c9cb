"""Run the suite on the GPU: machine ceilings, autotuned baselines, A/A spread, peers. GPU only.

For each kernel: compile every configuration of its autotune list for this GPU (or only the configuration
pinned by ``BenchOptions.pinned``: what ships), check each against the spec's torch reference, time them
interleaved with each other (L2 flushed before each launch), keep the fastest correct one as the baseline,
then time that baseline against itself and against its peers (:mod:`kbuild.bench.peers`: cuBLAS, torch
SDPA backends, torch composites), all interleaved over ``rounds`` rounds: the A/A control and the
``peer_ms / kernel_ms`` ratios come from the same run. Throughput is compared with the two ceilings measured
in the same run: a large device-to-device copy and a large bf16 matmul through PyTorch.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kbuild.bench import peers as peer_mod
from kbuild.bench.kernels import SUITE
from kbuild.bench.spec import (
    BenchSpec,
    BenchSpecError,
    Config,
    compile_spec,
    load_spec,
    settled,
    suite_archs,
    validate_inputs,
    validate_spec,
)
from kbuild.device import stats, timing
from kbuild.errors import KBuildError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchOptions:
    small: bool = False
    autotune_reps: int = 10
    rounds: int = 6
    reps: int = 10
    ceiling_reps: int = 10
    peers: bool = True
    """Time the kernel's peers (:mod:`kbuild.bench.peers`) in the A/A run."""
    pinned: Mapping[str, str | Mapping[str, Any]] = field(default_factory=dict)
    """Kernel name → the configuration to time instead of autotuning (a label of its search space, or a
    :meth:`Config.as_dict` mapping): what ships."""


def resolve_config(spec: BenchSpec, choice: str | Mapping[str, Any], *, where: str = "--config") -> Config:
    """The configuration ``choice`` names for ``spec``: a label from ``spec.search_space()``, or a config mapping
    (:meth:`Config.from_dict`) that must validate against the spec. :class:`BenchSpecError` (exit 2) otherwise,
    naming ``where``."""
    if isinstance(choice, str):
        by_label = {c.label(): c for c in spec.search_space()}
        if choice in by_label:
            return by_label[choice]
        import difflib

        near = difflib.get_close_matches(choice, list(by_label), n=3, cutoff=0.5)
        raise BenchSpecError(spec.label(), f"{where}: {choice!r} is not a configuration label of its search space "
                                           f"({len(by_label)} points)" + (f"; close: {', '.join(near)}" if near else ""))
    if not isinstance(choice, Mapping):
        raise BenchSpecError(spec.label(), f"{where}: expected a label or a config object, got {type(choice).__name__}")
    try:
        cfg = Config.from_dict(choice)
    except (TypeError, ValueError, AttributeError) as exc:
        raise BenchSpecError(spec.label(), f"{where}: not a configuration: {exc}") from None
    try:
        validate_spec(dataclasses.replace(spec, configs=[cfg], space=[]))
    except BenchSpecError as exc:
        raise BenchSpecError(spec.label(), f"{where}: {exc.detail.replace('configs[0]: ', '')}") from None
    return cfg


def measure_ceilings(opts: BenchOptions) -> dict[str, Any]:
    """Device-to-device copy bandwidth (bytes read + written) and bf16 matmul rate, on random data."""
    import torch

    def copy_ms() -> list[list[float]]:
        n = (8 << 20) if opts.small else (1 << 30)  # bf16 elements: 2 GiB per buffer at full size
        src = torch.randn(n, device=timing.DEVICE, dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        return timing.time_interleaved([lambda: dst.copy_(src)], rounds=1, reps=opts.ceiling_reps, flush=None)[0]

    def matmul_ms(s: int) -> list[list[float]]:
        a = torch.randn((s, s), device=timing.DEVICE, dtype=torch.bfloat16)
        b = torch.randn((s, s), device=timing.DEVICE, dtype=torch.bfloat16)
        return timing.time_interleaved([lambda: torch.matmul(a, b)], rounds=1, reps=opts.ceiling_reps, flush=None,
                                    warmup=3)[0]

    copy_bytes = 2.0 * ((8 << 20) if opts.small else (1 << 30)) * 2
    s = 512 if opts.small else 8192
    copy_samples = copy_ms()
    mm_samples = matmul_ms(s)
    torch.cuda.empty_cache()
    copy_med, mm_med = stats.median(copy_samples), stats.median(mm_samples)
    return {
        "copy": {"bytes": copy_bytes, "median_ms": copy_med, "gbps": copy_bytes / copy_med / 1e6,
                 "samples_ms": copy_samples},
        "matmul_bf16": {"size": s, "median_ms": mm_med, "tflops": 2.0 * s**3 / mm_med / 1e9,
                        "samples_ms": mm_samples},
    }


_rel_err = peer_mod.rel_err


def _launcher(kernel: Any, grid: tuple[int, int, int], args: list[Any]) -> Callable[[], object]:
    def launch() -> object:
        return kernel[grid](*args)

    return launch


def bench_kernel(spec: BenchSpec, arch: int, flush: timing.L2Flush, ceilings: dict[str, Any],
                 opts: BenchOptions) -> dict[str, Any]:
    """Autotune over the spec's autotune list, or take the pinned configuration (each checked against the
    reference, then timed interleaved), then an interleaved A/A measurement of the best configuration with its
    peers timed in the same rounds."""
    import torch

    if spec.needs_allocator:
        timing.set_scratch_allocator()
    spec = settled(spec, timing.DEVICE)
    inputs = spec.make_inputs(0, timing.DEVICE)
    validate_inputs(spec, inputs, check_reference=False)
    ref = spec.reference(inputs) if spec.reference is not None else None
    pristine = {name: inputs[name].clone() for name in spec.inplace}
    tried: list[dict[str, Any]] = []
    candidates: list[tuple[int, dict[str, Any], Any, tuple[int, int, int], list[Any]]] = []
    pinned = opts.pinned.get(spec.name)
    configs = [resolve_config(spec, pinned)] if pinned is not None else list(spec.configs)
    for idx, cfg in enumerate(configs):
        entry: dict[str, Any] = {"config": cfg.as_dict(), "label": cfg.label()}
        tried.append(entry)
        t0 = time.perf_counter()
        try:
            kernel = compile_spec(spec, cfg, arch)
        except KBuildError as exc:
            entry["error"] = str(exc).splitlines()[0][:300]
            continue
        entry["compile_s"] = round(time.perf_counter() - t0, 2)
        entry["registers"] = None
        grid = spec.grid(spec.all_constexprs(cfg))
        args = spec.launch_args(inputs, cfg)
        for name in spec.outputs:
            if name in pristine:  # updated in place: each configuration starts from the same values
                inputs[name].copy_(pristine[name])
            else:
                inputs[name].fill_(float("nan"))
        try:
            kernel[grid](*args)
            torch.cuda.synchronize()
        except Exception as exc:  # out of resources (shared memory, registers) at load time
            entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        entry["registers"] = getattr(kernel, "n_regs", None)
        entry["spills"] = getattr(kernel, "n_spills", None)
        if ref is not None:
            errs = {name: _rel_err(inputs[name], ref[name]) for name in spec.outputs}
            entry["rel_err"] = errs
            bad = [name for name, e in errs.items() if not e <= spec.tolerance(name)]
            if bad:
                entry["error"] = (f"wrong result: {bad[0]}: relative error {errs[bad[0]]:.3g} > "
                                  f"{spec.tolerance(bad[0]):.3g}")
                continue
        candidates.append((idx, entry, kernel, grid, args))
    if not candidates:
        return {"name": spec.name, "description": spec.description, "error": "no configuration compiled, ran and "
                "matched the reference", "autotune": tried}
    # Time every working configuration interleaved with the others, so drift cannot favour one of them.
    reps = max(1, opts.autotune_reps // 2)
    timed = timing.time_interleaved([_launcher(k, g, a) for _, _, k, g, a in candidates], rounds=2, reps=reps,
                                 flush=flush)
    best: tuple[float, int, Any, Any] | None = None
    for (idx, entry, kernel, grid, args), samples in zip(candidates, timed):
        med = stats.median(samples)
        entry["median_ms"] = med
        entry["samples_ms"] = samples
        if best is None or med < best[0]:
            best = (med, idx, kernel, (grid, args))
    assert best is not None
    _, idx, kernel, (grid, args) = best
    fn = _launcher(kernel, grid, args)
    (a, a2), peer_records = peer_mod.time_beside(peer_mod.peers_for(spec) if opts.peers else [], spec, inputs, ref,
                                                 [fn, fn], rounds=opts.rounds, reps=opts.reps, flush=flush,
                                                 synchronize=torch.cuda.synchronize)
    ms = stats.median(a)
    aa, aa_lo, aa_hi = stats.ratio_ci(a, a2)
    seconds = ms / 1e3
    tflops = spec.flops / seconds / 1e12
    gbps = spec.bytes_moved / seconds / 1e9
    ridge = ceilings["matmul_bf16"]["tflops"] * 1e3 / ceilings["copy"]["gbps"]  # FLOP per byte
    bound = "compute" if spec.intensity() >= ridge else "memory"
    pct = (100.0 * tflops / ceilings["matmul_bf16"]["tflops"] if bound == "compute"
           else 100.0 * gbps / ceilings["copy"]["gbps"])
    return {
        "name": spec.name, "description": spec.description, "ref": spec.ref,
        "best_config": configs[idx].as_dict(), "best_label": configs[idx].label(),
        "config_source": "pinned" if pinned is not None else "autotune",
        "time_ms": ms, "tflops": tflops, "gbps": gbps, "flops": spec.flops, "bytes_moved": spec.bytes_moved,
        "bound": bound, "pct_of_ceiling": pct,
        "aa": {"ratio": aa, "ci": [aa_lo, aa_hi], "spread_pct": 100.0 * abs(aa - 1.0),
               "iqr_pct": 100.0 * stats.spread([x for r in a for x in r])},
        "samples_ms": {"a": a, "a_prime": a2}, "autotune": tried,
        **({"peers": peer_records} if opts.peers else {}),
    }


def run_suite(names: Sequence[str], opts: BenchOptions, *, extra_specs: Sequence[str] = (),
              python_path: Sequence[str] = (), advance: Callable[..., None] = lambda n=1, **kw: None,
              on_result: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Benchmark ``names`` from the suite plus ``extra_specs`` (``module:callable`` references, imported with
    ``python_path`` on ``sys.path``). ``on_result(report)`` runs after each kernel (partial records)."""
    import torch

    arch = timing.require_gpu(suite_archs())
    refs = [(n, SUITE[n]) for n in names] + [(r, r) for r in extra_specs]
    started = time.perf_counter()
    report: dict[str, Any] = {"device": timing.device_report(), "options": dataclasses.asdict(opts), "kernels": [],
                              "skipped": []}
    flush = timing.L2Flush()
    report["ceilings"] = measure_ceilings(opts)
    advance(status="ceilings")
    for label, ref in refs:
        spec = load_spec(ref, small=opts.small, python_path=python_path)
        if arch not in spec.archs:
            report["skipped"].append({"name": spec.name, "reason": f"needs {', '.join(f'sm_{a}' for a in spec.archs)}"})
            advance(status=f"{spec.name} skipped")
            continue
        t0 = time.perf_counter()
        try:
            result = bench_kernel(spec, arch, flush, report["ceilings"], opts)
        except KBuildError:
            raise
        except Exception as exc:  # keep the rest of the suite running; the record says what failed
            log.debug("kernel %s failed", label, exc_info=True)
            result = {"name": spec.name, "error": f"{type(exc).__name__}: {exc}"[:500]}
        result["wall_s"] = round(time.perf_counter() - t0, 2)
        report["kernels"].append(result)
        torch.cuda.empty_cache()
        if on_result is not None:
            on_result(report)
        advance(status=spec.name)
    report["device"]["clocks_after"] = timing.clocks()
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    return report
