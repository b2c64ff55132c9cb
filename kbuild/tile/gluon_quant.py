"""Gluon emission of the int4 × fp16 GEMM with group-wise scales: ``mma(shared(x), dequant(w, s), acc)``.

The synthesised kernel computes ``Yᵀ = Wᵀ · Xᵀ`` (as Machete does on Hopper): wgmma takes only its A operand
from registers, and the dequantised weights are made in registers, so Wᵀ is A (its rows are N, a warpgroup
64 of them) and the activations' tile, read transposed from shared memory, is B (its columns are the tokens,
``BLOCK_T`` of them: wgmma's N, 8 to 256). Per K step, one ring stage holds the activations' tile, the packed
weights of each warpgroup (:func:`kbuild.tile.quant.packing`: thread ``t``'s words are one contiguous run, so
TMA copies a ``[128, words]`` box per warpgroup) and the step's scale row, all filled by TMA under one
mbarrier, ``STAGES - 1`` steps ahead. A thread then

1. reads its words from shared memory (16-byte loads; the swizzle comes from the bank-conflict model of
   :mod:`kbuild.tile.mma`),
2. dequantises them with the lop3 trick (``(word >> 4s) & 0x000F000F | 0x64006400`` is the fp16 pair
   ``1024 + q``), joins the pairs and renames its registers into the ``DotOperandLayout`` with the
   :class:`~kbuild.tile.quant.RegisterChain` (``convert_layout(..., assert_trivial=True)``: Triton refuses to
   compile the kernel if a value would have to move to another thread; that each register holds the value
   the operand expects there is checked by the numpy emulation in the tests),
3. subtracts 1032 (1024 and the zero point 8, exact in fp16) and multiplies by its rows' scales (read from the
   stage as a slice of the operand layout), so the weight is ``(q - 8) · s`` rounded once, as torch's
   ``(q - 8).half() * s`` is,
4. issues the wgmma asynchronously with one group in flight (the previous step's operand registers stay alive
   until it retires) and refills the stage the retired step used.

With ``SPLIT_K > 1`` (decode: too few output tiles to fill the SMs) ``program_id(2)`` takes a share of the K
steps and writes its fp32 partial tile to a workspace the synthesiser adds to the kernel's parameters; after a
CTA barrier one thread counts the tile's finished programs with an acquire-release atomic, and the last one
reads every partial back from L2 and adds them in split order, so the result does not depend on which program
finishes last (bit-identical reruns), then resets the counter for the next launch.

The epilogue applies the program's elementwise operations to the accumulator, transposes it back
(``permute``: a register renaming) and stores Y through shared memory with TMA (the edges past ``M`` are
clipped). ``N`` must be a multiple of the CTA's rows (64 per warpgroup) and ``K`` of the packed tile's K; ``M``
is any size. Each kept :class:`~kbuild.tile.quant.QuantPlan` is a ``VARIANT`` with its own warpgroups, tokens
tile, split and ring depth; all of them read the same packed weights.

On sm_80 (mma.sync) no transpose is needed: the dequantised weights are the B operand
(``DotOperandLayout(1, ...)``, the fragment Marlin shuffles for), X's tile the A operand read with ``ldmatrix``
from a swizzled stage; X and the packed runs are copied by 16-byte cp.async into a ``STAGES``-deep ring, the
scale row is loaded a step ahead into registers, and Y is stored from registers (masked past ``M``). The same
lop3 dequantisation, register chain and split-K reduction serve both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kbuild.arch import DEFAULT_SM
from kbuild.tile.gluon import GL_DTYPE, blocked_text, load_kernel
from kbuild.tile.gluon_mma import copy_layout, epilogue_statement, nvidia_imports
from kbuild.tile.lang import Program, trace
from kbuild.tile.mma import wgmma_path
from kbuild.tile.quant import WARPGROUP_ROWS, QuantPlan, QuantProgram, WeightLayout, analyse, plans

#: what the lop3 trick leaves in a half: 1024 + q; subtracting this gives q - 8 (zero point 8)
MAGIC = 1024 + 8
CONSTEXPRS = ("BLOCK_N", "BLOCK_K", "BLOCK_T", "STAGES", "SPLIT_K", "VARIANT")
#: what the synthesiser adds to the program's parameters for split-K: fp32 partial tiles and a counter per tile
#: (zero before the first launch; the last program of a tile sets it back to zero)
SPLIT_PARAMS = ("workspace_ptr", "counters_ptr")


def kernel_params(program: Program) -> list[str]:
    """The emitted kernel's parameters: a pointer per tensor, the split-K buffers, the scalars, the extents and
    the constexprs."""
    names = [f"{p.name}_ptr" for p in program.params if p.kind == "tensor"]
    names += [*SPLIT_PARAMS, *(p.name for p in program.params if p.kind == "scalar")]
    return [*names, "M", "N", "K", *CONSTEXPRS]


def signature(program: Program) -> dict[str, str]:
    """AOT types: the packed int4 weights are int32 words."""
    sig = {f"{p.name}_ptr": "*i32:16" if p.dtype == "int4" else f"*{p.dtype}:16"
           for p in program.params if p.kind == "tensor"}
    sig |= {"workspace_ptr": "*fp32:16", "counters_ptr": "*i32:16"}
    sig |= {p.name: p.dtype for p in program.params if p.kind == "scalar"}
    return sig | {"M": "i32", "N": "i32:16", "K": "i32:16"}


def _layouts(plan: QuantPlan) -> list[tuple[str, str]]:
    lay = plan.layout
    words = ("WL", f"gl.BlockedLayout(size_per_thread=[1, {lay.words_per_thread}], threads_per_warp=[32, 1], "
                   f"warps_per_cta=[{plan.num_warps}, 1], order=[1, 0])")
    if not wgmma_path(plan.arch):
        return [
            ("ACC", plan.acc.text()),
            ("DX", "gl.DotOperandLayout(operand_index=0, parent=ACC, k_width=2)"),
            ("DW", "gl.DotOperandLayout(operand_index=1, parent=ACC, k_width=2)"),
            words,
            ("CX", blocked_text(copy_layout(plan.block_t, plan.block_k, 2, plan.num_warps))),
            ("CW", f"gl.BlockedLayout(size_per_thread=[1, 4], threads_per_warp=[32, 1], "
                   f"warps_per_cta=[{plan.num_warps}, 1], order=[1, 0])"),  # 16-byte cp.async of the runs
            ("SX", plan.x_shared.text()),
            ("SW", plan.w_shared.text()),
        ]
    assert plan.y_shared is not None
    return [
        ("ACC", plan.acc.text()),
        ("DW", "gl.DotOperandLayout(operand_index=0, parent=ACC, k_width=2)"),
        words,
        ("SX", plan.x_shared.text()),
        ("SW", plan.w_shared.text()),
        ("SS", "gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)"),
        ("SY", plan.y_shared.text()),
    ]


def _copies(step: str, slot: str, x: str) -> list[str]:
    """The TMA copies of one K step into one stage (the caller has armed its barrier)."""
    pred = f"pred={step} < n_k"
    return [
        f"tma.async_copy_global_to_shared(x_desc, [off_t, (k0 + {step}) * BLOCK_K], bars.index({slot}), "
        f"x_s.index({slot}), {pred})",
        f"tma.async_copy_global_to_shared(s_desc, [((k0 + {step}) * BLOCK_K) // GROUP, off_n], bars.index({slot}), "
        f"s_s.index({slot}), {pred})",
        "for g in gl.static_range(BLOCK_N // 64):  # each warpgroup's packed tile: 128 threads' runs",
        f"    tma.async_copy_global_to_shared(w_desc, [w_row + g * k_steps * 128 + (k0 + {step}) * 128, 0], "
        f"bars.index({slot}), w_s.index({slot}).slice(g * 128, 128), {pred})",
    ]


def _chain(kept: Sequence[QuantPlan]) -> list[str]:
    """``v = <the register chain>``: one line, or one per CTA height when the variants differ in it."""
    by_rows = {p.block_n: p.chain.gluon("v") for p in kept}
    if len(by_rows) == 1:
        return [f"v = {next(iter(by_rows.values()))}"]
    out = []
    for i, (rows, text) in enumerate(sorted(by_rows.items())):
        kw = "if" if i == 0 else "elif" if i < len(by_rows) - 1 else "else"
        out += [f"{kw}{f' BLOCK_N == {rows}' if kw != 'else' else ''}:", f"    v = {text}"]
    return out


def _dequant(kept: Sequence[QuantPlan], operand: str) -> list[str]:
    """``words`` (a thread's run) → ``{operand}``, the fp16 ``(q - 8) · s`` tile in the operand layout ``DW``."""
    pairs = [f"p{i} = {'(words' if i == 0 else f'((words >> {4 * i})'} & 0x000F000F) | 0x64006400" for i in range(4)]
    halves = [f"f{i} = gl.join(p{i}.to(gl.int16).to(gl.float16, bitcast=True), "
              f"(p{i} >> 16).to(gl.int16).to(gl.float16, bitcast=True))" for i in range(4)]
    scale = "sc[:, None]" if wgmma_path(kept[0].arch) else "sc[None, :]"
    return [
        "# lop3: pair i of a word is nibbles (i, i + 4) as the fp16 halves 1024 + q",
        *pairs,
        *halves,
        "v = gl.join(gl.join(f0, f1), gl.join(f2, f3))  # [threads, words, half, pair bit 0, pair bit 1]",
        *_chain(kept),
        f"{operand} = gl.convert_layout(v, DW, assert_trivial=True)  # the operand layout: no value changes threads",
        f"{operand} = ({operand} - {float(MAGIC)}) * {scale}",
    ]


def _split_steps() -> list[str]:
    return [
        "k_steps = K // BLOCK_K",
        "# split-K: program_id(2) takes a SPLIT_K-th of the K steps (the last one the remainder)",
        "k0 = gl.program_id(2) * (k_steps // SPLIT_K)",
        "n_k = k_steps // SPLIT_K + (gl.program_id(2) == SPLIT_K - 1).to(gl.int32) * (k_steps % SPLIT_K)",
    ]


def _finish(qp: QuantProgram, store: list[str], rows: str, cols: str) -> list[str]:
    """Split-K's reduction (the accumulator is ``rows`` × ``cols``), then ``store``."""
    acc = f"v{qp.acc.id}"
    size = f"({rows} * {cols})"
    return [
        "if SPLIT_K > 1:  # partial tiles in the workspace; the last program of the tile adds them in split order",
        "    tile = gl.program_id(1) * gl.num_programs(0) + gl.program_id(0)",
        "    tiles = gl.num_programs(0) * gl.num_programs(1)",
        f"    pr = gl.arange(0, {rows}, layout=gl.SliceLayout(1, ACC))",
        f"    pc = gl.arange(0, {cols}, layout=gl.SliceLayout(0, ACC))",
        f"    part = pr[:, None] * {cols} + pc[None, :]",
        f"    gl.store(workspace_ptr + (gl.program_id(2) * tiles + tile).to(gl.int64) * {size} + part, {acc})",
        "    gl.thread_barrier()  # every thread's partial is written before the count says so",
        "    done = gl.atomic_add(counters_ptr + tile, 1, sem=\"acq_rel\", scope=\"gpu\")",
        "    if done == SPLIT_K - 1:",
        f"        {acc} = gl.load(workspace_ptr + tile.to(gl.int64) * {size} + part, cache_modifier=\".cg\")",
        "        for i in gl.static_range(1, SPLIT_K):",
        f"            {acc} += gl.load(workspace_ptr + (i * tiles + tile).to(gl.int64) * {size} + part, "
        "cache_modifier=\".cg\")",
        "        gl.store(counters_ptr + tile, 0)  # ready for the next launch",
        *(f"        {line}" for line in store),
        "else:",
        *(f"    {line}" for line in store),
    ]


def _body_sm90(qp: QuantProgram, kept: Sequence[QuantPlan]) -> list[str]:
    x, w, s, y = qp.x.name, qp.w.name, qp.scales.name, qp.y.name
    acc = f"v{qp.acc.id}"
    def step(k: str, a: str, a_prev: str) -> list[str]:
        """K step ``k``: its weights dequantised into ``a`` while the previous step's wgmma (operand ``a_prev``)
        may still run; then this step's wgmma, the wait that retires the previous one, and the refill."""
        return [
            f"k = {k}",
            "s = k % STAGES",
            "mbarrier.wait(bars.index(s), (k // STAGES) & 1)",
            "words = w_s.index(s).load(WL)  # thread t: row t, its contiguous run",
            "sc = s_s.index(s).reshape([BLOCK_N]).load(gl.SliceLayout(1, DW))  # the scales of its rows",
            *_dequant(kept, a),
            f"{acc} = warpgroup_mma({a}, x_s.index(s).permute((1, 0)), {acc}, is_async=True)",
            "# one group in flight: the previous step's operands (registers and stage) are free after this wait",
            f"{acc}, {a_prev} = warpgroup_mma_wait(num_outstanding=1, deps=({acc}, {a_prev}))",
            "nk = k + STAGES - 1",
            "ns = nk % STAGES",
            "mbarrier.expect(bars.index(ns), step_bytes, pred=nk < n_k)",
            *_copies("nk", "ns", x),
        ]

    # The A fragment is read from registers while its wgmma runs, so the next step must dequantise into other
    # registers: two steps per iteration, alternating between a0 and a1 (a loop of one step reuses the registers
    # of the fragment in flight: kbuild.sass.hazards finds that race, and on the H200 it gave wrong products).
    pair = [*step("2 * kk", "a0", "a1"), *step("2 * kk + 1", "a1", "a0")]
    store = [
        *(epilogue_statement(op) for op in qp.epilogue),
        f"y_s = gl.allocate_shared_memory({GL_DTYPE[qp.y.dtype]}, [BLOCK_T, BLOCK_N], SY)",
        f"y_s.store(gl.permute(v{qp.stored.id}, (1, 0)))  # back to Y = X · W: a register renaming",
        "fence_async_shared()",
        "tma.async_copy_shared_to_global(y_desc, [off_t, off_n], y_s)",
        "tma.store_wait(pendings=0)",
    ]
    return [
        "# Yᵀ = Wᵀ · Xᵀ: the dequantised weights are wgmma's register operand A (rows: N), X's tile is B",
        "off_n = gl.program_id(0) * BLOCK_N",
        "off_t = gl.program_id(1) * BLOCK_T",
        *_split_steps(),
        f"x_desc = tma.make_tensor_descriptor({x}_ptr, [M, K], [K, 1], [BLOCK_T, BLOCK_K], SX)",
        f"w_desc = tma.make_tensor_descriptor({w}_ptr, [(N // 64) * k_steps * 128, WORDS], [WORDS, 1], [128, WORDS], "
        "SW)",
        f"s_desc = tma.make_tensor_descriptor({s}_ptr, [K // GROUP, N], [N, 1], [1, BLOCK_N], SS)",
        f"y_desc = tma.make_tensor_descriptor({y}_ptr, [M, N], [N, 1], [BLOCK_T, BLOCK_N], SY)",
        "x_s = gl.allocate_shared_memory(gl.float16, [STAGES, BLOCK_T, BLOCK_K], SX)",
        "w_s = gl.allocate_shared_memory(gl.int32, [STAGES, (BLOCK_N // 64) * 128, WORDS], SW)",
        "s_s = gl.allocate_shared_memory(gl.float16, [STAGES, 1, BLOCK_N], SS)",
        "bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())",
        "for i in gl.static_range(STAGES):",
        "    mbarrier.init(bars.index(i), count=1)",
        "step_bytes: gl.constexpr = x_desc.block_type.nbytes + s_desc.block_type.nbytes + (BLOCK_N // 64) * "
        "w_desc.block_type.nbytes",
        "w_row = gl.program_id(0) * (BLOCK_N // 64) * k_steps * 128",
        "for i in gl.static_range(STAGES - 1):  # prologue: the first STAGES - 1 K steps in flight",
        "    mbarrier.expect(bars.index(i), step_bytes, pred=i < n_k)",
        *(f"    {line}" for line in _copies("i", "i", x)),
        f"{acc} = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, ACC)",
        "a0 = gl.zeros([BLOCK_N, BLOCK_K], gl.float16, DW)",
        "a1 = gl.zeros([BLOCK_N, BLOCK_K], gl.float16, DW)",
        "for kk in range(n_k // 2):",
        *(f"    {line}" for line in pair),
        "if n_k % 2 == 1:  # an odd split's last step",
        *(f"    {line}" for line in step("n_k - 1", "a0", "a1")),
        f"{acc} = warpgroup_mma_wait(num_outstanding=0, deps=({acc},))",
        "for i in gl.static_range(STAGES):",
        "    mbarrier.invalidate(bars.index(i))",
        *_finish(qp, store, "BLOCK_N", "BLOCK_T"),
    ]


def _body_sm80(qp: QuantProgram, kept: Sequence[QuantPlan]) -> list[str]:
    x, w, s, y = qp.x.name, qp.w.name, qp.scales.name, qp.y.name
    acc = f"v{qp.acc.id}"

    def copies(step: str, slot: str) -> list[str]:
        return [
            f"async_copy.async_copy_global_to_shared(x_s.index({slot}), x_ptrs + {step} * BLOCK_K, "
            f"mask=(xm[:, None] < M) & (xk[None, :] < BLOCK_K) & ({step} < n_k))",
            f"async_copy.async_copy_global_to_shared(w_s.index({slot}), w_ptrs + {step} * (128 * WORDS), "
            f"mask=(wt[:, None] < 128) & (ww[None, :] < WORDS) & ({step} < n_k))",
            "async_copy.commit_group()",
        ]

    loop = [
        "s = k % STAGES",
        f"sc_next = gl.load({s}_ptr + (((k0 + k + 1) * BLOCK_K) // GROUP) * N + sn, mask=(sn < N) & (k + 1 < n_k))",
        "async_copy.wait_group(STAGES - 2)",
        "gl.thread_barrier()",
        "xa = x_s.index(s).load(DX)",
        "words = w_s.index(s).load(WL)  # thread t: row t, its contiguous run",
        *_dequant(kept, "b"),
        f"{acc} = mma_v2(xa, b, {acc})",
        "sc = sc_next",
        "nk = k + STAGES - 1",
        "ns = nk % STAGES",
        *copies("nk", "ns"),
    ]
    store = [
        *(epilogue_statement(op) for op in qp.epilogue),
        "ym = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1, ACC))",
        "yn = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, ACC))",
        f"gl.store({y}_ptr + ym[:, None].to(gl.int64) * N + yn[None, :], v{qp.stored.id}, mask=(ym[:, None] < M) & "
        "(yn[None, :] < N))",
    ]
    return [
        "# Y = X · W: X's tile is mma.sync's A (ldmatrix from a swizzled stage), the dequantised weights its B",
        "off_n = gl.program_id(0) * BLOCK_N",
        "off_t = gl.program_id(1) * BLOCK_T",
        *_split_steps(),
        "x_s = gl.allocate_shared_memory(gl.float16, [STAGES, BLOCK_T, BLOCK_K], SX)",
        "w_s = gl.allocate_shared_memory(gl.int32, [STAGES, 128, WORDS], SW)",
        "xm = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(1, CX))",
        "xk = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, CX))",
        f"x_ptrs = {x}_ptr + xm[:, None].to(gl.int64) * K + k0 * BLOCK_K + xk[None, :]",
        "wt = gl.arange(0, 128, layout=gl.SliceLayout(1, CW))",
        "ww = gl.arange(0, WORDS, layout=gl.SliceLayout(0, CW))",
        "# packed tile (program_id(0), k0 + step): 128 threads' runs of WORDS words",
        f"w_ptrs = {w}_ptr + (gl.program_id(0) * k_steps + k0).to(gl.int64) * (128 * WORDS) + wt[:, None] * WORDS + "
        "ww[None, :]",
        "sn = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, DW))",
        "for i in gl.static_range(STAGES - 1):  # prologue: the first STAGES - 1 K steps in flight",
        *(f"    {line}" for line in copies("i", "i")),
        f"sc = gl.load({s}_ptr + ((k0 * BLOCK_K) // GROUP) * N + sn)  # the scales of its columns, a step ahead",
        f"{acc} = gl.zeros([BLOCK_T, BLOCK_N], gl.float32, ACC)",
        "for k in range(n_k):",
        *(f"    {line}" for line in loop),
        "async_copy.wait_group(0)",
        *_finish(qp, store, "BLOCK_T", "BLOCK_N"),
    ]


def _body(qp: QuantProgram, kept: Sequence[QuantPlan]) -> list[str]:
    head = [f"GROUP: gl.constexpr = {qp.group}", f"WORDS: gl.constexpr = {kept[0].packed.words_per_thread}"]
    return head + (_body_sm90(qp, kept) if wgmma_path(kept[0].arch) else _body_sm80(qp, kept))


def emit(qp: QuantProgram, kept: Sequence[QuantPlan]) -> str:
    """Gluon source of the int4 kernel with one ``VARIANT`` per plan."""
    if not kept or len({(p.arch, p.packed) for p in kept}) != 1:
        raise ValueError("emit takes plans of one architecture and one packing")
    program = qp.program
    packed = kept[0].packed
    arch = kept[0].arch
    engine, copy = ("wgmma", "TMA") if wgmma_path(arch) else ("mma.sync", "cp.async")
    tk, tn = packed.tile_kn()
    head = [f'"""{program.name}: emitted by kbuild.tile from {program.qualname or program.name} for sm_{arch} '
            f"(int4 x fp16, {engine} with the dequantised weights in registers, {copy}); layouts synthesised.", "",
            f"packed weights: {tn} columns of W x {tk} rows of K per tile, {packed.operand}; "
            f"nibble order {list(packed.nibble_order)}; scales every {qp.group} rows of K", ""]
    for i, p in enumerate(kept):
        head.append(f"variant {i}: {p.describe()}, modelled {p.cost:.0f} cycles")
    head += ['"""', "", "from triton.experimental import gluon", "from triton.experimental.gluon import language as gl",
             nvidia_imports(arch), "", "", "@gluon.jit"]
    args = ", ".join(f"{n}: gl.constexpr" if n in CONSTEXPRS else n for n in kernel_params(program))
    lines = [*head, f"def {program.name}({args}):"]
    for i, p in enumerate(kept):
        kw = "if" if i == 0 else "elif" if i < len(kept) - 1 else "else"
        lines.append(f"    {kw}{f' VARIANT == {i}' if kw != 'else' else ''}:")
        lines += [f"        {name}: gl.constexpr = {text}" for name, text in _layouts(p)]
    lines += [f"    {line}" for line in _body(qp, kept)]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class QuantKernel:
    """A synthesised int4 kernel: program, kept plans (variants, best first), Gluon source and function, and the
    packing its weights need (:meth:`~kbuild.tile.quant.WeightLayout.pack_torch`)."""

    program: Program
    plans: tuple[QuantPlan, ...]
    source: str
    fn: Any
    signature: dict[str, str]
    arch: int
    packing: WeightLayout
    seconds: float
    """Wall time of tracing, ranking, deriving the layouts and emitting (the CPU's synthesis time)."""

    def configs(self) -> list[Any]:
        """One ``kbuild.bench.spec.Config`` per variant."""
        from kbuild.bench.spec import Config

        return [Config({**p.constexprs, "VARIANT": i}, num_warps=p.num_warps, num_stages=1)
                for i, p in enumerate(self.plans)]

    def grid(self, m: int, n: int, constexprs: Any) -> tuple[int, int, int]:
        return (n // int(constexprs["BLOCK_N"]), -(-m // int(constexprs["BLOCK_T"])), int(constexprs["SPLIT_K"]))

    def workspace(self, m: int, n: int) -> tuple[int, int]:
        """fp32 elements of the split-K workspace and the number of tile counters any variant needs."""
        elems, counters = 1, 1
        for p in self.plans:
            tiles = (n // p.block_n) * -(-m // p.block_t)
            counters = max(counters, tiles)
            if p.split > 1:
                elems = max(elems, p.split * tiles * p.block_n * p.block_t)
        return elems, counters


def build_int4(fn: Callable[..., Any], problem: tuple[int, int, int], *, arch: int = DEFAULT_SM, variants: int = 3
               ) -> QuantKernel:
    """Trace ``fn`` (an int4 mma program), rank configurations for ``problem`` = (M, N, K), keep ``variants``
    of them and emit one Gluon kernel."""
    started = time.perf_counter()
    program = trace(fn)
    qp = analyse(program)
    kept = plans(arch, problem, qp.group, keep=variants)
    source = emit(qp, kept)
    kernel = load_kernel(source, program)
    assert kernel.arg_names == kernel_params(program)
    assert all(p.block_n % WARPGROUP_ROWS == 0 for p in kept)
    return QuantKernel(program, tuple(kept), source, kernel, signature(program), arch, kept[0].packed,
                       time.perf_counter() - started)


__all__ = ["MAGIC", "QuantKernel", "build_int4", "emit", "kernel_params", "signature"]
