# mypy: disable-error-code="valid-type,func-returns-value"
# (tile kernels annotate parameters with Tensor(...) values; the error cases call mma/store in comprehensions)
"""kbuild.tile mma programs: the K loop, shared tiles and mma in the front end; the layouts an mma fixes
(wgmma, mma.sync), swizzles derived from a bank-conflict model, configuration ranking; the fp16 GEMM emitted
as Gluon and compiled for sm_90 (HGMMA + TMA in the SASS) and sm_80 (mma.sync) on the CPU."""

from __future__ import annotations

import collections
import inspect
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbuild.errors import UsageError
from kbuild.tile import kernels
from kbuild.tile.gluon_mma import build_mma
from kbuild.tile.lang import Tensor, TileError, load, loop, mma, shared, store, trace, zeros
from kbuild.tile.mma import (
    MmaError,
    NVMMAShared,
    SwizzledShared,
    address,
    analyse,
    choose_nvmma_swizzle,
    choose_swizzled,
    mma_v2_accumulator,
    plans,
    wavefronts,
    wgmma_accumulators,
)


def test_gemm_traces_to_a_loop_of_shared_copies_and_one_mma() -> None:
    p = trace(kernels.gemm_tile)
    assert [op.kind for op in p.ops] == ["zeros", "loop", "shared", "shared", "mma", "endloop", "unary", "store"]
    mp = analyse(p)
    assert (mp.a.name, mp.b.name, mp.c.name) == ("a", "b", "c")
    assert [v.space for v in p.values if v.shape in (("M", "K"), ("K", "N"))] == ["shared", "shared"]
    assert "Layout" not in inspect.getsource(kernels.gemm_tile)


def _kernel(body):
    def k(a: Tensor("fp16", "MK"), b: Tensor("fp16", "KN"), c: Tensor("fp16", "MN")) -> None:
        body(a, b, c)
    return k


@pytest.mark.parametrize("body, message", [
    (lambda a, b, c: store(c, load(a)), "read by shared"),
    (lambda a, b, c: mma(shared(a), shared(b), zeros()), "outside loop"),
    (lambda a, b, c: [mma(shared(b), shared(a), zeros()) for _ in loop("K")], "mma: a has shape"),
    (lambda a, b, c: [store(c, shared(a)) for _ in loop("K")], "shared tile; only mma reads"),
    (lambda a, b, c: [mma(shared(a), shared(b), zeros("MN", "fp16")) for _ in loop("K")], "fp32 register tile"),
    (lambda a, b, c: [None for _ in loop("M")], "only the K dimension"),
])
def test_front_end_errors_name_the_operation(body, message: str) -> None:
    with pytest.raises(TileError, match=message) as info:
        trace(_kernel(body))
    assert "\n" not in str(info.value) and isinstance(info.value, UsageError)  # one line, exit status 2


def test_analyse_rejects_what_the_emitter_cannot_build() -> None:
    def two_accumulators(a: Tensor("fp16", "MK"), b: Tensor("fp16", "KN"), c: Tensor("fp16", "MN")) -> None:
        acc = zeros()
        other = zeros()
        for _ in loop("K"):
            mma(shared(a), shared(b), acc)
        store(c, acc + other)

    with pytest.raises(MmaError, match=r"two_accumulators: zeros \(line \d+\): before the K loop"):
        analyse(trace(two_accumulators))


# -- swizzles from the bank-conflict model ------------------------------------------------------------------


def test_unswizzled_rows_of_128_bytes_conflict_eight_ways_and_the_swizzle_removes_it() -> None:
    assert wavefronts(NVMMAShared(0, 16), 64, 128) == 8.0  # 8 rows, same banks
    assert wavefronts(NVMMAShared(128, 16), 64, 128) == 1.0
    assert wavefronts(SwizzledShared(8, 1, 1), 64, 64) == 4.0  # 64-byte rows unswizzled: rows 0, 2, 4, 6 collide
    layout, scores = choose_nvmma_swizzle(128, 64, 2)  # A's tile at BLOCK_K = 64
    assert layout == NVMMAShared(128, 16) and scores[0] == 8.0
    assert choose_nvmma_swizzle(64, 32, 2)[0] == NVMMAShared(64, 16)  # 64-byte rows: 128 is no candidate
    # Ampere: Triton's swizzled layout, 16-byte vectors; 64-byte rows need two rows per phase
    assert choose_swizzled(128, 32, 2)[0] == SwizzledShared(8, 2, 4)
    assert wavefronts(SwizzledShared(8, 1, 1), 64, 128) == 8.0


def test_128_byte_swizzle_is_cutlass_swizzle_3_4_3() -> None:
    # row r's 16-byte chunk j lands at chunk j ^ (r % 8) of the row (rows of 128 bytes)
    for r in range(16):
        for j in range(8):
            assert address(NVMMAShared(128, 16), 16, 128, r, 16 * j) == 128 * r + 16 * (j ^ (r % 8))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([8, 16, 64, 128]), st.sampled_from([16, 32, 64, 128, 256]), st.sampled_from([0, 32, 64, 128]))
def test_every_shared_layout_is_a_permutation_and_the_chosen_one_is_conflict_free(rows: int, cols: int,
                                                                                   swizzle: int) -> None:
    row_bytes = cols * 2
    if swizzle and (swizzle > row_bytes):
        return
    offsets = {address(NVMMAShared(swizzle, 16), rows, row_bytes, r, b) for r in range(rows)
               for b in range(0, row_bytes, 2)}
    assert offsets == set(range(0, rows * row_bytes, 2))
    best, _ = choose_nvmma_swizzle(rows, cols, 2)
    assert wavefronts(best, rows, row_bytes) == 1.0
    amp, _ = choose_swizzled(rows, cols, 2)
    assert wavefronts(amp, rows, row_bytes) == 1.0


# -- accumulators and plans --------------------------------------------------------------------------------


def test_wgmma_accumulator_prefers_the_widest_instruction() -> None:
    (best, read), *rest = wgmma_accumulators(128, 256, 8)
    assert best.warps_per_cta == (8, 1) and best.instr_shape == (16, 256, 16)
    assert rest and all(r > read for _, r in rest)
    assert wgmma_accumulators(32, 128, 4) == []  # a warpgroup spans 64 rows
    assert wgmma_accumulators(128, 128, 2) == []
    v2 = mma_v2_accumulator(128, 128, 4)
    assert v2 is not None and v2.version == (2, 0) and v2.warps_per_cta == (2, 2)


def test_plans_fit_the_machine_and_rank_large_tiles_first_at_4096() -> None:
    t0 = time.perf_counter()
    ranked = plans(90, (4096, 4096, 4096), keep=4)
    assert time.perf_counter() - t0 < 5.0
    best = ranked[0]
    assert {best.block_m, best.block_n} == {128, 256} and best.num_warps == 8 and best.copy == "tma"
    assert all(p.parts["smem_bytes"] <= 232448 and p.parts["acc_regs"] <= 192 for p in ranked)
    assert [p.cost for p in ranked] == sorted(p.cost for p in ranked)
    assert len({(p.block_m, p.block_n, p.block_k, p.num_warps, p.persistent) for p in ranked}) == len(ranked)
    small = plans(90, (256, 256, 4096), keep=1)[0]  # 4 tiles of 128x128 would leave 128 SMs idle
    assert small.block_m * small.block_n <= 64 * 128
    amp = plans(80, (4096, 4096, 4096), keep=1)[0]
    assert amp.copy == "cp.async" and amp.operands is not None and isinstance(amp.a_shared, SwizzledShared)
    with pytest.raises(MmaError, match="sm_75"):
        plans(75, (64, 64, 64))


# -- emitted Gluon, compiled ---------------------------------------------------------------------------------


def _code_lines(text: str) -> int:
    return sum(1 for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("#", '"""', "@")))


def test_gemm_source_is_at_most_half_its_gluon() -> None:
    one = build_mma(kernels.gemm_tile, (4096, 4096, 4096), variants=1)
    body = one.source[one.source.index("@gluon.jit"):]
    tile = inspect.getsource(kernels.gemm_tile)
    assert 2 * _code_lines(tile) <= _code_lines(body) - 1 - 4  # less the def and the 4 layout lines
    assert "warpgroup_mma(" in body and "tma.async_copy_global_to_shared" in body
    assert one.seconds < 5.0


def _sass_opcodes(cubin: bytes, kernel: str, tmp: Path) -> collections.Counter[str]:
    from kbuild.sass.disasm import disassemble
    from kbuild.sass.elf import load as load_cubin

    path = tmp / f"{kernel}.cubin"
    path.write_bytes(cubin)
    return collections.Counter(i.opcode for i in disassemble(load_cubin(path), kernel))


def test_gemm_compiles_for_sm90_to_hgmma_and_tma(tmp_path: Path) -> None:
    pytest.importorskip("triton.experimental.gluon")
    from kbuild.bench.spec import compile_spec, load_spec

    spec = load_spec("kbuild.tile.kernels:gemm")
    kernel = kernels.gemm_kernel(4096, 4096, 4096)
    assert spec.needs_allocator and len(spec.configs) == len(kernel.plans) == 3
    assert {int(c.constexprs["PERSISTENT"]) for c in spec.configs} == {0, 1}  # the tuner gets both kinds
    for cfg, plan in zip(spec.configs, kernel.plans):
        compiled = compile_spec(spec, cfg, 90)
        assert compiled.metadata.num_warps == cfg.num_warps
        # the model's shared-memory figure is what the compiler allocates, and it fits the H200
        assert compiled.metadata.shared <= plan.parts["smem_bytes"] <= 232448
        ops = _sass_opcodes(compiled.asm["cubin"], compiled.metadata.name, tmp_path)
        hgmma = {op: n for op, n in ops.items() if op.startswith("HGMMA")}
        n = plan.acc.instr_shape[1]
        m_reps = plan.block_m // (16 * plan.acc.warps_per_cta[0])
        assert hgmma == {f"HGMMA.64x{n}x16.F32": plan.block_k // 16 * m_reps}, cfg.label()
        assert ops["UTMALDG.2D"] >= 2 and ops["UTMASTG.2D"] == 1  # TMA both ways
    first = compile_spec(spec, spec.configs[0], 90)
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16" in first.asm["ptx"]
    grid = spec.grid(spec.all_constexprs(spec.configs[0]))
    assert grid == ((132, 1, 1) if spec.configs[0].constexprs["PERSISTENT"] else (512, 1, 1))


def test_ampere_fallback_compiles_for_sm80_with_mma_sync_and_cp_async(tmp_path: Path) -> None:
    pytest.importorskip("triton.experimental.gluon")
    from kbuild.bench.spec import compile_spec

    spec = kernels.gemm(small=True, arch=80)
    assert "DotOperandLayout(operand_index=0, parent=ACC" in kernels.gemm_kernel(256, 256, 256, arch=80).source
    compiled = compile_spec(spec, spec.configs[0], 80)
    ptx = compiled.asm["ptx"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx and "cp.async.cg.shared.global" in ptx
    assert "ldmatrix" in ptx
    ops = _sass_opcodes(compiled.asm["cubin"], compiled.metadata.name, tmp_path)
    assert ops["HMMA.16816.F32"] > 0 and "HGMMA.64x256x16.F32" not in ops


def test_row_builder_points_mma_programs_to_build_mma() -> None:
    from kbuild.tile.build import build

    with pytest.raises(TileError, match=r"build it with kbuild\.tile\.gluon_mma\.build_mma"):
        build(kernels.gemm_tile, {"M": 64, "N": 64})
    with pytest.raises(MmaError, match="one loop"):
        build_mma(kernels.softmax_tile, (64, 64, 64))
