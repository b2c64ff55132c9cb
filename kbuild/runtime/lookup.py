"""The run time's one lookup: from a call to the entry shipped for it, or the reason why not.

The lookup is pure: it is given the candidates (:class:`~kbuild.runtime.index.ShippedEntry`, from
:meth:`kbuild.runtime.state.RuntimeState.candidates`) and what Triton hands over about the call, and returns a
:class:`Hit` or a :class:`Miss`. It logs nothing, records nothing, reads no cubin and changes no object; besides
its arguments it asks only what the key asks of the process (Triton's version, an installed distribution's
version: :mod:`kbuild.runtime.keys`). What to do with the answer (check and load the cubin, record the event,
log that Triton compiles) is the loading path's:

* :func:`before_compile`: what ``triton.compile`` is about to compile (the ``ASTSource``, the target, the
  options). Zero-JIT loading (:mod:`.loader`) and the direct launcher (:mod:`.direct`) ask it.
* :func:`after_compile`: what Triton compiled (the ``compile`` mapping of ``jit_post_compile_hook`` and the
  ``CompiledKernel``). The post-compile substitution (:mod:`.hook`) asks it.
* :func:`autotune_choices`: which of an ``@triton.autotune`` object's configurations the shipped entries choose
  for this GPU, per autotuning key (:mod:`.loader`).

Each maps Triton's view of the call onto kbuild's declaration terms (:mod:`.keys`), computes the baseline key as
the build does, takes the first candidate with that key, then checks what the key does not cover: the Triton
metadata the entry recorded against the call's options and target (before a compile), the compiled kernel's
Triton version, symbol, shared memory, warps, CTAs and scratch against the entry's ``checks`` (after one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbuild.canonical import canonical_json
from kbuild.runtime import keys
from kbuild.runtime.index import CHECK_FIELDS, ShippedEntry, autotune_keys
from kbuild.runtime.verify import REFUSED, Expected, call_params, expected_of_compiled

#: Backend options compared between the call and the shipped Triton metadata (besides the key).
_PATH_OPTIONS = ("extern_libs", "triton_env")


@dataclass(frozen=True)
class Hit:
    """The entry shipped for the call, and what its cubin must show before it is loaded."""

    shipped: ShippedEntry
    expected: Expected
    call: keys.CallSpecialization | None = None
    """The call in kbuild's terms (what the coverage report counts)."""


@dataclass(frozen=True)
class Miss:
    """Why no shipped entry answers the call."""

    reason: str
    shipped: ShippedEntry | None = None
    """The entry with the call's key, when a check after the key failed."""
    target: str | None = None
    """The call's architecture (``"sm_90"``), when the call was understood but no entry has its key."""
    call: keys.CallSpecialization | None = None
    """The call in kbuild's terms, when it was understood."""
    nearest: ShippedEntry | None = None
    """The candidate whose key differs from the call's in the fewest fields, when no key matched."""
    differences: tuple[str, ...] = ()
    """Where ``nearest``'s key components differ from the call's, most telling first
    (``"kernel.signature.n_cols: call 'i32', index 'i32:16'"``)."""

    @property
    def refused(self) -> bool:
        """Whether the package data contradicts itself or the call (a warning, not a plain miss)."""
        return self.reason.startswith(REFUSED)


@dataclass(frozen=True)
class Choice:
    """A shipped answer for an ``@triton.autotune`` object: under its tuning ``key``, its own ``config``."""

    shipped: ShippedEntry
    key: tuple[Any, ...]
    config: Any


def cuda_arch(target: Any) -> int | None:
    """The compute capability of a Triton ``GPUTarget`` for an NVIDIA GPU (32-thread warps); None for any other."""
    if target is None or getattr(target, "backend", None) != "cuda" or getattr(target, "warp_size", 32) != 32:
        return None
    return int(target.arch)


def find(candidates: Sequence[ShippedEntry], call: keys.CallSpecialization, *,
         explain: bool = False, distribution: Any = keys.installed_distribution) -> ShippedEntry | list[str]:
    """The first candidate whose key is the call's baseline key; else, with ``explain``, where the closest
    candidate's key components differ from the call's (most telling first), or an empty list.

    ``distribution``: the ``distribution`` key component of the call for an entry (default: the installed
    distribution at the entry's version, :func:`kbuild.runtime.keys.installed_distribution`)."""
    found, closest = _search(candidates, call, explain=explain, distribution=distribution)
    if found is not None:
        return found
    return closest[1] if closest is not None else []


def nearest(candidates: Sequence[ShippedEntry], call: keys.CallSpecialization, *,
            distribution: Any = keys.installed_distribution) -> tuple[ShippedEntry | None, list[str]]:
    """The candidate with the call's key and no differences; else the candidate whose key components differ from
    the call's in the fewest fields, and those fields (most telling first); ``(None, [])`` without candidates."""
    found, _ = _search(candidates, call, explain=False, distribution=distribution)  # a hit compares keys only
    if found is not None:
        return found, []
    _, closest = _search(candidates, call, explain=True, distribution=distribution)
    return closest if closest is not None else (None, [])


def _search(candidates: Sequence[ShippedEntry], call: keys.CallSpecialization, *, explain: bool,
            distribution: Any) -> tuple[ShippedEntry | None, tuple[ShippedEntry, list[str]] | None]:
    closest: tuple[ShippedEntry, list[str]] | None = None
    # The call's key depends on a candidate only through its ptxas version, how it declares the arguments the call
    # passes as 1 (CallSpecialization.ones_as), and its distribution: computed once per such triple, not once per
    # candidate (a function's entries mostly share all three; Liger's dyt forward has 306 of them).
    keyed: dict[tuple[Any, ...], Any] = {}
    for shipped in candidates:
        entry = shipped.entry
        comps = entry["key_components"]
        declared = entry.get("signature")
        dist = distribution(entry)
        memo = (comps["compiler"]["ptxas"], call.ones_as(declared), tuple(sorted(dist.items())) if dist else None)
        got = keyed.get(memo)
        if got is None:
            key = call.key(ptxas_version=comps["compiler"]["ptxas"], declared=declared, distribution=dist)
            got = keyed[memo] = (key, key.hex)  # the digest once, too
        mine, mine_hex = got
        if mine_hex == shipped.key:
            return shipped, None
        if explain:
            diffs = sorted(key_differences(json.loads(canonical_json(mine.components)), comps), key=_priority)
            if closest is None or len(diffs) < len(closest[1]):
                closest = (shipped, diffs)
    return None, closest


def before_compile(candidates: Sequence[ShippedEntry], src: Any, target: Any, options: Mapping[str, Any]) -> Hit | Miss:
    """The entry that answers what Triton is about to compile (``ASTSource`` ``src`` for ``target`` with
    ``options``, as ``JITFunction._do_compile`` hands them to ``triton.compile``), among candidates that carry
    Triton metadata: the key, then the metadata against the options and target, then the entry's ``checks``
    against its metadata."""
    arch = cuda_arch(target)
    if arch is None:
        return Miss(f"target {target!r} is not an NVIDIA GPU")
    jit = src.fn
    triton_version = keys.current_triton_version()
    call = keys.specialization_from_source(jit, src, options, cc=arch, triton_version=triton_version)
    if call.unsupported:
        return Miss(f"call not declarable: {call.unsupported}")
    found, diffs = nearest(candidates, call)
    if found is None or diffs:  # a candidate without differences has the call's key
        close = found
        where = f"; nearest entry {close.entry.get('kernel')} differs in {'; '.join(diffs[:3])}" if close else ""
        return Miss(f"no shipped entry has this call's key{where}", target=call.target.arch, call=call,
                    nearest=close, differences=tuple(diffs))
    md = found.entry["triton_metadata"]
    serves = found.entry.get("serves_call")
    problem = metadata_mismatch(md, options, arch, triton_version, serves=serves) or _checks_mismatch(md, found.entry)
    if problem is not None:
        return Miss(problem, found, call=call)
    expected = Expected(cc=arch, params=call_params(getattr(src, "signature", None) or {}),
                        num_warps=md.get("num_warps") if serves else options.get("num_warps"),
                        name=getattr(jit.fn, "__name__", None))
    return Hit(found, expected, call)


def after_compile(candidates: Sequence[ShippedEntry], jit: Any, compile_info: Mapping[str, Any], kernel: Any) -> Hit | Miss:
    """The entry whose cubin may replace ``kernel``, the ``CompiledKernel`` Triton compiled for ``jit`` as
    ``jit_post_compile_hook``'s ``compile`` mapping describes the call: the key, then the kernel's Triton
    version and metadata against the entry's, and that Triton's kernel is a cubin."""
    md = kernel.metadata
    arch = cuda_arch(md.target)
    if arch is None:
        return Miss(f"target {md.target!r} is not an NVIDIA GPU")
    call = keys.specialization_from_hook(jit, compile_info, cc=arch, triton_version=keys.current_triton_version())
    if call.unsupported:
        return Miss(f"call not declarable: {call.unsupported}")
    close, diffs = nearest(candidates, call)
    if close is None or diffs:  # a candidate without differences has the call's key
        detail = "; ".join(diffs[:4]) if candidates else "no entry"
        return Miss(f"no index entry has this call's key ({detail})", target=call.target.arch, call=call,
                    nearest=close, differences=tuple(diffs))
    found = close
    problem = compiled_mismatch(md, found.entry)
    if problem is None and (not kernel.kernel or kernel.kernel[:4] != b"\x7fELF"):
        problem = "Triton's kernel is not an ELF cubin"
    if problem is not None:
        return Miss(problem, found, call=call)
    return Hit(found, expected_of_compiled(kernel.kernel, md), call)


def autotune_choices(candidates: Sequence[ShippedEntry], configs: Sequence[Any], *, arch: int,
                     triton_version: str) -> list[Choice | Miss]:
    """For each candidate with an ``autotune`` key for GPU ``arch`` and this Triton: the autotuner's own
    ``triton.Config`` equal to the entry's, or why there is none (an entry whose cubin another key names too is
    refused: a self-contradicting index chooses nothing)."""
    out: list[Choice | Miss] = []
    for shipped in candidates:
        index, entry_key, entry = shipped.index, shipped.key, shipped.entry
        if entry["target"].get("cc") != arch or entry["triton_version"] != triton_version:
            continue
        if entry_key in index.conflicts:
            out.append(Miss(f"{REFUSED}: {index.conflicts[entry_key]}", shipped))
            continue
        keys = [tuple(k) for k in autotune_keys(entry)]
        config = next((c for c in configs if config_matches(c, entry["config"])), None)
        if config is None:
            out.append(Miss(f"the shipped config {entry['config']} of key {keys[0]} is not among the autotuner's",
                            shipped))
            continue
        out.extend(Choice(shipped, key, config) for key in keys)
    return out


# ----------------------------------------------------------------------------------------------
# What the key does not cover


def _norm(value: Any) -> Any:
    return json.loads(json.dumps(value, default=vars))


def metadata_mismatch(md: Mapping[str, Any], options: Mapping[str, Any], arch: int, triton_version: str, *,
                      serves: Mapping[str, Any] | None = None) -> str | None:
    """Why Triton metadata recorded at build time does not describe a compile with ``options`` for ``arch``
    (None when it does): the Triton version, the target and every option (paths aside) must be equal.

    ``serves`` (an entry's ``serves_call``: a tuned configuration served to calls that ask for the default, issue 35
    part 3): for those options the call must ask exactly the values listed, and the metadata holds the tuned ones;
    only :data:`kbuild.declarations.space.SERVABLE_OPTIONS` may be listed, and constexprs an output check showed
    safe (:data:`~kbuild.declarations.space.SERVED_CONSTEXPRS`: the call asks its key's values)."""
    if md.get("triton_version") != triton_version:
        return f"shipped metadata is of Triton {md.get('triton_version')!r}, this is {triton_version!r}"
    target = md.get("target") or {}
    if target.get("backend") != "cuda" or target.get("arch") != arch or target.get("warp_size") != 32:
        return f"shipped metadata targets {target!r}, this GPU is cuda/{arch}"
    served = dict(serves or {})
    if served:
        from kbuild.declarations.space import SERVABLE_OPTIONS, SERVED_CONSTEXPRS

        # served constexprs: the call's own values are its key's (found by it); the cubin's are the tuned ones
        served.pop(SERVED_CONSTEXPRS, None)
        odd = sorted(n for n in served if n not in SERVABLE_OPTIONS)
        if odd:
            return f"the entry serves option {odd[0]}, which may change results"
    for name, value in _norm(dict(options)).items():
        if name in _PATH_OPTIONS:
            continue
        if name in served:
            if _norm(served[name]) != value:
                return f"option {name} is {value!r}, the served configuration answers calls asking {served[name]!r}"
            continue
        if name not in md:
            return f"option {name} is not in the shipped metadata"
        if _norm(md[name]) != value:
            return f"option {name} is {value!r}, shipped {md[name]!r}"
    return None


def _checks_mismatch(md: Mapping[str, Any], entry: Mapping[str, Any]) -> str | None:
    """The entry's ``checks`` (symbol, shared memory, warps, CTAs, scratch) must agree with its Triton metadata."""
    checks = entry.get("checks") or {}
    for name in CHECK_FIELDS:
        if checks.get(name) is not None and md.get(name) is not None and checks[name] != md[name]:
            return f"the entry's {name} is {checks[name]!r}, its Triton metadata says {md[name]!r}"
    return None


def compiled_mismatch(md: Any, entry: Mapping[str, Any]) -> str | None:
    """Why a kernel Triton compiled (its metadata ``md``) is not the one ``entry`` was built as (None when it is):
    the same Triton version, and the entry's ``checks`` equal to the kernel's (the symbol, shared memory and warps
    must be known on both sides)."""
    if getattr(md, "triton_version", None) != entry["triton_version"]:
        return f"kernel compiled by Triton {getattr(md, 'triton_version', None)}, entry by {entry['triton_version']}"
    checks: Mapping[str, Any] = entry.get("checks") or {}
    for name in CHECK_FIELDS:
        want = checks.get(name)
        have = getattr(md, name, None)
        if want is None or have is None:
            if name in ("name", "shared", "num_warps"):
                return f"cannot check {name} (kernel {have!r}, entry {want!r})"
            continue
        if have != want:
            return f"compiled kernel's {name} is {have!r}, entry says {want!r}"
    return None


def config_matches(config: Any, shipped: Mapping[str, Any]) -> bool:
    """Whether a ``triton.Config`` is the shipped ``config`` of an entry (its kwargs all among the entry's)."""
    kwargs = shipped.get("kwargs") or {}
    if any(name not in kwargs or _norm(value) != _norm(kwargs[name]) for name, value in config.kwargs.items()):
        return False
    return (config.num_warps == shipped.get("num_warps") and config.num_stages == shipped.get("num_stages")
            and config.num_ctas == shipped.get("num_ctas", 1) and config.maxnreg == shipped.get("maxnreg")
            and (getattr(config, "ptx_options", None) or None) == (shipped.get("ptx_options") or None))


_ORDER = ("target", "compiler.triton", "kernel", "compiler.ptxas", "compiler")


def _priority(diff: str) -> int:
    """Most telling components first: the GPU, the Triton version, the call, then backend options."""
    return next((i for i, prefix in enumerate(_ORDER) if diff.startswith(prefix)), len(_ORDER))


def key_differences(mine: Any, theirs: Any, path: str = "", *, theirs_are: str = "index") -> list[str]:
    """Leaf paths where two key-component trees differ, the call's value first: ``"kernel.num_warps: call 8, index
    4"`` (``theirs_are`` names the other side: the index's entry, the build's declaration)."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        out: list[str] = []
        for k in sorted(set(mine) | set(theirs)):
            sub = f"{path}.{k}" if path else str(k)
            if k not in mine or k not in theirs:
                out.append(f"{sub}: call {mine.get(k, '<absent>')!r}, {theirs_are} {theirs.get(k, '<absent>')!r}")
            else:
                out.extend(key_differences(mine[k], theirs[k], sub, theirs_are=theirs_are))
        return out
    if mine != theirs or type(mine) is not type(theirs):
        return [f"{path}: call {mine!r}, {theirs_are} {theirs!r}"]
    return []


__all__ = ["Choice", "Hit", "Miss", "after_compile", "autotune_choices", "before_compile", "compiled_mismatch",
           "config_matches", "cuda_arch", "find", "key_differences", "metadata_mismatch", "nearest"]
