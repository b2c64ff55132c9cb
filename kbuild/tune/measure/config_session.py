"""Level 1 inside the GPU worker: many configurations of one kernel, each checked against the reference, timed in batches.

Runs inside the worker process only (:mod:`kbuild.tune.measure.worker`, ops ``cfg_load``, ``cfg_add``,
``cfg_time``). Where :class:`~kbuild.tune.measure.session.Session` holds one configuration and compares
rewritten cubins bit for bit with it, a :class:`ConfigSession` holds many configurations, compiled
elsewhere and handed over (:mod:`kbuild.runtime.handover`), and judges each by the spec's torch
reference within ``spec.reference_tol`` (relative error; configurations change the summation order; an output
named in ``spec.reference_tols`` within its own, as a recorded spec sets by dtype), or,
for a spec without a reference, against the first configuration added. Each check runs with the
outputs poisoned, guard bands after them and the inputs compared afterwards
(:meth:`~kbuild.tune.measure.oracle.Oracle.run_once`). A launch that fails for lack of resources
(shared memory, registers, threads) leaves the CUDA context usable and is a candidate error; anything
else propagates and the worker turns it into a fault.
"""

from __future__ import annotations

import logging
from typing import Any

from kbuild.bench.spec import BenchSpec, Config, ast_source, load_spec, settled, validate_inputs
from kbuild.bench.tolerance import relative_error
from kbuild.device import timing
from kbuild.runtime.handover import KernelPayload, kernel_from_payload

from .oracle import Oracle
from .session import TIMING_SEED, CandidateError, SessionUsageError, gpu_for, open_spec

log = logging.getLogger(__name__)

#: Seed of the inputs every configuration is checked on (it is timed on :data:`~.session.TIMING_SEED`'s).
CHECK_SEED = 7


def _resource_error(exc: BaseException) -> bool:
    """Launch refused for lack of resources: Triton raises OutOfResources before anything runs."""
    return type(exc).__name__ == "OutOfResources" or "out of resources" in str(exc).lower()


class ConfigSession:
    def __init__(self, spec_ref: str, *, small: bool = False, python_path: tuple[str, ...] = ()) -> None:
        import torch

        self.torch = torch
        spec: BenchSpec = open_spec(load_spec, spec_ref, small=small, python_path=python_path)
        self.arch = gpu_for(spec.archs)
        if spec.needs_allocator:
            timing.set_scratch_allocator()
        self.spec = settled(spec, timing.DEVICE)
        self.check_inputs = self.spec.make_inputs(CHECK_SEED, timing.DEVICE)
        validate_inputs(self.spec, self.check_inputs)
        self.expected: dict[str, Any] | None = (self.spec.reference(self.check_inputs)
                                                 if self.spec.reference is not None else None)
        self.timing_inputs = self.spec.make_inputs(TIMING_SEED, timing.DEVICE)
        self.flush = timing.L2Flush()
        self.kernels: dict[str, tuple[Any, Config]] = {}

    def add(self, key: str, config: Config, payload: KernelPayload) -> dict[str, Any]:
        """Load one configuration's kernel and check it once; ``status`` ok or wrong-result (a kernel that
        cannot launch raises :class:`CandidateError`)."""
        kernel = kernel_from_payload(ast_source(self.spec, config), payload)
        oracle = Oracle(self.spec, config, device=timing.DEVICE, synchronize=self.torch.cuda.synchronize)
        try:
            outs, problem = oracle.run_once(kernel, self.check_inputs, CHECK_SEED)
        except Exception as exc:
            if _resource_error(exc):
                raise CandidateError(f"launch-error: {type(exc).__name__}: {exc}") from None
            raise
        extra = {"registers": getattr(kernel, "n_regs", None), "spills": getattr(kernel, "n_spills", None)}
        if problem:
            return {"status": "wrong-result", "error": problem, **extra}
        for name, t in outs.items():
            if t.is_floating_point() and bool(self.torch.isnan(t).any()) and not (
                    self.expected is not None and bool(self.torch.isnan(self.expected[name]).any())):
                return {"status": "wrong-result", "error": f"output {name!r} partly unwritten (NaN after poisoning)",
                        **extra}
        if self.expected is None:  # no torch reference: the first configuration added is the reference
            self.expected = outs
        errs = {name: relative_error(outs[name], self.expected[name]) for name in self.spec.outputs}
        tols = {name: self.spec.tolerance(name) for name in self.spec.outputs}
        worst = max(errs.values())
        self.kernels[key] = (kernel, config)
        bad = [name for name in self.spec.outputs if not errs[name] <= tols[name]]
        if bad:
            del self.kernels[key]
            name = bad[0]
            return {"status": "wrong-result", "rel_err": worst, "error": f"output {name!r}: relative error "
                    f"{errs[name]:.3g} > {tols[name]:.3g} against the reference", **extra}
        return {"status": "ok", "rel_err": worst, **extra}

    def time(self, keys: list[str], rounds: int, reps: int) -> dict[str, list[list[float]]]:
        missing = [k for k in keys if k not in self.kernels]
        if missing:
            raise SessionUsageError(f"not loaded: {missing}")
        fns = []
        for key in keys:
            kernel, config = self.kernels[key]
            grid = self.spec.grid(self.spec.all_constexprs(config))
            args = self.spec.launch_args(self.timing_inputs, config)
            fns.append(self._launcher(kernel, grid, args))
        samples = timing.time_interleaved(fns, rounds=rounds, reps=reps, flush=self.flush)
        return dict(zip(keys, samples))

    @staticmethod
    def _launcher(kernel: Any, grid: tuple[int, int, int], args: list[Any]) -> Any:
        return lambda: kernel[grid](*args)
