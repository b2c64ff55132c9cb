"""kbuild.tile.gluon: emitted Gluon source, compiled ahead of time for sm_90 on the CPU (Triton 3.6's real
compiler and ptxas through kbuild's bench-spec compile path)."""

from __future__ import annotations

import inspect

import pytest

from kbuild.bench.spec import compile_spec, load_spec
from kbuild.compile.triton_aot import ast_source_class
from kbuild.tile import kernels
from kbuild.tile.build import build

pytest.importorskip("triton.experimental.gluon")


def _accesses(compiled: object) -> set[str]:
    ptx = compiled.asm["ptx"]  # type: ignore[attr-defined]
    return {line.split()[1] for line in ptx.splitlines() if "ld.global" in line or "st.global" in line}


def _code_lines(text: str) -> int:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("#", '"""', "@"))]
    return len(lines) - 1  # the def line


@pytest.mark.parametrize("ref", ["kbuild.tile.kernels:softmax", "kbuild.tile.kernels:rmsnorm"])
def test_every_variant_compiles_for_sm90_with_16_byte_accesses(ref: str) -> None:
    spec = load_spec(ref)  # 4096 columns: the full-size problem
    assert len(spec.configs) == 3
    for i, cfg in enumerate(spec.configs):
        compiled = compile_spec(spec, cfg, 90)
        assert compiled.metadata.num_warps == cfg.num_warps
        assert compiled.asm["cubin"][:4] == b"\x7fELF"
        if i == 0:  # the cost model's first choice: 8 fp16 per access, loads and stores
            assert _accesses(compiled) == {"ld.global.v4.b32", "st.global.v4.b32"}


def test_small_problem_compiles_and_uses_the_widest_vector_the_tile_allows() -> None:
    spec = load_spec("kbuild.tile.kernels:softmax", small=True)  # 512 columns, 128 threads: 4 fp16 each
    compiled = compile_spec(spec, spec.configs[0], 90)
    assert _accesses(compiled) == {"ld.global.v2.b32", "st.global.v2.b32"}


def test_emitted_source_is_readable_deterministic_and_twice_as_long_as_the_tile_source() -> None:
    a = kernels.softmax_kernel(4096)
    b = kernels.softmax_kernel(4096)
    assert a.source == b.source
    tile_src = inspect.getsource(kernels.softmax_tile)
    assert "Layout" not in tile_src  # no layout written by hand
    # the target: the tile kernel in at most half the lines of its Gluon equivalent (one variant)
    one = build(kernels.softmax_tile, {"M": 1, "N": 4096}, variants=1)
    body = one.source[one.source.index("@gluon.jit"):]
    assert 2 * _code_lines(tile_src) <= _code_lines(body), (tile_src, body)
    assert "gl.SliceLayout(1, L0)" in one.source and "gl.max(" in one.source
    assert a.fn.is_gluon()
    assert ast_source_class(a.fn).__name__ == "GluonASTSource"


def test_same_source_gives_the_same_cubin() -> None:
    spec = load_spec("kbuild.tile.kernels:rmsnorm", small=True)
    one = compile_spec(spec, spec.configs[0], 90).asm["cubin"]
    spec2 = load_spec("kbuild.tile.kernels:rmsnorm", small=True)
    assert compile_spec(spec2, spec2.configs[0], 90).asm["cubin"] == one
