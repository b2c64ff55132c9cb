"""The kernel suite behind ``kbuild bench``: one module per kernel family, each entry a bench spec.

``SUITE`` maps the stable kernel name to its spec reference (``module:callable``), the same form
as ``[tool.kbuild.kernels].bench`` in user projects.
"""

from __future__ import annotations

_K = "kbuild.bench.kernels"

SUITE: dict[str, str] = {
    "matmul_leakyrelu_4096": f"{_K}.matmul:matmul_4096",
    "matmul_leakyrelu_512x512x2048": f"{_K}.matmul:matmul_512x512x2048",
    "bmm_64x1024": f"{_K}.matmul:bmm",
    "softmax": f"{_K}.softmax:softmax",
    "layernorm": f"{_K}.layernorm:layernorm",
    "rmsnorm": f"{_K}.rmsnorm:rmsnorm",
    "rmsnorm_swiglu": f"{_K}.swiglu:rmsnorm_swiglu_spec",
    "flash_attn_d64": f"{_K}.attention:attn_d64",
    "flash_attn_d64_causal": f"{_K}.attention:attn_d64_causal",
    "flash_attn_d128": f"{_K}.attention:attn_d128",
    "flash_attn_d128_causal": f"{_K}.attention:attn_d128_causal",
    "tma_matmul_4096": f"{_K}.tma_matmul:tma_matmul",
}
