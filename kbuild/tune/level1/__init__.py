"""kbuild.tune.level1: the launch configuration per GPU (issue 15, level 1 of the two-level search).

* :mod:`.search`: :func:`~.search.search_configs` (racing with Optuna's TPE and successive halving, or the
  exhaustive sweep), :class:`~.search.Trial`, :class:`~.search.Level1Result`;
* :mod:`.measurer`: the :class:`~.measurer.ConfigMeasurer` protocol; the GPU worker's and the cost model's;
* :mod:`.compile`: compiles in a process pool, ahead of the GPU;
* :mod:`.space`: a space as the sampler sees it (grid dimensions, or a list index);
* :mod:`.subject`, :mod:`.derive`, :mod:`.occupancy`, :mod:`.prune`: a space for a kernel that declares none
  (a recorded specialisation, or a bench spec without its ``space``): derived from the launch options that cannot
  change results, and pruned on the CPU before any GPU time is spent (shared memory, spills, occupancy, duplicate
  machine code); ``kbuild tune --dry-run`` reports it.

Importing this package imports neither torch, triton nor optuna.
"""

from __future__ import annotations

from kbuild.extras import needs

# The [tune] extra (numpy, optuna, ...): without it, one MissingDependencyError naming `pip install 'kbuild[tune]'`.
with needs("tune", "tuning (kbuild.tune.level1)"):
    from .measurer import ConfigMeasurer, GpuConfigMeasurer, ModelConfigMeasurer, Prepared, TimedBatch
    from .search import Level1Result, NoWorkingConfig, Trial, search_configs
    from .space import Space

__all__ = ["ConfigMeasurer", "GpuConfigMeasurer", "Level1Result", "ModelConfigMeasurer", "NoWorkingConfig",
           "Prepared", "Space", "TimedBatch", "Trial", "search_configs"]
