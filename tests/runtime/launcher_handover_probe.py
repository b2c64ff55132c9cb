"""One process of ``test_runtime_steady_state.py``'s launcher test: examples/jit-package's softmax called three
times against a libcuda stand-in (``benchmarks/standin/libcuda_standin.c``, on ``LD_LIBRARY_PATH``); before the
third, it waits for kbuild's look for Triton's launcher in Triton's cache (a background thread).

    python launcher_handover_probe.py DATA_DIR      # kbuild.runtime enabled from DATA_DIR (KBUILD_RUNTIME decides)

With ``KBUILD_RUNTIME_HANDOVER`` set, the probe then waits for kbuild's hand-over thread and profiles a fourth call
(``after_hand_over``).

Stand-ins (labelled; there is no GPU): libcuda.so.1, and torch's CUDA queries (an sm_90 device 0, stream 77).
Prints one JSON object: the C modules Triton built with the host compiler (``build._build``) and those it asked
for (``compile_module_from_src``), the launches the stand-in counted, what launches the cached kernel, the kbuild
frames of the third call, and, when the launcher is Triton's, whether it equals what Triton's own ``CudaLauncher``
constructor makes for the kernel (its attributes, the launch function's module).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any


def main() -> None:
    import torch

    torch._C._cuda_getCurrentRawStream = lambda device: 77
    torch.cuda.is_available = lambda: True
    torch.cuda.is_initialized = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    torch.cuda.set_device = lambda device: None
    import triton.runtime.build as build
    from triton.backends.nvidia import driver as nvidia

    built: list[str] = []
    asked: list[str] = []
    original_build, original_module = build._build, build.compile_module_from_src

    def counted_build(name: str, *args: Any, **kwargs: Any) -> Any:
        built.append(name)
        return original_build(name, *args, **kwargs)

    def counted_module(*args: Any, **kwargs: Any) -> Any:
        asked.append(str(kwargs.get("name")))
        return original_module(*args, **kwargs)

    build._build = counted_build
    build.compile_module_from_src = nvidia.compile_module_from_src = counted_module
    lib = ctypes.CDLL("libcuda.so.1")
    lib.standin_launches.restype = ctypes.c_ulonglong

    import kbuild.runtime

    kbuild.runtime.enable("kbx_jit", data_dir=sys.argv[1])
    import kbx_jit.kernels as k

    x = torch.empty(64 * 1024, dtype=torch.float16).view(64, 1024)
    out = torch.empty_like(x)

    def call() -> None:
        k.softmax[(64,)](out, x, x.stride(0), out.stride(0), 1024, BLOCK=1024, num_warps=4, num_stages=3)

    call()
    call()
    import threading

    for thread in threading.enumerate():  # Triton's launcher looked for in Triton's cache, off the first call's path
        if thread.name.startswith("kbuild-hand-over-cached-"):
            thread.join(timeout=60)
    frames: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and str(frame.f_globals.get("__name__", "")).startswith("kbuild"):
            frames.append(f"{frame.f_globals['__name__']}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    call()
    sys.setprofile(None)
    (kernel,) = k.softmax.device_caches[0][0].values()
    run = kernel._run
    doc: dict[str, Any] = {
        "built": built, "asked": asked, "launches": lib.standin_launches(), "frames": frames,
        "kbuild_entry": getattr(kernel, "kbuild_entry", None),
        "launcher": f"{run.__module__}.{run.__name__}" if hasattr(run, "__code__") else
        f"{type(run).__module__}.{type(run).__qualname__}",
        "stages": [e.stage for e in kbuild.runtime.events()]}
    if os.environ.get("KBUILD_RUNTIME_HANDOVER"):  # wait for the hand-over thread, then a fourth call, profiled
        for thread in threading.enumerate():
            if thread.name.startswith("kbuild-hand-over-"):
                thread.join(timeout=300)
        after: list[str] = []
        sys.setprofile(lambda frame, event, arg: after.append(f"{frame.f_globals.get('__name__')}:{frame.f_code.co_name}")
                       if event == "call" and str(frame.f_globals.get("__name__", "")).startswith("kbuild") else None)
        call()
        sys.setprofile(None)
        later = kernel._run
        doc["after_hand_over"] = {
            "frames": after, "launches": lib.standin_launches(), "built": list(built),
            "launcher": f"{type(later).__module__}.{type(later).__qualname__}" if not hasattr(later, "__code__")
            else f"{later.__module__}.{later.__name__}",
            "stages": [e.stage for e in kbuild.runtime.events()],
            "reasons": [e.reason for e in kbuild.runtime.events() if e.stage == "hand-over"]}
    if isinstance(run, nvidia.CudaLauncher) and doc["kbuild_entry"]:
        tritons = nvidia.CudaLauncher(kernel.src, kernel.metadata)  # Triton's constructor: the cached module again
        mine = {n: v for n, v in vars(run).items() if n != "launch"}
        theirs = {n: v for n, v in vars(tritons).items() if n != "launch"}
        doc["same_as_tritons"] = mine == theirs and type(run.launch) is type(tritons.launch) and \
            run.launch.__module__ == tritons.launch.__module__ == "__triton_launcher"
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
