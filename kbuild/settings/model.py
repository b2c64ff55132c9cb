"""The settings model: every setting of ``[tool.kbuild]``, a field of a frozen dataclass below.

Each field has a docstring (the string literal under it) that the JSON schema carries (:mod:`kbuild.schema`,
committed as ``kbuild/schema/kbuild.schema.json``); its metadata (:func:`kbuild.settings.fields.setting`) names the
``KBUILD_*`` variable that overrides it, whether it changes the shipped machine code (part of the key), and the
rule its value must keep beyond its type. The kernel declarations (``[[tool.kbuild.kernels]]``) are
:class:`kbuild.declarations.kernel.KernelSettings`, with their own grammar.

A tuning run's request is made here once from the settings (:meth:`Settings.tune_request`, a :class:`TuneRequest`)
and passed whole to the tuners, so that the budget's defaults are written in this module alone. Where the values
come from is :mod:`kbuild.settings.sources`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kbuild.arch import DEFAULT_TARGETS
from kbuild.declarations.kernel import KernelSettings
from kbuild.errors import ConfigError
from kbuild.targets import Target, parse_target

from .environ import env_value
from .fields import Converter, setting
from .ray_address import parse as parse_ray_address

TuneMode = Literal["off", "auto", "require"]
Algorithm = Literal["ppo", "random", "greedy"]
EditKind = Literal["moves", "far", "yield", "reuse", "stall"]
ShipMode = Literal["extension", "package-data"]
PackageDataMode = Literal["all", "tuned"]
PrewarmEngine = Literal["local", "ray"]
RuntimeLaunch = Literal["direct", "triton"]
#: ``KBUILD_RUNTIME``: off (False), on (True) or must-hit (``"strict"``); the boolean words stay accepted
#: (:func:`kbuild.settings.fields.from_string`: a boolean or some words).
RuntimeMode = bool | Literal["strict"]
WgmmaHazardMode = Literal["warn", "error"]


def _check_targets(value: list[str], conv: Converter, path: str) -> None:
    if not value:
        raise conv.error(path, "no targets; list at least one GPU target, e.g. [\"sm_90\"]")
    for i, t in enumerate(value):
        try:
            parse_target(t)
        except ValueError as exc:
            raise conv.error(f"{path}[{i}]", str(exc)) from None


def _check_paths(value: list[str], conv: Converter, path: str) -> None:
    for i, p in enumerate(value):
        if not p.strip() or "\0" in p:
            raise conv.error(f"{path}[{i}]", f"expected a path relative to pyproject.toml, got {p!r}")


#: Largest ``seed`` (:attr:`Settings.seed`): a 31-bit seed leaves room for the offsets the searches add.
MAX_SEED = 2**31 - 1


def _check_seed(value: int, conv: Converter, path: str) -> None:
    if not 0 <= value <= MAX_SEED:
        raise conv.error(path, f"expected a seed from 0 to {MAX_SEED:,}, got {value}")


def _check_positive(value: float, conv: Converter, path: str) -> None:
    if value <= 0:
        raise conv.error(path, f"must be positive, got {value}")


def _check_not_negative(value: float, conv: Converter, path: str) -> None:
    if value < 0:
        raise conv.error(path, f"must be 0 or more, got {value}")


def _check_ray_address(value: str | None, conv: Converter, path: str) -> None:
    if value is None:
        return
    try:
        parse_ray_address(value)
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

    evaluations: int = setting(200, env="KBUILD_BUDGET_EVALUATIONS", key=True, check=_check_positive,
                                schema={"exclusiveMinimum": 0})
    """Most candidate schedules measured on the GPU per kernel and target."""

    seconds: float = setting(600.0, env="KBUILD_BUDGET_SECONDS", key=True, check=_check_positive,
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

    engine: PrewarmEngine = setting("local", env="KBUILD_PREWARM_ENGINE")
    """``local``: one kernel × target at a time on this machine's GPUs; ``ray``: one Ray task per kernel × target
    on the cluster's GPU workers (``kbuild prewarm --ray``; needs ``pip install 'kbuild[ray]'``)."""

    address: str | None = setting(None, env="KBUILD_PREWARM_ADDRESS", check=_check_ray_address)
    """The Ray cluster to join: ``host:6379`` (the cluster's GCS), ``ray://host[:10001]`` (a Ray Client server,
    needs ``ray[client]``), ``auto`` (``RAY_ADDRESS``, else the cluster ``ray start`` made on this machine) or
    ``local`` (a new cluster on this machine); unset: ``auto`` if it finds one, else ``local``. ``--ray ADDRESS``
    beats it. Before joining, kbuild checks that a Ray cluster answers there (``connect_timeout``)."""

    lease_seconds: float = setting(300.0, check=_check_positive, schema={"exclusiveMinimum": 0})
    """Time to live of the lease a task holds in the shared tier while it tunes an entry (renewed every third
    of it): how long a prewarm that died keeps another from that entry. ``--lease-seconds`` beats it."""

    connect_timeout: float = setting(10.0, env="KBUILD_PREWARM_CONNECT_TIMEOUT", check=_check_positive,
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

    maxrregcount: list[int] = setting(key=True, default_factory=list)
    """The configuration level: ptxas ``--maxrregcount`` values to try on the kernel's PTX (0: as compiled;
    each 24-255). The tuner keeps the fastest bit-exact one, then tunes its SASS. Empty: only as compiled."""

    minnctapersm: list[int] = setting(key=True, default_factory=list)
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


@dataclass(frozen=True)
class TuneRequest:
    """One tuning run, asked of the tuners whole: the SASS search (:func:`kbuild.tune.api.tune`), the two levels
    (:func:`kbuild.tune.two_level.tune_two_level`) and level 1's compiles. Made once from the settings
    (:meth:`Settings.tune_request`), so that the budget's defaults are the settings model's alone; a command's flags
    or a level's share of the budget replace fields of it (:meth:`replace`)."""

    evaluations: int
    """Most candidates measured (``budget.evaluations``); the two levels share them."""
    seconds: float
    """Most wall-clock seconds (``budget.seconds``)."""
    algorithms: tuple[Algorithm, ...]
    """The SASS searchers, each on the whole budget: the settings' ``algorithm`` (``kbuild tune --algo all``: the
    three side by side)."""
    seed: int
    """Seed of every search (``seed``)."""
    kinds: tuple[EditKind, ...]
    """The SASS edit kinds the searches may use (``kinds``)."""
    compile_timeout: float
    """Most seconds one configuration's compile may take at level 1, in a process pool here or a Ray compile
    shard (``compile_timeout``)."""
    jobs: int | None = None
    """Level 1's compile processes here (None: one per core, less one)."""
    top: int = 2
    """Configurations level 1 hands to a SASS search."""
    method: Literal["racing", "exhaustive"] = "racing"
    """Level 1's search: racing (Optuna's TPE and successive halving) or the exhaustive sweep."""
    horizon: int = 32
    """Steps per episode of the SASS search."""
    policy: str | None = "default"
    """PPO's starting point: a checkpoint's path, ``"default"`` (the shipped one for the target, when there is one)
    or None (from scratch)."""

    def replace(self, **changes: Any) -> TuneRequest:
        """This request with ``changes`` (field names) in place."""
        return dataclasses.replace(self, **changes)


#: Why an ``env_only`` field is refused in ``pyproject.toml`` (the error says so).
_SECRET = "secrets do not belong in pyproject.toml"
_ONE_PROCESS = "it is a switch of one run, not of the project (or pass --debug)"
_THIS_MACHINE = "a path on one machine does not belong in the project's pyproject.toml"
_WHERE_IT_RUNS = "the run-time hook reads it where the package runs, which has no pyproject.toml"


@dataclass(frozen=True)
class Settings:
    """``[tool.kbuild]``: what to compile, where to store it and how to tune it."""

    targets: list[str] = setting(env="KBUILD_TARGETS", default_factory=lambda: list(DEFAULT_TARGETS),
                                  check=_check_targets, schema={"minItems": 1})
    """GPU architectures to compile every kernel for (``sm_80``, ``sm_90``, ...). The environment
    variable takes a comma-separated list."""

    kernels: list[KernelSettings] = field(default_factory=list)
    """The kernels, one ``[[tool.kbuild.kernels]]`` table each."""

    store: Path | None = setting(None, env="KBUILD_STORE")
    """Local store directory. Default: the per-user cache dir (``~/.cache/kbuild``). Relative paths are
    taken from the directory of ``pyproject.toml``. An empty string is an error (write ``"."`` for the project
    directory); an empty ``KBUILD_STORE`` counts as unset, like every empty ``KBUILD_*`` variable."""

    store_max_bytes: int = setting(10 * 2**30, env="KBUILD_STORE_MAX_BYTES", check=_check_positive,
                                    schema={"exclusiveMinimum": 0})
    """Size bound of the local store; least-recently-used entries are evicted beyond it."""

    remotes: list[RemoteSettings] = field(default_factory=list)
    """Shared store tiers, read in order after the local one."""

    remote_deadline: float = setting(30.0, env="KBUILD_REMOTE_DEADLINE", check=_check_positive,
                                      schema={"exclusiveMinimum": 0})
    """Most seconds one request to a remote tier may take in all: connecting, the headers and the whole
    body. Past it the tier counts as down for the rest of the run (a warning; an error under ``--strict``)."""

    store_secret: str | None = field(default=None, metadata={"env": "KBUILD_STORE_SECRET", "env_only": _SECRET,
                                                             "secret": True})
    """Shared secret for HMAC-SHA256 signing of metadata records. Environment only (never in pyproject):
    when set, unsigned or wrongly signed records are rejected in every tier, the local one included."""

    tune: TuneMode = setting("auto", env="KBUILD_TUNE")
    """``off``: never tune; ``auto``: tune when a GPU of the target architecture is present, else ship the
    baseline; ``require``: fail when any kernel would ship untuned."""

    algorithm: Algorithm = setting("greedy", env="KBUILD_ALGORITHM", key=True)
    """The SASS searcher run on a store miss, alone on the whole budget. Greedy by default: on the H200 it
    found most of the accepted schedules, and PPO (from scratch, or pretrained across the suite on the cost
    model) beat it on no kernel (``benchmarks/results``)."""

    kinds: list[EditKind] = setting(env="KBUILD_KINDS", key=True,
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

    seed: int = setting(0, env="KBUILD_SEED", key=True, check=_check_seed,
                         schema={"minimum": 0, "maximum": MAX_SEED})
    """Seed of the tuning search: 0 to 2,147,483,647 (the searches seed NumPy, Optuna and PyTorch with it and
    with small offsets of it; NumPy takes no negative seed and none of 2**32 or more)."""

    locked: bool = setting(False, env="KBUILD_LOCKED")
    """Build with exactly the artefacts pinned in ``kbuild.lock`` (next to ``pyproject.toml``): nothing is
    compiled or tuned, and one error lists every missing or stale pin. Also ``-C kbuild.locked=true`` and
    ``kbuild emit --locked``."""

    strict: bool = setting(False, env="KBUILD_STRICT")
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

    runtime: RuntimeMode = field(default=True, metadata={"env": "KBUILD_RUNTIME", "env_only": _WHERE_IT_RUNS})
    """Whether :mod:`kbuild.runtime` answers Triton's JIT from the cubins an installed package ships: on (``1``,
    ``true``, ``on``...), off (``0``, ``false``, ``off``...: Triton's own run), or ``strict``: on, and the first
    call that would compile or autotune raises ``kbuild.runtime.CoverageError`` naming the kernel, the
    specialisation and where the nearest shipped entry differs (CI proves a wheel covers a workload). Read when a
    specialisation is first called. Environment only, read where the package runs."""

    runtime_report: list[str] = field(default_factory=list, metadata={"env": "KBUILD_RUNTIME_REPORT",
                                                                      "env_only": _WHERE_IT_RUNS})
    """Where :mod:`kbuild.runtime` writes its coverage report when the process exits: a file path gets the JSON
    document (written atomically), ``-`` a short summary on stderr; comma-separated for both
    (``KBUILD_RUNTIME_REPORT=coverage.json,-``). ``{pid}`` in a path becomes the process id, one file per process
    of a run (pytest-xdist workers): ``kbuild coverage FILE...`` merges them. Environment only, read where the
    package runs."""

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

    runtime_handover: int = field(default=1000, metadata={"env": "KBUILD_RUNTIME_HANDOVER", "env_only": _WHERE_IT_RUNS,
                                                           "check": _check_not_negative, "schema": {"minimum": 0}})
    """With ``runtime_launch = "direct"``: after this many calls of one shipped specialisation that kbuild's own
    launcher runs (a process where Triton's cache has no launcher for its signature), Triton's launcher is built in
    a background thread (the host compiler, as Triton's own first call would build it, but off the calling
    thread) and takes over, so that a hot kernel's steady state is Triton's own; ``0``: never. Without a host
    compiler kbuild's launcher stays. Environment only, read where the package runs."""

    python_path: list[str] = field(default_factory=lambda: [".", "src"])
    """Directories (relative to ``pyproject.toml``) put on ``sys.path`` to import kernel sources."""

    ship: ShipMode = setting("extension")
    """How the wheel carries the kernels: ``extension`` embeds the cubins in a C extension with a
    launcher; ``package-data`` writes them with an index into ``<package>/_kbuild/`` for packages that
    run their ``@triton.jit`` kernels just in time, and :mod:`kbuild.runtime` substitutes the tuned ones."""

    package_data: PackageDataMode = setting("all")
    """With ``ship = "package-data"``: which kernel × target ship in ``<package>/_kbuild/``. ``all``: every one, the
    tuned artefact where there is one, else the baseline (the cubin Triton would compile), so that no shipped
    kernel compiles on its first call (:mod:`kbuild.runtime.loader`); ``tuned``: only those with an accepted
    tuning result (smaller wheels; untuned kernels compile just in time as without kbuild)."""

    package: str | None = setting(None)
    """With ``ship = "package-data"``: the import package of this project whose ``_kbuild/`` ships the cubins
    (``"kbx_liger"``). Unset: the one top-level package the kernels live in, which must be the project's; set it
    when the kernels come from an installed distribution (``source = "liger_kernel.ops.rms_norm:..."``), whose
    package this project does not build."""

    recordings: list[str] = setting(env="KBUILD_RECORDINGS", default_factory=list, check=_check_paths)
    """Recordings of real runs (``kbuild record``'s files, relative to ``pyproject.toml``) whose specialisations the
    build compiles beside ``[[tool.kbuild.kernels]]``: each recorded specialisation is a kernel entry for every
    target, keyed as a hand-written declaration of it would be; one that a hand-written entry declares too is
    built once. An ``@triton.autotune`` kernel ships the choice measured where the recording ran on a GPU of the
    target (or found in ``autotune_caches``), else every configuration's cubin (Triton's autotuner still
    benchmarks on the first call, compiling nothing). The build report names what a recording does not cover.
    The environment variable takes a comma-separated list."""

    autotune_caches: list[str] = setting(env="KBUILD_AUTOTUNE_CACHES", default_factory=list, check=_check_paths)
    """Triton autotune caches (directories as ``TRITON_CACHE_DIR`` holds them, relative to ``pyproject.toml``) in
    which a recorded autotuned kernel's choice is looked up, under the exact key Triton 3.6's ``cache_results``
    files it by (the Triton installation, the target's backend, the kernel's source, the tuning key and the
    configurations), for a key the recordings hold no measured choice of. The environment variable takes a
    comma-separated list."""

    reports: str | None = setting(None, env="KBUILD_REPORTS")
    """A folder (relative to ``pyproject.toml``) where the tune phase writes the report of each kernel × target it
    tunes, as it finishes: ``<kernel>.<target>.tune.html`` (one self-contained page: the space, derived and pruned
    for a recorded kernel, with each pruned point's reason; the level-1 search; the choice; the SASS schedule and
    its diff) and ``<kernel>.<target>.tune.json``. Unset: none is written (the report stays in the stored artefact's
    metadata)."""

    compile_jobs: int | None = setting(None, env="KBUILD_COMPILE_JOBS", check=_check_positive,
                                       schema={"minimum": 1})
    """Baseline compiles a build runs at once, each in its own child process (unset: one per core, less one):
    a recording declares hundreds of specialisations."""

    compile_timeout: float = setting(600.0, env="KBUILD_COMPILE_TIMEOUT", check=_check_positive,
                                      schema={"exclusiveMinimum": 0})
    """Most seconds the compile of one kernel × target may take (wall clock): Triton's passes and ptxas, in a
    child process. Past it the child is stopped and the build fails with an error naming the kernel, the target
    and this setting (exit status 3)."""

    wgmma_hazards: WgmmaHazardMode = setting("warn", env="KBUILD_WGMMA_HAZARDS")
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

    def project_path(self, relative: str) -> Path:
        """A path the settings give relative to ``pyproject.toml`` (``recordings``, ``autotune_caches``), resolved."""
        p = Path(relative).expanduser()
        return p if p.is_absolute() else self.project_dir / p

    @property
    def store_path(self) -> Path:
        if self.store is None:
            return default_store_path()
        return self.store if self.store.is_absolute() else (self.project_dir / self.store)

    def tune_request(self, **changes: Any) -> TuneRequest:
        """The tuning request of these settings (budget, ``algorithm``, ``seed``, ``kinds``, ``compile_timeout``),
        with ``changes`` (:class:`TuneRequest`'s field names: a command's flags) in place."""
        return TuneRequest(evaluations=self.budget.evaluations, seconds=self.budget.seconds,
                           algorithms=(self.algorithm,), seed=self.seed, kinds=tuple(self.kinds),
                           compile_timeout=self.compile_timeout).replace(**changes)
