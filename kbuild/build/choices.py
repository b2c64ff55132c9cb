"""Where a recorded ``@triton.autotune`` kernel's choice for a target comes from, and which entries carry it.

An autotuned kernel answers its first call without benchmarking only if the wheel ships a *choice*: for a tuning
key (the values of the autotuner's ``key`` arguments and the arguments' dtypes, as ``Autotuner.run`` builds it),
the configuration to launch. The run time fills the autotuner's cache with it (:mod:`kbuild.runtime.loader`); the
index entry of that configuration's specialisation carries the key (``autotune.key``).

Sources, asked in order for each recorded tuning key and target (:func:`choose`); the first that answers wins, and
the entry says which (``choice``):

1. :class:`RecordedChoices` (``"recording"``): the choice Triton's autotuner made where the recording ran on a GPU
   of that target (``tunings[].choice``, through Triton's hooks: measured, or from its own disk cache there);
2. :class:`TritonAutotuneCache` (``"triton-cache"``): a file of Triton 3.6's ``cache_results`` in one of the
   project's ``autotune_caches`` directories, found under the exact key Triton files it by (``Autotuner.
   check_disk_cache``: Triton's installation key, the target backend's hash, the kernel's ``cache_key``, the
   variables that invalidate Triton's cache, the tuning key and the configurations benchmarked), so only a cache
   made by the same Triton installation for the same target and source answers;
3. a tuned-configuration file the package ships: no such source yet. A package with one adds a
   :class:`ChoiceSource` (a ``name`` and ``choose(question)``) to :data:`SOURCES`' order in :func:`sources_for`.

With no choice (``None``), every configuration the recording saw benchmarked ships its cubin, so nothing compiles,
but Triton's autotuner still benchmarks them on the first call with that key.

:func:`fits` decides which recorded specialisation a tuning key belongs to: a call with that key's values and
dtypes specialises (Triton's own rules) to its signature and constexprs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kbuild.errors import UsageError
from kbuild.record.format import Kernel
from kbuild.settings.model import Settings
from kbuild.targets import Target

#: Largest Triton autotune cache file read (one key's timings: a few kB).
MAX_CACHE_BYTES = 4 * 2**20


@dataclass(frozen=True)
class Question:
    """One recorded tuning key of a kernel, asked for one target."""

    kernel: Kernel
    target: Target
    key: tuple[Any, ...]
    """The tuning key as recorded (JSON values: numbers, strings, None; dtypes as ``"torch.float16"``)."""
    configs: tuple[int, ...]
    """The configurations the autotuner benchmarked for it (indexes into ``kernel.autotune["configs"]``)."""
    autotuner: Any
    """The ``@triton.autotune`` object, imported as on the recording machine."""
    jit: Any
    """The ``@triton.jit`` function under it."""


@dataclass(frozen=True)
class Choice:
    """A configuration to launch for a tuning key, and where that came from."""

    config: int
    source: str
    """``"recording"`` or ``"triton-cache"`` (a :class:`ChoiceSource`'s ``name``)."""
    detail: str
    """For the report: ``measured on sm_90 (132 SMs)``, the cache file."""


class ChoiceSource(Protocol):
    """A place an autotuned kernel's choice may come from."""

    name: str

    def choose(self, question: Question) -> Choice | None: ...


class RecordedChoices:
    """The autotuner's choices a GPU recording holds for the target (``tunings[].choice``)."""

    name = "recording"

    def choose(self, question: Question) -> Choice | None:
        found = sorted({(t["choice"], t["sm_count"] or 0, t["source"] or "") for t in question.kernel.tunings
                        if t["target"] == question.target.name and tuple(t["key"]) == question.key
                        and t["choice"] is not None})
        if not found:
            return None
        config, sms, how = found[0]
        detail = f"{'measured' if how == 'measured' else 'from Triton’s cache'} on {question.target.name}" + (
            f" ({sms} SMs)" if sms else "")
        others = sorted({c for c, _, _ in found} - {config})
        if others:
            detail += f"; other runs chose config {', '.join(map(str, others))}: the first ships"
        return Choice(config, self.name, detail)


class TritonAutotuneCache:
    """Triton 3.6's ``cache_results`` files under the given directories (read ``triton/runtime/autotuner.py``:
    ``check_disk_cache``; the directory layout is ``triton/runtime/cache.py``'s ``FileCacheManager``)."""

    name = "triton-cache"

    def __init__(self, directories: Sequence[Path]) -> None:
        self.directories = list(directories)

    def path_of(self, question: Question) -> str | None:
        """The file name Triton files the question's timings under, relative to a cache directory; None when
        Triton would not use its disk cache for it (a config with a ``pre_hook``), the benchmarked configs' order
        is not known (the autotuner prunes: its order is the pruning's), or this import's configurations are not the
        recorded ones (their text is part of the name)."""
        from triton._C.libtriton import get_cache_invalidating_env_vars
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend
        from triton.runtime.cache import _base32, triton_key

        from kbuild.record.recorder import config_json

        here = list(question.autotuner.configs)
        recorded = question.kernel.autotune
        if recorded is None or recorded["prunes"] or [config_json(c) for c in here] != recorded["configs"]:
            # Triton files the timings under the configurations' own text: only an import that gives the recorded
            # list can name the file (fla picks its list at import from the GPU's shared memory; a CPU import differs)
            return None
        configs = [here[i] for i in question.configs]
        if any(c.pre_hook for c in configs):
            return None
        parts = [triton_key(), make_backend(GPUTarget("cuda", question.target.cc, 32)).hash(),
                 question.jit.cache_key, str(sorted(get_cache_invalidating_env_vars().items())), str(question.key)]
        parts += [str(c) for c in configs]
        digest = hashlib.sha256("-".join(parts).encode("utf-8")).hexdigest()
        return f"{_base32(digest)}/{question.jit.__name__[:150]}.autotune.json"

    def choose(self, question: Question) -> Choice | None:
        if not self.directories:
            return None
        name = self.path_of(question)
        if name is None:
            return None
        for directory in self.directories:
            path = directory / name
            if path.is_file():
                return Choice(self._chosen(path, question), self.name, f"Triton autotune cache {path}")
        return None

    @staticmethod
    def _chosen(path: Path, question: Question) -> int:
        """The config Triton's ``check_disk_cache`` would take from the file (the one of least timing)."""
        from kbuild.jsonio import read_json_file
        from kbuild.record.recorder import config_json

        where = str(path)
        doc = read_json_file(path, where=where, max_bytes=MAX_CACHE_BYTES)
        rows = doc.get("configs_timings") if isinstance(doc, dict) else None
        if not isinstance(rows, list) or not rows:
            raise UsageError(f"{where}: configs_timings: expected a list of [config, timings], as Triton 3.6 writes")
        best: tuple[Any, int] | None = None
        known = [config_json(c) for c in question.autotuner.configs]
        for i, row in enumerate(rows):
            if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], dict)):
                raise UsageError(f"{where}: configs_timings[{i}]: expected [config, timings]")
            config, timing = row
            shape = {"kwargs": config.get("kwargs") or {}, "num_warps": config.get("num_warps"),
                     "num_stages": config.get("num_stages"), "num_ctas": config.get("num_ctas"),
                     "maxnreg": config.get("maxnreg")}
            if shape not in known:
                raise UsageError(f"{where}: configs_timings[{i}]: not one of the autotuner's configs")
            if best is None or timing < best[0]:
                best = (timing, known.index(shape))
        assert best is not None
        return best[1]


def sources_for(settings: Settings) -> list[ChoiceSource]:
    """The sources asked, in order (see the module docstring)."""
    return [RecordedChoices(), TritonAutotuneCache([settings.project_path(p) for p in settings.autotune_caches])]


def choose(sources: Sequence[ChoiceSource], question: Question) -> Choice | None:
    """The first source's answer, or None."""
    for source in sources:
        found = source.choose(question)
        if found is not None:
            return found
    return None


def _specialised_type(value: Any, param: Any) -> str | None:
    """The declaration type Triton's JIT gives an argument of ``value`` (``native_specialize_impl``, honouring
    ``do_not_specialize``): ``i32:16``, ``i32``, ``i32:1``, ``fp32``, ``none``...; None when it is no scalar."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    if value is not None and not isinstance(value, (bool, int, float)):
        return None
    ty, attr = native_specialize_impl(BaseBackend, value, bool(param.is_const), not param.do_not_specialize,
                                      not param.do_not_specialize_on_alignment)
    if ty == "constexpr":
        return "none" if attr is None else ":1" if attr == 1 else None
    return ty + (":16" if attr == "D" else "")


def fits(kernel: Kernel, jit: Any, signature: Mapping[str, str], constexprs: Mapping[str, Any],
         key: Sequence[Any]) -> bool:
    """Whether a call whose tuning key is ``key`` specialises to the declaration (``signature``, ``constexprs``):
    the key's dtypes are those of the declaration's pointers (in parameter order) and each key argument's value
    is the declared constexpr, or specialises to the declared type. Pointer alignment is not in the key: an
    aligned and an unaligned declaration both fit."""
    from kbuild.runtime.autotune import TORCH_DTYPE_NAMES

    if kernel.autotune is None:
        return False
    names = list(kernel.autotune["key"])
    params = {p.name: p for p in jit.params}
    dtypes = []
    for p in jit.params:
        ty = "".join(signature.get(p.name, "").split())
        if ty.startswith("*"):
            elem = ty[1:].partition(":")[0].removeprefix("k")
            dtypes.append(f"torch.{TORCH_DTYPE_NAMES.get(elem, elem)}")
    if len(key) != len(names) + len(dtypes) or list(key[len(names):]) != dtypes:
        return False
    for name, value in zip(names, key[: len(names)]):
        if name in constexprs:
            if json.dumps(constexprs[name], sort_keys=True) != json.dumps(value, sort_keys=True):
                return False
        elif name in signature and name in params:
            got = _specialised_type(value, params[name])
            want = "".join(signature[name].split())
            if got is None or not (got == want or (got == ":1" and want.endswith(":1"))):
                return False
        else:
            return False
    return True


__all__ = ["MAX_CACHE_BYTES", "Choice", "ChoiceSource", "Question", "RecordedChoices", "TritonAutotuneCache",
           "choose", "fits", "sources_for"]
