"""Level-1 configuration spaces written as grids: :func:`grid_space`, the cartesian product of per-knob values.

A bench spec's ``space`` (:attr:`kbuild.bench.spec.BenchSpec.space`) is a list of :class:`Config`; the suite's
kernels build theirs here from a few values per knob (tiles, ``BLOCK_K``, ``GROUP_M``, ``num_warps``,
``num_stages``, ``maxnreg``), optionally dropping points with a ``keep`` predicate. The grid is deliberately
plain: points that fail to compile, fail to launch (shared memory, registers) or compute wrong results stay in
it when they are natural points of the grid, because the searcher checks every candidate.

Importing this module imports neither torch nor triton.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

from kbuild.bench.spec import Config, Constexpr
from kbuild.errors import UsageError


def grid_space(constexprs: Mapping[str, Sequence[Constexpr]], *, num_warps: Sequence[int] = (4,),
               num_stages: Sequence[int] = (3,), maxnreg: Sequence[int | None] = (None,),
               num_ctas: Sequence[int] = (1,), ptx_options: Sequence[str | None] = (None,),
               keep: Callable[[Config], bool] | None = None) -> list[Config]:
    """Every combination of the given values, as :class:`Config` s in a fixed order (constexprs in the order
    given, then warps, stages, ``maxnreg``, ``num_ctas``, ``ptx_options``; the last axis varies fastest).

    ``maxnreg`` 0 means the same as ``None`` (ptxas decides), and ``ptx_options`` ``""`` the same as ``None``
    (no extra ptxas flags; others are normalised by :func:`kbuild.declarations.space.check_ptx_options`), as in the
    ``[tool.kbuild.kernels]`` grammar.
    ``keep(config)`` drops the points it returns False for. An empty or repeated axis is a
    :class:`~kbuild.errors.UsageError` naming the axis (two equal values would give two equal points)."""
    axes: dict[str, Sequence[object]] = {**{f"constexprs[{k!r}]": v for k, v in constexprs.items()},
                                         "num_warps": num_warps, "num_stages": num_stages,
                                         "maxnreg": [m or None for m in maxnreg], "num_ctas": num_ctas,
                                         "ptx_options": ptx_options}
    for name, values in axes.items():
        if isinstance(values, (str, bytes)) or not len(values):
            raise UsageError(f"grid_space: axis {name} needs a non-empty list of values, got {values!r}")
        if len(set(map(repr, values))) != len(values):
            raise UsageError(f"grid_space: axis {name} repeats a value: {list(values)!r}")
    names = list(constexprs)
    regs: list[int | None] = [m or None for m in maxnreg]
    out: list[Config] = []
    ptxs = [_ptx(p) for p in ptx_options]
    for values, w, s, r, c, x in itertools.product(itertools.product(*[constexprs[n] for n in names]), num_warps,
                                                   num_stages, regs, num_ctas, ptxs):
        cfg = Config(dict(zip(names, values, strict=True)), num_warps=w, num_stages=s, maxnreg=r, num_ctas=c,
                     ptx_options=x)
        if keep is None or keep(cfg):
            out.append(cfg)
    return out


def _ptx(value: str | None) -> str | None:
    from kbuild.declarations.space import SpaceError, check_ptx_options

    try:
        return check_ptx_options(value or None, "ptx_options")
    except SpaceError as exc:
        raise UsageError(f"grid_space: {exc}") from None
