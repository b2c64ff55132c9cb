"""kbx-cuda: CUDA C++ kernels (a tiled fp16 matmul on mma.sync, a sum reduction, an elementwise fp16 GELU)
compiled for sm_80 and sm_90 through kbuild-nvcc. The functions take device pointers as integers
(``tensor.data_ptr()``) and a CUDA stream (``0``: the default stream); each returns the CUDA error code."""

from ._kernels import gelu_f16, matmul_f16, sum_f32, tiles

__all__ = ["gelu_f16", "matmul_f16", "sum_f32", "tiles"]
