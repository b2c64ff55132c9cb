"""Helpers for the kbuild.runtime tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
JIT_EXAMPLE = ROOT / "examples" / "jit-package"

#: Appended to the baseline cubin to make a distinct "tuned" cubin (still an ELF file; never loaded here).
MARKER = b"kbuild-runtime-test"


class FakeDriver:
    """Just enough of Triton's driver for ``JITFunction.run`` on a CPU: warmup (compile, hooks), and a launch
    whose load and launch steps are stubbed (recorded, labelled stand-ins for the GPU)."""

    def __init__(self, cc: int) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", cc, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self.target

    # -- Stand-ins for the GPU (CPU tests only): the driver's load and launch steps record what
    # -- reaches them instead of calling CUDA. Nothing here runs a kernel.

    @property
    def loads(self) -> list[tuple[str, bytes, int, int]]:
        """``(symbol, cubin bytes, shared, device)`` of each ``utils.load_binary`` call."""
        return self.utils.loads

    @property
    def launches(self) -> list[tuple[Any, ...]]:
        """The arguments of each launch (grid x, y, z, stream, function, ...)."""
        return _StubLauncher.launches

    @property
    def launcher_cls(self) -> type:
        return _StubLauncher

    @property
    def utils(self) -> _StubUtils:
        if not hasattr(self, "_utils"):
            self._utils = _StubUtils()
            _StubLauncher.launches = []
        return self._utils


class _StubUtils:
    """CPU stand-in for ``driver.active.utils``: records the cubin handed to the driver's load step."""

    def __init__(self) -> None:
        self.loads: list[tuple[str, bytes, int, int]] = []

    def get_device_properties(self, device: int) -> dict[str, int]:
        return {"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536, "warpSize": 32}

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int) -> tuple[int, int, int, int, int]:
        self.loads.append((name, bytes(kernel), shared, device))
        return (1, 2, 32, 0, 1024)  # module, function, n_regs, n_spills, n_max_threads (stand-in values)


class _StubLauncher:
    """CPU stand-in for Triton's compiled C launcher: records the launch instead of calling cuLaunchKernel."""

    launches: list[tuple[Any, ...]] = []

    def __init__(self, src: Any, metadata: Any) -> None:
        self.src, self.metadata = src, metadata

    def __call__(self, *args: Any) -> None:
        _StubLauncher.launches.append(args)


def make_tuned(settings: Any, build: Any, *, speedup: float = 1.25, marker: bytes = MARKER) -> Any:
    """Turn a baseline build into a "tuned" one with a distinct cubin, as the tuner's store entry would be."""
    from kbuild.cache import Artefact
    from kbuild.key import KernelKey, tuner_component
    from kbuild.tune import TUNER_VERSION

    tuned = dataclasses.replace(settings, tune="auto")
    tuner = tuner_component(tuned, version=TUNER_VERSION)
    build.tuned_key = KernelKey({**build.baseline_key.components, "tuner": tuner})
    build.tuned = True
    meta = {**build.artefact.meta, "tuned": True, "speedup": speedup, "key": build.tuned_key.hex}
    build.artefact = Artefact.create(key=build.tuned_key.hex, cubin=build.artefact.cubin + marker, meta=meta)
    return build


# ----------------------------------------------------------------------------------------------
# Stand-ins for the direct path on the CPU (labelled; tests and the first-call probe only): torch's CUDA queries
# (an sm_90 device 0), libcuda under kbuild's driver binding (FakeCuda records the module load and decodes the
# launch's parameters from the addresses the packing produced), and a Triton driver that answers only what Triton's
# GPUDriver answers from torch (the current device and stream, the target) and fails on any other use: the direct
# path must not build or use Triton's C modules (cuda_utils, the launcher: on a GPU their first use runs gcc).


class _NoDriver:
    def get_current_device(self) -> int:
        import torch

        return int(torch.cuda.current_device())

    def get_current_stream(self, device: int | None = None) -> int:
        import torch

        return int(torch._C._cuda_getCurrentRawStream(self.get_current_device() if device is None else device))

    def get_current_target(self) -> Any:
        import torch
        from triton.backends.compiler import GPUTarget

        major, minor = torch.cuda.get_device_capability(self.get_current_device())
        return GPUTarget("cuda", major * 10 + minor, 32)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Triton's driver was used ({name})")


class FakeCuda:
    """Stand-in for libcuda.so.1 under :class:`kbuild.device.cuda.CudaDriver` (CPU tests only): records what the
    direct path asks of the driver API."""

    def __init__(self) -> None:
        import ctypes

        self.ctypes = ctypes
        self.loaded: list[bytes] = []
        self.names: list[bytes] = []
        self.launches: list[dict[str, Any]] = []
        self.current = 1  # the context current on the thread (0: none, as before torch's first allocation)
        self.contexts: list[tuple[str, int]] = []  # (call, argument) of the context calls made

    def _set(self, ref: Any, value: Any) -> None:
        ref._obj.value = value

    def cuGetErrorString(self, code: int, ptext: Any) -> int:
        self._set(ptext, f"stand-in error {code}".encode())
        return 0

    def cuDeviceGetAttribute(self, pout: Any, attribute: int, device: int) -> int:
        self._set(pout, 232448)  # H200: max shared memory per block (opt-in)
        return 0

    def cuCtxGetCurrent(self, pctx: Any) -> int:
        self._set(pctx, self.current)
        return 0

    def cuDevicePrimaryCtxRetain(self, pctx: Any, device: int) -> int:
        self.contexts.append(("retain", device))
        self._set(pctx, 10 + device)
        return 0

    def cuCtxSetCurrent(self, ctx: Any) -> int:
        value = ctx.value if hasattr(ctx, "value") else ctx
        self.contexts.append(("set", value))
        self.current = value
        return 0

    def cuModuleLoadData(self, pmod: Any, data: bytes) -> int:
        if not self.current:
            return 201  # CUDA_ERROR_INVALID_CONTEXT
        self.loaded.append(data)
        self._set(pmod, 2)
        return 0

    def cuModuleGetFunction(self, pfn: Any, mod: Any, name: bytes) -> int:
        self.names.append(name)
        self._set(pfn, 3)
        return 0

    def cuFuncGetAttribute(self, pout: Any, attribute: int, fn: Any) -> int:
        from kbuild.device import cuda

        self._set(pout, 1024 if attribute == cuda.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK else 0)
        return 0

    def cuPointerGetAttribute(self, pdev: Any, attribute: int, ptr: int) -> int:
        from kbuild.device import cuda

        assert attribute == cuda.CU_POINTER_ATTRIBUTE_DEVICE_POINTER
        self._set(pdev, ptr)
        return 0

    def cuLaunchKernelEx(self, pconfig: Any, fn: Any, params: Any, extra: Any) -> int:
        from kbuild.device import cuda

        ct = self.ctypes
        # kbuild's binding passes a byref'd config and a pointer array, the run time's launchers plain addresses
        c = cuda.LaunchConfig.from_address(pconfig) if isinstance(pconfig, int) else pconfig._obj
        if isinstance(params, int):
            params = (ct.c_void_p * 7).from_address(params)
        addr = [params[i] for i in range(7)]  # out, in, 3 x i32, global/profile scratch
        self.launches.append({
            "grid": (c.gridDimX, c.gridDimY, c.gridDimZ), "block": c.blockDimX, "shared": c.sharedMemBytes,
            "stream": c.hStream, "attrs": c.numAttrs,
            "args": [ct.c_uint64.from_address(addr[0]).value, ct.c_uint64.from_address(addr[1]).value,
                     *(ct.c_int32.from_address(a).value for a in addr[2:5]),
                     ct.c_uint64.from_address(addr[5]).value, ct.c_uint64.from_address(addr[6]).value]})
        return 0


@contextlib.contextmanager
def direct_stand_ins() -> Iterator[FakeCuda]:
    """Install the stand-ins (restored on exit); yields the FakeCuda that records loads and launches."""
    import torch
    from triton.runtime.driver import driver

    from kbuild.device import cuda

    saved_driver = driver._active
    fake = FakeCuda()
    binding = cuda.CudaDriver(fake)
    patched = [(cuda, "driver", lambda: binding), (torch.cuda, "is_initialized", lambda: True),
               (torch.cuda, "current_device", lambda: 0),
               (torch.cuda, "get_device_capability", lambda device=None: (9, 0)),
               (torch._C, "_cuda_getCurrentRawStream", lambda device: 77)]
    saved = [(obj, name, obj.__dict__.get(name, _MISSING)) for obj, name, _ in patched]
    driver.set_active(_NoDriver())
    for obj, name, value in patched:
        setattr(obj, name, value)
    try:
        yield fake
    finally:
        for obj, name, value in saved:
            if value is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, value)
        driver._active = saved_driver


_MISSING = object()
