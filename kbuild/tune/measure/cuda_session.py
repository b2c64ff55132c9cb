"""One loaded CUDA C++ kernel on the GPU (runs inside the measurement worker only).

The CUDA counterpart of :class:`kbuild.tune.measure.session.Session`: the kernel is a ``__global__`` function of a
cubin that nvcc's ptxas wrote (:mod:`kbuild.nvcc.tuned`), named by its mangled symbol, and its bench spec is a
:class:`kbuild.bench.cuda.CudaBenchSpec`. Each cubin (the untouched baseline, each candidate) is loaded with
``cuModuleLoadData`` and launched with ``cuLaunchKernelEx`` through kbuild's CUDA driver binding (:mod:`kbuild.device.cuda`),
with the spec's grid, block and dynamic shared memory, and the parameters packed in the signature's order.
Correctness is the same oracle as for Triton kernels (:class:`CudaOracle`: poisoned outputs, guard bands,
inputs unchanged, bitwise comparison with the untouched baseline on fresh inputs); timing the same interleaved
CUDA-event loop with an L2 flush.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kbuild.bench.cuda import CudaBenchSpec, load_cuda_spec
from kbuild.device import cuda as cuda_driver
from kbuild.device import timing

from .oracle import Oracle
from .session import BaselineSession, baseline_arch, gpu_for, open_spec


class CudaFunction:
    """A cubin's ``__global__`` function loaded on the current device, launched with a spec's dimensions."""

    def __init__(self, cubin: bytes, symbol: str, spec: CudaBenchSpec) -> None:
        import torch

        self.spec = spec
        self.cuda = cuda = cuda_driver.driver()
        cuda.make_current(torch.cuda.current_device())  # torch.cuda.init() alone makes no context current
        self.module = cuda.load_module(cubin)
        self.function = cuda.get_function(self.module, symbol)
        if spec.shared > 48 * 1024:
            cuda.set_function_attribute(self.function, cuda_driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        spec.shared)
        kinds: list[Any] = []
        for ty in spec.signature.values():
            base = "".join(ty.split()).split(":")[0]
            kinds.append("ptr" if base.startswith("*") else cuda_driver.SCALAR_CTYPES[base])
        self.kinds = kinds

    def run(self, inputs: Mapping[str, Any]) -> None:
        """Launch once on torch's current stream with ``inputs`` (tensors for pointers, numbers for scalars)."""
        import torch

        (gx, gy, gz), (bx, by, bz) = self.spec.dims(inputs)
        values: list[Any] = []
        for kind, arg in zip(self.kinds, self.spec.launch_args(inputs)):
            values.append(ctypes.c_uint64(arg.data_ptr()) if kind == "ptr" else kind(arg))
        params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        config = cuda_driver.LaunchConfig(gx, gy, gz, bx, by, bz, self.spec.shared,
                                          ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), None, 0)
        self.cuda.launch(self.function, config, params)

    def close(self) -> None:
        """Unload the module (a candidate's, once judged). A failure to unload is ignored: after a kernel fault every
        call in the context fails, and the fault itself is what the caller reports."""
        if self.module.value:
            try:
                self.cuda.unload_module(self.module)
            except cuda_driver.CudaError:
                pass
            self.module = ctypes.c_void_p()


class CudaOracle(Oracle):
    """The oracle with a CUDA launch: dimensions from the inputs, not from constexprs."""

    def __init__(self, spec: CudaBenchSpec, *, device: str = "cuda",
                 synchronize: Callable[[], None] | None = None) -> None:
        import torch

        self.torch = torch
        self.spec = spec  # type: ignore[assignment]  # the Triton spec's interface, duck-typed
        self.config = None  # type: ignore[assignment]
        self.device = device
        self.synchronize = synchronize or (lambda: None)

    def launch(self, kernel: Any, inputs: dict[str, Any]) -> None:
        kernel.run(inputs)

    def _poison(self, inputs: dict[str, Any]) -> None:
        super()._poison(inputs)
        for name in self.spec.accumulate:  # type: ignore[attr-defined]
            inputs[name].zero_()


class CudaSession(BaselineSession):
    """``load``/``check``/``time`` for a CUDA kernel: the same answers as :class:`~.session.Session`."""

    def __init__(self, spec_ref: str, symbol: str, baseline: bytes, *, small: bool = False,
                 python_path: tuple[str, ...] = ()) -> None:
        import torch

        self.torch = torch
        self.spec = open_spec(load_cuda_spec, spec_ref, small=small, python_path=python_path)
        self.arch = gpu_for((baseline_arch(baseline),))
        self.symbol = symbol
        self._ready(baseline, CudaFunction(baseline, symbol, self.spec),
                    lambda: CudaOracle(self.spec, device=timing.DEVICE, synchronize=torch.cuda.synchronize))

    def _load(self, cubin: bytes) -> CudaFunction:
        return CudaFunction(cubin, self.symbol, self.spec)

    def _launchers(self, kernels: Sequence[Any]) -> list[Callable[[], Any]]:
        inputs = self.timing_inputs

        def run(fn: CudaFunction) -> Callable[[], None]:
            return lambda: fn.run(inputs)

        return [run(k) for k in kernels]

    def _release(self, kernel: Any) -> None:
        kernel.close()


__all__ = ["CudaFunction", "CudaOracle", "CudaSession"]
