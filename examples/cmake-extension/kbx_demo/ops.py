"""torch-facing wrappers of the kernels, launched through the C extension ``kbx_demo._kbx``.

torch is imported only when a wrapper is called; building and importing the package needs
neither torch nor a GPU.
"""

from __future__ import annotations

from typing import Any

from kbx_demo import _kbx


def _stream(t: Any) -> int:
    import torch

    return int(torch.cuda.current_stream(t.device).cuda_stream)


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def matmul_leaky_relu(a: Any, b: Any) -> Any:
    """``leaky_relu(a @ b)`` for fp16 row-major ``a`` (M×K) and ``b`` (K×N); fp16 out."""
    import torch

    _check(a.dtype == b.dtype == torch.float16 and a.is_cuda and b.is_cuda, "expected fp16 CUDA tensors")
    _check(a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0], "expected a (M×K) and b (K×N)")
    _check(a.stride(1) == 1 and b.stride(1) == 1, "expected row-major a and b (unit column stride)")
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.float16)
    _check(a.stride(0) % 16 == 0 and b.stride(0) % 16 == 0 and c.stride(0) % 16 == 0,
           "row strides must be multiples of 16 elements (declared :16)")
    # no grid: the launcher computes cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) from the configuration shipped for
    # this GPU (pyproject.toml's grid expression), which a tuned build may have changed
    with torch.cuda.device(a.device):
        _kbx.matmul_leaky_relu(_stream(a), a.data_ptr(), b.data_ptr(), c.data_ptr(), m, n, k,
                               a.stride(0), b.stride(0), c.stride(0))
    return c


def softmax(x: Any) -> Any:
    """Row-wise softmax of an fp16 matrix with at most 1024 columns."""
    import torch

    _check(x.dtype == torch.float16 and x.is_cuda and x.dim() == 2 and x.stride(1) == 1,
           "expected a row-major fp16 CUDA matrix")
    rows, cols = x.shape
    _check(cols <= 1024, "at most 1024 columns (BLOCK = 1024)")
    _check(x.stride(0) % 16 == 0, "the row stride must be a multiple of 16 elements (declared :16)")
    padded = _cdiv(cols, 16) * 16  # the output's row stride, a multiple of 16 too
    out = torch.empty((rows, padded), device=x.device, dtype=x.dtype)[:, :cols]
    with torch.cuda.device(x.device):
        _kbx.softmax(_stream(x), rows, 1, 1, out.data_ptr(), x.data_ptr(), x.stride(0), out.stride(0), cols)
    return out


def layernorm(x: Any, weight: Any, bias: Any, eps: float = 1e-5) -> tuple[Any, Any, Any]:
    """LayerNorm over the rows of an fp16 matrix (at most 1024 columns); returns (y, mean, rstd)."""
    import torch

    _check(x.dtype == weight.dtype == bias.dtype == torch.float16 and x.is_cuda, "expected fp16 CUDA tensors")
    _check(x.dim() == 2 and x.is_contiguous(), "expected a contiguous matrix")
    rows, cols = x.shape
    _check(cols <= 1024 and x.stride(0) % 16 == 0, "at most 1024 columns, a multiple of 16")
    y = torch.empty_like(x)
    mean = torch.empty(rows, device=x.device, dtype=torch.float32)
    rstd = torch.empty(rows, device=x.device, dtype=torch.float32)
    w, b = weight.contiguous(), bias.contiguous()  # kept alive until the launch is queued
    _check(w.numel() == cols and b.numel() == cols, "weight and bias need one value per column")
    with torch.cuda.device(x.device):
        _kbx.layernorm(_stream(x), rows, 1, 1, x.data_ptr(), y.data_ptr(), w.data_ptr(), b.data_ptr(),
                       mean.data_ptr(), rstd.data_ptr(), x.stride(0), cols, float(eps))
    return y, mean, rstd
