"""One loaded kernel on the GPU: the worker's state between requests (runs inside the worker only).

What every session of the worker shares is here: the bench spec loaded (:func:`open_spec`), the GPU it needs
(:func:`gpu_for`), the inputs every kernel is timed on (:data:`TIMING_SEED`), and the errors a request answers
with. :class:`BaselineSession` is a baseline loaded on this GPU with candidates checked bit for bit against it and
timed interleaved with it; :class:`Session` is that for a Triton kernel (it compiles the spec's configuration for
this GPU to get Triton's launcher and metadata and substitutes the baseline cubin), and
:class:`~kbuild.tune.measure.cuda_session.CudaSession` for a CUDA C++ kernel of an nvcc cubin. Level 1's
:class:`~kbuild.tune.measure.config_session.ConfigSession` holds many configurations instead of one baseline.
Exceptions from CUDA propagate; the worker turns them into a ``fault`` reply and exits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kbuild.bench.spec import BenchSpec, Config, compile_spec, load_spec, settled, validate_inputs
from kbuild.device import timing

from .cubin import CubinFormatError, cubin_arch, cubin_digest
from .oracle import BaselineProblem, Oracle

log = logging.getLogger(__name__)

#: Seed of the inputs every session times its kernels on.
TIMING_SEED = 1_000_003


class CandidateError(Exception):
    """The candidate is unusable but the CUDA context is fine (e.g. wrong architecture)."""


class SessionUsageError(Exception):
    """Bad request: no GPU, wrong architecture, spec problems."""

    def __init__(self, message: str, kind: str = "usage") -> None:
        self.kind = kind
        super().__init__(message)


SpecT = TypeVar("SpecT")


def open_spec(load: Callable[..., SpecT], ref: str, *, small: bool, python_path: tuple[str, ...]) -> SpecT:
    """The bench spec ``ref`` loaded by ``load`` (:func:`kbuild.bench.spec.load_spec`, or the CUDA one); a spec that
    does not load is a :class:`SessionUsageError`."""
    from kbuild.errors import KBuildError

    try:
        return load(ref, small=small, python_path=python_path)
    except KBuildError as exc:
        raise SessionUsageError(str(exc)) from None


def gpu_for(archs: Sequence[int]) -> int:
    """This GPU's architecture, when it is one of ``archs``; a :class:`SessionUsageError` of kind ``no-gpu``
    otherwise."""
    from kbuild.errors import GPUUnavailableError

    try:
        return timing.require_gpu(archs)
    except GPUUnavailableError as exc:
        raise SessionUsageError(str(exc), kind="no-gpu") from None


def baseline_arch(baseline: bytes) -> int:
    """The architecture the baseline cubin is for; a :class:`SessionUsageError` when it is not a cubin."""
    try:
        return cubin_arch(baseline)
    except CubinFormatError as exc:
        raise SessionUsageError(f"baseline: {exc}") from None


class BaselineSession:
    """A baseline loaded on this GPU, candidates checked bit for bit against it by the oracle (:meth:`check`) and
    timed interleaved with it, the baseline twice for the A/A control (:meth:`time`). A subclass loads its kernels
    (:meth:`_load`), says how each is launched on the timing inputs (:meth:`_launchers`) and, when they hold
    resources, gives them back (:meth:`_release`); it calls :meth:`_ready` once its baseline is loaded."""

    spec: Any
    arch: int
    baseline: Any
    baseline_digest: str
    flush: Any
    timing_inputs: dict[str, Any]
    oracle: Oracle
    details: dict[str, Any]

    def _ready(self, baseline: bytes, kernel: Any, oracle: Callable[[], Oracle]) -> None:
        """The rest of the setup once the baseline cubin is loaded as ``kernel``: its digest, the L2 flush, the
        timing inputs (checked), the oracle, and the oracle's sanity check of the baseline (``details``)."""
        self.baseline = kernel
        self.baseline_digest = cubin_digest(baseline)
        self.flush = timing.L2Flush()
        self.timing_inputs = self.spec.make_inputs(TIMING_SEED, timing.DEVICE)
        validate_inputs(self.spec, self.timing_inputs, check_reference=False)
        self.oracle = oracle()
        try:
            self.details = self.oracle.baseline_sanity(self.baseline)
        except BaselineProblem as exc:
            raise SessionUsageError(str(exc)) from None

    def _load(self, cubin: bytes) -> Any:
        """``cubin`` (for this GPU's architecture) loaded as a kernel this session launches."""
        raise NotImplementedError

    def _launchers(self, kernels: Sequence[Any]) -> list[Callable[[], Any]]:
        """One call per kernel that launches it once on the timing inputs."""
        raise NotImplementedError

    def _release(self, kernel: Any) -> None:
        """Give back what a candidate ``kernel`` holds, once judged (nothing, unless a subclass says otherwise)."""

    def _candidate(self, cubin: bytes) -> Any:
        try:
            arch = cubin_arch(cubin)
        except CubinFormatError as exc:
            raise CandidateError(f"not a cubin: {exc}") from None
        if arch != self.arch:
            raise CandidateError(f"cubin is for sm_{arch} but this GPU is sm_{self.arch}")
        return self._load(cubin)

    # -- requests --------------------------------------------------------------------------------
    def check(self, cubin: bytes, k: int, seed: int) -> dict[str, Any]:
        cand = self._candidate(cubin)
        try:
            return self.oracle.check(self.baseline, cand, k, seed)
        except BaselineProblem as exc:
            raise SessionUsageError(str(exc)) from None
        finally:
            self._release(cand)

    def time(self, cubin: bytes, rounds: int, reps: int) -> dict[str, list[list[float]]]:
        cand = self._candidate(cubin)
        try:
            base, other, aa = timing.time_interleaved(self._launchers([self.baseline, cand, self.baseline]),
                                                      rounds=rounds, reps=reps, flush=self.flush)
        finally:
            self._release(cand)
        return {"baseline": base, "candidate": other, "baseline_aa": aa}

    def peers(self, cubin: bytes, rounds: int, reps: int) -> dict[str, Any]:
        """``cubin`` (the schedule that ships, for this session's configuration) timed interleaved with the spec's
        peers (:func:`kbuild.bench.peers.peers_for`: the torch calls a user would make instead), on the timing
        inputs, as ``kbuild bench`` does: each peer's record (``available``, its output against the spec's
        reference, ``ratio`` = peer / kernel with its 95% interval, raw samples) and the kernel's samples. No
        peer: nothing is launched."""
        import torch

        from kbuild.bench import peers as peer_mod
        from kbuild.device import stats

        found = peer_mod.peers_for(self.spec)
        if not found:
            return {"peers": []}
        cand = self._candidate(cubin)
        try:
            ref = self.spec.reference(self.timing_inputs) if self.spec.reference is not None else None
            (kernel,), records = peer_mod.time_beside(found, self.spec, self.timing_inputs, ref,
                                                      self._launchers([cand]), rounds=rounds, reps=reps,
                                                      flush=self.flush, synchronize=torch.cuda.synchronize)
        finally:
            self._release(cand)
        return {"peers": records, "kernel_ms": stats.median(kernel), "kernel_samples_ms": kernel, "rounds": rounds,
                "reps": reps}


class Session(BaselineSession):
    """A Triton kernel: the spec's configuration compiled for this GPU, its cubin replaced by the baseline."""

    def __init__(self, spec_ref: str, config: int | dict[str, Any], baseline: bytes, *, small: bool = False,
                 python_path: tuple[str, ...] = ()) -> None:
        import torch

        self.torch = torch
        self.spec: BenchSpec = open_spec(load_spec, spec_ref, small=small, python_path=python_path)
        base_arch = baseline_arch(baseline)
        if base_arch not in self.spec.archs:
            raise SessionUsageError(f"baseline cubin is for sm_{base_arch}; {spec_ref} supports "
                                    f"{', '.join(f'sm_{a}' for a in self.spec.archs)}")
        self.arch = gpu_for((base_arch,))
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
        self.spec = settled(self.spec, timing.DEVICE)
        self.shell = compile_spec(self.spec, self.config, self.arch)
        self.grid = self.spec.grid(self.spec.all_constexprs(self.config))
        self._ready(baseline, timing.with_cubin(self.shell, baseline),
                    lambda: Oracle(self.spec, self.config, device=timing.DEVICE, synchronize=torch.cuda.synchronize))

    def _load(self, cubin: bytes) -> Any:
        return timing.with_cubin(self.shell, cubin)

    def _launchers(self, kernels: Sequence[Any]) -> list[Callable[[], Any]]:
        args = self.spec.launch_args(self.timing_inputs, self.config)
        grid = self.grid

        def run(kernel: Any) -> Callable[[], Any]:
            return lambda: kernel[grid](*args)

        return [run(k) for k in kernels]


__all__ = ["TIMING_SEED", "BaselineSession", "CandidateError", "Session", "SessionUsageError", "baseline_arch",
           "gpu_for", "open_spec"]
