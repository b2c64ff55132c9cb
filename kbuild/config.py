"""The settings model: the one place that reads ``[tool.kbuild]`` and ``KBUILD_*`` variables.

Every setting is a field of a frozen dataclass below, with a docstring (the string literal
under the field) that the JSON schema carries (:func:`json_schema`; committed as
``kbuild/schema/kbuild.schema.json``, ``python -m kbuild.schema`` prints it). Field metadata says:

* ``env``: the ``KBUILD_*`` variable that overrides it (environment beats pyproject);
* ``key``: whether the value changes the shipped machine code, so that :mod:`kbuild.key`
  collects those fields itself instead of keeping its own list.

Sources, each beating the ones before it: defaults, ``pyproject.toml``'s ``[tool.kbuild]``, PEP 517
config settings (``pip wheel -C kbuild.locked=true``), the environment (``KBUILD_LOCKED=1``), and last
the command-line flags that exist (``kbuild emit --locked``; :func:`apply_flags`, and :func:`apply_flag`,
which holds a flag's value to the field's rules). A field marked
``env_only`` (a secret, a path on this machine, a switch of one process) comes from the environment
alone. Strings become booleans by one rule, :func:`parse_bool`. A wrong type or an unknown key raises
:class:`kbuild.errors.ConfigError` naming the file (or variable, or config setting) and the dotted
key, and suggests the closest valid key.

Nothing else in kbuild touches ``os.environ``: code that runs without a project (the CLI before it
reads one, the external tools, the run-time hook) asks :func:`env_setting` for one field; other
programs' variables (Triton's) are read with :func:`env_value`.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import itertools
import math
import os
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from kbuild.arch import DEFAULT_TARGETS
from kbuild.declarations.kernel import KernelSettings, expand_entries
from kbuild.errors import COMMAND_LINE, ENVIRONMENT, ConfigError, dotted_key
from kbuild.targets import Target, parse_target

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TuneMode = Literal["off", "auto", "require"]
Algorithm = Literal["ppo", "random", "greedy"]
EditKind = Literal["moves", "far", "yield", "reuse", "stall"]
ShipMode = Literal["extension", "package-data"]
PackageDataMode = Literal["all", "tuned"]
PrewarmEngine = Literal["local", "ray"]
RuntimeLaunch = Literal["direct", "triton"]
WgmmaHazardMode = Literal["warn", "error"]


def _setting(default: Any = dataclasses.MISSING, *, env: str | None = None, key: bool = False,
             default_factory: Any = dataclasses.MISSING, check: Callable[[Any, _Converter, str], None] | None = None,
             schema: Mapping[str, Any] | None = None) -> Any:
    """A settings field. ``check(value, converter, path)`` validates a converted value where it was read (the
    file or the variable), raising ``converter.error(path, ...)``; ``schema`` adds JSON-schema keywords."""
    meta: dict[str, Any] = {"env": env, "key": key, "check": check, "schema": dict(schema or {})}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def _check_targets(value: list[str], conv: _Converter, path: str) -> None:
    if not value:
        raise conv.error(path, "no targets; list at least one GPU target, e.g. [\"sm_90\"]")
    for i, t in enumerate(value):
        try:
            parse_target(t)
        except ValueError as exc:
            raise conv.error(f"{path}[{i}]", str(exc)) from None


#: Largest ``seed`` (:attr:`Settings.seed`): a 31-bit seed leaves room for the offsets the searches add.
MAX_SEED = 2**31 - 1


def _check_seed(value: int, conv: _Converter, path: str) -> None:
    if not 0 <= value <= MAX_SEED:
        raise conv.error(path, f"expected a seed from 0 to {MAX_SEED:,}, got {value}")


def _check_positive(value: float, conv: _Converter, path: str) -> None:
    if value <= 0:
        raise conv.error(path, f"must be positive, got {value}")


def _check_ray_address(value: str | None, conv: _Converter, path: str) -> None:
    if value is None:
        return
    from kbuild.prewarm.address import parse  # standard library only; it imports nothing of Ray

    try:
        parse(value)
    except ValueError as exc:
        raise conv.error(path, str(exc)) from None


def default_store_path() -> Path:
    """The per-user cache directory: ``$XDG_CACHE_HOME/kbuild`` or ``~/.cache/kbuild``.

    A relative ``XDG_CACHE_HOME`` is ignored, as the XDG base-directory spec says: it would put the store
    in whatever directory kbuild runs from.
    """
    xdg = env_value("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "kbuild"


@dataclass(frozen=True)
class BudgetSettings:
    """Bounds on one tuning run; whichever is reached first stops it."""

    evaluations: int = _setting(200, env="KBUILD_BUDGET_EVALUATIONS", key=True, check=_check_positive,
                                schema={"exclusiveMinimum": 0})
    """Most candidate schedules measured on the GPU per kernel and target."""

    seconds: float = _setting(600.0, env="KBUILD_BUDGET_SECONDS", key=True, check=_check_positive,
                              schema={"exclusiveMinimum": 0})
    """Most wall-clock seconds spent tuning one kernel and target."""


@dataclass(frozen=True)
class RemoteSettings:
    """A shared store tier (HTTP in the Bazel remote-cache layout, or Redis)."""

    url: str
    """``http(s)://host[:port]/prefix`` or ``redis://host[:port]/db``."""

    writable: bool = False
    """Whether this machine may write to the tier (trusted prewarm machines only)."""


@dataclass(frozen=True)
class PrewarmSettings:
    """How ``kbuild prewarm`` runs: on this machine, or spread over a Ray cluster (:mod:`kbuild.prewarm`)."""

    engine: PrewarmEngine = _setting("local", env="KBUILD_PREWARM_ENGINE")
    """``local``: one kernel × target at a time on this machine's GPUs; ``ray``: one Ray task per kernel × target
    on the cluster's GPU workers (``kbuild prewarm --ray``; needs ``pip install 'kbuild[ray]'``)."""

    address: str | None = _setting(None, env="KBUILD_PREWARM_ADDRESS", check=_check_ray_address)
    """The Ray cluster to join: ``host:6379`` (the cluster's GCS), ``ray://host[:10001]`` (a Ray Client server,
    needs ``ray[client]``), ``auto`` (``RAY_ADDRESS``, else the cluster ``ray start`` made on this machine) or
    ``local`` (a new cluster on this machine); unset: ``auto`` if it finds one, else ``local``. ``--ray ADDRESS``
    beats it. Before joining, kbuild checks that a Ray cluster answers there (``connect_timeout``)."""

    lease_seconds: float = _setting(300.0, check=_check_positive, schema={"exclusiveMinimum": 0})
    """Time to live of the lease a task holds in the shared tier while it tunes an entry (renewed every third
    of it): how long a prewarm that died keeps another from that entry. ``--lease-seconds`` beats it."""

    connect_timeout: float = _setting(10.0, env="KBUILD_PREWARM_CONNECT_TIMEOUT", check=_check_positive,
                                      schema={"exclusiveMinimum": 0})
    """Most seconds the driver waits for the cluster at ``address`` to answer before it joins it: the host name
    resolved, a TCP connection and a gRPC call answered, as Ray's servers answer it. Past it, or when nothing or
    something other than Ray answers, the prewarm stops with an error naming the address (exit status 2); left
    to itself, ``ray.init`` retried such an address for minutes."""


@dataclass(frozen=True)
class CudaKernelSettings:
    """One ``__global__`` function of the project's CUDA C++ that kbuild-nvcc tunes (an entry of
    ``[[tool.kbuild.cuda.kernels]]``): found by its demangled name in the cubins ptxas writes for ``source``."""

    name: str
    """Name of the kernel in this project (the manifest's ``kernel``, ``kbuild inspect``)."""

    function: str
    """The demangled name of the ``__global__`` function: ``"gelu_f16_kernel"``, a template instance as
    ``"matmul_f16_kernel<64, 64, 32, 2, 2>"`` (as ``c++filt`` spells it), with or without its namespace
    (``(anonymous namespace)::`` may be left out) and parameter list. It must name exactly one kernel of the
    unit's cubin: a name found in none is an error naming this key."""

    source: str
    """The ``.cu`` file that defines it, relative to ``pyproject.toml`` (``"src/elementwise.cu"``): the translation
    unit kbuild-nvcc looks for the kernel in."""

    bench: str | None = None
    """Bench spec, ``"package.module:callable"`` returning a :class:`kbuild.bench.cuda.CudaBenchSpec` (inputs,
    grid, block, outputs, reference): what the tuner launches. Without it the kernel ships as ptxas wrote it."""

    maxrregcount: list[int] = _setting(key=True, default_factory=list)
    """The configuration level: ptxas ``--maxrregcount`` values to try on the kernel's PTX (0: as compiled;
    each 24-255). The tuner keeps the fastest bit-exact one, then tunes its SASS. Empty: only as compiled."""

    minnctapersm: list[int] = _setting(key=True, default_factory=list)
    """The configuration level: ptxas ``--minnctapersm`` values (the launch bound's minimum blocks per SM; 0:
    as compiled). ptxas ignores it for a kernel whose source declares ``__launch_bounds__`` or when
    ``maxrregcount`` is given."""

    def points(self) -> list[dict[str, int]]:
        """The configuration level's points, as compiled first: ``{"maxrregcount": N, "minnctapersm": M}`` (0:
        not passed to ptxas)."""
        regs = [0, *[v for v in self.maxrregcount if v]]
        ctas = [0, *[v for v in self.minnctapersm if v]]
        out = [{"maxrregcount": r, "minnctapersm": c} for r in dict.fromkeys(regs) for c in dict.fromkeys(ctas)]
        return out


@dataclass(frozen=True)
class CudaSettings:
    """``[tool.kbuild.cuda]``: the project's CUDA C++ kernels that kbuild-nvcc tunes (:mod:`kbuild.nvcc.tuned`)."""

    kernels: list[CudaKernelSettings] = field(default_factory=list)
    """The declared ``__global__`` functions, one ``[[tool.kbuild.cuda.kernels]]`` table each."""


#: Why an ``env_only`` field is refused in ``pyproject.toml`` (the error says so).
_SECRET = "secrets do not belong in pyproject.toml"
_ONE_PROCESS = "it is a switch of one run, not of the project (or pass --debug)"
_THIS_MACHINE = "a path on one machine does not belong in the project's pyproject.toml"
_WHERE_IT_RUNS = "the run-time hook reads it where the package runs, which has no pyproject.toml"


@dataclass(frozen=True)
class Settings:
    """``[tool.kbuild]``: what to compile, where to store it and how to tune it."""

    targets: list[str] = _setting(env="KBUILD_TARGETS", default_factory=lambda: list(DEFAULT_TARGETS),
                                  check=_check_targets, schema={"minItems": 1})
    """GPU architectures to compile every kernel for (``sm_80``, ``sm_90``, ...). The environment
    variable takes a comma-separated list."""

    kernels: list[KernelSettings] = field(default_factory=list)
    """The kernels, one ``[[tool.kbuild.kernels]]`` table each."""

    store: Path | None = _setting(None, env="KBUILD_STORE")
    """Local store directory. Default: the per-user cache dir (``~/.cache/kbuild``). Relative paths are
    taken from the directory of ``pyproject.toml``. An empty string is an error (write ``"."`` for the project
    directory); an empty ``KBUILD_STORE`` counts as unset, like every empty ``KBUILD_*`` variable."""

    store_max_bytes: int = _setting(10 * 2**30, env="KBUILD_STORE_MAX_BYTES", check=_check_positive,
                                    schema={"exclusiveMinimum": 0})
    """Size bound of the local store; least-recently-used entries are evicted beyond it."""

    remotes: list[RemoteSettings] = field(default_factory=list)
    """Shared store tiers, read in order after the local one."""

    remote_deadline: float = _setting(30.0, env="KBUILD_REMOTE_DEADLINE", check=_check_positive,
                                      schema={"exclusiveMinimum": 0})
    """Most seconds one request to a remote tier may take in all: connecting, the headers and the whole
    body. Past it the tier counts as down for the rest of the run (a warning; an error under ``--strict``)."""

    store_secret: str | None = field(default=None, metadata={"env": "KBUILD_STORE_SECRET", "env_only": _SECRET,
                                                             "secret": True})
    """Shared secret for HMAC-SHA256 signing of metadata records. Environment only (never in pyproject):
    when set, unsigned or wrongly signed records are rejected in every tier, the local one included."""

    tune: TuneMode = _setting("auto", env="KBUILD_TUNE")
    """``off``: never tune; ``auto``: tune when a GPU of the target architecture is present, else ship the
    baseline; ``require``: fail when any kernel would ship untuned."""

    algorithm: Algorithm = _setting("greedy", env="KBUILD_ALGORITHM", key=True)
    """The SASS searcher run on a store miss, alone on the whole budget. Greedy by default: on the H200 it
    found most of the accepted schedules, and PPO (from scratch, or pretrained across the suite on the cost
    model) beat it on no kernel (``benchmarks/results``)."""

    kinds: list[EditKind] = _setting(env="KBUILD_KINDS", key=True,
                                     default_factory=lambda: ["moves", "far", "yield", "reuse", "stall"])
    """SASS edit kinds the searcher may use: one-slot ``moves``, multi-slot ``far`` moves, and ``yield``,
    ``reuse`` and ``stall`` control-code edits (each proven safe by the ISA table, re-checked by the verifier,
    and fuzzed bit-exact on an H200)."""

    budget: BudgetSettings = field(default_factory=BudgetSettings)
    """Tuning budget per kernel and target."""

    cuda: CudaSettings = field(default_factory=CudaSettings)
    """CUDA C++ kernels compiled through kbuild-nvcc whose SASS is tuned: ``[[tool.kbuild.cuda.kernels]]``."""

    prewarm: PrewarmSettings = field(default_factory=PrewarmSettings)
    """How ``kbuild prewarm`` runs: ``{ engine = "ray" }`` spreads it over a Ray cluster."""

    seed: int = _setting(0, env="KBUILD_SEED", key=True, check=_check_seed,
                         schema={"minimum": 0, "maximum": MAX_SEED})
    """Seed of the tuning search: 0 to 2,147,483,647 (the searches seed NumPy, Optuna and PyTorch with it and
    with small offsets of it; NumPy takes no negative seed and none of 2**32 or more)."""

    locked: bool = _setting(False, env="KBUILD_LOCKED")
    """Build with exactly the artefacts pinned in ``kbuild.lock`` (next to ``pyproject.toml``): nothing is
    compiled or tuned, and one error lists every missing or stale pin. Also ``-C kbuild.locked=true`` and
    ``kbuild emit --locked``."""

    strict: bool = _setting(False, env="KBUILD_STRICT")
    """Fail the build when a remote store tier is unavailable, instead of a warning and a miss. Also
    ``-C kbuild.strict=true`` and ``kbuild emit --strict``."""

    debug: bool = field(default=False, metadata={"env": "KBUILD_DEBUG", "env_only": _ONE_PROCESS})
    """Show tracebacks and debug logging (``kbuild --debug``). Environment only."""

    ptxas: Path | None = field(default=None, metadata={"env": "KBUILD_PTXAS", "env_only": _THIS_MACHINE})
    """The ``ptxas`` to run instead of the one bundled with Triton (its version is part of every key).
    Environment only; a relative path is taken from the current directory."""

    nvdisasm: Path | None = field(default=None, metadata={"env": "KBUILD_NVDISASM", "env_only": _THIS_MACHINE})
    """The ``nvdisasm`` to run instead of the one bundled with Triton. Environment only."""

    cuobjdump: Path | None = field(default=None, metadata={"env": "KBUILD_CUOBJDUMP", "env_only": _THIS_MACHINE})
    """The ``cuobjdump`` to run instead of the one bundled with Triton. Environment only."""

    runtime: bool = field(default=True, metadata={"env": "KBUILD_RUNTIME", "env_only": _WHERE_IT_RUNS})
    """Whether :mod:`kbuild.runtime` substitutes the tuned cubins an installed package ships for the ones
    Triton compiles (``KBUILD_RUNTIME=off``: Triton's own run). Environment only, read where the package runs."""

    nvcc_cache: bool = field(default=True, metadata={"env": "KBUILD_NVCC_CACHE", "env_only": _ONE_PROCESS})
    """Whether the nvcc launcher (``kbuild-nvcc``, :mod:`kbuild.nvcc`) answers cicc and ptxas from the store
    (``KBUILD_NVCC_CACHE=off``: every step runs, nothing is stored). Environment only."""

    nvcc_log: Path | None = field(default=None, metadata={"env": "KBUILD_NVCC_LOG", "env_only": _ONE_PROCESS})
    """A file the nvcc launcher appends one JSON line to per step it runs or answers from the store (tool,
    architecture, ``run``/``hit``/``stored``/``uncached``/``plain``, seconds). Environment only."""

    nvcc_project: Path | None = field(default=None, metadata={"env": "KBUILD_NVCC_PROJECT", "env_only": _THIS_MACHINE})
    """The ``pyproject.toml`` whose ``[tool.kbuild.cuda]`` the nvcc launcher reads. Unset: the nearest one above
    the compiled source file. Environment only."""

    nvcc_records: Path | None = field(default=None, metadata={"env": "KBUILD_NVCC_RECORDS",
                                                               "env_only": _THIS_MACHINE})
    """A directory the nvcc launcher writes one JSON record into per declared CUDA kernel × target it ships
    (key, cubin digest, tuned or not, speedup): what :func:`kbuild.build.manifest.cuda_entries` turns into
    manifest entries. Environment only."""

    runtime_launch: RuntimeLaunch = field(default="direct", metadata={"env": "KBUILD_RUNTIME_LAUNCH",
                                                                      "env_only": _WHERE_IT_RUNS})
    """How :mod:`kbuild.runtime` launches a shipped kernel: ``direct`` through the CUDA driver API, so that the
    first call builds nothing with the host compiler (:mod:`kbuild.runtime.direct`); ``triton`` through Triton's
    own launcher (a C module Triton compiles once per signature and caches). Environment only."""

    python_path: list[str] = field(default_factory=lambda: [".", "src"])
    """Directories (relative to ``pyproject.toml``) put on ``sys.path`` to import kernel sources."""

    ship: ShipMode = _setting("extension")
    """How the wheel carries the kernels: ``extension`` embeds the cubins in a C extension with a
    launcher; ``package-data`` writes them with an index into ``<package>/_kbuild/`` for packages that
    run their ``@triton.jit`` kernels just in time, and :mod:`kbuild.runtime` substitutes the tuned ones."""

    package_data: PackageDataMode = _setting("all")
    """With ``ship = "package-data"``: which kernel × target ship in ``<package>/_kbuild/``. ``all``: every one, the
    tuned artefact where there is one, else the baseline (the cubin Triton would compile), so that no shipped
    kernel compiles on its first call (:mod:`kbuild.runtime.loader`); ``tuned``: only those with an accepted
    tuning result (smaller wheels; untuned kernels compile just in time as without kbuild)."""

    package: str | None = _setting(None)
    """With ``ship = "package-data"``: the import package of this project whose ``_kbuild/`` ships the cubins
    (``"kbx_liger"``). Unset: the one top-level package the kernels live in, which must be the project's; set it
    when the kernels come from an installed distribution (``source = "liger_kernel.ops.rms_norm:..."``), whose
    package this project does not build."""

    compile_timeout: float = _setting(600.0, env="KBUILD_COMPILE_TIMEOUT", check=_check_positive,
                                      schema={"exclusiveMinimum": 0})
    """Most seconds the compile of one kernel × target may take (wall clock): Triton's passes and ptxas, in a
    child process. Past it the child is stopped and the build fails with an error naming the kernel, the target
    and this setting (exit status 3)."""

    wgmma_hazards: WgmmaHazardMode = _setting("warn", env="KBUILD_WGMMA_HAZARDS")
    """What a wgmma register race in an sm_90 cubin does: an instruction that touches a register of a wgmma still
    in flight (:mod:`kbuild.sass.hazards`), as Triton 3.6 pipelines a wgmma whose A operand is in registers
    (triton-lang/triton#9433), so that the kernel's results can differ from run to run. ``warn``: a warning, and
    the findings in the artefact's metadata (``wgmma_register_hazards``); ``error``: ``kbuild compile`` and the
    build stop with an error naming the kernel and target (exit status 2) before anything is stored, for a
    kernel compiled now or found in the store. Either way the tuner keeps such a kernel's baseline."""

    # Resolved context, not read from TOML.
    project_dir: Path = field(default=Path("."), metadata={"internal": True})
    config_file: str = field(default="<defaults>", metadata={"internal": True})

    def kernel(self, name: str) -> KernelSettings:
        """The kernel called ``name``; a :class:`ConfigError` listing the known names otherwise."""
        for k in self.kernels:
            if k.name == name or (k.variant_of is not None and k.label == name):
                return k
        known = ", ".join(k.name for k in self.kernels) or "none declared"
        hint = difflib.get_close_matches(name, [k.name for k in self.kernels], n=1)
        extra = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ConfigError(self.config_file, "[tool.kbuild.kernels]", f"no kernel named {name!r} (known: {known}){extra}")

    @functools.cached_property
    def parsed_targets(self) -> tuple[Target, ...]:
        """:attr:`targets` as :class:`~kbuild.targets.Target` values, in order, each once (``sm_90`` and ``sm_90a``
        are one target): parsed once per settings object; every source checked its spelling where it was read."""
        out: list[Target] = []
        for name in self.targets:
            t = parse_target(name)
            if t not in out:
                out.append(t)
        return tuple(out)

    @property
    def store_path(self) -> Path:
        if self.store is None:
            return default_store_path()
        return self.store if self.store.is_absolute() else (self.project_dir / self.store)


# ----------------------------------------------------------------------------------------------
# Environment: the only reader of os.environ in kbuild.

def env_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Value of an environment variable, or None when unset or empty. The single access point.

    An empty variable counts as unset (``KBUILD_STORE=""`` means the pyproject value or the default, never
    the current directory), as the XDG base-directory spec asks of ``XDG_CACHE_HOME``.
    """
    value = (os.environ if environ is None else environ).get(name)
    return value if value not in (None, "") else None


#: The one string-to-bool rule (:func:`parse_bool`): the environment, config settings, every boolean.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def parse_bool(raw: str) -> bool | None:
    """``1``/``true``/``yes``/``on`` → True, ``0``/``false``/``no``/``off`` → False, in any case and with blanks
    around ignored; None for anything else, which the caller reports naming its variable or key."""
    word = raw.strip().lower()
    return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None


def _bool_message(raw: str) -> str:
    return f"expected a boolean ({', '.join(TRUE_WORDS)} or {', '.join(FALSE_WORDS)}, any case), got {raw!r}"


def env_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """A boolean variable by :func:`parse_bool`: False when unset or empty, a :class:`ConfigError` naming the
    variable when it is neither true nor false."""
    value = env_value(name, environ)
    if value is None:
        return False
    flag = parse_bool(value)
    if flag is None:
        raise ConfigError(ENVIRONMENT, name, _bool_message(value))
    return flag


def env_setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The field ``name`` of :class:`Settings` from the environment alone, converted and checked by the model's
    rules (its default when the variable is unset or empty): for code that runs without a project, such as the
    CLI before it reads one (``debug``), the external tools (``ptxas``, ``nvdisasm``, ``cuobjdump``) and the
    run-time hook (``runtime``). A bad value is a :class:`ConfigError` naming the variable."""
    f = Settings.__dataclass_fields__[name]
    found, value = _env_field(f, _hints(Settings)[name], environ)
    if found:
        return value
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def env_var(name: str) -> str:
    """The environment variable of the :class:`Settings` field ``name`` (``nvcc_records`` → ``KBUILD_NVCC_RECORDS``),
    for code that sets it for the processes it starts (a build's compilers); reading it goes through
    :func:`env_setting`."""
    return str(Settings.__dataclass_fields__[name].metadata["env"])


def env_raw(*names: str, environ: Mapping[str, str] | None = None) -> tuple[str | None, ...]:
    """The raw values of the variables of the :class:`Settings` fields ``names`` (None where unset): a cheap
    memo key for code asked on every call, such as a kernel launch, whether its settings changed."""
    env = os.environ if environ is None else environ
    return tuple(env.get(Settings.__dataclass_fields__[n].metadata["env"]) for n in names)


def env_with_prefix(prefixes: tuple[str, ...], names: tuple[str, ...] = (),
                    environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every variable whose name starts with one of ``prefixes`` or is one of ``names`` (set ones only,
    empty ones included: a tool may tell an empty value from an unset one), sorted by name."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if k.startswith(prefixes) or k in names}


# ----------------------------------------------------------------------------------------------
# Conversion from TOML values to the typed model.

class _Converter:
    def __init__(self, where: str) -> None:
        self.where = where

    def error(self, path: str, message: str) -> ConfigError:
        return ConfigError(self.where, path, message)

    def convert(self, value: Any, tp: Any, path: str) -> Any:
        origin = get_origin(tp)
        if isinstance(value, float) and not math.isfinite(value):
            # TOML has nan/inf literals and float() reads "nan" and "inf": no setting means either.
            raise self.error(path, f"non-finite number {value!r}; expected a finite number")
        if tp is Any:
            return value
        if origin in (Union, types.UnionType):
            options = get_args(tp)
            if value is None and type(None) in options:
                return None
            errors: list[ConfigError] = []
            for opt in options:
                if opt is type(None):
                    continue
                try:
                    return self.convert(value, opt, path)
                except ConfigError as exc:
                    errors.append(exc)
            if len(errors) == 1:  # ``X | None``: X's own message says more
                raise errors[0]
            raise self.error(path, f"expected {_type_name(tp)}, got {_value_name(value)}")
        if origin is Literal:
            allowed = get_args(tp)
            if value not in allowed:
                hint = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
                extra = f"; did you mean {hint[0]!r}?" if hint else ""
                raise self.error(path, f"expected one of {', '.join(repr(a) for a in allowed)}, got {value!r}{extra}")
            return value
        if origin is list:
            (item_tp,) = get_args(tp)
            if not isinstance(value, list):
                raise self.error(path, f"expected an array, got {_value_name(value)}")
            return [self.convert(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
        if origin is dict:
            _, val_tp = get_args(tp)
            if not isinstance(value, dict):
                raise self.error(path, f"expected a table, got {_value_name(value)}")
            return {str(k): self.convert(v, val_tp, dotted_key(path, k)) for k, v in value.items()}
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise self.error(path, f"expected a table, got {_value_name(value)}")
            return self.dataclass(tp, value, path)
        if tp is bool:
            if not isinstance(value, bool):
                raise self.error(path, f"expected true or false, got {_value_name(value)}")
            return value
        if tp is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(path, f"expected an integer, got {_value_name(value)}")
            return value
        if tp is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.error(path, f"expected a number, got {_value_name(value)}")
            return float(value)
        if tp is str:
            if not isinstance(value, str):
                raise self.error(path, f"expected a string, got {_value_name(value)}")
            return value
        if tp is Path:
            if not isinstance(value, str):
                raise self.error(path, f"expected a path string, got {_value_name(value)}")
            if not value.strip():  # Path("") is "." — the project directory; never by accident
                raise self.error(path, f"empty path {value!r}; leave the key out for its default, or write \".\" "
                                       "for the project directory")
            if "\0" in value:
                raise self.error(path, "the path contains a NUL character")
            try:
                return Path(value).expanduser()
            except RuntimeError:  # "~name" for a user this machine does not have
                raise self.error(path, f"cannot expand {value.split('/', 1)[0]!r} in {value!r}: "
                                       "no such user's home directory here") from None
        raise TypeError(f"settings model uses an unsupported type {tp!r}")  # pragma: no cover

    def dataclass(self, cls: Any, table: dict[str, Any], path: str) -> Any:
        hints = _hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
        kwargs: dict[str, Any] = {}
        for raw_key, value in table.items():
            name = str(raw_key).replace("-", "_")
            sub = dotted_key(path, raw_key)
            if name in fields and fields[name].metadata.get("env_only"):
                raise self.error(sub, f"set {fields[name].metadata['env']} in the environment; "
                                      f"{fields[name].metadata['env_only']}")
            if name not in fields:
                hint = difflib.get_close_matches(name, list(fields), n=1)
                extra = f"; did you mean {hint[0]!r}?" if hint else f"; valid keys: {', '.join(fields)}"
                raise self.error(sub, f"unknown key{extra}")
            kwargs[name] = self.convert(value, hints[name], sub)
            check = fields[name].metadata.get("check")
            if check is not None:
                check(kwargs[name], self, sub)
        for f in fields.values():
            if f.name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise self.error(f"{path}.{f.name}" if path else f.name, "required key is missing")
        return cls(**kwargs)


_HINTS: dict[Any, dict[str, Any]] = {}


def _hints(cls: Any) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp) if a is not type(None))
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", Path: "a path"}.get(tp, str(tp))


def _value_name(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {value}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"{type(value).__name__} {value!r}"


# ----------------------------------------------------------------------------------------------
# Loading.

def load_settings(pyproject: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None,
                  require_table: bool = True, config_settings: Mapping[str, Any] | None = None,
                  document: Mapping[str, Any] | None = None) -> Settings:
    """Read ``[tool.kbuild]`` from ``pyproject`` (default ``./pyproject.toml``), then apply the PEP 517
    ``config_settings`` (``kbuild.*`` keys) and ``KBUILD_*``. ``document``: the file, already read with
    :func:`read_pyproject` (a build backend reads it once).

    Raises :class:`ConfigError` (exit status 2) for a missing file, bad TOML, a missing table when
    ``require_table``, an unknown key, a wrong type, or an invalid kernel declaration.
    """
    path = Path(pyproject) if pyproject is not None else Path("pyproject.toml")
    where = str(path)
    data = read_pyproject(path) if document is None else document
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(where, "tool", f"expected a table ([tool]), got {_value_name(tool)}")
    table = tool.get("kbuild")
    if table is None:
        if require_table:
            raise ConfigError(where, "[tool.kbuild]", "table is missing; declare your kernels there (see the README)")
        table = {}
    return settings_from_table(table, where=where, project_dir=path.resolve().parent, environ=environ,
                               config_settings=config_settings)


#: Largest ``pyproject.toml`` read (a project's is a few kB; thousands of declared kernels stay far below).
MAX_PYPROJECT_BYTES = 16 * 2**20


def read_pyproject(pyproject: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed TOML file: kbuild's one reader of ``pyproject.toml``, through :func:`kbuild.fsutil.read_bounded`
    (a regular file of at most :data:`MAX_PYPROJECT_BYTES`). A :class:`ConfigError` naming the file when it is
    missing, unreadable, not a regular file, too large, not UTF-8 or not TOML."""
    from kbuild.fsutil import read_bounded

    path = Path(pyproject)
    where = str(path)
    try:
        text = read_bounded(path, max_bytes=MAX_PYPROJECT_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(where, "(file)", "no such file; pass --config PATH to a pyproject.toml") from None
    except OSError as exc:
        raise ConfigError(where, "(file)", f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(where, "(file)", f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                                           f"{exc.start}); TOML files must be UTF-8") from None
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, and an integer of more than 4300 digits
        raise ConfigError(where, "(file)", f"not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays and inline tables
        raise ConfigError(where, "(file)", "not valid TOML: arrays or inline tables nested too deeply") from None
    return data


def settings_from_table(table: Mapping[str, Any], *, where: str = "<table>", project_dir: Path | None = None,
                        environ: Mapping[str, str] | None = None,
                        config_settings: Mapping[str, Any] | None = None) -> Settings:
    conv = _Converter(where)
    if not isinstance(table, dict):
        raise conv.error("[tool.kbuild]", f"expected a table, got {_value_name(table)}")
    kernels = table.get("kernels")
    base = conv.dataclass(Settings, {k: v for k, v in table.items() if k != "kernels"}, "")
    # Kernels get their own path notation: [tool.kbuild.kernels][i].key
    parsed: list[KernelSettings] = []
    if kernels is not None:
        if not isinstance(kernels, list):
            raise conv.error("[tool.kbuild.kernels]", f"expected an array of tables, got {_value_name(kernels)}")
        for i, k in enumerate(kernels):
            kpath = f"[tool.kbuild.kernels][{i}]"
            if not isinstance(k, dict):
                raise conv.error(kpath, f"expected a table, got {_value_name(k)}")
            parsed.extend(expand_entries(conv.dataclass(KernelSettings, k, kpath), i, kpath, conv.error))
    names = [k.name for k in parsed]
    for j, (k, n) in enumerate(zip(parsed, names)):
        if n in names[:j]:
            raise conv.error(f"[tool.kbuild.kernels][{k.entry}].name", f"duplicate kernel name {n!r}"
                             + (f" (variant {k.label})" if k.variant_of is not None else ""))
    _validate_cuda(base.cuda, conv)
    settings = dataclasses.replace(base, kernels=parsed, project_dir=project_dir or Path.cwd(), config_file=where)
    settings = _apply_environment(_apply_config_settings(settings, config_settings), environ)
    _check_types_on_targets(settings, conv)
    return settings


def _validate_cuda(cuda: CudaSettings, conv: _Converter) -> None:
    """``[[tool.kbuild.cuda.kernels]]``: names, the function, the source, the bench spec and the ptxas values."""
    seen: set[str] = set()
    for i, k in enumerate(cuda.kernels):
        path = f"cuda.kernels[{i}]"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k.name):
            raise conv.error(f"{path}.name", f"{k.name!r} is not an identifier (letters, digits and _)")
        if k.name in seen:
            raise conv.error(f"{path}.name", f"duplicate CUDA kernel name {k.name!r}")
        seen.add(k.name)
        if not k.function.strip() or any(c in k.function for c in "\n\r\0"):
            raise conv.error(f"{path}.function", f"expected the demangled name of a __global__ function, got "
                                                 f"{k.function!r}")
        src = Path(k.source)
        if not k.source.strip() or src.is_absolute() or ".." in src.parts:
            raise conv.error(f"{path}.source", f"expected a path inside the project, relative to pyproject.toml, "
                                               f"got {k.source!r}")
        if k.bench is not None:
            mod, sep, fn = k.bench.partition(":")
            if not sep or not all(p.isidentifier() for p in mod.split(".")) or not fn.isidentifier():
                raise conv.error(f"{path}.bench", f"expected \"package.module:function\", got {k.bench!r}")
        for j, v in enumerate(k.maxrregcount):
            if v != 0 and not 24 <= v <= 255:
                raise conv.error(f"{path}.maxrregcount[{j}]", f"expected 0 (as compiled) or 24 to 255, got {v}")
        for j, v in enumerate(k.minnctapersm):
            if not 0 <= v <= 32:
                raise conv.error(f"{path}.minnctapersm[{j}]", f"expected 0 (as compiled) to 32, got {v}")


def _check_types_on_targets(s: Settings, conv: _Converter) -> None:
    """A parameter type that a target lacks (fp8e4nv before sm_89) is the configuration's error, not Triton's."""
    for i, k in enumerate(s.kernels):
        for pname, ty in k.signature.items():
            for t in s.parsed_targets:
                problem = t.type_problem(ty.strip())
                if problem:
                    raise conv.error(dotted_key(f"[tool.kbuild.kernels][{i if k.entry is None else k.entry}].signature",
                                               pname),
                                     f"{problem} (targets: {', '.join(s.targets)})")


def _apply_environment(s: Settings, environ: Mapping[str, str] | None) -> Settings:
    """Overlay ``KBUILD_*`` variables declared in field metadata (recursing into nested tables)."""

    def overlay(obj: Any, prefix: str) -> Any:
        changes: dict[str, Any] = {}
        hints = _hints(type(obj))
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                new = overlay(value, f"{prefix}{f.name}.")
                if new is not value:
                    changes[f.name] = new
                continue
            found, new_value = _env_field(f, hints[f.name], environ)
            if found:
                changes[f.name] = new_value
        return dataclasses.replace(obj, **changes) if changes else obj

    return overlay(s, "")


def _env_field(f: dataclasses.Field[Any], tp: Any, environ: Mapping[str, str] | None) -> tuple[bool, Any]:
    """(whether its variable is set, the converted and checked value) for one field with ``env`` metadata."""
    var = f.metadata.get("env")
    if not var:
        return False, None
    raw = env_value(var, environ)
    if f.metadata.get("secret") and (os.environ if environ is None else environ).get(var, "x").strip() == "":
        # a secret that is set but empty (a CI secret missing on forks) must not turn signing off silently
        raise ConfigError(ENVIRONMENT, var, "is set but empty; set it to the shared secret, "
                          "or unset it to work without signed records")
    if raw is None:
        return False, None
    conv = _Converter(ENVIRONMENT)
    value = _from_string(raw, tp, conv, var)
    check = f.metadata.get("check")
    if check is not None:
        check(value, conv, var)
    return True, value


def _from_string(raw: str, tp: Any, conv: _Converter, key: str) -> Any:
    """A value given as a string (a variable, a config setting) converted to the field's type ``tp``."""
    if tp is bool:
        flag = parse_bool(raw)
        if flag is None:
            raise conv.error(key, _bool_message(raw))
        return flag
    return conv.convert(_parse_env(raw, tp), tp, key)


#: The prefix of kbuild's PEP 517 config settings: ``-C kbuild.locked=true``, ``-C kbuild.budget.seconds=60``.
CONFIG_SETTINGS_PREFIX = "kbuild."


def _config_setting_fields(cls: Any, above: tuple[str, ...] = ()) -> dict[str, tuple[tuple[str, ...], Any, Any]]:
    """``kbuild.<dotted name>`` → (field path, field, type) of every field a config setting may give."""
    out: dict[str, tuple[tuple[str, ...], Any, Any]] = {}
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if f.metadata.get("internal"):
            continue
        if dataclasses.is_dataclass(tp):
            out.update(_config_setting_fields(tp, (*above, f.name)))
        else:
            out[CONFIG_SETTINGS_PREFIX + ".".join((*above, f.name))] = ((*above, f.name), f, tp)
    return out


def _apply_config_settings(s: Settings, config_settings: Mapping[str, Any] | None) -> Settings:
    """Overlay the PEP 517 config settings under ``kbuild.`` (dashes or underscores). Values are strings read as
    the environment's are; of a repeated key (a list) a list setting takes every value, any other the last. An
    empty value counts as unset. Keys of other tools are left alone; an unknown ``kbuild.`` key is an error
    suggesting the closest one."""
    given = {str(k): v for k, v in (config_settings or {}).items() if str(k).startswith(CONFIG_SETTINGS_PREFIX)}
    if not given:
        return s
    conv = _Converter("config-settings")
    known = _config_setting_fields(Settings)
    for key, value in given.items():
        entry = known.get(key.replace("-", "_"))
        if entry is None:
            hint = difflib.get_close_matches(key.replace("-", "_"), list(known), n=1)
            raise conv.error(key, "unknown setting" + (f"; did you mean {hint[0]!r}?" if hint else ""))
        path, f, tp = entry
        if f.metadata.get("env_only"):
            raise conv.error(key, f"environment only: set {f.metadata['env']} instead")
        if get_origin(tp) is list and dataclasses.is_dataclass(get_args(tp)[0]):
            raise conv.error(key, "tables cannot be given as config settings; declare them in pyproject.toml")
        values = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
        raw = ",".join(values) if get_origin(tp) is list else (values[-1] if values else "")
        if raw == "":
            continue
        new = _from_string(raw, tp, conv, key)
        check = f.metadata.get("check")
        if check is not None:
            check(new, conv, key)
        s = _replace_at(s, path, new)
    return s


def _replace_at(obj: Any, path: tuple[str, ...], value: Any) -> Any:
    head, *rest = path
    return dataclasses.replace(obj, **{head: _replace_at(getattr(obj, head), tuple(rest), value) if rest else value})


def flag_setting(name: str, value: Any, flag: str) -> Any:
    """The value of the command-line flag ``flag`` for the setting ``name`` (``seed``, ``budget.seconds``),
    converted and checked by the model's rules as a file's or a variable's value is (``--seed -1`` and
    ``--budget-seconds nan`` are refused like ``KBUILD_SEED=-1``): a :class:`ConfigError` naming the flag
    otherwise. None (the flag was not given) stays None."""
    if value is None:
        return None
    cls: Any = Settings
    *parents, last = name.split(".")
    for part in parents:
        cls = _hints(cls)[part]
    f = cls.__dataclass_fields__[last]
    conv = _Converter(COMMAND_LINE)
    converted = conv.convert(value, _hints(cls)[last], flag)
    check = f.metadata.get("check")
    if check is not None:
        check(converted, conv, flag)
    return converted


def apply_flag(settings: Settings, path: str, value: Any, *, flag: str) -> Settings:
    """``settings`` with the setting at the dotted ``path`` (``"prewarm.lease_seconds"``) replaced by the
    command-line ``flag``'s ``value`` (or a library function's argument), held to the model's rules by
    :func:`flag_setting`; None (not given) leaves ``settings`` unchanged."""
    if value is None:
        return settings
    return _replace_at(settings, tuple(path.split(".")), flag_setting(path, value, flag))


def apply_flags(settings: Settings, **flags: Any) -> Settings:
    """The last source, command-line flags: every flag that was given (not None) replaces its setting, whatever
    the environment and ``pyproject.toml`` say (``kbuild emit --locked`` → ``apply_flags(s, locked=True)``)."""
    given = {name: value for name, value in flags.items() if value is not None}
    return dataclasses.replace(settings, **given) if given else settings


def _parse_env(raw: str, tp: Any) -> Any:
    """Turn an environment string into the TOML-like value the converter expects."""
    origin = get_origin(tp)
    args = [a for a in get_args(tp) if a is not type(None)]
    if origin in (Union, types.UnionType) and len(args) == 1:
        tp, origin = args[0], get_origin(args[0])
    if origin is list:
        return [p.strip() for p in raw.split(",") if p.strip()]
    if tp is int:
        try:
            return int(raw)
        except ValueError:
            return raw
    if tp is float:
        try:
            return float(raw)
        except ValueError:
            return raw
    if tp is bool:
        flag = parse_bool(raw)
        return raw if flag is None else flag
    return raw


# ----------------------------------------------------------------------------------------------
# Introspection: docs, key fields and the JSON schema come from the model itself.

def field_docs(cls: Any) -> dict[str, str]:
    """The docstring under each field of a settings dataclass (the scikit-build-core convention)."""
    source = textwrap.dedent(inspect.getsource(cls))
    tree = ast.parse(source)
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def key_fields(cls: type) -> list[str]:
    """Names of the fields of ``cls`` marked as changing the machine code."""
    return [f.name for f in dataclasses.fields(cls) if f.metadata.get("key")]


def json_schema() -> dict[str, Any]:
    """JSON schema of ``[tool.kbuild]``, generated from the model (committed; a test checks it)."""

    def schema_for(tp: Any) -> dict[str, Any]:
        origin = get_origin(tp)
        if origin in (Union, types.UnionType):
            opts = [a for a in get_args(tp) if a is not type(None)]
            return schema_for(opts[0]) if len(opts) == 1 else {"anyOf": [schema_for(a) for a in opts]}
        if origin is Literal:
            return {"enum": list(get_args(tp))}
        if origin is list:
            return {"type": "array", "items": schema_for(get_args(tp)[0])}
        if origin is dict:
            return {"type": "object", "additionalProperties": schema_for(get_args(tp)[1])}
        if dataclasses.is_dataclass(tp):
            docs = field_docs(tp)
            hints = _hints(tp)
            props = {}
            required = []
            for f in dataclasses.fields(tp):
                if f.metadata.get("internal"):
                    continue
                entry = schema_for(hints[f.name])
                if f.name in docs:
                    entry["description"] = docs[f.name]
                if f.metadata.get("env"):
                    entry["x-env"] = f.metadata["env"]
                if f.metadata.get("env_only"):
                    entry["x-env-only"] = True
                if f.metadata.get("key"):
                    entry["x-in-key"] = True
                entry.update(f.metadata.get("schema") or {})
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    required.append(f.name)
                props[f.name] = entry
            out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": props}
            if required:
                out["required"] = required
            if tp.__doc__:
                out["description"] = " ".join(tp.__doc__.split())
            return out
        scalars: dict[Any, dict[str, Any]] = {bool: {"type": "boolean"}, int: {"type": "integer"},
                                              float: {"type": "number"}, str: {"type": "string"},
                                              Path: {"type": "string", "minLength": 1}}
        return dict(scalars[tp])

    schema = schema_for(Settings)
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    schema["title"] = "[tool.kbuild]"
    return schema
