"""kbuild.tile.lang and kbuild.tile.synth: tracing, layout inference, conflicts and the cost model's choices."""

from __future__ import annotations

import inspect
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbuild.tile import kernels
from kbuild.tile.build import build
from kbuild.tile.gluon import Variant, emit
from kbuild.tile.lang import Tensor, TileError, load, rearrange, store, trace
from kbuild.tile.synth import Blocked, LayoutConflict, Slice, Var, infer, synthesize

ROW = Blocked((1, 8), (1, 32), (1, 4), (1, 0))
COL = Blocked((8, 1), (32, 1), (4, 1), (0, 1))


def test_softmax_has_one_root_and_reductions_are_its_slices() -> None:
    p = trace(kernels.softmax_tile)
    s = infer(p)
    reduces = [op for op in p.ops if op.kind == "reduce"]
    assert len(reduces) == 2
    root = s.find(s.term(reduces[0].args[0]))
    assert isinstance(root, Var)
    for op in reduces:
        assert op.result is not None
        assert s.resolve(s.term(op.result)) == Slice(1, root)
    assert {s.find(s.term(v)) for v in p.values if len(v.shape) == 2} == {root}


def test_rmsnorm_weight_vector_is_a_column_slice() -> None:
    p = trace(kernels.rmsnorm_tile)
    s = infer(p)
    (w_load,) = [op for op in p.ops if op.kind == "load" and op.args[0].name == "w"]
    assert w_load.result is not None
    term = s.resolve(s.term(w_load.result))
    assert isinstance(term, Slice) and term.dim == 0 and isinstance(term.parent, Var)


def test_best_layout_is_vectorised_and_coalesced() -> None:
    p = trace(kernels.softmax_tile)
    syn = synthesize(p, {"M": 1, "N": 4096}, num_warps=4)
    best = syn.ranked[0]
    (layout,) = best.layouts.values()
    assert layout == ROW  # 8 fp16 = 16-byte accesses, 32 lanes along the row
    # a load and a store of 4096 fp16: 8 KiB each, 256 sectors each, nothing more
    assert best.parts["memory"] == 2 * 4096 * 2 / 32
    # a layout that walks the row with lanes but only 2-byte accesses issues 8x the instructions
    worse = synthesize(p, {"M": 1, "N": 4096}, num_warps=4, keep=400).ranked
    scalar = next(c for c in worse if next(iter(c.layouts.values())).size_per_thread == (1, 1))
    assert scalar.parts["issue"] == 8 * best.parts["issue"]
    assert scalar.cost > best.cost


def test_two_dimensional_tiles_keep_rows_coalesced() -> None:
    syn = synthesize(trace(kernels.softmax_tile), {"M": 16, "N": 256}, num_warps=4)
    (layout,) = syn.ranked[0].layouts.values()
    assert layout.size_per_thread[1] * 2 == 16  # 16-byte vectors along the contiguous dimension
    assert layout.order[0] == 1
    assert syn.ranked[0].parts["memory"] == 2 * 16 * 256 * 2 / 32


def _pinned(x: Tensor("fp16", "MN"), z: Tensor("fp16", "MN"), y: Tensor("fp16", "MN")) -> None:  # type: ignore[valid-type]
    a = load(x, layout=ROW)
    b = load(z, layout=COL)
    store(y, a + b)


def _pinned_rearranged(x: Tensor("fp16", "MN"), z: Tensor("fp16", "MN"), y: Tensor("fp16", "MN")) -> None:  # type: ignore[valid-type]
    a = load(x, layout=ROW)
    b = load(z, layout=COL)
    store(y, a + rearrange(b))


def test_conflict_names_the_operation_and_both_layouts() -> None:
    p = trace(_pinned)
    add_line = inspect.getsourcelines(_pinned)[1] + 3
    with pytest.raises(LayoutConflict) as info:
        infer(p)
    msg = str(info.value)
    assert info.value.exit_code == 2 and "\n" not in msg  # bad input: one line, exit status 2
    assert msg.startswith("test_synth.py: _pinned: ")
    assert f"add (line {add_line})" in msg
    assert str(ROW) in msg and str(COL) in msg
    assert re.search(r"fixed by load \(line \d+\)", msg)
    assert "rearrange" in msg


def test_rearrange_resolves_the_conflict_with_a_conversion() -> None:
    p = trace(_pinned_rearranged)
    syn = synthesize(p, {"M": 16, "N": 256}, num_warps=4)
    src = emit([Variant(syn)])
    assert "gl.convert_layout(" in src
    assert src.count("gl.BlockedLayout(") == 2


def test_front_end_errors_name_the_kernel_and_line() -> None:
    def unannotated(x, y: Tensor("fp16", "MN")) -> None:  # type: ignore[no-untyped-def,valid-type]
        store(y, load(x))

    with pytest.raises(TileError, match=r"parameter 'x' needs a kbuild\.tile Tensor"):
        trace(unannotated)

    def mismatched(x: Tensor("fp16", "MN"), w: Tensor("fp16", "N"), y: Tensor("fp16", "MN")) -> None:  # type: ignore[valid-type]
        store(y, load(x) + load(w))

    line = inspect.getsourcelines(mismatched)[1] + 1
    with pytest.raises(TileError, match=rf"mismatched line {line}: add of shapes \('M', 'N'\) and \('N',\): ranks differ"):
        trace(mismatched)
    with pytest.raises(TileError, match=r"only inside kbuild\.tile\.trace"):
        load(None)  # type: ignore[arg-type]
    with pytest.raises(TileError, match="BLOCK_N = 100 is not a power of two"):
        synthesize(trace(kernels.softmax_tile), {"M": 1, "N": 100})


@pytest.mark.parametrize("fn", [kernels.softmax_tile, kernels.rmsnorm_tile])
@pytest.mark.parametrize("blocks", [{"M": 1, "N": 4096}, {"M": 16, "N": 1024}, {"M": 1, "N": 32768}])
def test_synthesis_takes_well_under_five_seconds(fn: object, blocks: dict[str, int]) -> None:
    k = build(fn, blocks, warps=(1, 2, 4, 8, 16))  # type: ignore[arg-type]
    assert k.seconds < 5.0, k.seconds
    assert len(k.variants) == 3


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([64, 256, 1024, 4096]), st.sampled_from([1, 2, 4, 8]))
def test_synthesis_invariants(block_m: int, block_n: int, warps: int) -> None:
    syn = synthesize(trace(kernels.rmsnorm_tile), {"M": block_m, "N": block_n}, num_warps=warps)
    costs = [c.cost for c in syn.ranked]
    assert costs == sorted(costs)
    best = syn.ranked[0]
    (layout,) = best.layouts.values()
    assert layout.num_warps == warps
    # at least the bytes the kernel must move: x read, y written (fp16), w read once per program
    assert best.parts["memory"] >= (2 * block_m * block_n * 2 + block_n * 2) / 32
    if block_m * block_n >= 32 * warps:  # enough elements: no thread holds a copy of another's
        foot = [a * b * c for a, b, c in zip(layout.size_per_thread, layout.threads_per_warp, layout.warps_per_cta)]
        assert foot[0] <= block_m and foot[1] <= block_n
        assert layout.size_per_thread[1] * 2 <= 16  # wider than one 16-byte access gains nothing; ties go narrow
