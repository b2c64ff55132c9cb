"""FlashAttention forward (fp16, fp32 softmax state), sequence 4096, head dim 64 or 128, causal or not.

Q, K, V and O are (batch·heads, seq, head_dim) contiguous. One program computes BLOCK_M query
rows of one head with an online softmax over BLOCK_N-key blocks. Causal attention handles the
blocks left of the diagonal without masks and the diagonal block with a mask.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import triton
import triton.language as tl

from kbuild.bench.space import grid_space
from kbuild.bench.spec import BenchSpec, Config, Constexpr


@triton.jit
def _attn_inner(acc, l_i, m_i, q, k_base, v_base, start_m, lo, hi, qk_scale,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr):
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        kt = tl.load(k_base + (start_n + offs_n)[None, :] * HEAD_DIM + offs_d[:, None])
        qk = tl.dot(q, kt)
        if MASKED:
            keep = offs_m[:, None] >= (start_n + offs_n)[None, :]
            qk = qk * qk_scale + tl.where(keep, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_base + (start_n + offs_n)[:, None] * HEAD_DIM + offs_d[None, :])
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def flash_attn_fwd(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, seq_len,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    head = tl.program_id(1).to(tl.int64)
    base = head * seq_len * HEAD_DIM
    q_base = q_ptr + base
    k_base = k_ptr + base
    v_base = v_ptr + base
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
    m_i = tl.zeros((BLOCK_M,), dtype=tl.float32) - float("inf")
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32) + 1.0
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # log2(e): exp2 instead of exp
    if CAUSAL:
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_base, v_base, start_m, 0, start_m * BLOCK_M, qk_scale,
                                    BLOCK_M, BLOCK_N, HEAD_DIM, False)
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_base, v_base, start_m, start_m * BLOCK_M,
                                    (start_m + 1) * BLOCK_M, qk_scale, BLOCK_M, BLOCK_N, HEAD_DIM, True)
    else:
        acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_base, v_base, start_m, 0, seq_len, qk_scale,
                                    BLOCK_M, BLOCK_N, HEAD_DIM, False)
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(tl.float16))


def _configs(head_dim: int) -> list[Config]:
    if head_dim <= 64:
        return [Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=3),
                Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8, num_stages=3),
                Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=4)]
    return [Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3),
            Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=2),
            Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3)]


def _space() -> list[Config]:
    """Level-1 space (issue 15): 108 points per head dim. Non-causal, every BLOCK_N divides the sequence.
    Causal, BLOCK_N > BLOCK_M (BLOCK_N does not divide BLOCK_M) is kept as a natural grid point although the
    kernel assumes it does: such points compute wrong results (unmasked keys past the diagonal) and read up
    to BLOCK_N - BLOCK_M key rows past the last head; the searcher checks and rejects them."""
    return grid_space({"BLOCK_M": [64, 128], "BLOCK_N": [32, 64, 128]}, num_warps=[4, 8], num_stages=[2, 3, 4],
                      maxnreg=[None, 168, 232])


def attention_spec(head_dim: int, causal: bool, *, small: bool = False) -> BenchSpec:
    """Batch 4 × 16 heads, sequence 4096 (1 × 2 heads, sequence 256 when ``small``)."""
    heads, seq = (2, 256) if small else (64, 4096)
    scale = 1.0 / math.sqrt(head_dim)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)

        def rnd() -> Any:
            return torch.randn((heads, seq, head_dim), generator=g, device=device).to(device=device, dtype=torch.float16)

        q, k, v = rnd(), rnd(), rnd()
        return {"q_ptr": q, "k_ptr": k, "v_ptr": v, "o_ptr": torch.empty_like(q), "sm_scale": scale,
                "seq_len": seq}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return (triton.cdiv(seq, int(c["BLOCK_M"])), heads, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        q, k, v = (x[n].float() for n in ("q_ptr", "k_ptr", "v_ptr"))
        return {"o_ptr": torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)}

    pairs = seq * seq * (0.5 if causal else 1.0)
    name = f"flash_attn_d{head_dim}{'_causal' if causal else ''}"
    return BenchSpec(
        name=name, fn=flash_attn_fwd,
        signature={"q_ptr": "*fp16:16", "k_ptr": "*fp16:16", "v_ptr": "*fp16:16", "o_ptr": "*fp16:16",
                   "sm_scale": "fp32", "seq_len": "i32:16"},
        constexprs={"HEAD_DIM": head_dim, "CAUSAL": causal}, configs=_configs(head_dim), space=_space(),
        make_inputs=make_inputs, grid=grid, outputs={"o_ptr": None},
        flops=4.0 * heads * pairs * head_dim, bytes_moved=2.0 * 4 * heads * seq * head_dim, reference=reference,
        description=f"FlashAttention forward, {heads} heads (batch×heads), seq {seq}, d {head_dim}, "
                    f"{'causal' if causal else 'non-causal'}")


def attn_d64(small: bool = False) -> BenchSpec:
    return attention_spec(64, False, small=small)


def attn_d64_causal(small: bool = False) -> BenchSpec:
    return attention_spec(64, True, small=small)


def attn_d128(small: bool = False) -> BenchSpec:
    return attention_spec(128, False, small=small)


def attn_d128_causal(small: bool = False) -> BenchSpec:
    return attention_spec(128, True, small=small)
