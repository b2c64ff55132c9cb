"""The CUDA driver API through ctypes: kbuild's one binding of ``libcuda.so.1``.

Three callers share it: the run time's direct launcher (:mod:`kbuild.runtime.direct`: a shipped Triton kernel
loaded and launched with no host compiler), the measurement worker's CUDA C++ kernels
(:mod:`kbuild.tune.measure.cuda_session`) and the GPU probe (:mod:`kbuild.device.probe`: which GPUs this machine
has, asked on every build).

:func:`driver` opens the library once per process, as Triton's launcher ``dlopen``\\ s it, and types the functions
kbuild calls. :class:`CudaDriver` wraps them: the devices and their attributes, the current context
(:meth:`~CudaDriver.make_current`), a module loaded from bytes, a function of it, a pointer's device address, and
a launch with a :class:`LaunchConfig`. A call that fails raises :class:`CudaError`, which names the call and keeps
the driver's error code; its message begins as Triton's own does (``Triton Error [CUDA]: ...``).

Nothing runs at import time, nothing creates a CUDA context but :meth:`CudaDriver.make_current`, and this module
imports nothing of kbuild, nor torch.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

# CUDA driver API enumerations (cuda.h).
CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
CU_FUNC_ATTRIBUTE_NUM_REGS = 4
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_FUNC_CACHE_PREFER_SHARED = 1
CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3
CUDA_ERROR_INVALID_VALUE = 1
CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
CU_CLUSTER_SCHEDULING_POLICY_SPREAD = 1

#: The ctypes type a kernel parameter of each scalar type (Triton's names) is passed as.
SCALAR_CTYPES: dict[str, Any] = {
    "i1": ctypes.c_int8, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32, "i64": ctypes.c_int64,
    "u1": ctypes.c_uint8, "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64,
    "fp32": ctypes.c_float, "f32": ctypes.c_float, "fp64": ctypes.c_double}


class LaunchAttributeValue(ctypes.Union):
    """``CUlaunchAttributeValue``: 64 bytes, of which kbuild sets an int or a cluster's three dimensions."""

    _fields_ = [("pad", ctypes.c_char * 64), ("value", ctypes.c_int), ("dim", ctypes.c_uint * 3)]


class LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: an attribute id (``CU_LAUNCH_ATTRIBUTE_*``) and its value."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("val", LaunchAttributeValue)]


class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig``: grid and block dimensions, dynamic shared memory, the stream and the attributes."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


class CudaError(RuntimeError):
    """A CUDA driver call failed: ``call`` names it and ``code`` is the driver's ``CUresult`` (None for a limit
    kbuild checks itself). The message begins as Triton's: ``Triton Error [CUDA]: <the driver's text>``."""

    def __init__(self, message: str, *, call: str | None = None, code: int | None = None) -> None:
        super().__init__(message)
        self.call = call
        self.code = code


_ARGTYPES: dict[str, list[Any]] = {
    "cuInit": [ctypes.c_uint], "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
    "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
    "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
    "cuCtxGetCurrent": [ctypes.POINTER(ctypes.c_void_p)], "cuCtxSetCurrent": [ctypes.c_void_p],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int],
    "cuModuleLoadData": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p],
    "cuModuleUnload": [ctypes.c_void_p],
    "cuModuleGetFunction": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p],
    "cuFuncGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_void_p],
    "cuFuncSetAttribute": [ctypes.c_void_p, ctypes.c_int, ctypes.c_int],
    "cuFuncSetCacheConfig": [ctypes.c_void_p, ctypes.c_int],
    "cuPointerGetAttribute": [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64],
    "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuLaunchKernelEx": [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                         ctypes.POINTER(ctypes.c_void_p)],
}


#: ``cuLaunchKernelEx`` as a prototype of four ``void *`` (:attr:`CudaDriver.launch_raw`).
_LAUNCH_BY_ADDRESS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class CudaDriver:
    """The driver calls kbuild makes, each checked (:class:`CudaError` names the call that failed).

    ``lib`` is ``libcuda.so.1`` with its functions typed (:func:`driver`), or a stand-in with the same functions
    (the CPU tests')."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self._pointer_attribute = lib.cuPointerGetAttribute  # the two calls of every launch, looked up once
        self._launch_ex = lib.cuLaunchKernelEx
        raw = lib.cuLaunchKernelEx
        address = ctypes.cast(raw, ctypes.c_void_p).value if isinstance(lib, ctypes.CDLL) else None
        self.launch_raw = _LAUNCH_BY_ADDRESS(address) if address else raw
        """``cuLaunchKernelEx`` taking its four arguments as plain addresses (``int``: the launch configuration,
        the function, the parameter array, ``None``) and returning the status unchecked (:meth:`check`), for the
        run time's generated launchers (:class:`kbuild.runtime.direct.DirectLauncher`), once per kernel launch: no
        ``byref`` and no type check per call (a stand-in ``lib`` gets the same integers)."""

    @classmethod
    def open(cls) -> CudaDriver:
        """``libcuda.so.1`` (OSError when there is no driver), its functions typed."""
        lib = ctypes.CDLL("libcuda.so.1")
        for name, argtypes in _ARGTYPES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        return cls(lib)

    def error(self, code: int, call: str) -> CudaError:
        """The :class:`CudaError` for ``call`` returning ``code``, with the driver's text for it."""
        text = ctypes.c_char_p()
        self.lib.cuGetErrorString(code, ctypes.byref(text))
        return CudaError(f"Triton Error [CUDA]: {(text.value or b'unknown error').decode()} ({call})", call=call,
                         code=code)

    def check(self, code: int, call: str) -> None:
        """Raise the :class:`CudaError` of ``call`` unless ``code`` is ``CUDA_SUCCESS``."""
        if code:
            raise self.error(code, call)

    # -- devices

    def init(self) -> None:
        """``cuInit(0)``: needed before the device calls in a process where nothing else (torch) initialised CUDA."""
        self.check(self.lib.cuInit(0), "cuInit")

    def device_count(self) -> int:
        count = ctypes.c_int(0)
        self.check(self.lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
        return count.value

    def device(self, ordinal: int) -> int:
        """The ``CUdevice`` handle of the device numbered ``ordinal``."""
        dev = ctypes.c_int(0)
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        return dev.value

    def device_name(self, device: int) -> str:
        name = ctypes.create_string_buffer(256)
        self.check(self.lib.cuDeviceGetName(name, 256, device), "cuDeviceGetName")
        return name.value.decode(errors="replace")

    def device_attribute(self, attribute: int, device: int) -> int:
        """A ``CU_DEVICE_ATTRIBUTE_*`` of ``device``."""
        out = ctypes.c_int()
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(out), attribute, device), "cuDeviceGetAttribute")
        return out.value

    def compute_capability(self, device: int) -> int:
        """``major * 10 + minor`` (90 for an H100)."""
        return (self.device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) * 10
                + self.device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device))

    def make_current(self, device: int) -> None:
        """A CUDA context current on this thread: the one already current, else ``device``'s primary context
        (retained and made current), as Triton's ``load_binary`` does. ``cuModuleLoadData`` needs one: torch
        creates its context only at its first allocation or launch, so a cubin loaded before that fails with
        "invalid device context" (seen on the H200 when the measurement worker loaded a CUDA C++ kernel's
        baseline)."""
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
            self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    # -- modules and functions

    def load_module(self, image: bytes) -> ctypes.c_void_p:
        """A module loaded from a cubin's bytes into the current context."""
        module = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
        return module

    def unload_module(self, module: ctypes.c_void_p) -> None:
        self.check(self.lib.cuModuleUnload(module), "cuModuleUnload")

    def get_function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        """The kernel ``name`` (its symbol: mangled for CUDA C++) of ``module``."""
        function = ctypes.c_void_p()
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(function), module, name.encode()), "cuModuleGetFunction")
        return function

    def function_attribute(self, function: ctypes.c_void_p, attribute: int) -> int:
        """A ``CU_FUNC_ATTRIBUTE_*`` of ``function``."""
        out = ctypes.c_int()
        self.check(self.lib.cuFuncGetAttribute(ctypes.byref(out), attribute, function), "cuFuncGetAttribute")
        return out.value

    def set_function_attribute(self, function: ctypes.c_void_p, attribute: int, value: int) -> None:
        self.check(self.lib.cuFuncSetAttribute(function, attribute, value), "cuFuncSetAttribute")

    def set_cache_config(self, function: ctypes.c_void_p, config: int) -> None:
        self.check(self.lib.cuFuncSetCacheConfig(function, config), "cuFuncSetCacheConfig")

    # -- launching

    def device_pointer(self, address: int) -> int | None:
        """The device address of the memory at ``address``; None when the driver does not know it as device
        memory (``CUDA_ERROR_INVALID_VALUE``: host memory, a CPU tensor)."""
        dev = ctypes.c_uint64()
        status = self._pointer_attribute(ctypes.byref(dev), CU_POINTER_ATTRIBUTE_DEVICE_POINTER, address)
        if status == CUDA_ERROR_INVALID_VALUE:
            return None
        if status:
            raise self.error(status, "cuPointerGetAttribute")
        return dev.value

    def launch(self, function: ctypes.c_void_p, config: LaunchConfig, params: Any) -> None:
        """``cuLaunchKernelEx``: ``params`` is an array of pointers to each parameter's value, in order."""
        status = self._launch_ex(ctypes.byref(config), function, params, None)
        if status:
            raise self.error(status, "cuLaunchKernelEx")


_lock = threading.Lock()
_driver: CudaDriver | None = None


def driver() -> CudaDriver:
    """This process's :class:`CudaDriver`, opened on first use (OSError when there is no ``libcuda.so.1``)."""
    global _driver
    with _lock:
        if _driver is None:
            _driver = CudaDriver.open()
        return _driver


__all__ = ["SCALAR_CTYPES", "CudaDriver", "CudaError", "LaunchAttribute", "LaunchAttributeValue", "LaunchConfig",
           "driver"]
