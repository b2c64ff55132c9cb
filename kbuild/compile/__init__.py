"""kbuild.compile: kernel declarations → baseline cubins, per target, without a GPU.

``triton_aot`` compiles ``@triton.jit`` functions; a CUDA C++ (nvcc) front end will sit beside
it. Each front end returns :class:`CompiledKernel`. ``folded`` describes the module-level values a kernel's code
depends on and imports a kernel with another machine's (a recording's).
"""

from kbuild.compile.triton_aot import (
    CompiledKernel,
    compile_kernel,
    compiler_options,
    load_jit_function,
    portable_options,
    source_hash,
)

__all__ = ["CompiledKernel", "compile_kernel", "compiler_options", "load_jit_function", "portable_options",
           "source_hash"]
