"""Direct launch: a shipped kernel launched through the CUDA driver API, with no host compiler.

Why: zero-JIT loading (:mod:`kbuild.runtime.loader`) answers Triton before it compiles, but Triton's first call
of any kernel still builds two C modules with the host compiler (``triton/runtime/build.py``
``compile_module_from_src``): ``cuda_utils`` when ``driver.active`` is first used (``JITFunction.run`` does so on
its first line) and ``__triton_launcher`` per signature when the kernel is first launched. Measured on the H200
(``benchmarks/results/h200/issue16/``): a shipped kernel's first call took 0.78 s with an empty Triton cache and
0.15 s with the modules cached, against 12 ms to load and launch the cubin directly.

How: :func:`install` wraps ``JITFunction.run`` (class attribute, restored by :func:`uninstall`). For a function
that an enabled package ships cubins for (version 2 index), the wrapper does what ``run`` does up to the launch
with Triton's own parts (the binder of ``create_function_from_signature``, ``_pack_args``, ``ASTSource``; the binder
specialises common argument types through :mod:`kbuild.runtime.specialize`, which avoids Triton's first-call import
of Gluon),
for the target ``GPUTarget("cuda", cc, 32)`` of the current torch device, and asks
:func:`kbuild.runtime.loader.shipped_kernel` for the exactly matching shipped kernel (the same decision the
compile wrapper makes: :func:`kbuild.runtime.lookup.before_compile`). On a match it loads the cubin with
``cuModuleLoadData`` (as Triton's ``load_binary``: primary context, dynamic shared memory above 48 KiB) and
launches it with ``cuLaunchKernelEx`` through kbuild's CUDA driver binding (:mod:`kbuild.device.cuda`), with the
launch configuration and parameter packing of Triton 3.6's generated launcher
(``triton/backends/nvidia/driver.py`` ``make_launcher``): grid x times ``num_ctas``, ``32 * num_warps``
threads, the metadata's shared memory, the non-constexpr arguments in order (pointers as ``data_ptr()``, checked
to be device memory), then the two scratch pointers (null). The choice is cached per function and
specialisation, as Triton's ``kernel_cache``.

Everything this does not cover goes to Triton's ``run`` unchanged (and so to the compile wrapper, or to Triton's
compiler): warm-up calls, launch or load hooks (profilers), another ``jit_cache_hook`` or
``jit_post_compile_hook``, async compile mode, global or profile scratch memory, tensor descriptors, tuple
arguments, fp16/bf16 scalar arguments, a CPU tensor, no current CUDA context, ``KBUILD_RUNTIME_LAUNCH=triton``,
and any call without a shipped kernel. The returned object is the shipped ``CompiledKernel``, as ``run`` returns
(its handles load through Triton if something asks for them).
"""

from __future__ import annotations

import ctypes
import logging
import sys
from dataclasses import dataclass
from typing import Any

from kbuild.device import cuda
from kbuild.runtime import keys
from kbuild.runtime.hook import post_compile_hook
from kbuild.runtime.loader import cache_hook, shipped_kernel
from kbuild.runtime.state import STATE, Event, function_name, runtime_disabled

log = logging.getLogger("kbuild.runtime")

_NOT_SHIPPED = object()  # a function with no shipped entries (per generation of enabled packages)
_NO_MATCH = object()  # a specialisation with no shipped kernel, or one this module does not launch


# ----------------------------------------------------------------------------------------------
# One loaded kernel


def launchable(signature: dict[str, Any], md: Any) -> str | None:
    """Why this module does not launch a kernel of ``signature`` and Triton metadata ``md`` (None: it does)."""
    for name, ty in signature.items():
        if not isinstance(ty, str):
            return f"argument {name} is a tuple"
        if ty != "constexpr" and not ty.startswith("*") and ty not in cuda.SCALAR_CTYPES:
            return f"argument {name} has type {ty}"
    for field in ("global_scratch_size", "profile_scratch_size"):
        if getattr(md, field, 0):
            return f"the kernel needs {field.replace('_size', '')} memory"
    if getattr(md, "tensordesc_meta", None):
        return "the kernel takes tensor descriptors"
    if getattr(md, "num_ctas", 1) == 16:
        return "16-CTA clusters are non-portable"
    return None


@dataclass
class DirectKernel:
    """A shipped cubin loaded on one device, launched through ``cuLaunchKernelEx``."""

    compiled: Any  # the shipped triton CompiledKernel (returned to the caller, as JITFunction.run does)
    kinds: tuple[Any, ...]  # per argument: None (constexpr), "ptr", or a ctypes scalar type
    function: ctypes.c_void_p
    module: ctypes.c_void_p
    num_warps: int
    num_ctas: int
    shared: int
    attrs: Any
    num_attrs: int
    driver: cuda.CudaDriver

    @classmethod
    def load(cls, compiled: Any, signature: dict[str, Any], device: int) -> DirectKernel:
        driver, md = cuda.driver(), compiled.metadata
        driver.make_current(device)
        module = driver.load_module(compiled.kernel)
        function = driver.get_function(module, md.name)
        shared = int(md.shared)
        optin = driver.device_attribute(cuda.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device)
        if shared > 49152 and optin > 49152:
            driver.set_cache_config(function, cuda.CU_FUNC_CACHE_PREFER_SHARED)
            static = driver.function_attribute(function, cuda.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
            driver.set_function_attribute(function, cuda.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          optin - static)
        threads = driver.function_attribute(function, cuda.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        if int(md.num_warps) * 32 > threads:
            raise cuda.CudaError(f"{md.name}: {int(md.num_warps) * 32} threads, the function allows {threads}")
        attrs, n = (cuda.LaunchAttribute * 4)(), 0
        if getattr(md, "launch_pdl", False):
            attrs[n].id, attrs[n].val.value, n = cuda.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 1, n + 1
        if getattr(md, "launch_cooperative_grid", False):
            attrs[n].id, attrs[n].val.value, n = cuda.CU_LAUNCH_ATTRIBUTE_COOPERATIVE, 1, n + 1
        num_ctas = int(getattr(md, "num_ctas", 1))
        if num_ctas != 1:
            attrs[n].id, attrs[n].val.dim[0], attrs[n].val.dim[1], attrs[n].val.dim[2] = \
                cuda.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, num_ctas, 1, 1
            attrs[n + 1].id, attrs[n + 1].val.value = (cuda.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
                                                       cuda.CU_CLUSTER_SCHEDULING_POLICY_SPREAD)
            n += 2
        kinds = tuple(None if ty == "constexpr" else "ptr" if ty.startswith("*") else cuda.SCALAR_CTYPES[ty]
                      for ty in signature.values())
        return cls(compiled, kinds, function, module, int(md.num_warps), num_ctas, shared, attrs, n, driver)

    def launch(self, grid: tuple[int, int, int], stream: int, args: tuple[Any, ...]) -> None:
        gx, gy, gz = grid
        if gx * gy * gz <= 0:
            return
        driver = self.driver
        values: list[Any] = []
        for i, (kind, arg) in enumerate(zip(self.kinds, args)):
            if kind is None:
                continue
            if kind == "ptr":
                ptr = 0 if arg is None else arg if isinstance(arg, int) else arg.data_ptr()
                if ptr:
                    ptr = driver.device_pointer(ptr)
                    if ptr is None:
                        raise ValueError(f"Pointer argument (at {i}) cannot be accessed from Triton (cpu tensor?)")
                values.append(ctypes.c_uint64(ptr))
            else:
                values.append(kind(arg))
        values += [ctypes.c_uint64(0), ctypes.c_uint64(0)]  # global_scratch, profile_scratch
        params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        config = cuda.LaunchConfig(gx * self.num_ctas, gy, gz, 32 * self.num_warps, 1, 1, self.shared,
                                   ctypes.c_void_p(stream), self.attrs, self.num_attrs)
        driver.launch(self.function, config, params)


# ----------------------------------------------------------------------------------------------
# The JITFunction.run wrapper


@dataclass
class _DeviceState:
    """What Triton's ``device_caches[device]`` holds, for one device: its target, backend, binder and caches."""

    target: Any
    backend: Any
    binder: Any
    key_cache: dict[Any, Any]
    kernels: dict[Any, Any]  # Triton's cache key -> DirectKernel or _NO_MATCH


@dataclass
class _FunctionState:
    generation: int
    devices: dict[int, _DeviceState]

    def device(self, jit: Any, device: int) -> _DeviceState:
        found = self.devices.get(device)
        if found is None:
            from triton.backends.compiler import GPUTarget
            from triton.compiler.compiler import make_backend

            from kbuild.runtime.specialize import binder as make_binder

            target = GPUTarget("cuda", keys.current_cc(device), 32)
            backend = make_backend(target)
            binder = make_binder(jit, backend)
            found = self.devices[device] = _DeviceState(target, backend, binder, {}, {})
        return found


def direct_enabled() -> bool:
    """``KBUILD_RUNTIME`` on and ``KBUILD_RUNTIME_LAUNCH=direct`` (memoised on the two variables' values: this is
    asked on every launch). A bad value turns direct launch off (``runtime_disabled`` warns about its own)."""
    from kbuild.errors import ConfigError
    from kbuild.settings.variables import env_raw, env_setting

    memo = env_raw("runtime", "runtime_launch")
    found = STATE.launch_modes.get(memo)
    if found is None:
        try:
            found = not runtime_disabled() and env_setting("runtime_launch") == "direct"
        except ConfigError as exc:
            log.warning("%s; shipped kernels launch through Triton's launcher", exc)
            found = False
        STATE.launch_modes[memo] = found
    return found


def _active(hook: Any) -> bool:
    """Whether a Triton hook does something: Triton 3.6's launch and load hooks are ``HookChain`` objects, never
    None, and call nothing while their ``calls`` list is empty."""
    return hook is not None and bool(getattr(hook, "calls", True))


def plain_triton_reason() -> str | None:
    """Why calls must take Triton's own ``run`` now (None when the direct path may answer them): direct launch is
    off, or something else watches Triton's launches, loads or compiles, or CUDA is not initialised."""
    from triton import knobs

    if not direct_enabled():
        return "direct launch is off"
    rt = knobs.runtime
    if _active(rt.launch_enter_hook) or _active(rt.launch_exit_hook):
        return "launch hooks are set"
    if _active(rt.kernel_load_start_hook) or _active(rt.kernel_load_end_hook):
        return "kernel load hooks are set"
    if rt.jit_cache_hook is not cache_hook or STATE.previous_cache_hook is not None:
        return "another jit_cache_hook is set"
    if rt.jit_post_compile_hook not in (None, post_compile_hook):
        return "another jit_post_compile_hook is set"
    from triton.runtime import _async_compile

    if _async_compile.active_mode.get() is not None:
        return "async compile mode is on"
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return "torch has not initialised CUDA"
    return None


def _function_state(jit: Any) -> Any:
    """This function's :class:`_FunctionState`, or ``_NOT_SHIPPED`` (both per generation of enabled packages)."""
    with STATE.lock:
        generation = STATE.generation
    cached = jit.__dict__.get("_kbuild_direct")
    if cached is not None and cached[0] == generation:
        return cached[1]
    st: Any = _NOT_SHIPPED
    if STATE.candidates(function_name(jit), "triton_metadata"):
        st = _FunctionState(generation, {})
    jit._kbuild_direct = (generation, st)
    return st


def _resolve(jit: Any, st: _DeviceState, device: int, kwargs: dict[str, Any], bound_args: Any,
             specialization: Any, options: Any) -> Any:
    """The :class:`DirectKernel` for this specialisation on ``device``, or ``_NO_MATCH``."""
    options, signature, constexprs, attrs = jit._pack_args(st.backend, kwargs, bound_args, specialization, options)
    from triton.compiler.compiler import ASTSource

    src = ASTSource(jit, signature, constexprs, attrs)
    kernel = shipped_kernel(src, st.target, options.__dict__)
    if kernel is None:
        return _NO_MATCH
    why = launchable(signature, kernel.metadata)
    if why is not None:
        name = function_name(jit)
        with STATE.lock:
            first = name not in STATE.direct_declined_logged
            STATE.direct_declined_logged.add(name)
        if first:
            log.info("%s: not launched directly (%s); Triton's launcher runs the shipped kernel", name, why)
        return _NO_MATCH
    direct = DirectKernel.load(kernel, signature, device)
    STATE.record(Event(function_name(jit), True, "direct launch: shipped cubin launched without a host compiler",
                       key=getattr(kernel, "kbuild_entry", None), stage="direct-launch"))
    return direct


def direct_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
    """Stands in ``JITFunction.run``: a call with a shipped kernel is launched directly, any other goes to Triton's
    ``run``."""
    original = STATE.original_jit_run
    if original is None:  # uninstalled while this call was on its way
        from triton.runtime.jit import JITFunction

        original = JITFunction.run
    if warmup:
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)
    try:
        if plain_triton_reason() is not None:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        st = _function_state(self)
        if st is _NOT_SHIPPED:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        return _run_shipped(self, st, original, args, grid, kwargs)
    except _Unhandled:
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)


class _Unhandled(Exception):
    """Raised before anything was launched: Triton's ``run`` takes the call."""


def _run_shipped(jit: Any, st: _FunctionState, original: Any, args: Any, grid: Any, kwargs: dict[str, Any]) -> Any:
    import torch
    from triton import knobs
    from triton.runtime.jit import compute_cache_key

    call_kwargs = dict(kwargs)
    call_kwargs["debug"] = call_kwargs.get("debug", jit.debug) or knobs.runtime.debug
    call_kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    device = torch.cuda.current_device()
    try:
        dev = st.device(jit, device)
        bound_args, specialization, options = dev.binder(*args, **call_kwargs)
        key = compute_cache_key(dev.key_cache, specialization, options)
        direct: Any = dev.kernels.get(key)
        if direct is None:
            try:
                direct = _resolve(jit, dev, device, call_kwargs, bound_args, specialization, options)
            except cuda.CudaError:
                log.debug("direct launch: load failed; Triton's path runs", exc_info=True)
                direct = _NO_MATCH
            dev.kernels[key] = direct
    except Exception as exc:  # never break the user's launch: Triton's own run reports real errors
        log.debug("direct launch: %s; Triton's path runs", exc, exc_info=True)
        raise _Unhandled from exc
    if direct is _NO_MATCH:
        raise _Unhandled
    for hook in jit.pre_run_hooks:  # Triton runs them before binding; they see the same arguments
        hook(*args, **call_kwargs)
    not_present = object()
    for (name, _), (val, globals_dict) in jit.used_global_vals.items():
        if (new := globals_dict.get(name, not_present)) != val:
            raise RuntimeError(f"Global variable {name} has changed since we compiled this kernel, from {val} to {new}")
    if callable(grid):
        grid = grid(bound_args)
    size = len(grid)
    dims = (grid[0], grid[1] if size > 1 else 1, grid[2] if size > 2 else 1)
    stream = torch._C._cuda_getCurrentRawStream(device)
    direct.launch(dims, stream, tuple(bound_args.values()))
    return direct.compiled


def install() -> None:
    """Wrap ``JITFunction.run`` (idempotent)."""
    from triton.runtime.jit import JITFunction

    with STATE.lock:
        if JITFunction.run is not direct_run:
            STATE.original_jit_run = JITFunction.run
            JITFunction.run = direct_run  # type: ignore[method-assign]
        STATE.direct_installed = True


def uninstall() -> None:
    """Put back Triton's ``JITFunction.run``."""
    if not STATE.direct_installed:
        return
    from triton.runtime.jit import JITFunction

    with STATE.lock:
        if JITFunction.run is direct_run and STATE.original_jit_run is not None:
            JITFunction.run = STATE.original_jit_run  # type: ignore[method-assign]
        STATE.original_jit_run = None
        STATE.direct_installed = False


__all__ = ["DirectKernel", "direct_enabled", "direct_run", "install", "launchable", "plain_triton_reason",
           "uninstall"]
