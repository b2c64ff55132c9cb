"""One loaded kernel on the GPU: the worker's state between requests (runs inside the worker only).

:class:`Session` compiles the spec's configuration for this GPU to get Triton's launcher and
metadata, substitutes the baseline cubin, and answers ``check`` and ``time`` for candidate cubins.
Exceptions from CUDA propagate; the worker turns them into a ``fault`` reply and exits.
"""

from __future__ import annotations

import logging
from typing import Any

from kbuild.bench.spec import BenchSpec, Config, compile_spec, load_spec, validate_inputs
from kbuild.device import timing

from .cubin import CubinFormatError, cubin_arch, cubin_digest
from .oracle import BaselineProblem, Oracle

log = logging.getLogger(__name__)


class CandidateError(Exception):
    """The candidate is unusable but the CUDA context is fine (e.g. wrong architecture)."""


class SessionUsageError(Exception):
    """Bad request: no GPU, wrong architecture, spec problems."""

    def __init__(self, message: str, kind: str = "usage") -> None:
        self.kind = kind
        super().__init__(message)



class Session:
    def __init__(self, spec_ref: str, config: int | dict[str, Any], baseline: bytes, *, small: bool = False,
                 python_path: tuple[str, ...] = ()) -> None:
        import torch

        from kbuild.errors import GPUUnavailableError, KBuildError

        self.torch = torch
        try:
            self.spec: BenchSpec = load_spec(spec_ref, small=small, python_path=python_path)
        except KBuildError as exc:
            raise SessionUsageError(str(exc)) from None
        try:
            base_arch = cubin_arch(baseline)
        except CubinFormatError as exc:
            raise SessionUsageError(f"baseline: {exc}") from None
        if base_arch not in self.spec.archs:
            raise SessionUsageError(f"baseline cubin is for sm_{base_arch}; {spec_ref} supports "
                                    f"{', '.join(f'sm_{a}' for a in self.spec.archs)}")
        try:
            self.arch = timing.require_gpu((base_arch,))
        except GPUUnavailableError as exc:
            raise SessionUsageError(str(exc), kind="no-gpu") from None
        if isinstance(config, dict):
            try:
                self.config = Config.from_dict(config)
            except (TypeError, ValueError) as exc:
                raise SessionUsageError(f"config {config!r}: {exc}") from None
        elif not 0 <= config < len(self.spec.configs):
            raise SessionUsageError(f"config {config} out of range (spec has {len(self.spec.configs)})")
        else:
            self.config = self.spec.configs[config]
        if self.spec.needs_allocator:
            timing.set_scratch_allocator()
        self.shell = compile_spec(self.spec, self.config, self.arch)
        self.baseline = timing.with_cubin(self.shell, baseline)
        self.baseline_digest = cubin_digest(baseline)
        self.grid = self.spec.grid(self.spec.all_constexprs(self.config))
        self.flush = timing.L2Flush()
        self.timing_inputs = self.spec.make_inputs(1_000_003, timing.DEVICE)
        validate_inputs(self.spec, self.timing_inputs, check_reference=False)
        self.oracle = Oracle(self.spec, self.config, device=timing.DEVICE, synchronize=torch.cuda.synchronize)
        try:
            self.details = self.oracle.baseline_sanity(self.baseline)
        except BaselineProblem as exc:
            raise SessionUsageError(str(exc)) from None

    # -- requests --------------------------------------------------------------------------------
    def _candidate(self, cubin: bytes) -> Any:
        try:
            arch = cubin_arch(cubin)
        except CubinFormatError as exc:
            raise CandidateError(f"not a cubin: {exc}") from None
        if arch != self.arch:
            raise CandidateError(f"cubin is for sm_{arch} but this GPU is sm_{self.arch}")
        return timing.with_cubin(self.shell, cubin)

    def check(self, cubin: bytes, k: int, seed: int) -> dict[str, Any]:
        cand = self._candidate(cubin)
        try:
            return self.oracle.check(self.baseline, cand, k, seed)
        except BaselineProblem as exc:
            raise SessionUsageError(str(exc)) from None

    def time(self, cubin: bytes, rounds: int, reps: int) -> dict[str, list[list[float]]]:
        cand = self._candidate(cubin)
        args = self.spec.launch_args(self.timing_inputs, self.config)
        grid = self.grid

        def run(kernel: Any) -> Any:
            return lambda: kernel[grid](*args)

        base, other, aa = timing.time_interleaved([run(self.baseline), run(cand), run(self.baseline)],
                                               rounds=rounds, reps=reps, flush=self.flush)
        return {"baseline": base, "candidate": other, "baseline_aa": aa}
