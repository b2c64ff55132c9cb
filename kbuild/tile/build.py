"""From a tile function to a compiled-ready Gluon kernel: trace, synthesise per warp count, emit, load.

:func:`build` keeps the ``variants`` best layout assignments over the given warp counts (by modelled cost);
variant 0 is the default, and :attr:`TileKernel.configs` gives each as a bench-spec ``Config`` (its
``VARIANT`` constexpr and warps), so the kbuild tuner measures them on the GPU and keeps the fastest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kbuild.tile.gluon import ROW_WISE, Variant, emit, kernel_params, layouts_of, load_kernel, signature
from kbuild.tile.lang import Program, TileError, trace
from kbuild.tile.synth import synthesize


@dataclass(frozen=True)
class TileKernel:
    """A synthesised kernel: its program, kept variants, Gluon source and the ``@gluon.jit`` function."""

    program: Program
    variants: tuple[Variant, ...]
    source: str
    fn: Any
    signature: dict[str, str]
    blocks: dict[str, int]
    seconds: float
    """Wall time of tracing, synthesis (every warp count) and emission."""

    @property
    def constexprs(self) -> dict[str, int]:
        return {"BLOCK_M": self.blocks["M"], "BLOCK_N": self.blocks["N"]}

    def configs(self) -> list[Any]:
        """One ``kbuild.bench.spec.Config`` per variant (best first)."""
        from kbuild.bench.spec import Config

        if len(self.variants) == 1:
            return [Config({}, num_warps=self.variants[0].num_warps, num_stages=1)]
        return [Config({"VARIANT": i}, num_warps=v.num_warps, num_stages=1) for i, v in enumerate(self.variants)]

    def layout_lines(self) -> list[str]:
        return [line.strip() for line in self.source.splitlines() if "gl.BlockedLayout(" in line]


def build(fn: Callable[..., Any], blocks: dict[str, int], *, warps: Sequence[int] = (4, 8),
          variants: int = 3) -> TileKernel:
    """Trace ``fn``, synthesise its layouts for each warp count in ``warps``, keep the ``variants`` cheapest
    assignments and emit them as one Gluon kernel."""
    started = time.perf_counter()
    if not warps or any(w not in (1, 2, 4, 8, 16, 32) for w in warps):
        raise TileError(f"{getattr(fn, '__name__', fn)}: warps {list(warps)} must be powers of two up to 32")
    program = trace(fn)
    if any(op.kind in ("mma", "loop") for op in program.ops):
        raise TileError(f"{program.name}: a K-loop (mma) program: build it with kbuild.tile.gluon_mma.build_mma "
                        "(kbuild tile --problem M,N,K)")
    stray = next((op.kind for op in program.ops if op.kind not in ROW_WISE), None)
    if stray is not None:  # zeros, shared, dequant: the parts of a K-loop, which this program does not have
        raise TileError(f"{program.name}: {stray}(...) belongs to a K-loop (an mma accumulator or its operands), and "
                        "this program has no mma(...): a row-wise program loads, computes and stores")
    pool: list[tuple[float, Variant]] = []
    for w in warps:
        syn = synthesize(program, blocks, num_warps=w, keep=variants)
        pool += [(c.cost, Variant(syn, i)) for i, c in enumerate(syn.ranked)]
    pool.sort(key=lambda p: p[0])
    # one kernel holds the variants: they must name the same number of layouts (L0, L1, ...)
    width = len(layouts_of(pool[0][1]))
    kept = [v for _, v in pool if len(layouts_of(v)) == width][:variants]
    source = emit(kept)
    kernel = load_kernel(source, program)
    assert kernel.arg_names == kernel_params(program, len(kept))
    return TileKernel(program, tuple(kept), source, kernel, signature(program), dict(blocks),
                      time.perf_counter() - started)


__all__ = ["TileKernel", "build"]
