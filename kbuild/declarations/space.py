"""Configuration spaces: the launch configurations a kernel may ship, and their one dict shape.

A kernel declaration (``[[tool.kbuild.kernels]]``, :class:`kbuild.declarations.kernel.KernelSettings`) names one point,
the *default* configuration (``constexprs``, ``num_warps``, ``num_stages``, ``maxnreg``, ``num_ctas``),
which is what ships untuned. It may add a space around it, in one of three ways:

* ``space = { BLOCK_M = [64, 128], num_warps = [4, 8], maxnreg = [0, 232] }``: a grid, the cartesian
  product of the lists. Every key's list must hold the default's value (an error names the key);
* ``configs = [{ BLOCK_M = 64, num_warps = 4 }, ...]``: a list, as ``@triton.autotune`` takes. A key an
  entry leaves out has the default's value; when no entry is the default, the default is added in front;
* ``autotune = true`` (or a ``source`` that is an ``@triton.autotune`` object): the autotuner's own
  ``configs``, not restated (:func:`autotune_configs`; the pipeline reads them after importing the kernel).
  When ``constexprs`` gives every constexpr the configs set, the declared point is the default (added in
  front when no config is it); otherwise the autotuner's first config, over the declared constexprs, is.

Keys are the kernel's constexprs (declared under ``constexprs``, which gives the default value) and
``num_warps`` (a power of two, 1 to 32), ``num_stages`` (1 to 8), ``maxnreg`` (0: ptxas decides, else 16 to
255 registers), ``num_ctas`` (a power of two, 1 to 16) and ``ptx_options`` (extra ptxas flags, Triton's
``ptx_options``: ``""`` none; see :func:`check_ptx_options` for the flags allowed).

A point is a dict of the shape :meth:`kbuild.bench.spec.Config.as_dict` reads back
(:meth:`~kbuild.bench.spec.Config.from_dict`), always with these five keys, and ``ptx_options`` (a
normalised string) only when it is set, so that points, spaces and tuned keys without it read as before::

    {"constexprs": {...every constexpr...}, "num_warps": 4, "num_stages": 3, "maxnreg": None, "num_ctas": 1}

:func:`expand` gives the points, the default first, each once. Errors are :class:`SpaceError` with the
dotted key below the kernel's table (``space.BLOCK_M[1]``); the settings model (:mod:`kbuild.settings.sources`) adds file and table.
This module imports nothing of Triton.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: Keys of a configuration that are Triton options, not constexprs.
OPTION_KEYS = ("num_warps", "num_stages", "maxnreg", "num_ctas", "ptx_options")
#: Most points a space may expand to (a grid of a few lists multiplies fast).
MAX_POINTS = 4096
#: The options a call's configuration may be swapped in for (issue 35 part 3: the run time serves a tuned
#: configuration to a call that asks for the default): they change how the same program is laid out, pipelined and
#: register-allocated, never its arithmetic (:mod:`kbuild.tune.level1.derive` says why, read from Triton 3.6) nor
#: its launch grid. Not ``num_ctas`` (the launcher launches ``grid × num_ctas`` blocks in clusters) and no
#: constexpr (a caller's grid and masks are written for its own) unless an output check showed the value safe
#: (:data:`SERVED_CONSTEXPRS`). ``ptx_options`` only as
#: :func:`check_ptx_options` accepts them (no flag that changes results).
SERVABLE_OPTIONS = ("num_warps", "num_stages", "maxnreg", "ptx_options")
#: The key of an index entry's ``serves_call`` that lists constexprs an output check showed safe to serve
#: (``{name: the value the call asks}``; :func:`servable_difference`).
SERVED_CONSTEXPRS = "constexprs"


class SpaceError(ValueError):
    """A configuration space that is not valid: ``key`` (below the kernel's table) and why."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.detail = message
        super().__init__(f"{key}: {message}")


#: ptxas flags a configuration may pass (Triton's ``ptx_options``), by every spelling ptxas accepts, to the kind of
#: value they take: None (no value), ``"int:LO:HI"``, ``"bool"`` or a tuple of words. All of them change how
#: ptxas optimises or what it warns about, never the target, the output file or the results.
_PTX_ALLOWED: dict[str, Any] = {
    **dict.fromkeys(("--opt-level", "-O"), "int:0:3"),
    **dict.fromkeys(("--allow-expensive-optimizations", "-allow-expensive-optimizations"), "bool"),
    **dict.fromkeys(("--register-usage-level", "-regUsageLevel"), "int:0:10"),
    **dict.fromkeys(("--minnctapersm", "-minnctapersm"), "int:1:32"),
    **dict.fromkeys(("--def-load-cache", "-dlcm"), ("ca", "cg", "cs", "lu", "cv")),
    **dict.fromkeys(("--def-store-cache", "-dscm"), ("wb", "cg", "cs", "wt")),
    **dict.fromkeys(("--disable-optimizer-constants", "-disable-optimizer-consts", "--dont-merge-basicblocks",
                     "-no-bb-merge", "--return-at-end", "-ret-end", "--warn-on-spills", "-warn-spills",
                     "--warn-on-local-memory-usage", "-warn-lmem-usage", "--warn-on-double-precision-use",
                     "-warn-double-usage", "--disable-warnings", "-w", "--verbose", "-v"), None),
}
#: ptxas flags refused, with the reason the error gives.
_PTX_REFUSED: dict[str, str] = {
    **dict.fromkeys(("--gpu-name", "-arch", "--machine", "-m"), "kbuild sets the target architecture per target"),
    **dict.fromkeys(("--output-file", "-o", "--compile-only", "-c", "--entry", "-e", "--input-as-string", "-ias",
                     "--options-file", "-optf", "--preserve-relocs", "-preserve-relocs", "--extensible-whole-program",
                     "-ewp", "--compile-as-tools-patch", "-astoolspatch", "--position-independent-code", "-pic",
                     "--help", "-h", "--version", "-V"),
                    "it changes what ptxas reads or writes (kbuild needs one relocatable cubin of the whole kernel)"),
    **dict.fromkeys(("--device-debug", "-g", "--generate-line-info", "-lineinfo", "--suppress-debug-info",
                     "-suppress-debug-info", "--sp-bounds-check", "-sp-bounds-check", "--device-stack-protector",
                     "-device-stack-protector", "--g-tensor-memory-access-check", "-g-tmem-access-check"),
                    "debug code and line tables are not shipped (they turn optimisation off or embed source paths, "
                    "and kbuild compiles with line info off)"),
    **dict.fromkeys(("--maxrregcount", "-maxrregcount", "--device-function-maxrregcount", "-func-maxrregcount"),
                    "use maxnreg (the configuration's register limit) instead"),
    **dict.fromkeys(("--maxntid", "-maxntid", "--override-directive-values", "-override-directive-values"),
                    "it overrides the launch bounds Triton derives from num_warps; use num_warps or maxnreg"),
    **dict.fromkeys(("--fmad", "-fmad"),
                    "FMA contraction changes results; it is Triton's enable_fp_fusion, which kbuild leaves at its "
                    "default"),
    **dict.fromkeys(("--optimize-float-atomics", "-opt-fp-atomics"), "it changes floating-point atomic results"),
}


def check_ptx_options(value: Any, key: str) -> str | None:
    """The checked, normalised ``ptx_options`` (flags separated by one space; None for none).

    Triton splits the string on single spaces and passes the words to ptxas after its own flags
    (``compiler.py`` ``make_cubin``), so the words may hold no quotes. Each flag must be one of
    :data:`_PTX_ALLOWED` (ptxas options that change optimisation or warnings only); a flag that changes the
    target, the output, the numerics or the launch bounds, or adds debug code, is refused with its reason
    (:data:`_PTX_REFUSED`). :class:`SpaceError` naming ``key`` otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise SpaceError(key, f"expected a string of ptxas flags (\"\": none), got {value!r}")
    words = value.split()
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or not all(c.isalnum() or c in "-_=.," for c in word):
            raise SpaceError(key, f"{word!r} is not a ptxas flag (flags start with '-'; no quotes or paths)")
        name, eq, attached = word.partition("=")
        if not eq and name.startswith("-O") and not name.startswith("--") and len(name) > 2:
            name, attached, eq = "-O", name[2:], "="
        if name in _PTX_REFUSED:
            raise SpaceError(key, f"ptxas flag {name!r} is refused: {_PTX_REFUSED[name]}")
        if name not in _PTX_ALLOWED:
            raise SpaceError(key, f"ptxas flag {name!r} is not one kbuild passes; allowed: "
                                  + ", ".join([*sorted(f for f in _PTX_ALLOWED if f.startswith("--")), "-O<n>"]))
        kind = _PTX_ALLOWED[name]
        if kind is None:
            if eq:
                raise SpaceError(key, f"ptxas flag {name!r} takes no value, got {word!r}")
            out.append(name)
            i += 1
            continue
        if not eq:
            if i + 1 >= len(words):
                raise SpaceError(key, f"ptxas flag {name!r} needs a value")
            attached, i = words[i + 1], i + 1
        _check_ptx_value(name, kind, attached, key)
        out.append(f"-O{attached}" if name == "-O" else f"{name}={attached}")
        i += 1
    return " ".join(out) or None


def _check_ptx_value(name: str, kind: Any, value: str, key: str) -> None:
    if kind == "bool":
        ok = value in ("true", "false")
        want = "true or false"
    elif isinstance(kind, str):
        lo, hi = (int(x) for x in kind.split(":")[1:])
        ok = value.isdigit() and lo <= int(value) <= hi
        want = f"an integer from {lo} to {hi}"
    else:
        ok = value in kind
        want = "one of " + ", ".join(kind)
    if not ok:
        raise SpaceError(key, f"ptxas flag {name!r} takes {want}, got {value!r}")


def check_option(name: str, value: Any, key: str, *, recorded: bool = False) -> int | None:
    """The checked value of one integer option (``maxnreg`` 0 becomes None); :class:`SpaceError` naming ``key``.
    ``ptx_options`` (a string) is :func:`check_ptx_options`. A ``recorded`` value is what a workload ran
    (:mod:`kbuild.record.format`): its ``num_stages`` may be any depth Triton takes (0 and up), not only the 1 to 8 a
    space searches."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpaceError(key, f"expected an integer, got {value!r}")
    if name == "num_warps" and (not 1 <= value <= 32 or value & (value - 1)):
        raise SpaceError(key, f"expected a power of two from 1 to 32, got {value}")
    if name == "num_stages" and (value < 0 if recorded else not 1 <= value <= 8):
        raise SpaceError(key, f"expected {'0 or more' if recorded else '1 to 8'}, got {value}")
    if name == "maxnreg":
        if value == 0:
            return None
        if not 16 <= value <= 255:
            raise SpaceError(key, f"expected 0 (ptxas decides) or 16 to 255 registers, got {value}")
    if name == "num_ctas" and (not 1 <= value <= 16 or value & (value - 1)):
        raise SpaceError(key, f"expected a power of two from 1 to 16, got {value}")
    return value


def _check(name: str, value: Any, key: str) -> Any:
    return check_ptx_options(value, key) if name == "ptx_options" else check_option(name, value, key)


def make_point(constexprs: Mapping[str, Any], num_warps: int, num_stages: int, maxnreg: int | None = None,
               num_ctas: int = 1, ptx_options: str | None = None) -> dict[str, Any]:
    """A point in its one shape (``maxnreg`` 0 means None; ``ptx_options`` only when set, already checked)."""
    point = {"constexprs": dict(constexprs), "num_warps": int(num_warps), "num_stages": int(num_stages),
             "maxnreg": int(maxnreg) if maxnreg else None, "num_ctas": int(num_ctas)}
    if ptx_options:
        point["ptx_options"] = ptx_options
    return point


def normalize_point(point: Mapping[str, Any], *, where: str = "config") -> dict[str, Any]:
    """A point given as a dict (the tuner's, a ``Config.as_dict()`` that left maxnreg/num_ctas out), checked and
    with all five keys (and ``ptx_options`` when set); :class:`SpaceError` naming ``where`` otherwise."""
    if not isinstance(point, Mapping):
        raise SpaceError(where, f"expected a table, got {type(point).__name__}")
    unknown = sorted(set(point) - {"constexprs", *OPTION_KEYS})
    if unknown:
        raise SpaceError(f"{where}.{unknown[0]}", "unknown key; a config has constexprs, " + ", ".join(OPTION_KEYS))
    cx = point.get("constexprs", {})
    if not isinstance(cx, Mapping) or not all(isinstance(k, str) for k in cx):
        raise SpaceError(f"{where}.constexprs", "expected a table of constexpr values")
    defaults = {"num_warps": 4, "num_stages": 3, "maxnreg": 0, "num_ctas": 1, "ptx_options": None}
    opts = {n: _check(n, point.get(n) if point.get(n) is not None else defaults[n], f"{where}.{n}")
            for n in OPTION_KEYS}
    return make_point(cx, opts["num_warps"] or 4, opts["num_stages"] or 3, opts["maxnreg"], opts["num_ctas"] or 1,
                      opts["ptx_options"])


def point_id(point: Mapping[str, Any]) -> str:
    """A canonical text of a point (equal points, equal texts), for de-duplication and sorting."""
    return json.dumps(point, sort_keys=True, separators=(",", ":"))


def label(point: Mapping[str, Any]) -> str:
    """``BLOCK_M=64,BLOCK_N=128,w4,s3`` (+ ``r232``, ``c2``, ``ptx[-O2]``): :meth:`kbuild.bench.spec.Config.label`'s spelling,
    constexprs sorted."""
    cx = point.get("constexprs") or {}
    parts = [f"{k}={cx[k]}" for k in sorted(cx)]
    maxnreg, ctas, ptx = point.get("maxnreg"), point.get("num_ctas", 1), point.get("ptx_options")
    extra = ([f"r{maxnreg}"] if maxnreg else []) + ([f"c{ctas}"] if ctas not in (None, 1) else [])
    extra += [f"ptx[{ptx}]"] if ptx else []
    return ",".join([*parts, f"w{point.get('num_warps')}", f"s{point.get('num_stages')}", *extra])


def _apply(default: dict[str, Any], values: Mapping[str, Any], key_of: Any) -> dict[str, Any]:
    """``default`` with ``values`` (constexpr names and option names mixed) put in; checked."""
    cx = dict(default["constexprs"])
    opts: dict[str, Any] = {n: default.get(n) for n in OPTION_KEYS}
    for name, value in values.items():
        if name in OPTION_KEYS:
            opts[name] = _check(name, value, key_of(name))
        else:
            cx[name] = value
    return make_point(cx, opts["num_warps"], opts["num_stages"], opts["maxnreg"], opts["num_ctas"], opts["ptx_options"])


def _check_names(names: Iterable[str], constexprs: Mapping[str, Any], runtime: Iterable[str], key_of: Any,
                 *, need_default: bool = True) -> None:
    runtime = set(runtime)
    for name in names:
        if name in OPTION_KEYS:
            continue
        if not name.isidentifier():
            raise SpaceError(key_of(name), "not a parameter name (an identifier)")
        if name in runtime:
            raise SpaceError(key_of(name), f"{name!r} is a runtime parameter (under signature); a configuration "
                                           "varies constexprs and " + ", ".join(OPTION_KEYS))
        if need_default and name not in constexprs:
            raise SpaceError(key_of(name), f"{name!r} has no default value; declare it under constexprs (the "
                                           "default configuration, which ships untuned)")


def _dedup_default_first(default: dict[str, Any], points: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    out, seen = [default], {point_id(default)}
    for p in points:
        pid = point_id(p)
        if pid not in seen:
            seen.add(pid)
            out.append(p)
            if len(out) > MAX_POINTS:
                raise SpaceError("space", f"more than {MAX_POINTS} configurations; narrow the space")
    return out


def expand(default: dict[str, Any], *, space: Mapping[str, Sequence[Any]] | None = None,
           configs: Sequence[Mapping[str, Any]] | None = None, runtime: Iterable[str] = (),
           require_declared: bool = True) -> list[dict[str, Any]]:
    """Every point of the space around ``default`` (a :func:`make_point`), the default first, each once.

    ``space`` (a grid) and ``configs`` (a list) are exclusive; neither: just the default. ``runtime``: the
    kernel's runtime parameter names (a space may not vary them). ``require_declared``: every constexpr
    varied must have a default under ``constexprs`` (the autotune list is read with False: the pipeline
    picks the default first, :func:`autotune_default`)."""
    runtime = list(runtime)
    if space and configs:
        raise SpaceError("space", "declare either space (a grid) or configs (a list), not both")
    if space:
        if len(space) > 32:
            raise SpaceError("space", "more than 32 keys")
        _check_names(space, default["constexprs"], runtime, lambda n: f"space.{n}")
        lists: list[list[Any]] = []
        for name, values in space.items():
            if not isinstance(values, (list, tuple)) or not values:
                raise SpaceError(f"space.{name}", "expected a non-empty list of values")
            checked = [(_apply(default, {name: v}, lambda n, i=i: f"space.{n}[{i}]")) for i, v in enumerate(values)]
            current = default.get(name) if name in OPTION_KEYS else default["constexprs"][name]
            got = [p.get(name) if name in OPTION_KEYS else p["constexprs"][name] for p in checked]
            if not any(_same(current, g) for g in got):
                shown = 0 if name == "maxnreg" and current is None else "" if name == "ptx_options" and current is None \
                    else current
                where = name if name in OPTION_KEYS else f"constexprs.{name}"
                raise SpaceError(f"space.{name}", f"the default {shown!r} ({where}) is not in the list {list(values)!r}; "
                                                  "the default configuration must be one of the space's points")
            lists.append(list(values))
        names = list(space)
        total = 1
        for values in lists:
            total *= len(values)
        if total > MAX_POINTS:
            raise SpaceError("space", f"{total} configurations (the product of the lists); at most {MAX_POINTS}")
        product = (_apply(default, dict(zip(names, combo)), lambda n: f"space.{n}")
                   for combo in itertools.product(*lists))
        return _dedup_default_first(default, product)
    if configs:
        if len(configs) > MAX_POINTS:
            raise SpaceError("configs", f"{len(configs)} configurations; at most {MAX_POINTS}")
        points: list[dict[str, Any]] = []
        for i, entry in enumerate(configs):
            if not isinstance(entry, Mapping):
                raise SpaceError(f"configs[{i}]", "expected a table")
            _check_names(entry, default["constexprs"], runtime, lambda n, i=i: f"configs[{i}].{n}",
                         need_default=require_declared)
            points.append(_apply(default, entry, lambda n, i=i: f"configs[{i}].{n}"))
        return _dedup_default_first(default, points)
    return [default]


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def autotune_configs(autotuner: Any) -> list[dict[str, Any]]:
    """The configs of an ``@triton.autotune`` object, as ``configs`` entries (constexprs and options mixed, as
    ``[tool.kbuild.kernels].configs`` writes them). :class:`SpaceError` (key ``autotune``) when it has none or one
    is not a ``triton.Config``."""
    configs = getattr(autotuner, "configs", None)
    if not isinstance(configs, (list, tuple)) or not configs:
        raise SpaceError("autotune", "the @triton.autotune object has no configs")
    out = []
    for i, c in enumerate(configs):
        kwargs = getattr(c, "kwargs", None)
        if not isinstance(kwargs, Mapping):
            raise SpaceError(f"autotune.configs[{i}]", f"not a triton.Config ({type(c).__name__})")
        entry: dict[str, Any] = dict(kwargs)
        for name in OPTION_KEYS:
            value = getattr(c, name, None)
            if value is not None:
                entry[name] = value
        out.append(entry)
    return out


def autotune_default(declared: dict[str, Any], entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The default of an autotuned kernel: the declared point when its ``constexprs`` give every constexpr the
    configs set, else the first config applied over it."""
    varied = {n for e in entries for n in e if n not in OPTION_KEYS}
    if varied <= set(declared["constexprs"]):
        return declared
    return _apply(declared, entries[0], lambda n: f"autotune.configs[0].{n}")


__all__ = ["MAX_POINTS", "OPTION_KEYS", "SERVABLE_OPTIONS", "SERVED_CONSTEXPRS", "SpaceError", "autotune_configs",
           "autotune_default", "check_option", "check_ptx_options", "expand", "label", "make_point", "normalize_point",
           "point_id", "servable_difference"]


def servable_difference(asked: Mapping[str, Any], tuned: Mapping[str, Any], *,
                        shown_safe: Sequence[str] = ()) -> tuple[dict[str, Any] | None, str]:
    """Whether configuration ``tuned`` may answer a call that asks for ``asked`` (both points): ``({option: the value
    the call asks}, "")`` for the :data:`SERVABLE_OPTIONS` that differ (empty when none does), else ``(None, why)``:
    a constexpr or another option differs, or a ``ptx_options`` flag could change results (refused by
    :func:`check_ptx_options` when the point is normalised).

    ``shown_safe``: constexprs whose other values an output check showed give the asked value's results with the
    caller's own grid, on every recorded call (:mod:`kbuild.tune.level1.output_check`); such a difference is served
    too, listed under :data:`SERVED_CONSTEXPRS` (``{"constexprs": {name: the value the call asks}}``)."""
    try:  # normalising checks every option, ptx_options by check_ptx_options (a flag that changes results raises)
        a, t = normalize_point(asked, where="asked"), normalize_point(tuned, where="tuned")
    except SpaceError as exc:
        return None, str(exc)
    served: dict[str, Any] = {}
    if a["constexprs"] != t["constexprs"]:
        names = sorted(n for n in set(a["constexprs"]) | set(t["constexprs"])
                       if a["constexprs"].get(n) != t["constexprs"].get(n))
        unsafe = [n for n in names if n not in shown_safe or n not in a["constexprs"] or n not in t["constexprs"]]
        if unsafe:
            return None, (f"its constexprs differ ({', '.join(unsafe)}): the caller's grid and masks are written for "
                          "its own, and no output check showed the tuned value safe")
        served[SERVED_CONSTEXPRS] = {n: a["constexprs"][n] for n in names}
    differ = [n for n in OPTION_KEYS if a.get(n) != t.get(n)]
    fixed = [n for n in differ if n not in SERVABLE_OPTIONS]
    if fixed:
        return None, f"{', '.join(fixed)} differ{'s' if len(fixed) == 1 else ''}: not an option a call may be served"
    return {**{n: a.get(n) for n in differ}, **served}, ""
