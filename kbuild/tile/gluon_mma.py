"""Gluon emission of mma programs: a synthesised GEMM-shaped tile program becomes a pipelined Gluon kernel.

For ``sm_90`` the kernel builds TMA descriptors on the device (``tma.make_tensor_descriptor``: the kernel takes
plain pointers, and the launcher needs Triton's global-scratch allocator), keeps ``STAGES`` K steps of both
operands in flight in shared memory (one mbarrier per stage), runs ``warpgroup_mma`` asynchronously with one
group outstanding, applies the elementwise epilogue to the accumulator in registers and stores the tile
through shared memory with a TMA store. Tiles are visited in groups of ``GROUP_M`` rows of tiles (L2 reuse).
Each program walks the output tiles ``program_id, program_id + num_programs, ...``: launched with a program
per tile it runs one; a ``PERSISTENT`` variant is launched with a program per SM and lets each tile's TMA
store overlap the next tile's main loop (waiting for it only before the epilogue tile is written again).

For ``sm_80`` (the mma.sync fallback) the operands are copied by cp.async into swizzled shared tiles,
loaded into ``DotOperandLayout`` registers and multiplied with ``mma_v2``; the epilogue stores from registers.

Every layout comes from :mod:`kbuild.tile.mma`; each kept :class:`~kbuild.tile.mma.Plan` is a ``VARIANT``
of the kernel with its own block sizes (constexprs of its bench-spec ``Config``), so the kbuild tuner picks.
The kernel's tensors are row-major and contiguous (row strides ``K``, ``N``, ``N``); ``M``, ``N`` and ``K``
may be any size (TMA fills and clips the edges; cp.async copies are masked), ``K`` and ``N`` multiples of 8.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kbuild.arch import DEFAULT_SM
from kbuild.tile.gluon import BINARY, GL_DTYPE, UNARY, blocked_text, load_kernel, operand
from kbuild.tile.lang import BYTES, Op, Program, TileError, trace
from kbuild.tile.mma import MmaProgram, Plan, analyse, plans, wgmma_path
from kbuild.tile.synth import Blocked, candidates


def epilogue_statement(op: Op) -> str:
    """One elementwise operation of an mma program's epilogue (binary, cast or unary) as a Gluon statement."""
    out = f"v{op.result.id}" if op.result is not None else ""
    if op.kind == "binary":
        a, b = (operand(x) for x in op.args)
        if op.attrs["op"] == "maximum":
            return f"{out} = gl.maximum({a}, {b})"
        return f"{out} = {a} {BINARY[op.attrs['op']]} {b}"
    a = operand(op.args[0])
    if op.attrs["op"] == "cast":
        assert op.result is not None
        return f"{out} = {a}.to({GL_DTYPE[op.result.dtype]})"
    return f"{out} = {UNARY[op.attrs['op']]}({a})"


def kernel_params(program: Program) -> list[str]:
    """The emitted kernel's parameters: a pointer per tensor, the scalars, the extents and the constexprs."""
    names = [f"{p.name}_ptr" for p in program.params if p.kind == "tensor"]
    names += [p.name for p in program.params if p.kind == "scalar"]
    return [*names, "M", "N", "K", "BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "GROUP_M", "PERSISTENT", "VARIANT"]


def signature(program: Program) -> dict[str, str]:
    sig = {f"{p.name}_ptr": f"*{p.dtype}:16" for p in program.params if p.kind == "tensor"}
    sig |= {p.name: p.dtype for p in program.params if p.kind == "scalar"}
    return sig | {"M": "i32", "N": "i32:16", "K": "i32:16"}


def copy_layout(rows: int, cols: int, elem: int, num_warps: int) -> Blocked:
    """A register layout for cp.async copies of a rows × cols tile: 16-byte vectors along the row, lanes
    across it (the first of :func:`kbuild.tile.synth.candidates` that does so without replication)."""
    vec = 16 // elem
    for b in candidates((rows, cols), num_warps, elem):
        foot = [s * t * w for s, t, w in zip(b.size_per_thread, b.threads_per_warp, b.warps_per_cta)]
        if b.size_per_thread == (1, vec) and b.order == (1, 0) and foot[0] <= rows and foot[1] <= cols:
            return b
    raise TileError(f"no cp.async copy layout for a {rows}x{cols} tile over {num_warps} warps")


def _grouped_tile(tile: str = "gl.program_id(0)") -> list[str]:
    return [
        "num_m = gl.cdiv(M, BLOCK_M)",
        "num_n = gl.cdiv(N, BLOCK_N)",
        "in_group = GROUP_M * num_n",
        f"first_m = ({tile} // in_group) * GROUP_M",
        "group = gl.minimum(num_m - first_m, GROUP_M)",
        f"off_m = (first_m + ({tile} % in_group) % group) * BLOCK_M",
        f"off_n = (({tile} % in_group) // group) * BLOCK_N",
    ]


def _body_sm90(mp: MmaProgram) -> list[str]:
    a, b, c = mp.a.name, mp.b.name, mp.c.name
    acc = f"v{mp.acc.id}"
    ops_dtype = GL_DTYPE[mp.dtype]
    c_dtype = GL_DTYPE[mp.c.dtype]
    loop = [
        *_grouped_tile("tile"),
        "for i in gl.static_range(STAGES - 1):  # prologue: the first STAGES - 1 K steps in flight",
        "    slot = (it + i) % STAGES",
        "    mbarrier.expect(bars.index(slot), step_bytes, pred=i < n_k)",
        "    tma.async_copy_global_to_shared(a_desc, [off_m, i * BLOCK_K], bars.index(slot), a_s.index(slot), "
        "pred=i < n_k)",
        "    tma.async_copy_global_to_shared(b_desc, [i * BLOCK_K, off_n], bars.index(slot), b_s.index(slot), "
        "pred=i < n_k)",
        f"{acc} = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, ACC)",
        "for k in range(n_k):",
        "    s = (it + k) % STAGES",
        "    mbarrier.wait(bars.index(s), ((it + k) // STAGES) & 1)",
        f"    {acc} = warpgroup_mma(a_s.index(s), b_s.index(s), {acc}, is_async=True)",
        "    # one group left in flight: the previous step's operands are free, refill them",
        f"    {acc}, _, _ = warpgroup_mma_wait(num_outstanding=1, deps=({acc}, a_s.index(s), b_s.index(s)))",
        "    nk = k + STAGES - 1",
        "    ns = (it + nk) % STAGES",
        "    mbarrier.expect(bars.index(ns), step_bytes, pred=nk < n_k)",
        "    tma.async_copy_global_to_shared(a_desc, [off_m, nk * BLOCK_K], bars.index(ns), a_s.index(ns), "
        "pred=nk < n_k)",
        "    tma.async_copy_global_to_shared(b_desc, [nk * BLOCK_K, off_n], bars.index(ns), b_s.index(ns), "
        "pred=nk < n_k)",
        f"{acc} = warpgroup_mma_wait(num_outstanding=0, deps=({acc},))",
        "it += n_k",
        *(epilogue_statement(op) for op in mp.epilogue),
        "if PERSISTENT:  # the previous tile's store has left c_s; this one overlaps the next main loop",
        "    tma.store_wait(pendings=0)",
        f"    c_s.store(v{mp.stored.id})",
        "    fence_async_shared()",
        "    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_s)",
        "else:",
        f"    c_t = gl.allocate_shared_memory({c_dtype}, [BLOCK_M, BLOCK_N], SC)",
        f"    c_t.store(v{mp.stored.id})",
        "    fence_async_shared()",
        "    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_t)",
        "    tma.store_wait(pendings=0)",
    ]
    return [
        f"a_desc = tma.make_tensor_descriptor({a}_ptr, [M, K], [K, 1], [BLOCK_M, BLOCK_K], SA)",
        f"b_desc = tma.make_tensor_descriptor({b}_ptr, [K, N], [N, 1], [BLOCK_K, BLOCK_N], SB)",
        f"c_desc = tma.make_tensor_descriptor({c}_ptr, [M, N], [N, 1], [BLOCK_M, BLOCK_N], SC)",
        f"a_s = gl.allocate_shared_memory({ops_dtype}, [STAGES, BLOCK_M, BLOCK_K], SA)",
        f"b_s = gl.allocate_shared_memory({ops_dtype}, [STAGES, BLOCK_K, BLOCK_N], SB)",
        "bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())",
        "for i in gl.static_range(STAGES):",
        "    mbarrier.init(bars.index(i), count=1)",
        "if PERSISTENT:",
        f"    c_s = gl.allocate_shared_memory({c_dtype}, [BLOCK_M, BLOCK_N], SC)",
        "n_k = gl.cdiv(K, BLOCK_K)",
        "step_bytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes",
        "it = 0  # K steps consumed by this program so far: the stage ring and its barrier phases run on",
        "# a grid of one program per tile runs the loop once; a persistent grid (one per SM) walks the tiles",
        "for tile in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N), gl.num_programs(0)):",
        *(f"    {line}" for line in loop),
        "if PERSISTENT:",
        "    tma.store_wait(pendings=0)",
        "for i in gl.static_range(STAGES):",
        "    mbarrier.invalidate(bars.index(i))",
    ]


def _body_sm80(mp: MmaProgram) -> list[str]:
    a, b, c = mp.a.name, mp.b.name, mp.c.name
    acc = f"v{mp.acc.id}"
    ops_dtype = GL_DTYPE[mp.dtype]
    return [
        *_grouped_tile(),
        f"a_s = gl.allocate_shared_memory({ops_dtype}, [STAGES, BLOCK_M, BLOCK_K], SA)",
        f"b_s = gl.allocate_shared_memory({ops_dtype}, [STAGES, BLOCK_K, BLOCK_N], SB)",
        "am = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, CA))",
        "ak = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, CA))",
        "bk = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, CB))",
        "bn = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, CB))",
        f"a_ptrs = {a}_ptr + am[:, None].to(gl.int64) * K + ak[None, :]",
        f"b_ptrs = {b}_ptr + bk[:, None].to(gl.int64) * N + bn[None, :]",
        "n_k = gl.cdiv(K, BLOCK_K)",
        "for i in gl.static_range(STAGES - 1):  # prologue: the first STAGES - 1 K steps in flight",
        "    async_copy.async_copy_global_to_shared(a_s.index(i), a_ptrs + i * BLOCK_K, "
        "mask=(am[:, None] < M) & (ak[None, :] < K - i * BLOCK_K))",
        "    async_copy.async_copy_global_to_shared(b_s.index(i), b_ptrs + i * BLOCK_K * N, "
        "mask=(bk[:, None] < K - i * BLOCK_K) & (bn[None, :] < N))",
        "    async_copy.commit_group()",
        f"{acc} = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, ACC)",
        "for k in range(n_k):",
        "    s = k % STAGES",
        "    async_copy.wait_group(STAGES - 2)",
        "    gl.thread_barrier()",
        "    a_r = a_s.index(s).load(DA)",
        "    b_r = b_s.index(s).load(DB)",
        f"    {acc} = mma_v2(a_r, b_r, {acc})",
        "    nk = k + STAGES - 1",
        "    ns = nk % STAGES",
        "    async_copy.async_copy_global_to_shared(a_s.index(ns), a_ptrs + nk * BLOCK_K, "
        "mask=(am[:, None] < M) & (ak[None, :] < K - nk * BLOCK_K))",
        "    async_copy.async_copy_global_to_shared(b_s.index(ns), b_ptrs + nk * BLOCK_K * N, "
        "mask=(bk[:, None] < K - nk * BLOCK_K) & (bn[None, :] < N))",
        "    async_copy.commit_group()",
        "async_copy.wait_group(0)",
        *(epilogue_statement(op) for op in mp.epilogue),
        "cm = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, ACC))",
        "cn = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, ACC))",
        f"gl.store({c}_ptr + cm[:, None].to(gl.int64) * N + cn[None, :], v{mp.stored.id}, "
        "mask=(cm[:, None] < M) & (cn[None, :] < N))",
    ]


def _layouts(plan: Plan, elem: int) -> list[tuple[str, str]]:
    out = [("ACC", plan.acc.text()), ("SA", plan.a_shared.text()), ("SB", plan.b_shared.text())]
    if plan.c_shared is not None:
        out.append(("SC", plan.c_shared.text()))
    if plan.operands is not None:
        out += [("DA", plan.operands[0].text("ACC")), ("DB", plan.operands[1].text("ACC"))]
        out.append(("CA", blocked_text(copy_layout(plan.block_m, plan.block_k, elem, plan.num_warps))))
        out.append(("CB", blocked_text(copy_layout(plan.block_k, plan.block_n, elem, plan.num_warps))))
    return out


def nvidia_imports(arch: int) -> str:
    """The import of Gluon's NVIDIA module that an mma kernel for ``sm_<arch>`` uses: Hopper's (wgmma, TMA,
    mbarrier) on the wgmma path (:func:`kbuild.tile.mma.wgmma_path`), else Ampere's (mma.sync, cp.async)."""
    if wgmma_path(arch):
        return ("from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, "
                "warpgroup_mma, warpgroup_mma_wait")
    return "from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2"


def emit(mp: MmaProgram, kept: Sequence[Plan]) -> str:
    """Gluon source of the mma kernel with one ``VARIANT`` per plan (all of one architecture)."""
    if not kept or len({p.arch for p in kept}) != 1:
        raise ValueError("emit takes plans of one architecture")
    arch = kept[0].arch
    program = mp.program
    elem = BYTES[mp.dtype]
    engine = "wgmma, TMA" if wgmma_path(arch) else "mma.sync, cp.async"
    head = [f'"""{program.name}: emitted by kbuild.tile from {program.qualname or program.name} for sm_{arch} '
            f"({engine}); layouts synthesised.", ""]
    for i, p in enumerate(kept):
        head.append(f"variant {i}: {p.block_m}x{p.block_n}x{p.block_k}, num_warps={p.num_warps}, stages={p.stages}, "
                    f"{'persistent, ' if p.persistent else ''}modelled {p.cost:.0f} cycles")
    head += ['"""', "", "from triton.experimental import gluon", "from triton.experimental.gluon import language as gl",
             nvidia_imports(arch), "", "", "@gluon.jit"]
    constexprs = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "GROUP_M", "PERSISTENT", "VARIANT"}
    args = ", ".join(f"{n}: gl.constexpr" if n in constexprs else n for n in kernel_params(program))
    lines = [*head, f"def {program.name}({args}):"]
    for i, p in enumerate(kept):
        kw = "if" if i == 0 else "elif" if i < len(kept) - 1 else "else"
        lines.append(f"    {kw}{f' VARIANT == {i}' if kw != 'else' else ''}:")
        lines += [f"        {name}: gl.constexpr = {text}" for name, text in _layouts(p, elem)]
    body = _body_sm90(mp) if wgmma_path(arch) else _body_sm80(mp)
    lines += [f"    {line}" for line in body]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class MmaKernel:
    """A synthesised mma kernel: its program, kept plans (variants, best first), Gluon source and function."""

    program: Program
    plans: tuple[Plan, ...]
    source: str
    fn: Any
    signature: dict[str, str]
    arch: int
    seconds: float

    def configs(self) -> list[Any]:
        """One ``kbuild.bench.spec.Config`` per variant: its block sizes, stages and ``VARIANT``."""
        from kbuild.bench.spec import Config

        return [Config({**p.constexprs, "VARIANT": i}, num_warps=p.num_warps, num_stages=1)
                for i, p in enumerate(self.plans)]


def build_mma(fn: Callable[..., Any], problem: tuple[int, int, int], *, arch: int = DEFAULT_SM, variants: int = 3
              ) -> MmaKernel:
    """Trace ``fn`` (an mma program), rank configurations for ``problem`` = (M, N, K) on ``sm_<arch>``, keep
    ``variants`` of them and emit one Gluon kernel."""
    started = time.perf_counter()
    program = trace(fn)
    if any(op.kind == "dequant" for op in program.ops):
        raise TileError(f"{program.name}: an int4 (dequant) program: build it with "
                        "kbuild.tile.gluon_quant.build_int4")
    mp = analyse(program)
    kept = plans(arch, problem, BYTES[mp.dtype], keep=variants)
    source = emit(mp, kept)
    kernel = load_kernel(source, program)
    assert kernel.arg_names == kernel_params(program)
    return MmaKernel(program, tuple(kept), source, kernel, signature(program), arch, time.perf_counter() - started)


__all__ = ["MmaKernel", "build_mma", "copy_layout", "emit", "epilogue_statement", "kernel_params", "nvidia_imports",
           "signature"]
