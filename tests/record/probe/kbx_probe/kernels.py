"""The kernel, and what its module decides at import from ``torch.cuda.is_available()``."""

import torch
import triton
import triton.language as tl

ON_GPU = torch.cuda.is_available()
#: Folded into the kernel by Triton (a ``tl.constexpr`` global): tf32 dots on a GPU, exact ones elsewhere.
PRECISION = tl.constexpr("tf32" if ON_GPU else "ieee")


@triton.jit
def _softplus_fast(x):
    return tl.math.log2(1.0 + tl.math.exp2(x * 1.4426950408889634)) * 0.6931471805599453


@triton.jit
def _softplus_plain(x):
    return tl.log(1.0 + tl.exp(x))


#: The callee chosen by the probe: Triton hashes whichever function the name holds.
softplus = _softplus_fast if ON_GPU else _softplus_plain


@triton.jit
def dense_softplus(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK: tl.constexpr):
    """``softplus(x @ w)`` for one BLOCK of rows (N and K at most BLOCK)."""
    rm = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rn = tl.arange(0, BLOCK)
    rk = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
    w = tl.load(w_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
    acc = tl.dot(x, w, input_precision=PRECISION)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], softplus(acc), mask=(rm[:, None] < M) & (rn[None, :] < N))
