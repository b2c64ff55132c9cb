"""kbx_liger: Liger-Kernel 0.8.5's own Triton kernels, shipped as cubins by kbuild (issue 16, part 5).

This package holds no kernel code: ``pyproject.toml`` declares kernels of the installed ``liger_kernel``
(unpatched, from the package index) by recordings of Liger's own test files and of ``workload.py`` (the shapes of
``SHAPES``), and the build writes their cubins into ``kbx_liger/_kbuild/``.
Importing ``kbx_liger`` enables :mod:`kbuild.runtime` for them, after which Liger's own Python API
(``LigerRMSNormFunction``, ``LigerSiLUMulFunction``, ...) loads the shipped cubins instead of compiling,
for calls that specialise exactly as recorded; any other call runs Triton's own JIT.
"""

from __future__ import annotations

try:  # absent in a source checkout, and when kbuild is not installed
    from . import _kbuild  # noqa: F401
except ImportError:
    pass

#: The shapes of workload.py (recordings/llama-shapes.cpu.json) and of benchmarks/gpu_liger.py (hidden sizes of Llama-2-7B class models).
SHAPES = {
    "rows": 4096,          # batch × sequence (4 × 1024)
    "hidden": 4096,        # rms_norm, layer_norm, dyt
    "intermediate": 11008, # swiglu, geglu
    "vocab": 32000,        # cross_entropy
    "dtypes": ("fp16", "bf16"),
}
