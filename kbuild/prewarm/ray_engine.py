"""``kbuild prewarm --ray``: the kernel × target work spread over a Ray cluster, results in the shared tier.

**The driver** (:func:`prewarm_ray`, on the machine that runs ``kbuild prewarm``) first checks that a Ray cluster
answers at the address within ``connect_timeout`` (:func:`check_cluster`, :mod:`kbuild.prewarm.address`:
``ray.init`` alone retried an address nobody answers at for minutes), then resolves every kernel and
computes its keys exactly as a build does (:func:`kbuild.build.resolve.specs_and_keys`), looks the tuned keys
up in the shared writable tier, and for each one missing:

1. submits a compile task (:func:`kbuild.prewarm.tasks.compile_task`; one CPU, any node): the baseline from the shared tier, or
   compiled now and put there;
2. once that baseline exists, hands the entry to a **tune worker** of its target (:mod:`kbuild.prewarm.workers`):
   a long-lived Ray actor holding **one GPU of the target's compute capability**, ``num_gpus=1`` plus one unit of
   the custom resource ``kbuild_sm_<cc>`` (:func:`kbuild.prewarm.node.resource_name`), which each GPU node declares once per GPU,
   e.g. ``ray start --address HEAD:6379 --num-gpus 8 --resources '{"kbuild_sm_90": 8}'``
   (``kbuild prewarm --ray-resources`` prints this machine's). The driver starts one worker per unit of the
   resource (at most one per entry) as the run starts, so they import what a tune needs while the baselines
   compile, and each then tunes entry after entry (:func:`kbuild.prewarm.tasks.tune_task`): it takes a lease on the tuned key in the
   shared tier (:mod:`kbuild.cache.lease`; renewed while it works), looks the key up again, tunes
   (:func:`kbuild.build.tuning.tune_build`, or the CPU cost model with ``backend="model"``), puts the result
   into the shared tier at once and gives the lease up. A target's workers are killed once it has no more work.

**Kernels with a configuration space** (level 1, :mod:`kbuild.tune.level1`): the tune (on its worker) runs the racing
search itself, but its candidate configurations are compiled by Ray CPU tasks (``num_gpus=0``), a few per task,
on any node with a free CPU, their results handed to the tune through Ray's object store
(:mod:`kbuild.prewarm.shards`: why the racing stays in one GPU task, why the object store, the shard size).

Every task of a run holds leases as the same holder (the run id), so an entry tuned again after its worker's
node or process died (the driver gives it to another worker, up to ``max_retries`` times, and asks Ray for a
replacement worker) takes its own lease again at once, while another prewarm that wants the same entry waits:
its task answers "leased" and the driver asks again later, until the entry is stored (then "found") or the
lease expired (then it tunes). An interrupted run resumes: what was stored is found, the rest is submitted.

**Failures** never end the run: a tuner that raises (a GPU fault, a kernel that does not run) is reported
with the node, its GPU and the error; an entry whose workers kept dying (more than ``max_retries`` times), or
whose target has no worker left (they died or could not start, and the replacements are used up, or no node
offers its resource any more), is reported with Ray's error; everything else finishes.

**The cost-model backend** (``backend="model"``) is the CPU stand-in that CI runs: it asks for the custom
resource only (no GPU), searches the SASS schedule with the cost model, and stores its result — the baseline,
as the acceptance rule never ships a schedule only the model judged — under the tuned key with
``"measure": "cost-model"`` in its tuner component. Builds never look that key up, so a model result can
never ship. A kernel with a configuration space gets both levels on the model: level 1 ranks the space's
compiled cubins by the cost model (:class:`kbuild.tune.level1.ModelConfigMeasurer`, compiles in shards as
above), level 2 searches the chosen configurations' schedules, and the result holds the chosen
configuration's untouched cubin; the same seed gives the configuration the single-process search gives
(:func:`kbuild.prewarm.tasks.model_tuner` called in one process).

**What travels, what must be there:** when kbuild starts Ray itself (``kbuild prewarm --ray``, or
:func:`prewarm_ray` with Ray not yet initialised), it ships the project and kbuild with Ray's own job-level
``runtime_env`` (:func:`ship_env`): the project folder as ``working_dir`` (Ray's worker processes start in its
copy, which Ray puts first on their ``PYTHONPATH``; Ray leaves out what the project's ``.gitignore`` names, and
kbuild adds :data:`SHIP_EXCLUDES`) and kbuild's own package as ``py_modules`` (a copy of the ``kbuild`` tree
with the subpackages a checkout keeps beside it, :data:`MAPPED_SUBPACKAGES`, put back inside). On a node the
tasks look for the kernels in that copy (:func:`kbuild.prewarm.node.on_node`), wherever Ray unpacked it; keys never hold a path
(the key covers Triton's source hash, which is of the text, not of the file's place), so a node whose copy lives
elsewhere computes the driver's keys. What does not travel: Triton, ptxas and kbuild's dependencies (installed
on every node), and a kernel imported from an installed package rather than the project. A node whose toolchain
differs computes another key for an entry than the driver did, and refuses it, naming both. ``ship=False`` (or a
Ray the caller initialised: its own ``runtime_env`` applies) keeps the old rule, the same paths on every node.
Workers read and write the shared tiers only (never a local store), signed with ``KBUILD_STORE_SECRET`` as the
driver's settings carry it.

**What each task did:** every result carries ``node``, ``host``, ``gpu`` (the GPUs the task saw) and
``gpu_ids`` (Ray's GPU ids given to it), ``started``/``finished`` (epoch seconds) and ``seconds``, and
``compile`` (the same for the compile task that made or found its baseline) and ``shards`` (its level-1 compile
shards: node, host, pid, state, attempts, seconds); :func:`prewarm_ray`'s summary adds ``nodes``, what each
node and GPU did (tasks, busy seconds, entries), per target the shards done, running and failed, ``workers``
(each tune worker: resource, where, when it was asked for and ready, its warm-up seconds, the entries it was
given, how it ended) and ``phases`` (the driver's seconds to compute the keys and to join the cluster).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbuild.errors import ClusterUnreachableError, KBuildError, MissingDependencyError, UsageError
from kbuild.settings.environ import env_value, parse_bool
from kbuild.settings.model import Settings
from kbuild.settings.sources import apply_flag
from kbuild.targets import Target

from .node import node_resources, ray_error, resource_name
from .tasks import leases_of, model_key, shared_store

log = logging.getLogger(__name__)

#: Seconds between two looks at a lease another prewarm holds.
LEASE_POLL_SECONDS = 5.0
#: kbuild's subpackages that a checkout keeps beside the ``kbuild`` folder (pyproject.toml's ``wheel.packages``
#: maps them in, as an editable install does); the shipped copy puts them back inside.
MAPPED_SUBPACKAGES = ("hooks", "cache", "templates")
#: Left out of what is shipped, besides what the project's ``.gitignore`` names (Ray reads it).
SHIP_EXCLUDES = [".git", "__pycache__", "*.pyc", ".venv", ".venv-*", ".mypy_cache", ".pytest_cache", ".ruff_cache",
                 ".hypothesis", "*.egg-info"]


# ---------------------------------------------------------------------------------------------
# Shipping the project and kbuild to the nodes (Ray's runtime_env).

def stage_kbuild(dest: Path) -> Path:
    """A copy of the imported kbuild package under ``dest/kbuild``, as a wheel lays it out: the ``kbuild`` folder
    and, inside it, the subpackages a checkout keeps beside it (:data:`MAPPED_SUBPACKAGES`); no bytecode."""
    import importlib.util

    import kbuild

    top = Path(kbuild.__file__).resolve().parent
    out = dest / "kbuild"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(top, out, ignore=skip)
    for name in MAPPED_SUBPACKAGES:
        spec = importlib.util.find_spec(f"kbuild.{name}")
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if not locations:
            raise KBuildError(f"kbuild.{name} cannot be found; kbuild's installation is incomplete")
        where = Path(locations[0]).resolve()
        if where != (top / name).resolve():
            if (out / name).is_symlink() or (out / name).is_file():
                (out / name).unlink()
            elif (out / name).exists():
                shutil.rmtree(out / name)
            shutil.copytree(where, out / name, ignore=skip)
    return out


def ship_env(settings: Settings, staging: Path) -> dict[str, Any]:
    """Ray's job-level ``runtime_env`` that ships the project (``working_dir``: ``settings.project_dir``) and kbuild
    (``py_modules``: :func:`stage_kbuild` under ``staging``, which must live until ``ray.init`` has uploaded it)."""
    return {"working_dir": str(settings.project_dir), "py_modules": [str(stage_kbuild(staging))],
            "excludes": list(SHIP_EXCLUDES)}


# ---------------------------------------------------------------------------------------------
# The driver (what the tasks do on the nodes: kbuild.prewarm.tasks).

@dataclass
class Entry:
    """One kernel × target of the run, as the driver tracks it."""

    kernel: str
    target: Target
    """Parsed once by the driver and handed to the tasks as it is (a node never parses its name again)."""
    key: str
    state: str = "queued"
    """queued → running → found | tuned | failed; ``waiting`` while another prewarm holds its lease."""
    result: dict[str, Any] = field(default_factory=dict)
    attempts: int = 0
    retry_at: float = 0.0
    shards: list[dict[str, Any]] = field(default_factory=list)
    """Its level-1 compile shards as the board last reported them (:mod:`kbuild.prewarm.shards`)."""

    @property
    def cc(self) -> int:
        return self.target.cc

    @property
    def finished(self) -> bool:
        return self.state in ("found", "tuned", "failed")


@dataclass
class TargetCounts:
    total: int = 0
    done: int = 0
    running: int = 0
    failed: int = 0
    waiting: int = 0
    shards_done: int = 0
    """Level-1 compile shards of this target's entries that finished, are running (started, not finished; a
    shard whose worker died counts again once Ray restarts it), or failed for good (retries used up)."""
    shards_running: int = 0
    shards_failed: int = 0


def counts_by_target(entries: Sequence[Entry]) -> dict[str, TargetCounts]:
    out: dict[str, TargetCounts] = {}
    for e in entries:
        c = out.setdefault(e.target.name, TargetCounts())
        c.total += 1
        c.done += e.finished
        c.running += e.state == "running"
        c.failed += e.state == "failed"
        c.waiting += e.state == "waiting"
        for sh in e.shards:
            c.shards_done += sh.get("state") == "done"
            c.shards_running += sh.get("state") == "running"
            c.shards_failed += sh.get("state") == "failed"
    return out


def _ray() -> Any:
    """Ray, imported: not installed, or failing to import, is a :class:`MissingDependencyError` (exit status 2)."""
    from kbuild.extras import import_extra

    return import_extra("ray", "ray", "kbuild prewarm --ray")


def prewarm_ray(settings: Settings, *, address: str | None = None, targets: Sequence[str] | None = None,
                kernels: Sequence[str] | None = None, remote: str | None = None, backend: str = "gpu",
                lease_seconds: float | None = None, max_retries: int = 3, tuner: Callable[..., Any] | None = None,
                on_update: Callable[[Sequence[Entry]], None] | None = None,
                run_id: str | None = None, ship: bool = True) -> dict[str, Any]:
    """Prewarm every kernel × target on the Ray cluster at ``address`` (None: ``settings.prewarm.address``, else
    Ray's default); the summary (``entries``, ``failures``, per-target ``counts``, per-node ``nodes``, and
    ``shipped``). See the module docstring.

    ``tuner`` replaces the backend's tuner in the tasks (tests, other measurement setups: it must pickle), called
    as ``tuner(settings, build, pool=...)`` (``pool``: level 1's compile shards, :mod:`kbuild.prewarm.shards`);
    ``on_update`` hears the entries whenever one changes state; ``ship`` (when this call starts Ray) sends the
    project and kbuild to the nodes through Ray's ``runtime_env`` (:func:`ship_env`).

    ``address`` and ``lease_seconds`` are held to the settings model's rules (:func:`kbuild.settings.sources.apply_flag`),
    and, when this call starts Ray, the address to :func:`check_cluster`'s, before any kernel is imported."""
    from kbuild.build.pipeline import resolve_builds
    from kbuild.build.prewarm import with_remote
    from kbuild.build.resolve import select_kernels, select_targets

    if backend not in ("gpu", "model"):
        raise UsageError(f"--backend: expected gpu or model, got {backend!r}")
    if settings.tune == "off":
        raise UsageError(f"{settings.config_file}: tune: \"off\" means builds never look up tuned results, so there "
                         f"is nothing to prewarm; set tune = \"auto\" (or KBUILD_TUNE=auto)")
    given = address is not None
    settings = apply_flag(settings, "prewarm.address", address, flag="address")
    settings = apply_flag(settings, "prewarm.lease_seconds", lease_seconds, flag="lease_seconds")
    lease_seconds = settings.prewarm.lease_seconds
    ray = _ray()
    started_ray = not ray.is_initialized()
    join = check_cluster(settings, given=given) if started_ray else None
    settings = with_remote(settings, remote)
    run_id = run_id or f"prewarm-{uuid.uuid4().hex[:12]}"
    started = time.time()
    # the declared kernels and the recordings' (named and keyed as the build does; not with --kernel)
    builds = resolve_builds(settings, select_kernels(settings, kernels), select_targets(settings, targets),
                            recordings=not kernels)[0]
    entries: list[Entry] = []
    with shared_store(settings) as store:
        _probe_leases(store, run_id)
        for b in builds:
            assert b.tuned_key is not None  # tune != "off"
            key = model_key(b.tuned_key) if backend == "model" else b.tuned_key
            e = Entry(kernel=b.spec.name, target=b.target, key=key.hex)
            if store.get(key.hex) is not None:
                e.state, e.result = "found", {"kernel": e.kernel, "target": e.target.name, "key": e.key, "state": "found",
                                              "host": "(driver)"}
            entries.append(e)
    keyed = time.time()
    shipped = started_ray and ship
    if started_ray:
        with tempfile.TemporaryDirectory(prefix="kbuild-ship-") as staging:  # ray.init uploads it
            env = ship_env(settings, Path(staging)) if shipped else None
            _init(ray, join, backend, sorted({e.cc for e in entries}), env)
    elif ship:
        log.info("Ray was initialised by the caller: its runtime_env applies, kbuild ships nothing")
    joined = time.time()
    try:
        workers = _run(ray, settings, entries, run_id=run_id, backend=backend, lease_seconds=lease_seconds,
             max_retries=max_retries, tuner=tuner, on_update=on_update, shipped=shipped)
    finally:
        if started_ray:
            ray.shutdown()
    failures = [e.result for e in entries if e.state == "failed"]
    return {
        "engine": "ray", "backend": backend, "run_id": run_id, "seconds": round(time.time() - started, 3),
        "stores": [r.url for r in settings.remotes if r.writable],
        "counts": {t: dataclasses.asdict(c) for t, c in counts_by_target(entries).items()},
        "entries": [{**e.result, "kernel": e.kernel, "target": e.target.name, "key": e.key, "state": e.state,
                     "attempts": e.attempts, "shards": e.shards} for e in entries],
        "failures": failures, "shipped": shipped, "nodes": by_node(entries), "workers": workers,
        "phases": {"keys_seconds": round(keyed - started, 3), "ray_init_seconds": round(joined - keyed, 3)},
        "notes": notes(settings, kernels),
    }


def notes(settings: Settings, kernels: Sequence[str] | None = None) -> list[str]:
    """What the summary says this run left out: the kernels of the settings' recordings when ``--kernel`` named
    declared ones (a recorded kernel is prewarmed with the others, under the name the build gives it)."""
    if not settings.recordings or not kernels:
        return []
    return [f"--kernel names declared kernels: the kernels of [tool.kbuild] recordings "
            f"({', '.join(settings.recordings)}) were not prewarmed in this run"]


def by_node(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    """What each node and GPU did: per (node, GPU ids) the tasks it ran (compile, level-1 compile shards and tune,
    as the entries' last attempts record them), their busy seconds and the entries it tuned or found, first start
    to last finish."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for e in entries:
        tasks = [("compile", e.result.get("compile"))] if e.result.get("compile") else []
        tasks += [("shard", sh) for sh in e.shards if sh.get("state") == "done"]
        if e.result.get("started") is not None:
            tasks.append(("tune", e.result))
        for kind, t in tasks:
            assert t is not None
            ids = tuple(t.get("gpu_ids") or ())
            row = out.setdefault((t.get("node"), ids), {
                "node": t.get("node"), "host": t.get("host"), "gpu": t.get("gpu"), "gpu_ids": list(ids),
                "tasks": 0, "compile_tasks": 0, "shard_tasks": 0, "tune_tasks": 0, "busy_seconds": 0.0,
                "first_start": None,
                "last_finish": None, "entries": []})
            row["tasks"] += 1
            row[f"{kind}_tasks"] += 1
            row["busy_seconds"] = round(row["busy_seconds"] + float(t.get("seconds") or 0.0), 3)
            if t.get("started") is not None:
                row["first_start"] = min(x for x in (row["first_start"], t["started"]) if x is not None)
            if t.get("finished") is not None:
                row["last_finish"] = max(x for x in (row["last_finish"], t["finished"]) if x is not None)
            if kind == "tune":
                row["entries"].append({"kernel": e.kernel, "target": e.target.name, "state": t.get("state"),
                                       "seconds": t.get("seconds")})
    return sorted(out.values(), key=lambda r: (str(r["host"]), str(r["node"]), r["gpu_ids"]))


def _probe_leases(store: Any, run_id: str) -> None:
    """Take and give up a lease of this run's own, so that a tier without leases (an HTTP server without MOVE)
    or one that is down stops the run before anything is submitted."""
    import hashlib

    leases = leases_of(store)
    probe = hashlib.sha256(run_id.encode()).hexdigest()
    claim = leases.acquire(probe, run_id, 60.0, owner={"probe": True})
    if claim.ok and claim.held is not None:
        leases.release(claim.held)


def _where_address(settings: Settings, given: bool) -> str:
    return "--ray" if given else (f"{settings.config_file}: [tool.kbuild.prewarm] address (or "
                                  "KBUILD_PREWARM_ADDRESS)")


def check_cluster(settings: Settings, *, given: bool = True) -> str | None:
    """Before Ray sees ``settings.prewarm.address`` (:mod:`kbuild.prewarm.address`): a ``ray://`` address needs
    ``ray[client]``, and a Ray cluster must answer there within ``connect_timeout`` (a
    :class:`~kbuild.errors.ClusterUnreachableError`, exit status 2, naming the address and ``where`` it came from:
    ``--ray`` when ``given``). Unset or ``auto``: the address Ray would find (``RAY_ADDRESS``, or a cluster ``ray
    start`` made here), checked the same way, or None when it finds none (a new local cluster then). Returns the
    address to hand to ``ray.init`` (``local``: start one here)."""
    from kbuild.prewarm.address import check_reachable
    from kbuild.settings.ray_address import parse

    text = settings.prewarm.address or "auto"
    where = _where_address(settings, given and settings.prewarm.address is not None)
    address = parse(text)  # the settings model checked the form already
    seconds = settings.prewarm.connect_timeout
    grpc = parse_bool(env_value("RAY_USE_TLS") or "0") is not True  # Ray's TLS: no plain HTTP/2 to speak
    if address.kind == "local":
        return "local"
    if address.kind == "client":
        try:
            from ray._private.utils import get_ray_client_dependency_error
        except ImportError:  # another Ray: its ray.init says what it lacks
            get_ray_client_dependency_error = lambda: None  # noqa: E731
        if get_ray_client_dependency_error() is not None:
            raise MissingDependencyError(f"{where} {text}: a Ray Client address, and Ray Client needs the "
                                         "package ray[client], which is not installed; install it with: pip "
                                         "install 'ray[client]', or give the cluster's GCS address (HOST:6379)")
    if address.kind == "auto":
        found = _found_address()
        if found is None:
            return None if settings.prewarm.address is None else "auto"
        try:
            address = parse(found)
        except ValueError:
            return "auto"  # Ray's own business (a ray:// RAY_ADDRESS...)
        where = ("the cluster Ray found for \"auto\" (RAY_ADDRESS, or the address the last `ray start` on this "
                 "machine left behind)")
    try:
        check_reachable(address, seconds, grpc=grpc)
    except ClusterUnreachableError as exc:
        hint = ("run `ray stop` (a cluster that died leaves its address behind) or unset RAY_ADDRESS, or pass --ray "
                "local for a new cluster here") if address.text != text else (
                "check the address (`ray status` on the head node prints it) and that the cluster is up")
        raise ClusterUnreachableError(f"{where} {address.text}: {exc} (checked for {seconds:g} s, "
                                      f"[tool.kbuild.prewarm] connect_timeout)\n  next step: {hint}") from None
    return address.text if address.text == text else "auto"


def _found_address() -> str | None:
    """The address ``ray.init(address="auto")`` would join, as Ray finds it; None when it finds none."""
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # another Ray: its ray.init decides alone
        return None
    try:
        return canonicalize_bootstrap_address("auto")  # type: ignore[no-any-return]
    except ConnectionError:
        return None
    except Exception as exc:  # a Ray of other ways: its ray.init decides
        log.debug("looking up Ray's auto address failed: %s", exc)
        return None


def _init(ray: Any, address: str | None, backend: str, ccs: Sequence[int],
          runtime_env: dict[str, Any] | None = None) -> None:
    """Join the cluster at ``address`` (:func:`check_cluster` checked it); without one, the cluster ``ray start``
    made on this machine, else (and for ``local``) a new local one whose resources are this machine's GPUs
    (``kbuild_sm_<cc>`` each; the cost model: one per core and target, labelled stand-ins for GPUs).
    ``runtime_env``: the job's (:func:`ship_env`), uploaded here. A ``ray.init`` that fails anyway is a
    :class:`~kbuild.errors.ClusterUnreachableError` with Ray's reason in one line."""
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING, "configure_logging": False}
    if runtime_env is not None:
        quiet["runtime_env"] = runtime_env
    if address and address != "local":
        try:
            ray.init(address=address, **quiet)
        except Exception as exc:
            from kbuild.console import printable

            lines = [printable(line).strip() for line in str(exc).splitlines() if line.strip()]
            raise ClusterUnreachableError(f"joining the Ray cluster at {address} failed: {type(exc).__name__}: "
                                          f"{lines[0] if lines else ''}") from None
        return
    if address is None:
        try:
            ray.init(address="auto", **quiet)
            return
        except ConnectionError:
            pass
    resources = node_resources() if backend == "gpu" else {resource_name(cc): float(os.cpu_count() or 1)
                                                            for cc in ccs}
    ray.init(resources=resources, include_dashboard=False, **quiet)


def _run(ray: Any, settings: Settings, entries: list[Entry], *, run_id: str, backend: str, lease_seconds: float,
         max_retries: int, tuner: Callable[..., Any] | None, on_update: Callable[[Sequence[Entry]], None] | None,
         shipped: bool = False) -> list[dict[str, Any]]:
    """Run every unfinished entry: its compile task, then its tune on a worker of its target
    (:mod:`kbuild.prewarm.workers`); the workers' records."""
    from collections import deque

    from kbuild.prewarm.tasks import compile_task
    from kbuild.prewarm.workers import WorkerPool, wanted_per_cc

    exceptions = ray.exceptions
    compile_remote = ray.remote(num_cpus=1, max_retries=max_retries)(compile_task)
    board = _board(ray)
    resources = ray.cluster_resources()
    pool = WorkerPool(ray, backend=backend, max_retries=max_retries,
                      units={e.cc: int(resources.get(resource_name(e.cc), 0)) for e in entries},
                      settings=settings, kernels=sorted({e.kernel for e in entries if not e.finished}),
                      shipped=shipped)
    compiles: dict[Any, int] = {}  # compile task → entry
    baselines: dict[int, Any] = {}  # entry → its compile task's result (an object ref)
    queues: dict[int, deque[int]] = {}  # per cc: entries whose baseline is done, waiting for a worker
    tunes: dict[Any, tuple[int, Any]] = {}  # tune call → (entry, worker)
    lost: dict[int, int] = {}  # entry → how often the worker tuning it died

    def notify() -> None:
        if on_update is not None:
            on_update(entries)

    def fail(i: int, error: str, where: dict[str, Any] | None = None) -> None:
        e = entries[i]
        where = where or {}
        e.state = "failed"
        e.result = {"kernel": e.kernel, "target": e.target.name, "key": e.key, "state": "failed", "node": where.get("node"),
                    "gpu": where.get("gpu"), "host": where.get("host"), "error": error}

    for i, e in enumerate(entries):
        if e.finished:
            continue
        res = resource_name(e.cc)
        if resources.get(res, 0) < 1:
            fail(i, f"no node of the cluster offers the resource {res} (start GPU nodes with ray start --resources "
                    f"'{{\"{res}\": <GPUs>}}')")
            continue
        compiles[compile_remote.remote(settings, e.kernel, e.target, shipped=shipped)] = i
    for cc, n in wanted_per_cc(entries).items():  # started now: they warm up while the baselines compile
        pool.ensure(cc, n)

    def dispatch() -> None:
        for cc, queue in queues.items():
            while queue:
                w = pool.idle(cc)
                if w is None:
                    break
                i = queue.popleft()
                e = entries[i]
                e.attempts += 1
                e.state = "queued"
                w.state = "busy"
                w.entries.append(f"{e.kernel}/{e.target.name}")
                ref = w.handle.tune.remote(settings, e.kernel, e.target, baselines[i], run_id=run_id,
                                           expected_key=e.key, backend=backend, lease_seconds=lease_seconds,
                                           tuner=tuner, board=board, index=i, shipped=shipped,
                                           max_retries=max_retries)
                tunes[ref] = (i, w)

    def tuned(ref: Any) -> None:
        i, w = tunes.pop(ref)
        e = entries[i]
        try:
            out = ray.get(ref)
        except exceptions.RayActorError as exc:  # its node or process died: another worker takes the entry
            where = _board_snapshot(ray, board)["tune"].get(i, {})
            pool.lost(w, ray_error(exc))
            lost[i] = lost.get(i, 0) + 1
            if lost[i] > max_retries:
                fail(i, f"its tune worker died {lost[i]} times; the last: {ray_error(exc)}", where)
            else:
                e.state = "queued"
                queues.setdefault(e.cc, deque()).appendleft(i)
            return
        except Exception as exc:  # the task raised (its compile failed, or the tune itself outside the tuner)
            w.state = "idle"
            fail(i, ray_error(exc), _board_snapshot(ray, board)["tune"].get(i, {}))
            return
        w.state = "idle"
        if out["state"] == "leased":
            e.state, e.result = "waiting", out
            wait = min(LEASE_POLL_SECONDS, max(0.5, (out.get("expires") or time.time()) - time.time()))
            e.retry_at = time.time() + wait
        else:
            e.state, e.result = out["state"], out

    notify()
    last_look = 0.0
    try:
        while compiles or tunes or any(not e.finished for e in entries):
            waitable = [*compiles, *tunes, *pool.starting_refs()]
            ready = ray.wait(waitable, num_returns=1, timeout=0.5)[0] if waitable else []
            if not waitable:
                time.sleep(0.5)
            for ref in ready:
                if ref in compiles:
                    i = compiles.pop(ref)
                    baselines[i] = ref
                    queues.setdefault(entries[i].cc, deque()).append(i)
                elif ref in tunes:
                    tuned(ref)
                else:
                    w = pool.by_ready_ref(ref)
                    if w is not None:
                        pool.started(w)
            now = time.time()
            for i, e in enumerate(entries):
                if e.state == "waiting" and e.retry_at <= now and i not in queues.get(e.cc, ()):
                    queues.setdefault(e.cc, deque()).append(i)
            for cc, queue in queues.items():
                why = pool.exhausted(cc) if queue else None
                if queue and not why and not any(w.state in ("idle", "busy") for w in pool.of(cc)) \
                        and now - last_look >= 2.0:  # only workers Ray has not placed: is a node left to take them?
                    last_look = now
                    if ray.cluster_resources().get(resource_name(cc), 0) < 1:
                        why = f"no node of the cluster offers the resource {resource_name(cc)} any more"
                while why and queue:
                    fail(queue.popleft(), why)
            dispatch()
            busy = {entries[i].cc for i, _ in tunes.values()}
            for cc in {w.cc for w in pool.workers if w.live}:
                if cc not in busy and not any(e.cc == cc and not e.finished for e in entries):
                    pool.retire(cc)
            snap = _board_snapshot(ray, board)
            for i, _ in tunes.values():
                if i in snap["tune"] and entries[i].state == "queued":
                    entries[i].state = "running"
            _update_shards(entries, snap["shards"])
            notify()
    finally:
        pool.shutdown()
    _update_shards(entries, _board_snapshot(ray, board)["shards"])
    notify()
    return pool.summary()


def _update_shards(entries: list[Entry], shards: dict[str, dict[str, Any]]) -> None:
    """Each entry's compile shards: the board's records (live state, every attempt), and once the tune
    returned, its own (the state it read them in wins: the board hears of a shard's end asynchronously). A shard
    still running when its entry finished without reporting it (the worker that owned it died) is
    ``abandoned``."""
    board: dict[int, dict[str, dict[str, Any]]] = {}
    for sid, rec in shards.items():
        board.setdefault(int(rec["index"]), {})[sid] = rec
    for i, e in enumerate(entries):
        merged = dict(board.get(i, {}))
        for rec in e.result.get("shards") or []:
            merged[rec["id"]] = {**merged.get(rec["id"], {}), **rec,
                                 "attempts": merged.get(rec["id"], {}).get("attempts", [])}
        if not merged:
            continue
        e.shards = [{**sh, "state": "abandoned"} if e.finished and sh.get("state") in ("running", "submitted")
                    else sh for _, sh in sorted(merged.items(), key=lambda kv: _shard_order(kv[0]))]


def _shard_order(sid: str) -> tuple[str, int]:
    head, _, seq = sid.rpartition("/")
    return head, int(seq) if seq.isdigit() else 0


class _Board:
    """A small actor on the driver's node: which entries' tunes have started, and where; what each level-1
    compile shard is doing (``shard``: its start, end, failure or cancellation; one attempt per start)."""

    def __init__(self) -> None:
        self.started: dict[int, dict[str, Any]] = {}
        self.shards: dict[str, dict[str, Any]] = {}

    def start(self, index: int, where: dict[str, Any]) -> None:
        self.started[index] = where

    def shard(self, sid: str, event: str, record: dict[str, Any]) -> None:
        old = self.shards.get(sid, {})
        attempts = list(old.get("attempts", []))
        if event == "start":
            attempts.append({k: record.get(k) for k in ("node", "host", "pid", "started")})
        if old.get("state") == "done" and event != "done":
            return  # a cancellation or failure report that came after the end
        state = {"start": "running", "done": "done", "failed": "failed", "cancelled": "cancelled"}[event]
        self.shards[sid] = {**old, **record, "state": state, "attempts": attempts}

    def snapshot(self) -> dict[str, Any]:
        return {"tune": dict(self.started), "shards": {k: dict(v) for k, v in self.shards.items()}}


def _board(ray: Any) -> Any:
    """The board actor, placed on the driver's node (soft: a Ray client driver has none); None if it cannot start
    (the bars then count queued tasks as running)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        node = ray.get_runtime_context().get_node_id()
        strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=True)
        actor_cls = ray.remote(num_cpus=0, max_restarts=0)(_Board)
        return _BoardHandle(actor_cls.options(scheduling_strategy=strategy).remote())
    except Exception as exc:
        log.debug("no progress board: %s", exc)
        return None


class _BoardHandle:
    """The actor handle with the methods the tasks call, under the names they call them by (picklable)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    @property
    def started(self) -> Any:
        return self.actor.start

    @property
    def shard(self) -> Any:
        return self.actor.shard


def _board_snapshot(ray: Any, board: Any) -> dict[str, Any]:
    """The board's ``tune`` starts (entry index → where) and ``shards`` (id → record); empty without a board."""
    empty: dict[str, Any] = {"tune": {}, "shards": {}}
    if board is None:
        return empty
    try:
        return {**empty, **ray.get(board.actor.snapshot.remote(), timeout=5)}
    except Exception as exc:
        log.debug("progress board unavailable: %s", exc)
        return empty


