# mypy: disable-error-code="valid-type"
# (tile kernels annotate parameters with Tensor(...)/Scalar(...) values, which kbuild.tile.lang.trace reads)
"""Kernels written in the tile language, with bench specs and torch references: softmax, RMSNorm, fp16 GEMM and
the int4 × fp16 GEMM with group-wise scales.

Each is a few lines with no layout in it; :func:`kbuild.tile.build.build` (row-wise kernels),
:func:`kbuild.tile.gluon_mma.build_mma` (the GEMM) and :func:`kbuild.tile.gluon_quant.build_int4` (the int4
GEMM, whose weights' in-memory order is synthesised too) synthesise the layouts. The softmax and RMSNorm specs
mirror :mod:`kbuild.bench.kernels.softmax` and :mod:`kbuild.bench.kernels.rmsnorm` (same shapes, inputs and
references), so the tile kernels compare one to one with the hand-written Triton ones:
``kbuild bench --spec kbuild.tile.kernels:softmax``; the GEMM's inputs are those of
:mod:`kbuild.bench.kernels.tma_matmul` (``C = A @ B`` at 4096³); the int4 GEMM's are those of the plain Triton
baseline :mod:`kbuild.bench.kernels.int4_matmul` (same seed, same values), packed by the synthesised layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kbuild.arch import DEFAULT_SM
from kbuild.bench.spec import BenchSpec, Constexpr
from kbuild.tile.build import TileKernel, build
from kbuild.tile.gluon_mma import MmaKernel, build_mma
from kbuild.tile.gluon_quant import QuantKernel, build_int4
from kbuild.tile.lang import (
    Scalar,
    Tensor,
    dequant,
    exp,
    extent,
    load,
    loop,
    mma,
    rsqrt,
    shared,
    store,
    zeros,
)
from kbuild.tile.mma import machine, wgmma_path

EPS = 1e-6


def softmax_tile(x: Tensor("fp16", "MN"), y: Tensor("fp16", "MN")) -> None:
    a = load(x, other=-float("inf")).to("fp32")
    e = exp(a - a.max(axis=1)[:, None])
    store(y, e / e.sum(axis=1)[:, None])


def rmsnorm_tile(x: Tensor("fp16", "MN"), w: Tensor("fp16", "N"), y: Tensor("fp16", "MN"),
                 eps: Scalar("fp32")) -> None:
    a = load(x).to("fp32")
    r = rsqrt((a * a).sum(axis=1) / extent("N") + eps)
    store(y, a * r[:, None] * load(w).to("fp32")[None, :])


def gemm_tile(a: Tensor("fp16", "MK"), b: Tensor("fp16", "KN"), c: Tensor("fp16", "MN")) -> None:
    acc = zeros("MN")
    for _ in loop("K"):
        mma(shared(a), shared(b), acc)
    store(c, acc)


def int4_gemm_tile(x: Tensor("fp16", "MK"), w: Tensor("int4", "KN"), s: Tensor("fp16", "GN"),
                   y: Tensor("fp16", "MN")) -> None:
    acc = zeros("MN")
    for _ in loop("K"):
        mma(shared(x), dequant(w, s, group=128), acc)
    store(y, acc)


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _row_spec(name: str, k: TileKernel, m: int, n: int, make_extra: Any, reference: Any, flops: float,
              bytes_moved: float) -> BenchSpec:
    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)
        x = (torch.randn((m, n), generator=g, device=device) * 2.0).to(device=device, dtype=torch.float16)
        out = {"x_ptr": x, "y_ptr": torch.empty_like(x), "stride_x": n, "stride_y": n, "n_rows": m, "n_cols": n}
        out.update(make_extra(g, device))
        return out

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        block_m = int(c["BLOCK_M"])
        return ((m + block_m - 1) // block_m, 1, 1)

    return BenchSpec(
        name=name, fn=k.fn, signature=k.signature, constexprs=k.constexprs, configs=k.configs(),
        make_inputs=make_inputs, grid=grid, outputs={"y_ptr": None}, flops=flops, bytes_moved=bytes_moved,
        archs=(DEFAULT_SM,), reference=reference,
        description=f"{name}: kbuild.tile (Gluon, {len(k.variants)} synthesised variants), {m}x{n} fp16")


def softmax_kernel(n: int, block_m: int = 1) -> TileKernel:
    return build(softmax_tile, {"M": block_m, "N": _pow2(n)})


def rmsnorm_kernel(n: int, block_m: int = 1) -> TileKernel:
    return build(rmsnorm_tile, {"M": block_m, "N": _pow2(n)})


def softmax(small: bool = False) -> BenchSpec:
    """Softmax over rows of a 65536×4096 fp16 matrix (16×512 when ``small``), one row per program."""
    m, n = (16, 512) if small else (65536, 4096)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        return {"y_ptr": torch.softmax(x["x_ptr"].float(), dim=-1)}

    return _row_spec("tile_softmax", softmax_kernel(n), m, n, lambda g, d: {}, reference, 5.0 * m * n, 4.0 * m * n)


def rmsnorm(small: bool = False) -> BenchSpec:
    """RMSNorm over rows of a 32768×4096 fp16 matrix (16×512 when ``small``), one row per program."""
    m, n = (16, 512) if small else (32768, 4096)

    def extra(g: Any, device: Any) -> dict[str, Any]:
        import torch

        w = (torch.rand((n,), generator=g, device=device) + 0.5).to(device=device, dtype=torch.float16)
        return {"w_ptr": w, "eps": EPS}

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        import torch

        xf = x["x_ptr"].float()
        return {"y_ptr": xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * x["w_ptr"].float()}

    return _row_spec("tile_rmsnorm", rmsnorm_kernel(n), m, n, extra, reference, 4.0 * m * n, 2.0 * (2 * m * n + n))


def gemm_kernel(m: int, n: int, k: int, arch: int = DEFAULT_SM, variants: int = 3) -> MmaKernel:
    return build_mma(gemm_tile, (m, n, k), arch=arch, variants=variants)


def gemm(small: bool = False, arch: int = DEFAULT_SM, variants: int = 3) -> BenchSpec:
    """fp16 ``C = A @ B`` (fp32 accumulation) at 4096³ (256³ when ``small``), A M×K and B K×N row-major; the
    ``variants`` best-modelled configurations are its autotune list."""
    s = 256 if small else 4096
    k = gemm_kernel(s, s, s, arch, variants)
    sms = machine(arch, "mma: no tensor-core layouts").sms

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        g = torch.Generator(device=device).manual_seed(seed)

        def randn(*shape: int) -> Any:
            return torch.randn(shape, generator=g, device=device).to(dtype=torch.float16)

        return {"a_ptr": randn(s, s), "b_ptr": randn(s, s),
                "c_ptr": torch.empty((s, s), dtype=torch.float16, device=device), "M": s, "N": s, "K": s}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        tiles = -(-s // int(c["BLOCK_M"])) * -(-s // int(c["BLOCK_N"]))
        return (min(tiles, sms) if c.get("PERSISTENT") else tiles, 1, 1)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        return {"c_ptr": x["a_ptr"].float() @ x["b_ptr"].float()}

    return BenchSpec(
        name="tile_gemm", fn=k.fn, signature=k.signature, constexprs={}, configs=k.configs(),
        make_inputs=make_inputs, grid=grid, outputs={"c_ptr": None}, flops=2.0 * s ** 3, bytes_moved=2.0 * 3 * s * s,
        archs=(arch,), reference=reference, needs_allocator=wgmma_path(arch),
        description=f"tile_gemm: kbuild.tile (Gluon for sm_{arch}, {len(k.plans)} synthesised variants), fp16 {s}^3")


def int4_gemm_kernel(m: int, n: int, k: int, arch: int = DEFAULT_SM, variants: int = 3) -> QuantKernel:
    return build_int4(int4_gemm_tile, (m, n, k), arch=arch, variants=variants)


def int4_gemm(small: bool = False, m: int = 16, n: int = 4096, k: int = 4096, variants: int = 3,
              arch: int = DEFAULT_SM) -> BenchSpec:
    """``Y = X · W`` with ``W = (q - 8) · s`` (int4 ``q``, fp16 scales per 128 rows of K) at M × N × K
    (16 × 128 × 256 when ``small``); the inputs are :func:`kbuild.bench.kernels.int4_matmul.problem`'s, the
    weights packed by the synthesised layout (:meth:`~kbuild.tile.quant.WeightLayout.pack_torch`), plus the
    split-K workspace and tile counters (zeros) the synthesised kernel takes."""
    from kbuild.bench.kernels import int4_matmul as plain

    if small:
        m, n, k = 16, 128, 256
    kernel = int4_gemm_kernel(m, n, k, arch=arch, variants=variants)
    packing = kernel.packing

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        import torch

        p = plain.problem(seed, device, m, n, k)
        elems, counters = kernel.workspace(m, n)
        return {"x_ptr": p["x"], "w_ptr": packing.pack_torch(p["q"]), "s_ptr": p["s"],
                "y_ptr": torch.empty((m, n), dtype=torch.float16, device=device),
                "workspace_ptr": torch.full((elems,), 1.0, device=device),  # split-K partials (not all zeros)
                "counters_ptr": torch.zeros((counters,), dtype=torch.int32, device=device), "M": m, "N": n, "K": k}

    def grid(c: Mapping[str, Constexpr]) -> tuple[int, int, int]:
        return kernel.grid(m, n, c)

    def reference(x: dict[str, Any]) -> dict[str, Any]:
        return {"y_ptr": plain.reference(x["x_ptr"], packing.unpack_torch(x["w_ptr"], k, n), x["s_ptr"])}

    return BenchSpec(
        name=f"tile_int4_gemm_{m}x{n}x{k}", fn=kernel.fn, signature=kernel.signature, constexprs={},
        configs=kernel.configs(), make_inputs=make_inputs, grid=grid, outputs={"y_ptr": None},
        flops=2.0 * m * n * k, bytes_moved=n * k / 2 + (k // plain.GROUP) * n * 2 + 2.0 * m * (k + n),
        archs=(arch,), reference=reference, reference_tol=2e-3, needs_allocator=wgmma_path(arch),
        description=f"tile_int4_gemm: kbuild.tile (Gluon for sm_{arch}, {len(kernel.plans)} synthesised variants), "
                    f"int4 x fp16 {m}x{n}x{k}, group {plain.GROUP}")


__all__ = ["gemm", "gemm_kernel", "gemm_tile", "int4_gemm", "int4_gemm_kernel", "int4_gemm_tile", "rmsnorm", "rmsnorm_kernel", "rmsnorm_tile", "softmax", "softmax_kernel", "softmax_tile"]
