"""``kbuild tune``: search a kernel's SASS schedule on a budget and report PPO beside the baselines.

``kbuild tune KERNEL --target sm_90`` tunes a kernel of the project (its baseline comes from the
pipeline, its inputs from its ``bench`` spec); ``kbuild tune --suite`` tunes the benchmark suite.
``--backend gpu`` (the default) measures on a GPU of the target architecture in an isolated worker
process; ``--backend model`` uses the CPU cost model, and says so: model results never ship.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from kbuild.arch import DEFAULT_SM, architecture
from kbuild.commands.common import add_config_args, settings_from_args
from kbuild.console import emit_json, print_table, progress
from kbuild.errors import GPUUnavailableError, UsageError
from kbuild.fsutil import check_output_dir, write_atomic
from kbuild.jsonio import read_json_file
from kbuild.settings.model import Settings, TuneRequest
from kbuild.settings.sources import flag_setting, settings_from_table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="search a kernel's SASS schedule (PPO beside random and greedy search)",
                       description="Tune one kernel (or the bench suite) for one target, within a budget of GPU "
                                   "evaluations and seconds, and report every algorithm's result.")
    p.add_argument("kernel", nargs="?", metavar="KERNEL", help="a kernel of the project (omit with --suite)")
    add_config_args(p, targets=False)
    p.add_argument("--suite", action="store_true", help="tune kbuild's benchmark suite instead of a project kernel")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="with --suite or --recording: only these kernels (a recorded kernel by its name or "
                        "module:qualname)")
    p.add_argument("--recording", metavar="FILE",
                   help="kernels from a `kbuild record` recording, which declare no space: a space is derived "
                        "for each (with --dry-run)")
    p.add_argument("--dry-run", action="store_true",
                   help="derive each kernel's level-1 space, compile and prune it on this CPU (shared memory, "
                        "register spills, occupancy, duplicates) and report; measure nothing")
    p.add_argument("--derive-space", action="store_true",
                   help="with --suite: tune on a derived space, pruned on this CPU first, instead of the declared "
                        "one (--dry-run always derives)")
    p.add_argument("--max-points", type=int, default=None, metavar="N",
                   help="largest derived space per kernel before it is thinned (default 128)")
    p.add_argument("--configs-from", metavar="BENCH_JSON",
                   help="with --suite: tune the SASS schedule of each kernel's configuration from a `kbuild bench` "
                        "record (implies --levels sass)")
    p.add_argument("--total-seconds", type=float, default=None, metavar="S",
                   help="with --suite: finish within about S seconds, sharing them out among the kernels and "
                        "algorithms still to run (never more than --budget-seconds each)")
    default = architecture(DEFAULT_SM).name
    p.add_argument("--target", default=default, metavar="SM", help=f"target architecture (default {default})")
    p.add_argument("--algo", default="default", choices=["default", "ppo", "random", "greedy", "all"],
                   help="SASS searcher: default (the project's `algorithm`, else greedy, on the whole budget), one "
                        "by name, or all three side by side, each on its own budget (a comparison report)")
    p.add_argument("--budget-evals", type=int, default=None, metavar="N", help="evaluations per algorithm")
    p.add_argument("--budget-seconds", type=float, default=None, metavar="S", help="seconds per algorithm")
    p.add_argument("--seed", type=int, default=None)
    defaults = Settings().tune_request()  # the model's defaults, not a project's
    p.add_argument("--horizon", type=int, default=defaults.horizon, help="steps per episode")
    p.add_argument("--backend", choices=["gpu", "model"], default="gpu",
                   help="gpu: measure on the GPU (default); model: CPU cost model estimate")
    p.add_argument("--levels", choices=["both", "sass"], default="both",
                   help="both: search the configuration space, then the SASS schedule of the best configurations "
                        "(default); sass: the SASS schedule of one configuration only (--configs-from picks it)")
    p.add_argument("--method", choices=["racing", "exhaustive"], default=defaults.method,
                   help="level-1 search: racing (Optuna TPE + successive halving, default) or the exhaustive sweep")
    p.add_argument("--top", type=int, default=defaults.top, metavar="N",
                   help=f"configurations that get a SASS search (default {defaults.top})")
    p.add_argument("--kinds", default=None, metavar="K,...",
                   help="SASS edit kinds: moves (one slot), far, yield, reuse, stall (default: the project's "
                        "`kinds`, else all five)")
    p.add_argument("--policy", default=defaults.policy, metavar="PATH|scratch",
                   help="PPO's starting point: a checkpoint (benchmarks/ppo_pretrain.py makes one), scratch, or "
                        "default (the shipped checkpoint when there is one)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="compile processes for level 1 (default: one per core, less one)")
    p.add_argument("--out", metavar="DIR",
                   help="write <kernel>.tune.json, <kernel>.tune.png and <kernel>.tune.html (two-level) here")
    p.set_defaults(func=run)


def _budget(args: argparse.Namespace, settings: Any) -> TuneRequest:
    """The request's evaluations, seconds and seed: each flag checked by the settings model's rules for its setting
    (a positive, finite budget; a seed NumPy takes), else the project's value, else the model's default (the
    environment's over it)."""
    base = settings if settings is not None else settings_from_table({}, where="<defaults>")
    flags = {"evaluations": flag_setting("budget.evaluations", args.budget_evals, "--budget-evals"),
             "seconds": flag_setting("budget.seconds", args.budget_seconds, "--budget-seconds"),
             "seed": flag_setting("seed", args.seed, "--seed")}
    return base.tune_request(**{name: value for name, value in flags.items() if value is not None})


def _backend(args: argparse.Namespace, target: Any) -> Any:
    if args.backend == "model":
        return None
    from kbuild.device.probe import has_gpu, local_gpus

    if not has_gpu(target.cc):
        have = ", ".join(f"{g.name} ({g.sm})" for g in local_gpus()) or "none"
        raise GPUUnavailableError(f"tuning {target.name} needs an {target.name} GPU; this machine has {have} "
                                  f"(use --backend model for a CPU estimate)")
    from kbuild.tune.measure.client import WorkerClient

    return WorkerClient()


def autotuned_configs(path: str) -> dict[str, str]:
    """Kernel name → the label of the configuration ``kbuild bench`` kept as the baseline, from its JSON record
    (``{"kernels": [{"name": ..., "best_label": ...}, ...]}``; kernels without a ``best_label`` are skipped).

    Read with :func:`kbuild.jsonio.read_json_file`; anything else is one UsageError naming the file and the key."""
    where = f"--configs-from: {path}"
    record = read_json_file(path, where=where)
    kernels = record.get("kernels") if isinstance(record, dict) else None
    if not isinstance(kernels, list):
        raise UsageError(f"{where}: not a `kbuild bench` JSON record (kernels: expected a list of kernels)")
    chosen: dict[str, str] = {}
    for i, k in enumerate(kernels):
        if not isinstance(k, dict):
            raise UsageError(f"{where}: not a `kbuild bench` JSON record (kernels[{i}]: expected an object)")
        if "best_label" not in k:
            continue
        for key in ("name", "best_label"):
            if not isinstance(k.get(key), str):
                raise UsageError(f"{where}: not a `kbuild bench` JSON record (kernels[{i}].{key}: expected a string)")
        chosen[k["name"]] = k["best_label"]
    return chosen


def _jobs(args: argparse.Namespace, target: Any) -> list[tuple[str, bytes, str | None, Any]]:
    """(name, baseline cubin, kernel symbol, KernelRef or None) for each kernel to tune."""
    from kbuild.tune.measure.backend import KernelRef

    jobs = []
    if args.suite:
        from kbuild.bench.kernels import SUITE
        from kbuild.bench.spec import compile_spec, load_spec

        names = args.only or list(SUITE)
        unknown = [n for n in names if n not in SUITE]
        if unknown:
            raise UsageError(f"--only: unknown suite kernel {unknown[0]!r}; known: {', '.join(SUITE)}")
        chosen = autotuned_configs(args.configs_from) if args.configs_from else {}
        for name in names:
            bench = load_spec(SUITE[name])
            if target.cc not in bench.archs:
                continue
            labels = [c.label() for c in bench.configs]
            label = chosen.get(bench.name, labels[0])
            if label not in labels:
                raise UsageError(f"--configs-from: {args.configs_from}: {bench.name}: configuration {label!r} is not "
                                 f"in the spec's space ({'; '.join(labels)})")
            idx = labels.index(label)
            compiled = compile_spec(bench, bench.configs[idx], target.cc)
            jobs.append((name, compiled.asm["cubin"], compiled.metadata.name,
                         KernelRef(spec=SUITE[name], config=idx)))
        return jobs
    if not args.kernel:
        raise UsageError("name a KERNEL of the project, or pass --suite")
    from kbuild.build.pipeline import run_pipeline

    settings = settings_from_args(args)
    spec = settings.kernel(args.kernel)
    (build,) = run_pipeline(settings, kernels=[spec.name], targets=[target])
    ref = None
    if args.backend == "gpu":
        if not spec.bench:
            idx = [k.name for k in settings.kernels].index(spec.name)
            raise UsageError(f"{settings.config_file}: [tool.kbuild.kernels][{idx}].bench: kernel {spec.name!r} has "
                             f"no bench spec; measuring it needs one")
        ref = KernelRef(spec=spec.bench, python_path=tuple(str(settings.project_dir / p) for p in settings.python_path))
    return [(spec.name, build.shipped.cubin, build.shipped.meta.get("symbol"), ref)]


def _kinds(args: argparse.Namespace) -> tuple[str, ...]:
    from kbuild.tune.env import KINDS

    if args.kinds is None:
        from kbuild.tune.env import KINDS

        return tuple(args.settings_kinds or KINDS)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise UsageError(f"--kinds: unknown kind {unknown[0] if unknown else '(none)'!r}; choose from "
                         f"{', '.join(KINDS)}")
    return kinds


def run(args: argparse.Namespace) -> int:
    from kbuild.build.resolve import select_targets
    from kbuild.tune.api import learning_curve_png, tune

    if args.max_points is None:
        from kbuild.tune.level1.derive import DEFAULT_MAX_POINTS

        args.max_points = DEFAULT_MAX_POINTS
    if args.recording and args.suite:
        raise UsageError("--recording and --suite name different kernels; give one")
    if args.dry_run or args.recording:
        if not args.dry_run:
            raise UsageError("--recording tunes nothing itself: a project that declares a recording "
                             "([tool.kbuild] recordings) with tune = \"auto\" tunes its plain @triton.jit kernels in "
                             "the build or `kbuild prewarm` on a GPU machine (a bench spec from the recorded call, a "
                             "derived space); add --dry-run to derive and prune the spaces here on the CPU")
        from kbuild.commands.tune_space import run_dry

        return run_dry(args, _target(args.target))
    if args.derive_space and not args.suite:
        raise UsageError("--derive-space tunes the bench suite on derived spaces (--suite); for a recording use "
                         "--recording FILE --dry-run")
    if args.derive_space and (args.configs_from or args.levels == "sass"):
        raise UsageError("--derive-space derives the level-1 space, which --levels sass and --configs-from skip")
    settings = settings_from_args(args) if not args.suite else None
    target = select_targets(settings, [args.target])[0] if settings else _target(args.target)
    request = _budget(args, settings)
    if args.total_seconds is not None and not 0 < args.total_seconds < math.inf:
        raise UsageError(f"--total-seconds must be positive and finite, got {args.total_seconds}")
    if args.top < 1:
        raise UsageError(f"--top must be at least 1, got {args.top}")
    if args.horizon < 1:
        raise UsageError(f"--horizon must be at least 1, got {args.horizon}")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    if args.out is not None:
        check_output_dir(args.out, "--out")  # before any work: a file there is refused now, not after the search
    args.settings_kinds = list(settings.kinds) if settings else None
    kinds = _kinds(args)
    if args.policy not in ("default", "scratch") and not Path(args.policy).is_file():
        raise UsageError(f"--policy: {args.policy}: no such checkpoint file")
    if args.algo == "default":
        from kbuild.tune.search import DEFAULT_ALGORITHM

        args.algo = settings.algorithm if settings else DEFAULT_ALGORITHM
    algorithms = ("random", "greedy", "ppo") if args.algo == "all" else (args.algo,)
    request = request.replace(algorithms=algorithms, kinds=kinds, horizon=args.horizon, policy=_policy(args),
                              top=args.top, method=args.method, jobs=args.jobs)
    if args.configs_from and args.levels == "both":
        args.levels = "sass"  # the configuration is given: only its SASS schedule is searched
    if args.levels == "both" and (args.suite or _has_space(settings, args.kernel)):
        return run_two_level(args, target, settings, request)
    deadline = time.monotonic() + args.total_seconds if args.total_seconds is not None else None  # compiles inside
    backend = _backend(args, target)
    jobs = _jobs(args, target)
    results = []
    try:
        with progress("tune", len(jobs) * len(algorithms), enabled=not args.json) as advance:
            for i, (name, cubin, symbol, ref) in enumerate(jobs):
                def report(algo: str, used: int, best: float, name: str = name) -> None:
                    advance(status=f"{name} {algo}: {used} evals, best {best:.4f}")

                kernel_secs = request.seconds
                if deadline is not None:
                    kernel_secs = min(request.seconds, share_of_deadline(deadline - time.monotonic(), len(jobs) - i,
                                                                         len(algorithms)))
                r = tune(cubin, request.replace(seconds=kernel_secs), kernel=symbol, backend=backend, kernel_ref=ref,
                         on_progress=report)
                rep = r.report()
                rep["name"] = name
                rep["target"] = target.name
                rep["budget"] = {"evaluations": request.evaluations, "seconds": round(kernel_secs, 2),
                                 "seed": request.seed}
                if ref is not None:
                    rep["kernel_ref"] = {"spec": ref.spec, "config": ref.config}
                if args.out:
                    out = Path(args.out)
                    write_atomic(out / f"{name}.tune.json", report_json(rep))
                    learning_curve_png(r, str(out / f"{name}.tune.png"))
                results.append(rep)
    finally:
        if backend is not None:
            backend.close()
    if args.json:
        emit_json(results if args.suite else results[0])
        return 0
    rows = []
    for rep in results:
        for algo, a in rep["algorithms"].items():
            retimed = a.get("confirmed_ratio")
            rows.append((rep["name"], algo, f"{a['best_ratio']:.4f}", "-" if retimed is None else f"{retimed:.4f}",
                         a["evaluations"], f"{a['seconds']:.1f}s", "←" if rep["winner"] == algo else ""))
    print_table(f"kbuild tune ({results[0]['backend'] if results else args.backend}; ratio = time / baseline time)",
                ["kernel", "algorithm", "search best", "re-timed", "evals", "time", "winner"], rows)
    for rep in results:
        print_table(None, ["kernel", "decision", "PPO"], [(rep["name"], rep["decision"]["reason"],
                                                          rep["ppo_vs_baselines"])])
    return 0


def report_json(rep: dict[str, Any]) -> str:
    """A report as JSON text. A re-timing that failed is NaN in the report; JSON has no NaN (strict readers such
    as :func:`kbuild.jsonio.load_json` and ``benchmarks/tune_table.py`` refuse it), so non-finite numbers are
    written as null, which every reader takes as "no re-timed ratio"."""

    def finite(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        return value

    return json.dumps(finite(rep), indent=2, default=str, allow_nan=False)


OVERHEAD_PER_KERNEL_S = 25.0
"""Seconds a kernel costs besides its searches on the GPU: compile, worker load, acceptance re-check and timing."""


def share_of_deadline(left: float, kernels_left: int, algorithms: int) -> float:
    """Search seconds per algorithm for the next kernel when ``left`` seconds remain for ``kernels_left`` kernels."""
    per_kernel = left / max(kernels_left, 1) - OVERHEAD_PER_KERNEL_S
    return max(per_kernel / max(algorithms, 1), 1.0)


def _target(name: str) -> Any:
    from kbuild.targets import parse_target

    try:
        return parse_target(name)
    except ValueError as exc:
        raise UsageError(f"--target: {exc}") from None


def _policy(args: argparse.Namespace) -> str | None:
    return None if args.policy == "scratch" else args.policy


def _has_space(settings: Any, kernel: str | None) -> bool:
    """Whether the project kernel declares a configuration space (more than its one default point)."""
    if settings is None or not kernel:
        return False
    from kbuild.build.resolve import resolve

    (b,) = resolve(settings, [settings.kernel(kernel)], [next(iter(_targets_of(settings)))])
    return len(b.space) > 1


def _targets_of(settings: Any) -> list[Any]:
    from kbuild.build.resolve import select_targets

    return select_targets(settings, None)


def run_two_level(args: argparse.Namespace, target: Any, settings: Any, request: TuneRequest) -> int:
    """Both levels (:func:`kbuild.tune.two_level.tune_two_level`) within ``request`` for each suite kernel, or the
    project kernel."""
    from kbuild.bench.peers import time_beside_peers
    from kbuild.bench.spec import Config, load_spec
    from kbuild.tune.api import learning_curve_png
    from kbuild.tune.level1 import GpuConfigMeasurer, ModelConfigMeasurer
    from kbuild.tune.measure.backend import KernelRef
    from kbuild.tune.two_level import project_spec, tune_two_level

    # the deadline starts now: a derived space is compiled and pruned inside the kernel's share of the total
    deadline = time.monotonic() + args.total_seconds if args.total_seconds is not None else None
    jobs: list[tuple[str, Any, tuple[str, ...]]] = []
    if args.suite:
        from kbuild.bench.kernels import SUITE

        names = args.only or list(SUITE)
        unknown = [n for n in names if n not in SUITE]
        if unknown:
            raise UsageError(f"--only: unknown suite kernel {unknown[0]!r}; known: {', '.join(SUITE)}")
        for name in names:
            spec = load_spec(SUITE[name])
            if target.cc in spec.archs:
                jobs.append((name, spec, ()))
    else:
        from kbuild.build.resolve import resolve

        kspec = settings.kernel(args.kernel)
        if not kspec.bench:
            idx = [k.name for k in settings.kernels].index(kspec.name)
            raise UsageError(f"{settings.config_file}: [tool.kbuild.kernels][{idx}].bench: kernel {kspec.name!r} "
                             f"has no bench spec; measuring it needs one")
        python_path = tuple(str(settings.project_dir / p) for p in settings.python_path)
        (b,) = resolve(settings, [kspec], [target])
        jobs.append((kspec.name, project_spec(load_spec(kspec.bench, python_path=python_path), b.space), python_path))
    sass_backend = _backend(args, target)
    results = []
    try:
        with progress("tune", len(jobs), enabled=not args.json) as advance:
            for i, (name, spec, python_path) in enumerate(jobs):
                started = time.monotonic()
                share = None if deadline is None else max(1.0, (deadline - started) / (len(jobs) - i))
                derived = None
                if args.derive_space:  # pruned on this CPU before the GPU measures anything, inside the share
                    from kbuild.commands.tune_space import derived_suite_space

                    advance(0, status=f"{name}: deriving and pruning its space")
                    spec, pruned = derived_suite_space(spec, target, max_points=args.max_points, jobs=args.jobs,
                                                       enabled=False)
                    derived = {k: v for k, v in pruned.as_dict().items() if k != "points"}
                    derived["wall_seconds"] = round(time.monotonic() - started, 2)
                kernel_secs = request.seconds
                if share is not None:  # both levels' compiles and checks are inside tune_two_level's seconds
                    kernel_secs = min(request.seconds, max(1.0, share - (time.monotonic() - started)))
                measurer: Any = (ModelConfigMeasurer(spec, arch=target.cc, jobs=request.jobs, python_path=python_path,
                                                     compile_timeout=request.compile_timeout)
                                 if sass_backend is None else
                                 GpuConfigMeasurer(spec, python_path=python_path, jobs=request.jobs,
                                                   compile_timeout=request.compile_timeout))

                def ref(c: Config, spec: Any = spec, python_path: tuple[str, ...] = python_path) -> KernelRef:
                    return KernelRef(spec=spec.ref, config=c.as_dict(), python_path=python_path)

                try:
                    r = tune_two_level(spec, target.cc, request.replace(seconds=kernel_secs), measurer=measurer,
                                       backend=sass_backend, kernel_ref=ref,
                                       on_progress=lambda msg: advance(0, status=msg))
                finally:
                    measurer.close()
                advance(0, status=f"{name}: timing what ships beside its peers")
                def untouched(cubin: bytes = r.baseline) -> bytes:
                    return cubin

                peers = time_beside_peers(spec, sass_backend, ref(r.config), untouched, r.cubin)
                rep = r.report()
                if peers is not None:  # the torch calls a user would make instead, timed beside what ships
                    rep["peers"] = peers
                rep.update({"name": name, "budget": {"evaluations": request.evaluations,
                                                     "seconds": round(kernel_secs, 2), "seed": request.seed,
                                                     "kinds": list(request.kinds)}})
                if derived is not None:
                    rep["derived_space"] = derived
                results.append(rep)
                if args.out:
                    _write_outputs(Path(args.out), name, rep, r, learning_curve_png)
                    if args.suite:  # after each kernel: a run cut short keeps the suite's figure so far
                        write_atomic(Path(args.out) / "suite.json",
                                     json.dumps(suite_summary(results, len(jobs)), indent=2, allow_nan=False) + "\n")
                advance(status=f"{name}: {r.config.label()} ×{(r.gains.get('final') or r.gains.get('total') or 1):.3f}")
    finally:
        if sass_backend is not None:
            sass_backend.close()
    if args.json:
        emit_json(results if args.suite else results[0])
        return 0

    def x(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}×"

    rows = [(rep["name"], rep["level1"]["autotune_best_label"] if rep.get("level1") else "-", rep["config_label"],
             x(rep["gains"]["level1"]), x(rep["gains"]["level2"]), x(rep["gains"]["final"]), rep["evaluations"],
             f"{rep['seconds']:.0f}s") for rep in results]
    print_table(f"kbuild tune, two levels ({results[0]['backend'] if results else args.backend}; gains against the "
                "autotune list's best)", ["kernel", "autotune best", "ships", "level 1", "level 2",
                                          "side by side", "evals", "time"], rows)
    return 0


def suite_summary(reports: list[dict[str, Any]], planned: int) -> dict[str, Any]:
    """The suite's figure from two-level reports: per kernel what ships against the best of its autotune list in the
    final side-by-side check (``gains.final``; a kernel that ships its default without one counts as 1.0×; one that
    ships another configuration with no side-by-side check, as on the cost model, counts as not measured), their
    geometric mean and maximum, and how many of the ``planned`` kernels it covers (a run cut short still says what it
    measured)."""
    def measured(r: dict[str, Any]) -> float | None:
        final = r["gains"].get("final")
        if final is not None:
            return float(final)
        return 1.0 if r.get("config_label") == r.get("default_label") else None

    shipped = {r["name"]: measured(r) for r in reports}
    per_kernel = {}
    for r in reports:
        final = r.get("final") or {}
        per_kernel[r["name"]] = {
            "shipped_speedup": shipped[r["name"]], "autotune_best": final.get("reference"),
            "ships": r.get("config_label"), "speedup_ci": final.get("speedup_ci"), "aa_ratio": final.get("aa_ratio"),
            "gains": r["gains"], "seconds": r["seconds"], "budget_seconds": r["budget"]["seconds"],
            "derived_space": {k: v for k, v in (r.get("derived_space") or {}).items()
                              if k in ("size", "kept", "pruned", "seconds", "wall_seconds")} or None,
            "kept_default_because": r.get("decision") if r.get("config_label") == r.get("default_label") else None,
            "peers": _peer_ratios(r.get("peers")),
        }
    values = [v for v in shipped.values() if v is not None]
    return {
        "kernels": len(reports), "planned": planned, "complete": len(reports) == planned,
        "not_measured_side_by_side": sorted(n for n, v in shipped.items() if v is None),
        "geomean_speedup": math.exp(sum(math.log(v) for v in values) / len(values)) if values else None,
        "max_speedup": max(values, default=None),
        "per_kernel": per_kernel,
    }


def _peer_ratios(peers: Any) -> dict[str, Any] | None:
    """``{peer label: peer ms / what ships ms}`` from a report's ``peers`` (above 1: what ships is faster; None for a
    peer unavailable here), or the reason none was timed."""
    if not isinstance(peers, dict):
        return None
    if "peers" not in peers or peers.get("not_timed") or peers.get("error"):
        return {"not_timed": peers.get("not_timed") or peers.get("error")}
    return {str(p.get("label")): p.get("ratio") for p in peers["peers"] if isinstance(p, dict)}


def _write_outputs(out: Path, name: str, rep: dict[str, Any], r: Any, learning_curve_png: Any) -> None:
    """``<name>.tune.json``, the chosen configuration's learning curve and the HTML report."""
    from kbuild.tune.report_html import write_report_html

    write_atomic(out / f"{name}.tune.json", report_json(rep))
    chosen = r.level2.get(r.config.label())
    png = None
    if chosen is not None and learning_curve_png(chosen, str(out / f"{name}.tune.png")):
        png = (out / f"{name}.tune.png").read_bytes()
    write_report_html(rep, r.baseline, r.cubin, out / f"{name}.tune.html", kernel_symbol=r.symbol, curve_png=png)
