"""A level-1 space as Optuna sees it: categorical dimensions for a grid, one index for a list.

:meth:`kbuild.bench.spec.BenchSpec.search_space` is a list of :class:`~kbuild.bench.spec.Config`.
When that list is a full grid (every combination of the values seen in each dimension is in it,
once), the searcher suggests one categorical value per dimension, so a sampler such as TPE can learn
which values pay. Any other list is searched by its index.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbuild.bench.spec import Config

#: Launch options that are dimensions beside the constexprs (``maxnreg`` 0 and ``ptx_options`` "" stand for None).
OPTIONS = ("num_warps", "num_stages", "maxnreg", "num_ctas", "ptx_options")

Value = bool | int | float | str


def params_of(config: Config) -> dict[str, Value]:
    """Every dimension's value of ``config``, constexprs first."""
    return {**config.constexprs, "num_warps": config.num_warps, "num_stages": config.num_stages,
            "maxnreg": config.maxnreg or 0, "num_ctas": config.num_ctas, "ptx_options": config.ptx_options or ""}


def _key(params: Mapping[str, Value]) -> tuple[tuple[str, Any], ...]:
    """A hashable key of ``params`` (a dtype constexpr, ``{"dtype": "fp16"}``, as its sorted items)."""
    return tuple(sorted(((k, tuple(sorted(v.items())) if isinstance(v, Mapping) else v) for k, v in params.items()),
                        key=lambda kv: kv[0]))


@dataclass(frozen=True)
class Space:
    """The configurations, and the dimensions the sampler suggests (``{"index": [0 .. n-1]}`` for a list)."""

    configs: tuple[Config, ...]
    dimensions: Mapping[str, tuple[Value, ...]]
    grid: bool

    @classmethod
    def of(cls, configs: Sequence[Config]) -> Space:
        configs = tuple(configs)
        values: dict[str, list[Value]] = {}
        names = None
        for c in configs:
            p = params_of(c)
            if names is None:
                names = list(p)
            elif list(p) != names:
                names = []
                break
            for k, v in p.items():
                if v not in values.setdefault(k, []):
                    values[k].append(v)
        distinct = {_key(params_of(c)) for c in configs}
        if names and len(distinct) == len(configs) > 1 and math.prod(len(v) for v in values.values()) == len(configs):
            dims = {k: tuple(v) for k, v in values.items() if len(v) > 1}
            return cls(configs, dims, True)
        return cls(configs, {"index": tuple(range(len(configs)))}, False)

    def __len__(self) -> int:
        return len(self.configs)

    def params(self, config: Config) -> dict[str, Any]:
        """The sampler's parameters for a configuration of this space."""
        if not self.grid:
            return {"index": self.index(config)}
        p = params_of(config)
        return {k: p[k] for k in self.dimensions}

    def index(self, config: Config) -> int:
        return self._by_key()[_key(params_of(config))]

    def config(self, params: Mapping[str, Any]) -> Config:
        """The configuration the sampler's parameters name."""
        if not self.grid:
            return self.configs[int(params["index"])]
        fixed = params_of(self.configs[0])
        full = {k: params.get(k, v) for k, v in fixed.items()}
        return self.configs[self._by_key()[_key(full)]]

    def _by_key(self) -> dict[tuple[tuple[str, Value], ...], int]:
        cached: dict[tuple[tuple[str, Value], ...], int] | None = self.__dict__.get("_index")
        if cached is None:
            cached = {_key(params_of(c)): i for i, c in enumerate(self.configs)}
            object.__setattr__(self, "_index", cached)
        return cached
