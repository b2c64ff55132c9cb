"""Direct launch: a shipped kernel launched through the CUDA driver API, with no host compiler, at Triton's cost.

Why: zero-JIT loading (:mod:`kbuild.runtime.loader`) answers Triton before it compiles, but Triton's first call of a
kernel still builds C modules with the host compiler (``triton/runtime/build.py`` ``compile_module_from_src``):
``cuda_utils`` when Triton's driver is first created (``JITFunction.run`` asks it for the device on its first line)
and ``__triton_launcher`` per signature when the kernel is first launched. Measured on the H200
(``benchmarks/results/h200/issue16/``): a shipped kernel's first call took 0.78 s with an empty Triton cache and
0.15 s with the modules cached, against 12 ms to load and launch the cubin directly.

How, read from Triton 3.6's ``JITFunction.run`` (``triton/runtime/jit.py``): a call binds its arguments, looks its
specialisation up in the function's per-device ``kernel_cache`` and, on a miss, has ``_do_compile`` put a
``CompiledKernel`` there (the zero-JIT compile slot answers it from the wheel); every call then launches
``kernel.run(grid, stream, kernel.function, kernel.packed_metadata, launch_metadata, hooks, *args)``, where ``run``
(a property) loads the kernel through ``_init_handles`` on first use. So kbuild works once per specialisation, and
later calls are Triton's own, with no kbuild frame on the path:

* :class:`shipped kernels <ShippedKernel>` are the ``CompiledKernel`` the compile slot returns, whose
  ``_init_handles`` loads the cubin with ``cuModuleLoadData`` (as Triton's ``load_binary``: primary context, dynamic
  shared memory above 48 KiB, the same out-of-resources checks and load hooks) through kbuild's CUDA driver binding
  (:mod:`kbuild.device.cuda`), and whose launcher is, in this order of preference:

  - **kbuild's** (:class:`DirectLauncher`) for the first call, always, Python generated once per kernel that writes the launch
    configuration and the parameters as Triton 3.6's generated C launcher does (``triton/backends/nvidia/driver.py``
    ``make_launcher``: grid x times ``num_ctas``, ``32 * num_warps`` threads, the metadata's shared memory, the
    non-constexpr arguments in order, then the two scratch pointers, null) with one ``struct`` call, and calls
    ``cuLaunchKernelEx`` on the stream Triton's ``run`` passes (torch's current stream,
    ``torch._C._cuda_getCurrentRawStream``), with the launch enter and exit hooks called as Triton's launcher calls
    them. On the CPU stand-in a call costs 2-3 µs more host time than Triton's own path, about 1 µs of it per
    pointer argument the ctypes pointer query a CPU tensor needs and a CUDA tensor skips
    (``benchmarks/results/runtime_per_call_cpu.json``; ``benchmarks/gpu_runtime_steady.py`` measures it on a GPU).
    Building Triton's launcher instead would run ``gcc`` at the first launch; ``KBUILD_RUNTIME_LAUNCH=triton``
    chooses that. On an H100 kbuild's launcher costs 1.4-1.9 µs more per call than Triton's (+6.3% on 22-30 µs
    host-bound launches, ``benchmarks/results/h100/issue34/``), so a hot specialisation hands over: after
    ``KBUILD_RUNTIME_HANDOVER`` calls (1000) Triton's launcher is built in a background thread and runs the later
    calls (:func:`hand_over_in_background`); the first call still builds nothing.
  - then **Triton's own** (:func:`cached_triton_launcher`), when Triton's cache already holds its C module for this
    signature (an earlier process built it): looked for in a background thread right after the kernel is loaded
    (:func:`adopt_cached_launcher_in_background`; its key costs a ``file`` subprocess, kept off the first call), it
    is the same ``CudaLauncher`` object Triton would make, loaded without a host compiler, so the later calls are
    exactly Triton's path and cost.
* Triton's driver is created without ``cuda_utils`` (:func:`install_lazy_driver`): Triton 3.6's ``CudaDriver``
  whose ``utils`` module is built on first use, i.e. only when Triton itself loads a kernel it compiled (or
  someone asks for ``driver.active.utils``). Its device, stream and target come from torch, as Triton's own.
* The process's first ``JITFunction.run`` call after :func:`install` goes through :func:`direct_run`, which puts
  ``JITFunction.run`` back at once and runs that one call as Triton's ``run`` does, but binds the arguments with
  kbuild's specialiser (:mod:`kbuild.runtime.specialize`, the same answers without Triton's first-call import of
  Gluon). Every later call is Triton's ``run`` with Triton's binder, and every binder Triton makes meanwhile (the
  first call of another kernel) specialises its own first call through kbuild's specialiser too
  (:func:`kbuild.runtime.specialize.install_first_call_binders`), Triton's from its second call on: the Gluon
  import happens once, at a kernel's second call (0.03-0.1 s; no compile), not inside any kernel's first.

What this does not launch itself goes to Triton's launcher (and so builds it once): tuple arguments, fp16/bf16
scalar arguments, global or profile scratch memory, tensor descriptors, 16-CTA clusters (:func:`launchable`), and
any kernel while ``KBUILD_RUNTIME_LAUNCH=triton``. A kernel Triton compiled (a miss) is Triton's, launched by
Triton's launcher.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import struct
import sys
import threading
from typing import Any

from kbuild.device import cuda
from kbuild.runtime.state import STATE, Event, function_name, runtime_disabled

log = logging.getLogger("kbuild.runtime")

#: The ``struct`` code of each scalar parameter type a launch packs (Triton's names).
_STRUCT_CODES = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u1": "B", "u8": "B", "u16": "H",
                 "u32": "I", "u64": "Q", "fp32": "f", "f32": "f", "fp64": "d"}


# ----------------------------------------------------------------------------------------------
# What this module launches


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


def direct_enabled() -> bool:
    """``KBUILD_RUNTIME`` on and ``KBUILD_RUNTIME_LAUNCH=direct`` (asked when a shipped kernel is first loaded). A
    bad value turns direct launch off (``runtime_disabled`` warns about its own)."""
    from kbuild.errors import ConfigError
    from kbuild.settings.variables import env_setting

    try:
        return not runtime_disabled() and env_setting("runtime_launch") == "direct"
    except ConfigError as exc:
        with STATE.lock:
            once = ("KBUILD_RUNTIME_LAUNCH", str(exc))
            first = once not in STATE.logged
            STATE.logged.add(once)
        if first:
            log.warning("%s; shipped kernels launch through Triton's launcher", exc)
        return False


# ----------------------------------------------------------------------------------------------
# The launcher


def _pointer(arg: Any, index: int, driver: cuda.CudaDriver) -> int:
    """A pointer argument's device address, as Triton 3.6's launcher (``getPointer``) takes it: None is null, an
    int is the address, anything else is asked ``data_ptr()`` and the address checked with the driver (a CPU
    tensor raises Triton's error). The generated launchers take a CUDA tensor's ``data_ptr()`` without asking the
    driver (on unified addressing the driver answers the same address)."""
    if arg is None:
        return 0
    if type(arg) is int:
        return arg
    ptr = arg.data_ptr()
    if not ptr:
        return 0
    dev = driver.device_pointer(ptr)
    if dev is None:
        raise ValueError(f"Pointer argument (at {index}) cannot be accessed from Triton (cpu tensor?)")
    return dev


class DirectLauncher:
    """What Triton's ``CompiledKernel.run`` is for a :class:`ShippedKernel`: ``launcher(grid x, y, z, stream,
    function, packed_metadata, launch_metadata, enter_hook, exit_hook, *args)`` with every argument of the
    function (constexprs included, as ``JITFunction.run`` passes them).

    One buffer holds the launch configuration (``CUlaunchConfig``) followed by the parameter values, and one
    ``struct`` call per launch writes both (C alignment; the kernel's constants, block size, shared memory and
    attributes, are literals of the generated code); ``kernelParams`` points into the buffer, and
    ``cuLaunchKernelEx`` gets plain addresses (:attr:`kbuild.device.cuda.CudaDriver.launch_raw`). A lock guards
    the buffer while the driver reads it (ctypes releases the GIL during the call, as Triton's launcher does). A
    pointer argument that is a CUDA tensor is its ``data_ptr()``, as Triton's launcher takes it; anything else
    (None, an int, another object with ``data_ptr``) goes through :func:`_pointer`, with Triton's check."""

    def __init__(self, signature: dict[str, Any], md: Any, driver: cuda.CudaDriver, *,
                 hand_over: Any = None, after: int = 0) -> None:
        """``hand_over``: called once, on the calling thread, when the ``after``-th call has been launched (0 or
        no callback: never); it must return at once (:func:`hand_over_in_background`)."""
        import torch

        self.driver = driver
        num_ctas = int(getattr(md, "num_ctas", 1))
        attrs, n = (cuda.LaunchAttribute * 4)(), 0
        if getattr(md, "launch_pdl", False):
            attrs[n].id, attrs[n].val.value, n = cuda.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 1, n + 1
        if getattr(md, "launch_cooperative_grid", False):
            attrs[n].id, attrs[n].val.value, n = cuda.CU_LAUNCH_ATTRIBUTE_COOPERATIVE, 1, n + 1
        if num_ctas != 1:
            attrs[n].id, attrs[n].val.dim[0], attrs[n].val.dim[1], attrs[n].val.dim[2] = \
                cuda.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, num_ctas, 1, 1
            attrs[n + 1].id, attrs[n + 1].val.value = (cuda.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
                                                       cuda.CU_CLUSTER_SCHEDULING_POLICY_SPREAD)
            n += 2
        self.attrs = attrs
        codes = ["Q" if ty.startswith("*") else _STRUCT_CODES[ty] for ty in signature.values() if ty != "constexpr"]
        head = _config_format()
        every = [*codes, "Q", "Q"]  # the parameters, then the global and profile scratch pointers (null)
        fmt = head + "".join(every)
        # each field ends where the format up to it ends (native alignment from the buffer's start)
        offsets = [struct.calcsize(head + "".join(every[:i + 1])) - struct.calcsize("@" + code)
                   for i, code in enumerate(every)]
        self.buffer = ctypes.create_string_buffer(struct.calcsize(fmt))
        base = ctypes.addressof(self.buffer)
        self.config = cuda.LaunchConfig.from_buffer(self.buffer)
        self.params = (ctypes.c_void_p * len(offsets))(*[base + off for off in offsets])
        values, names = [], []
        for i, ty in enumerate(signature.values()):
            arg = f"a{i}"
            names.append(arg)
            if ty == "constexpr":
                continue
            if ty.startswith("*"):
                values.append(f"({arg}.data_ptr() if type({arg}) is Tensor and {arg}.is_cuda "
                              f"else pointer({arg}, {i}, driver))")
            else:
                values.append(arg)
        grid_x = "gx" if num_ctas == 1 else f"gx * {num_ctas}"
        constants = (f"{32 * int(md.num_warps)}, 1, 1, {int(md.shared)}, stream, {ctypes.addressof(attrs)}, {n}")
        env = {"__name__": __name__, "Tensor": torch.Tensor, "pointer": _pointer, "driver": driver,
               "lock": threading.Lock(), "pack": struct.Struct(head + "".join(codes)).pack_into,
               "buffer": self.buffer, "launch": driver.launch_raw, "check": driver.check,
               "keep": (self.params, attrs, self.config),  # the code has their addresses: they live as long as it
               "calls": [0], "hand_over": hand_over}
        counting = (f"    calls[0] += 1\n    if calls[0] == {int(after)}:\n        hand_over()\n"
                    if hand_over is not None and after > 0 else "")
        source = (
            f"def direct_launch(gx, gy, gz, stream, function, packed_metadata, launch_metadata, enter_hook, "
            f"exit_hook{''.join(', ' + a for a in names)}):\n"
            "    if enter_hook is not None:\n"
            "        enter_hook(launch_metadata)\n"
            "    if gx * gy * gz > 0:\n"
            "        with lock:\n"
            f"            pack(buffer, 0, {grid_x}, gy, gz, {constants}{''.join(', ' + v for v in values)})\n"
            f"            status = launch({base}, function, {ctypes.addressof(self.params)}, None)\n"
            "        if status:\n"
            "            check(status, 'cuLaunchKernelEx')\n"
            "    if exit_hook is not None:\n"
            "        exit_hook(launch_metadata)\n"
            + counting)
        self.source = source
        exec(compile(source, f"<kbuild direct launcher of {md.name}>", "exec"), env)
        self.launch = env["direct_launch"]


def _config_format() -> str:
    """``CUlaunchConfig`` as a ``struct`` format (:class:`kbuild.device.cuda.LaunchConfig`'s fields, then its tail
    padding), checked against ctypes' layout."""
    fmt = "@IIIIIIIQQI"
    size = ctypes.sizeof(cuda.LaunchConfig)
    fmt += f"{size - struct.calcsize(fmt)}x"
    fields = [name for name, *_ in cuda.LaunchConfig._fields_]
    offsets = [getattr(cuda.LaunchConfig, name).offset for name in fields]
    mine = [struct.calcsize(fmt[:i + 2]) - struct.calcsize("@" + fmt[i + 1]) for i in range(len(fields))]
    assert struct.calcsize(fmt) == size and mine == offsets, (fmt, mine, offsets)
    return fmt


# ----------------------------------------------------------------------------------------------
# Triton's own launcher, where its cache already holds it


def cached_triton_launcher(kernel: Any) -> Any | None:
    """Triton's own launcher for ``kernel`` (a ``CudaLauncher``, what ``CompiledKernel._init_handles`` makes) when
    Triton's cache already holds its C module for this signature (an earlier process built it: Triton's own run,
    ``KBUILD_RUNTIME_LAUNCH=triton``), so that nothing is compiled; else None.

    Read from Triton 3.6 (``triton/backends/nvidia/driver.py`` ``CudaLauncher.__init__``, ``triton/runtime/build.py``
    ``compile_module_from_src``): the module is ``__triton_launcher`` under the key
    ``sha256(make_launcher(constants, signature, tensordesc_meta) + platform_key())`` in Triton's cache manager.
    The launcher is made as ``CudaLauncher.__init__`` makes it, less its ``library_dirs()`` (``ldconfig -p``, a
    subprocess of some milliseconds, only needed to build the module), and the module is loaded from where Triton's
    cache has it. Only for a Triton this was checked against (:data:`kbuild.runtime.specialize.CHECKED_TRITON`)."""
    import hashlib
    import sysconfig

    from triton.backends.nvidia import driver as nvidia
    from triton.runtime import build
    from triton.runtime.cache import get_cache_manager

    from kbuild.runtime.specialize import checked

    if not checked():
        return None
    src, md = kernel.src, kernel.metadata
    constants = src.constants if hasattr(src, "constants") else {}
    constants = {((src.fn.arg_names.index(k),) if isinstance(k, str) else k): v for k, v in constants.items()}
    signature = dict(src.signature)
    tensordesc_meta = getattr(md, "tensordesc_meta", None)
    source = nvidia.make_launcher(constants, signature, tensordesc_meta)
    key = hashlib.sha256((source + _platform_key()).encode("utf-8")).hexdigest()
    path = get_cache_manager(key).get_file(f"{LAUNCHER_MODULE}{sysconfig.get_config_var('EXT_SUFFIX')}")
    if path is None:
        return None
    module = build._load_module_from_path(LAUNCHER_MODULE, path)
    launcher = nvidia.CudaLauncher.__new__(nvidia.CudaLauncher)
    launcher.num_ctas = getattr(md, "num_ctas", 1)
    launcher.launch = nvidia.wrap_handle_tensordesc(module.launch, signature, tensordesc_meta)
    launcher.global_scratch_size = md.global_scratch_size
    launcher.global_scratch_align = md.global_scratch_align
    launcher.profile_scratch_size = md.profile_scratch_size
    launcher.profile_scratch_align = md.profile_scratch_align
    launcher.launch_cooperative_grid = md.launch_cooperative_grid
    launcher.launch_pdl = md.launch_pdl
    return launcher


@functools.cache
def _platform_key() -> str:
    """Triton's ``platform_key()`` (machine, system and ``platform.architecture()``, which runs ``file`` on the
    interpreter): the same for the whole process, so asked once, not once per kernel loaded."""
    from triton.runtime import build

    return str(build.platform_key())


#: The name of Triton's generated launcher module (``CudaLauncher``).
LAUNCHER_MODULE = "__triton_launcher"


# ----------------------------------------------------------------------------------------------
# The shipped kernel


_SHIPPED_CLASS: list[type] = []


def shipped_kernel_class() -> type:
    """:class:`ShippedKernel`, a subclass of Triton's ``CompiledKernel`` (defined on first use: this module
    imports no triton)."""
    if not _SHIPPED_CLASS:
        from triton.compiler.compiler import CompiledKernel

        class ShippedKernel(CompiledKernel):  # type: ignore[misc,valid-type]
            """A shipped cubin as Triton's ``CompiledKernel``, loaded and launched through the CUDA driver API
            (:func:`load_direct`); Triton's own loading where this module does not launch it."""

            kbuild_direct = True

            def _init_handles(self) -> None:
                if self.module is not None:
                    return
                loaded = load_direct(self)
                self.__class__ = CompiledKernel  # from now on Triton's own methods, with kbuild's launcher in _run
                if not loaded:
                    CompiledKernel._init_handles(self)

        _SHIPPED_CLASS.append(ShippedKernel)
    return _SHIPPED_CLASS[0]


def make_direct(kernel: Any) -> Any:
    """``kernel`` (the shipped ``CompiledKernel`` the zero-JIT compile slot returns), made a
    :class:`ShippedKernel` when it is launched directly (``KBUILD_RUNTIME_LAUNCH=direct`` and :func:`launchable`),
    else left as it is (Triton's launcher runs it)."""
    if not direct_enabled():
        return kernel
    why = launchable(dict(getattr(kernel.src, "signature", None) or {}), kernel.metadata)
    if why is not None:
        name = function_name(kernel.src.fn)
        with STATE.lock:
            first = name not in STATE.direct_declined_logged
            STATE.direct_declined_logged.add(name)
        if first:
            log.info("%s: not launched directly (%s); Triton's launcher runs the shipped kernel", name, why)
        return kernel
    kernel.__class__ = shipped_kernel_class()
    return kernel


def load_direct(kernel: Any) -> bool:
    """Load ``kernel``'s cubin on the current device through kbuild's driver binding and give it a
    :class:`DirectLauncher` (Triton's launcher from Triton's cache replaces it once found in the background), with
    Triton's checks (shared memory, threads: ``OutOfResources``) and load hooks
    (False when the CUDA driver or torch is not there: Triton loads it)."""
    from triton import knobs
    from triton.runtime.errors import OutOfResources

    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        driver = cuda.driver()
    except OSError:
        log.debug("no libcuda.so.1: Triton loads the shipped kernel", exc_info=True)
        return False
    md = kernel.metadata
    device = torch.cuda.current_device()
    try:
        driver.make_current(device)
        optin = driver.device_attribute(cuda.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device)
    except cuda.CudaError:
        log.debug("direct launch: no CUDA context; Triton loads the shipped kernel", exc_info=True)
        return False
    shared = int(md.shared)
    if shared > optin:
        raise OutOfResources(shared, optin, "shared memory")
    if knobs.runtime.kernel_load_start_hook is not None:
        knobs.runtime.kernel_load_start_hook(None, None, kernel.name, kernel.metadata_group, kernel.hash)
    module = driver.load_module(kernel.kernel)
    function = driver.get_function(module, md.name)
    if shared > 49152 and optin > 49152:
        driver.set_cache_config(function, cuda.CU_FUNC_CACHE_PREFER_SHARED)
        static = driver.function_attribute(function, cuda.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
        driver.set_function_attribute(function, cuda.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin - static)
    threads = driver.function_attribute(function, cuda.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
    if int(md.num_warps) * 32 > threads:
        raise OutOfResources(int(md.num_warps) * 32, threads, "threads")
    kernel.n_regs = driver.function_attribute(function, cuda.CU_FUNC_ATTRIBUTE_NUM_REGS)
    kernel.n_spills, kernel.n_max_threads = 0, threads
    from kbuild.errors import ConfigError
    from kbuild.settings.variables import env_setting

    try:
        after = int(env_setting("runtime_handover"))
    except ConfigError as exc:  # a bad KBUILD_RUNTIME_HANDOVER: the kernel still runs, without a hand-over
        log.warning("%s; kbuild's launcher runs every call", exc)
        after = 0
    kernel._run = DirectLauncher(dict(kernel.src.signature), md, driver, after=after,
                                 hand_over=lambda: hand_over_in_background(kernel, after)).launch
    kernel.function = int(function.value or 0)
    kernel.module = int(module.value or 0)
    if knobs.runtime.kernel_load_end_hook is not None:
        knobs.runtime.kernel_load_end_hook(kernel.module, kernel.function, kernel.name, kernel.metadata_group,
                                           kernel.hash)
    STATE.record(Event(function_name(kernel.src.fn), True, "direct launch: shipped cubin loaded without a host "
                       "compiler, launched by kbuild's launcher", key=getattr(kernel, "kbuild_entry", None),
                       stage="direct-launch"))
    if after > 0:
        adopt_cached_launcher_in_background(kernel)
    return True


def adopt_cached_launcher_in_background(kernel: Any) -> threading.Thread:
    """Look for Triton's own launcher of ``kernel`` in Triton's cache (:func:`cached_triton_launcher`) in a daemon
    thread and, when it is there, make it the kernel's launcher, so that later calls take Triton's path at
    Triton's cost. Not on the first call's path: the cache key needs Triton's ``platform_key()``, which runs
    ``file`` on the interpreter (10-22 ms on the H100 machine, ``benchmarks/results/h100/issue34-s3/``). Nothing is
    built here; a launcher that is not cached comes with the hand-over after ``KBUILD_RUNTIME_HANDOVER`` calls. The
    thread is named like the hand-over's (``kbuild-hand-over-…``), so that what waits for one waits for both."""
    name = function_name(kernel.src.fn)

    def adopt() -> None:
        try:
            launcher = cached_triton_launcher(kernel)
        except Exception:  # Triton's cache unreadable, a module that does not load: kbuild's launcher goes on
            log.debug("%s: Triton's cached launcher cannot be used; kbuild's launcher goes on", name, exc_info=True)
            return
        if launcher is None:
            return
        kernel._run = launcher
        STATE.record(Event(name, True, "hand-over: Triton's launcher, found in Triton's cache (nothing built), runs "
                           "the later calls", key=getattr(kernel, "kbuild_entry", None), stage="hand-over"))

    thread = threading.Thread(target=adopt, name=f"kbuild-hand-over-cached-{name}", daemon=True)
    thread.start()
    return thread


def hand_over_in_background(kernel: Any, calls: int) -> threading.Thread:
    """Build Triton's own launcher for ``kernel`` in a daemon thread and, once built, make it the kernel's
    launcher (``kernel._run``: ``CompiledKernel.run`` reads it on every call, so the next call takes Triton's path
    with no kbuild frame). Started by a :class:`DirectLauncher` after ``calls`` calls of one specialisation
    (``KBUILD_RUNTIME_HANDOVER``): the first call stays free of the host compiler, and a hot kernel's steady
    state becomes Triton's own (kbuild's launcher costs 1.4-1.9 µs more per call on an H100,
    ``benchmarks/results/h100/issue34/``). The build is Triton's ``CudaLauncher`` as ``_init_handles`` makes it
    (``gcc``, cached in Triton's cache, where later processes find it: :func:`cached_triton_launcher`). Without a
    host compiler, or on any error, kbuild's launcher stays, with one event saying why."""
    name = function_name(kernel.src.fn)

    def build() -> None:
        try:
            from triton.backends.nvidia.driver import CudaLauncher

            launcher = CudaLauncher(kernel.src, kernel.metadata)
        except Exception as exc:  # no gcc, no Python headers, a failed build: kbuild's launcher goes on
            log.info("%s: Triton's launcher could not be built (%s); kbuild's launcher goes on", name, exc)
            STATE.record(Event(name, True, f"hand-over declined: Triton's launcher could not be built ({exc}); "
                               "kbuild's launcher goes on", key=getattr(kernel, "kbuild_entry", None),
                               stage="hand-over"))
            return
        kernel._run = launcher
        STATE.record(Event(name, True, f"hand-over: after {calls} calls Triton's launcher was built in the "
                           "background and runs the later calls", key=getattr(kernel, "kbuild_entry", None),
                           stage="hand-over"))

    thread = threading.Thread(target=build, name=f"kbuild-hand-over-{name}", daemon=True)
    thread.start()
    return thread


# ----------------------------------------------------------------------------------------------
# Triton's driver without cuda_utils


def install_lazy_driver() -> bool:
    """Create Triton's driver (``triton.runtime.driver.driver``) as Triton would, but with its ``cuda_utils`` C
    module built on first use: only when no driver exists yet, the installed Triton is one whose ``CudaDriver``
    this was checked against (:data:`kbuild.runtime.specialize.CHECKED_TRITON`), and CUDA is Triton's one active
    backend, as ``_create_driver`` requires. Returns whether it did."""
    from triton.runtime.driver import driver as config

    from kbuild.runtime.specialize import checked

    if config._active is not None or config._default is not None or not checked():
        return False
    from triton.backends import backends
    from triton.backends.driver import GPUDriver
    from triton.backends.nvidia.driver import CudaDriver, CudaLauncher, CudaUtils

    active = [b.driver for b in backends.values() if b.driver.is_active()]
    if active != [CudaDriver]:
        return False

    class LazyUtilsCudaDriver(CudaDriver):  # type: ignore[misc]
        """Triton 3.6's ``CudaDriver`` whose ``utils`` (the ``cuda_utils`` C module, built with the host compiler
        on first use) is made when first asked for."""

        def __init__(self) -> None:  # CudaDriver.__init__ less ``self.utils = CudaUtils()``
            self.launcher_cls = CudaLauncher
            GPUDriver.__init__(self)

        @property
        def utils(self) -> Any:
            found = self.__dict__.get("_utils")
            if found is None:
                found = self.__dict__["_utils"] = CudaUtils()
            return found

        @utils.setter
        def utils(self, value: Any) -> None:
            self.__dict__["_utils"] = value

    config._default = LazyUtilsCudaDriver()
    return True


# ----------------------------------------------------------------------------------------------
# The first call


def _active(hook: Any) -> bool:
    """Whether a Triton hook does something: Triton 3.6's launch and load hooks are ``HookChain`` objects, never
    None, and call nothing while their ``calls`` list is empty."""
    return hook is not None and bool(getattr(hook, "calls", True))


def plain_triton_reason() -> str | None:
    """Why the process's first call takes Triton's own ``run`` unchanged (None when :func:`first_call` may run it
    with kbuild's specialiser): direct launch is off, something else watches Triton's launches, loads or compiles
    (it then sees Triton's path exactly), or torch has not initialised CUDA."""
    from triton import knobs

    if not direct_enabled():
        return "direct launch is off"
    rt = knobs.runtime
    if _active(rt.launch_enter_hook) or _active(rt.launch_exit_hook):
        return "launch hooks are set"
    if _active(rt.kernel_load_start_hook) or _active(rt.kernel_load_end_hook):
        return "kernel load hooks are set"
    if rt.jit_cache_hook is None or rt.jit_cache_hook is not STATE.cache_hook or STATE.previous_cache_hook is not None:
        return "another jit_cache_hook is set"
    if rt.jit_post_compile_hook is not None and rt.jit_post_compile_hook is not STATE.post_compile_hook:
        return "another jit_post_compile_hook is set"
    from triton.runtime import _async_compile

    if _async_compile.active_mode.get() is not None:
        return "async compile mode is on"
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return "torch has not initialised CUDA"
    return None


def direct_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
    """Stands in ``JITFunction.run`` for one call: puts Triton's ``run`` back, creates Triton's driver without
    ``cuda_utils`` (:func:`install_lazy_driver`), and runs this call as Triton's ``run`` does with kbuild's
    specialiser (:func:`first_call`)."""
    from triton.runtime.jit import JITFunction

    with STATE.lock:
        original = STATE.original_jit_run
        if JITFunction.run is direct_run and original is not None:
            JITFunction.run = original  # type: ignore[method-assign]
        STATE.direct_installed = False
    if original is None:  # uninstalled while this call was on its way
        original = JITFunction.run
    try:
        if not runtime_disabled():
            install_lazy_driver()
    except Exception:  # never break the user's launch
        log.debug("Triton's driver is created as Triton creates it", exc_info=True)
    from kbuild.runtime.specialize import checked

    if warmup or not checked() or _run_is_not_triton_3_6(original) or plain_triton_reason() is not None:
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)
    return first_call(self, args, grid, kwargs)


def _run_is_not_triton_3_6(run: Any) -> bool:
    return getattr(run, "__qualname__", "") != "JITFunction.run"


def first_call(jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
    """Triton 3.6's ``JITFunction.run`` (``warmup=False``), line for line, but for the binder: Triton's own binder
    for the device, its first call specialised by kbuild's specialiser
    (:func:`kbuild.runtime.specialize.first_call_specialises`), which gives the same specialisation and so the same
    ``kernel_cache`` key."""
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import compute_cache_key

    from kbuild.runtime.specialize import first_call_specialises

    kwargs["debug"] = kwargs.get("debug", jit.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    device = driver.active.get_current_device()
    stream = driver.active.get_current_stream(device)
    for hook in jit.pre_run_hooks:
        hook(*args, **kwargs)
    kernel_cache, kernel_key_cache, _, backend, binder = jit.device_caches[device]
    first_call_specialises(binder)  # a binder Triton made before install(); else it is so already
    bound_args, specialization, options = binder(*args, **kwargs)
    key = compute_cache_key(kernel_key_cache, specialization, options)
    kernel = kernel_cache.get(key, None)
    if kernel is None:
        options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound_args, specialization, options)
        kernel = jit._do_compile(key, signature, device, constexprs, options, attrs, False)
        if kernel is None:
            return None
    not_present = object()
    for (name, _), (val, globals_dict) in jit.used_global_vals.items():
        if (new := globals_dict.get(name, not_present)) != val:
            raise RuntimeError(f"Global variable {name} has changed since we compiled this kernel, from {val} to {new}")
    assert grid is not None
    if callable(grid):
        grid = grid(bound_args)
    size = len(grid)
    grid_0, grid_1, grid_2 = grid[0], grid[1] if size > 1 else 1, grid[2] if size > 2 else 1
    if hasattr(kernel, "result"):
        kernel = kernel.result()
    launch_metadata = kernel.launch_metadata(grid, stream, *bound_args.values())
    kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, launch_metadata,
               knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *bound_args.values())
    return kernel


def install() -> None:
    """Put :func:`direct_run` in ``JITFunction.run`` for the next call (idempotent)."""
    from triton.runtime.jit import JITFunction

    from kbuild.runtime.specialize import install_first_call_binders

    with STATE.lock:
        if JITFunction.run is not direct_run:
            STATE.original_jit_run = JITFunction.run
            JITFunction.run = direct_run  # type: ignore[method-assign]
        install_first_call_binders()
        STATE.direct_installed = True


def uninstall() -> None:
    """Put back Triton's ``JITFunction.run`` (when no call has yet)."""
    from triton.runtime.jit import JITFunction

    from kbuild.runtime.specialize import uninstall_first_call_binders

    with STATE.lock:
        if JITFunction.run is direct_run and STATE.original_jit_run is not None:
            JITFunction.run = STATE.original_jit_run  # type: ignore[method-assign]
        uninstall_first_call_binders()
        STATE.original_jit_run = None
        STATE.direct_installed = False


__all__ = ["DirectLauncher", "direct_enabled", "direct_run", "first_call", "install", "install_lazy_driver",
           "launchable", "load_direct", "make_direct", "plain_triton_reason", "shipped_kernel_class", "uninstall"]
