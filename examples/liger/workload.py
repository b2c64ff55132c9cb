"""examples/liger's Llama-shape workload for ``kbuild record``: Liger-Kernel 0.8.5's own wrappers on CPU tensors.

Liger's ops at the shapes of ``kbx_liger.SHAPES`` (4096 rows, hidden 4096, intermediate 11008, vocabulary 32000),
in fp16 and bf16, with the RMSNorm forward and backward also at 2048 rows (the backward's ``rows_per_program``
follows the row count: ``ceil(n_rows / sm_count)``, one SM on a CPU). ``recordings/llama-shapes.cpu.json`` is its
recording (``kbuild record --mode cpu --target sm_80,sm_90 --out recordings/llama-shapes.cpu.json -- python
workload.py``); ``benchmarks/gpu_liger.py`` times these calls on the GPU machine.
``python workload.py [--cuda] [DTYPE...]``: ``--cuda`` puts the tensors on the GPU (a GPU machine).

``python workload.py --llama3 [--cuda]``: issue 35's shapes instead, Llama-3-8B's (hidden 4096, intermediate 14336,
vocabulary 128256), bf16, at 4096 and 16384 tokens (cross entropy at 4096 and 8192: its logits are 2 GiB at 8192);
``recordings/llama3-8b.cpu.json`` is its recording, what ``tune = "auto"`` tunes on the GPU machine.
"""

import sys

import torch
from liger_kernel.ops import cross_entropy, dyt, geglu, layer_norm, rms_norm, swiglu

ROWS, HIDDEN, INTER, VOCAB = 4096, 4096, 11008, 32000


def main(dtypes, device="cpu"):
    torch.set_default_device(device)
    for name in dtypes:
        dt = getattr(torch, name)
        w = torch.ones(HIDDEN, dtype=dt, requires_grad=True)
        for rows in (ROWS, ROWS // 2):
            x = torch.randn(rows, HIDDEN).to(dt)
            _y, xv, rstd, block, warps, mode = rms_norm.rms_norm_forward(x, w, 1e-6, 0.0, "llama", None)
            rms_norm.rms_norm_backward(torch.randn(rows, HIDDEN).to(dt), xv, w, rstd, 0.0, mode, block, warps, True,
                                       None, needs_dw=True)
        x = torch.randn(ROWS, HIDDEN).to(dt)
        a, b = torch.randn(ROWS, INTER).to(dt), torch.randn(ROWS, INTER).to(dt)
        swiglu.swiglu_forward(a, b, 1.0)
        geglu.geglu_forward(a, b)
        layer_norm.layer_norm_forward(x, w, torch.zeros(HIDDEN, dtype=dt), 1e-5)
        logits = torch.randn(ROWS, VOCAB).to(dt).requires_grad_(True)
        target = torch.randint(0, VOCAB, (ROWS,))
        cross_entropy.cross_entropy_forward(logits, target, None, -100, 0.0, 0.0, "mean", None, False)
        alpha, gamma, beta = torch.ones(1, dtype=dt), torch.ones(HIDDEN, dtype=dt), torch.zeros(HIDDEN, dtype=dt)
        dyt.liger_dyt_fwd(x, alpha, gamma, beta)


LLAMA3 = {"hidden": 4096, "intermediate": 14336, "vocab": 128256, "tokens": (4096, 16384), "ce_tokens": (4096, 8192)}


def llama3(device="cpu"):
    """Liger's wrappers at Llama-3-8B's shapes, bf16 (issue 35's targets)."""
    torch.set_default_device(device)
    dt, hidden, inter, vocab = torch.bfloat16, LLAMA3["hidden"], LLAMA3["intermediate"], LLAMA3["vocab"]
    w = torch.ones(hidden, dtype=dt, requires_grad=True)
    for rows in LLAMA3["tokens"]:
        x = torch.randn(rows, hidden, dtype=dt)
        _y, xv, rstd, block, warps, mode = rms_norm.rms_norm_forward(x, w, 1e-6, 0.0, "llama", None)
        rms_norm.rms_norm_backward(torch.randn(rows, hidden, dtype=dt), xv, w, rstd, 0.0, mode, block, warps, True,
                                   None, needs_dw=True)
        a, b = torch.randn(rows, inter, dtype=dt), torch.randn(rows, inter, dtype=dt)
        swiglu.swiglu_forward(a, b, 1.0)
        geglu.geglu_forward(a, b)
        layer_norm.layer_norm_forward(x, w, torch.zeros(hidden, dtype=dt), 1e-5)
    for rows in LLAMA3["ce_tokens"]:
        logits = torch.randn(rows, vocab, dtype=dt).requires_grad_(True)
        target = torch.randint(0, vocab, (rows,))
        cross_entropy.cross_entropy_forward(logits, target, None, -100, 0.0, 0.0, "mean", None, False)


if __name__ == "__main__":
    device = "cuda" if "--cuda" in sys.argv[1:] else "cpu"
    if "--llama3" in sys.argv[1:]:
        llama3(device)
    else:
        names = [a for a in sys.argv[1:] if a not in ("--cuda", "--llama3")]
        main(names or ["float16", "bfloat16"], device)
