"""kbuild.tune.level1: the launch configuration per GPU (issue 15, level 1 of the two-level search).

* :mod:`.search`: :func:`~.search.search_configs` (racing with Optuna's TPE and successive halving, or the
  exhaustive sweep), :class:`~.search.Trial`, :class:`~.search.Level1Result`;
* :mod:`.measurer`: the :class:`~.measurer.ConfigMeasurer` protocol; the GPU worker's and the cost model's;
* :mod:`.compile`: compiles in a process pool, ahead of the GPU;
* :mod:`.space`: a space as the sampler sees it (grid dimensions, or a list index);
* :mod:`.subject`, :mod:`.derive`, :mod:`.occupancy`, :mod:`.prune`: a space for a kernel that declares none
  (a recorded specialisation, or a bench spec without its ``space``): derived from the launch options that cannot
  change results, and pruned on the CPU before any GPU time is spent (shared memory, spills, occupancy, duplicate
  machine code); ``kbuild tune --dry-run`` reports it. :mod:`.output_check`: block sizes shown safe by checking a
  recorded kernel's outputs on its recorded calls with the caller's grid.

Importing this package imports neither torch, triton nor optuna.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbuild.extras import needs

if TYPE_CHECKING:
    from .measurer import ConfigMeasurer, GpuConfigMeasurer, ModelConfigMeasurer, Prepared, TimedBatch
    from .search import Level1Result, NoWorkingConfig, Trial, search_configs
    from .space import Space

_LAZY = {"ConfigMeasurer": "measurer", "GpuConfigMeasurer": "measurer", "ModelConfigMeasurer": "measurer",
         "Prepared": "measurer", "TimedBatch": "measurer", "Level1Result": "search", "NoWorkingConfig": "search",
         "Trial": "search", "search_configs": "search", "Space": "space"}


def __getattr__(name: str) -> Any:
    """The search and the measurers, imported when first asked for: a build that only derives a recorded kernel's
    space (:mod:`.derive`, :mod:`.subject`: no extra needed) imports this package without the [tune] extra (numpy,
    optuna, ...), which the search needs; without it, one MissingDependencyError naming
    ``pip install 'kbuild[tune]'``."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    with needs("tune", "tuning (kbuild.tune.level1)"):
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

__all__ = ["ConfigMeasurer", "GpuConfigMeasurer", "Level1Result", "ModelConfigMeasurer", "NoWorkingConfig",
           "Prepared", "Space", "TimedBatch", "Trial", "search_configs"]
