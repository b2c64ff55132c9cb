"""One kernel declaration: an entry of ``[[tool.kbuild.kernels]]`` (:class:`KernelSettings`) and its checks.

The entry's parts have their own grammars beside this module: the parameter types (:mod:`.signature`), the
matrix of values one table expands over (:mod:`.variants`), the configuration space (:mod:`.space`) and the launch
grid (:mod:`.grid`). :func:`expand_entries` turns one table, as the settings model read it
(:mod:`kbuild.settings.sources`), into its entries, each checked against those grammars; an error is made by the
caller's ``error(key, message)`` (:data:`ErrorAt`), so that it names the file and the dotted key from the file's
top, and the variant.

A field marked ``key`` in its metadata changes the machine code: :func:`kbuild.key.kernel_component` collects
those fields (:func:`kbuild.settings.fields.key_fields`). Imports nothing of Triton.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbuild.errors import dotted_key

from .grid import check_names, parse_grid
from .signature import INTEGER_TYPES, SignatureError, check_constexpr_value, parse_type
from .space import SpaceError, check_option, check_ptx_options, expand, make_point
from .variants import VariantError, label
from .variants import expand as expand_variants

#: Scalars allowed as constexpr values.
Constexpr = bool | int | float | str
#: A declared constexpr value: a scalar, or a dtype as ``{ dtype = "fp16" }`` (:func:`.signature.dtype_constexpr`).
ConstexprValue = bool | int | float | str | dict[str, str]

#: ``error(key, message)``: the exception for ``message`` about the dotted ``key`` (from the file's top, such as
#: ``[tool.kbuild.kernels][2].num_warps``); the settings model's makes a :class:`~kbuild.errors.ConfigError` naming
#: the file too.
ErrorAt = Callable[[str, str], Exception]

#: Field metadata of a field whose value changes the machine code (part of the kernel's key).
IN_KEY = {"key": True}


@dataclass(frozen=True)
class KernelSettings:
    """One Triton kernel to compile ahead of time (an entry of ``[[tool.kbuild.kernels]]``)."""

    name: str
    """Name of the kernel in this project; used by the CLI (``kbuild explain NAME``) and emitted symbols."""

    source: str
    """The ``@triton.jit`` function, as ``"package.module:function"``, importable from the project root."""

    signature: dict[str, str] = field(default_factory=dict, metadata=IN_KEY)
    """Type of each non-constexpr parameter, by name, in Triton's AOT notation: ``"*fp16"`` is a pointer,
    ``"i32"`` an integer; ``":16"`` declares the value (pointer address or integer) divisible by 16, ``":1"`` the
    constant 1; ``"none"``: the argument is passed None (compiled as the constant None, as Triton does). A
    parameter with a default in the Python signature may be left out: it is specialised as Triton specialises
    the default (1 and None become constants)."""

    constexprs: dict[str, ConstexprValue] = field(default_factory=dict, metadata=IN_KEY)
    """Value of each ``tl.constexpr`` parameter, by name; a dtype as ``{ dtype = "fp16" }``. A parameter with a
    default in the Python signature, or set by an ``@triton.heuristics`` of the source, may be left out."""

    variants: dict[str, list[ConstexprValue]] = field(default_factory=dict)
    """A matrix of values, each combination one entry (:mod:`kbuild.declarations.variants`): ``{ BLOCK = [1024, 4096], dtype =
    ["fp16", "bf16"] }``. A key written as ``{key}`` in a signature type or a constexpr string (``"*{dtype}:16"``,
    ``{ dtype = "{dtype}" }``) is filled in there; any other key is a constexpr. Entries are named
    ``name_BLOCK_1024_dtype_bf16`` (label ``name[BLOCK=1024,dtype=bf16]``)."""

    num_warps: int = field(default=4, metadata=IN_KEY)
    """Warps per program (Triton's ``num_warps``)."""

    num_stages: int = field(default=3, metadata=IN_KEY)
    """Software-pipelining stages (Triton's ``num_stages``)."""

    maxnreg: int | None = None
    """Most registers per thread (Triton's ``maxnreg``, ptxas's ``.maxnreg``); unset or 0: ptxas decides. It
    reaches the key through Triton's compiler options, so a kernel that leaves it unset keeps its key."""

    num_ctas: int = 1
    """Thread blocks per cluster (Triton's ``num_ctas``, sm_90 and later; the C launchers support 1 only).
    Reaches the key through Triton's compiler options."""

    ptx_options: str = ""
    """Extra ptxas flags (Triton's ``ptx_options``), e.g. ``"-O2"`` or ``"--allow-expensive-optimizations=true"``;
    ``""``: none. Only flags that change how ptxas optimises are allowed (:func:`kbuild.declarations.space.check_ptx_options`):
    the target, the output, debug code, ``--maxrregcount`` (use ``maxnreg``) and ``--fmad`` (changes results) are
    refused. Reaches the key through Triton's compiler options, only when set."""

    space: dict[str, list[Constexpr]] = field(default_factory=dict)
    """A grid of configurations to tune over, e.g. ``{ BLOCK_M = [64, 128], num_warps = [4, 8], maxnreg = [0,
    232] }``: the product of the lists. Keys: constexprs (with a default under ``constexprs``), ``num_warps``,
    ``num_stages``, ``maxnreg`` (0: ptxas decides), ``num_ctas`` and ``ptx_options`` (``["", "-O2"]``); each list
    must hold the default's value.
    The declared point ships untuned; the tuned key includes the space."""

    configs: list[dict[str, Constexpr]] = field(default_factory=list)
    """A list of configurations to tune over (as ``@triton.autotune`` takes): each a table of constexprs and
    options; a key left out has the default's value, and the default is added in front when no entry is it.
    Not with ``space``."""

    autotune: bool = False
    """Take the configurations from the ``@triton.autotune`` object ``source`` points at (its ``configs``),
    without restating them. Also implied when ``source`` is such an object."""

    grid: list[str] = field(default_factory=list)
    """The launch grid, 1 to 3 expressions (x, y, z; missing ones are 1) over the integer runtime arguments and
    integer constexprs: integers, names, ``+ - * // %``, parentheses, ``cdiv``, ``min``, ``max``. With it, the C
    launcher takes no grid arguments and computes the grid from the configuration that ships for the GPU."""

    bench: str | None = None
    """Optional bench spec, ``"package.module:callable"``, that makes inputs and the grid for measuring."""

    # Resolved context, not read from TOML.
    entry: int | None = field(default=None, metadata={"internal": True})
    """Index of the ``[[tool.kbuild.kernels]]`` table this entry comes from (variants share one)."""
    variant: dict[str, Any] = field(default_factory=dict, metadata={"internal": True})
    """The variant's values (empty: not a variant)."""
    variant_of: str | None = field(default=None, metadata={"internal": True})
    """The declared name a variant was expanded from."""
    recorded: tuple[str, str] | None = field(default=None, metadata={"internal": True})
    """``(file, JSON path)`` of the recorded specialisation a declaration was made from
    (:mod:`kbuild.build.recorded`): where its errors point; None for an entry of ``[[tool.kbuild.kernels]]``."""

    @property
    def label(self) -> str:
        """The readable name: ``name[BLOCK=1024,dtype=bf16]`` for a variant, else the name."""
        return label(self.variant_of, self.variant) if self.variant_of is not None else self.name

    def default_config(self) -> dict[str, Any]:
        """The declared point, the configuration that ships untuned (:func:`.space.make_point`'s shape)."""
        return make_point(self.constexprs, self.num_warps, self.num_stages, self.maxnreg, self.num_ctas,
                          self.ptx_options or None)

    def search_space(self) -> list[dict[str, Any]]:
        """Every configuration of the declared space, the default first, each once, in the shape of
        :meth:`kbuild.bench.spec.Config.as_dict` with all five keys (``constexprs`` with every constexpr,
        ``num_warps``, ``num_stages``, ``maxnreg`` (None: ptxas decides), ``num_ctas``, and ``ptx_options`` when
        set); see :mod:`kbuild.declarations.space`.
        A kernel without a space has one point. ``autotune`` needs the imported kernel: the pipeline resolves
        it into ``configs`` (:attr:`kbuild.build.kernel_build.KernelBuild.space` is the resolved list); here it is
        a :class:`ValueError`."""
        if self.autotune:
            raise ValueError(f"kernel {self.name!r}: autotune = true; the configurations come from the imported "
                             "@triton.autotune object (kbuild.build.resolve resolves them)")
        return expand(self.default_config(), space=self.space, configs=self.configs, runtime=self.signature)

    @property
    def module(self) -> str:
        return self.source.partition(":")[0]

    @property
    def function(self) -> str:
        return self.source.partition(":")[2]


def expand_entries(k: KernelSettings, index: int, path: str, error: ErrorAt) -> list[KernelSettings]:
    """The entries of the ``index``-th ``[[tool.kbuild.kernels]]`` table ``k`` (at the dotted ``path``): itself, or
    one per combination of its variants (:mod:`.variants`), each checked. An error of a variant's entry names the
    variant too."""
    k = dataclasses.replace(k, entry=index)
    try:
        variants = expand_variants(k.name, k.signature, k.constexprs, k.variants)
    except VariantError as exc:
        raise error(f"{path}.{exc.key}", exc.detail) from None
    if not variants:
        return [_checked(k, error, path)]
    out = []
    for v in variants:
        entry = dataclasses.replace(k, name=v.name, signature=v.signature, constexprs=v.constexprs, variants={},
                                    variant=v.values, variant_of=k.name)
        out.append(_checked(entry, _naming_variant(error, entry.label), path))
    return out


def _naming_variant(error: ErrorAt, variant: str) -> ErrorAt:
    """``error`` with the variant's label after each message."""
    return lambda key, message: error(key, f"{message} (variant {variant})")


def _checked(k: KernelSettings, error: ErrorAt, path: str) -> KernelSettings:
    """``k`` checked against the grammars: its name, source and bench spec, the parameter types and constexpr values
    (:mod:`.signature`), warps and stages, then its space and grid (:func:`_checked_space`)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k.name):
        raise error(f"{path}.name", f"{k.name!r} is not an identifier (letters, digits and _)")
    for key, spec in (("source", k.source), ("bench", k.bench)):
        if spec is None:
            continue
        mod, sep, fn = spec.partition(":")
        if not sep or not mod or not fn or not all(p.isidentifier() for p in mod.split(".")) or not fn.isidentifier():
            raise error(f"{path}.{key}", f"expected \"package.module:function\", got {spec!r}")
    for pname, ty in k.signature.items():
        if not pname.isidentifier():
            raise error(dotted_key(f"{path}.signature", pname), "parameter names must be identifiers")
        try:
            parse_type(ty)
        except SignatureError as exc:
            raise error(f"{path}.signature.{pname}", str(exc)) from None
    for cname, value in k.constexprs.items():
        if not cname.isidentifier():
            raise error(dotted_key(f"{path}.constexprs", cname), "parameter names must be identifiers")
        try:
            check_constexpr_value(value, recorded=k.recorded is not None)
        except SignatureError as exc:
            raise error(f"{path}.constexprs.{cname}", str(exc)) from None
    both = sorted(set(k.signature) & set(k.constexprs))
    if both:
        raise error(f"{path}.constexprs.{both[0]}", "declared both in signature and constexprs")
    if not 1 <= k.num_warps <= 32 or k.num_warps & (k.num_warps - 1):
        raise error(f"{path}.num_warps", f"expected a power of two from 1 to 32, got {k.num_warps}")
    if not 1 <= k.num_stages <= 8:
        raise error(f"{path}.num_stages", f"expected 1 to 8, got {k.num_stages}")
    return _checked_space(k, error, path)


def _checked_space(k: KernelSettings, error: ErrorAt, path: str) -> KernelSettings:
    """The configuration space and the grid (:mod:`.space`, :mod:`.grid`), errors naming their key."""
    try:
        maxnreg = check_option("maxnreg", k.maxnreg, "maxnreg") if k.maxnreg is not None else None
        check_option("num_ctas", k.num_ctas, "num_ctas")
        ptx_options = check_ptx_options(k.ptx_options, "ptx_options") or ""
        if ptx_options != k.ptx_options:
            k = dataclasses.replace(k, ptx_options=ptx_options)
        if k.autotune and (k.space or k.configs):
            raise SpaceError("autotune", "autotune = true takes the configurations from the @triton.autotune "
                                         "object; leave out space and configs")
        if maxnreg != k.maxnreg:
            k = dataclasses.replace(k, maxnreg=maxnreg)
        points = [k.default_config()] if k.autotune else k.search_space()
    except SpaceError as exc:
        raise error(f"{path}.{exc.key}", exc.detail) from None
    if k.grid:
        grid = parse_grid(k.grid, on_error=lambda i, m: error(f"{path}.grid" if i is None else f"{path}.grid[{i}]", m))
        check_grid_names(k, grid, points, lambda i, m: error(f"{path}.grid[{i}]", m), partial=k.autotune)
    return k


def check_grid_names(k: KernelSettings, grid: Any, points: list[dict[str, Any]],
                     on_error: Callable[[int, str], Exception], *, partial: bool = False) -> None:
    """Every name of ``grid`` is an integer runtime argument of ``k`` or a constexpr that is an integer in every
    point. ``partial`` (an autotuned kernel before its configs are read): names not declared yet pass."""
    integers: set[str] = set()
    others: dict[str, str] = {}
    for pname, ty in k.signature.items():
        t = parse_type(ty)
        if not t.pointer and t.element in INTEGER_TYPES:
            integers.add(pname)
        else:
            kind = "pointer" if t.pointer else "None" if t.is_none else "floating-point or boolean"
            others[pname] = f"a {kind} argument ({ty.strip()})"
    names = {n for p in points for n in p["constexprs"]}
    for n in names:
        values = [p["constexprs"].get(n) for p in points]
        bad = next((v for v in values if isinstance(v, bool) or not isinstance(v, int)), None)
        if bad is None:
            integers.add(n)
        else:
            others[n] = f"a constexpr that is not always an integer ({bad!r})"
    if partial:
        integers |= set(grid.names()) - set(others)
    check_names(grid, integers=integers, others=others, on_error=on_error)


__all__ = ["IN_KEY", "Constexpr", "ConstexprValue", "ErrorAt", "KernelSettings", "check_grid_names", "expand_entries"]
