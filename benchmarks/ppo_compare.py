"""PPO against random and greedy, per suite kernel, on the same budget: does pretraining earn PPO its place?

    python benchmarks/ppo_compare.py --backend model --budget-evals 150 --out benchmarks/results/ppo_compare_cpu_model
    python benchmarks/ppo_compare.py --backend gpu --budget-evals 333 --configs-from BENCH_JSON --out DIR   # on the GPU

Per kernel, four searchers each get a fresh budget of ``--budget-evals`` evaluations (and
``--budget-seconds``) on the same schedule:

* ``ppo_pretrained``: PPO fine-tuned from a checkpoint pretrained across the suite on the cost
  model (:mod:`kbuild.tune.pretrain`, "pretrained on the cost model, CPU estimate") **without this
  kernel**: the kernels are split into ``--folds`` folds (default: one per kernel, leave-one-out) and
  each fold's kernels are tuned with a checkpoint pretrained on the other folds only. The script
  checks every checkpoint's kernel list before using it.
* ``ppo_scratch``: the same policy network, from random weights.
* ``random`` and ``greedy``: :mod:`kbuild.tune.search`.

``--backend model`` scores every candidate with the CPU cost model (an estimate, deterministic; the
output says so everywhere) on the suite's ``small=True`` sm_90 cubins. ``--backend gpu`` measures on
the GPU through the measurement worker on the full-size kernels, then re-times each searcher's fastest
distinct schedules (:func:`kbuild.tune.api.confirm`) and judges by the re-timed ratios, where
searchers within the kernel's A/A spread of the best all count as winners (a tie). On the cost model a
tie is an equal ratio (to 1e-9).

Writes ``ppo_compare.json`` (every searcher's result, the checkpoints' metadata, the winners) and
``ppo_compare.md`` (the table) into ``--out``; checkpoints go to ``--out``/checkpoints (reused when
their metadata matches). Nothing is typed in: every figure comes from the runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kbuild.errors import UsageError
from kbuild.fsutil import write_atomic

SEARCHERS = ("ppo_pretrained", "ppo_scratch", "random", "greedy")
MODEL_LABEL = "cost model (CPU estimate, not a measurement)"


def folds_of(names: list[str], folds: int) -> list[list[str]]:
    """Split ``names`` round-robin into ``folds`` non-empty folds (at most one per kernel)."""
    k = max(1, min(folds, len(names)))
    return [names[i::k] for i in range(k)]


def fold_checkpoint(pool: list[Any], held_out: list[str], out_dir: Path, *, steps: int, seed: int) -> tuple[Path, dict]:
    """A checkpoint pretrained on ``pool`` less ``held_out`` (reused from ``out_dir`` when its metadata matches)."""
    from kbuild.tune.policy import load_checkpoint
    from kbuild.tune.pretrain import pretrain

    path = out_dir / f"pretrained_without_{'+'.join(sorted(held_out))}.zip"
    if len(path.name) > 200:
        import hashlib

        path = out_dir / f"pretrained_without_{hashlib.sha256('+'.join(sorted(held_out)).encode()).hexdigest()[:16]}.zip"
    want = sorted(k.name for k in pool if k.name not in held_out)
    if path.is_file():
        _, meta = load_checkpoint(path)
        if sorted(meta.get("kernels", [])) == want and meta.get("steps") == steps and meta.get("seed") == seed:
            return path, meta
    present = {k.name for k in pool}
    result = pretrain(pool, path, steps=steps, seed=seed, exclude=[n for n in held_out if n in present])
    return result.path, result.meta


def winners(scores: dict[str, float], noise: float) -> list[str]:
    """The searchers whose score is within ``noise`` of the best (lower ratio is better); NaN never wins."""
    finite = {k: v for k, v in scores.items() if not math.isnan(v)}
    if not finite:
        return []
    best = min(finite.values())
    return sorted(k for k, v in finite.items() if v - best <= noise)


def _score(r: Any) -> float:
    return r.confirmed_ratio if r.confirmed_ratio is not None else r.best_ratio


def compare_kernel(name: str, cubin: bytes, symbol: str, *, checkpoint: Path, backend: Any, ref: Any,
                   evaluations: int, seconds: float, seed: int, horizon: int) -> dict[str, Any]:
    """Run the four searchers on one kernel's schedule, each on its own budget; GPU: re-time and judge."""
    from kbuild.sass.schedule import Schedule
    from kbuild.tune.api import confirm
    from kbuild.tune.env import SassScheduleEnv
    from kbuild.tune.evaluate import BackendEvaluator, Budget, Evaluator, ModelEvaluator
    from kbuild.tune.search import SearchResult, run_search

    schedule = Schedule.from_cubin(cubin, symbol)
    if backend is not None:
        backend.load(ref, cubin)
    searches: dict[str, SearchResult] = {}
    movable = 0
    for i, searcher in enumerate(SEARCHERS):
        schedule.reset()
        budget = Budget(evaluations, seconds)
        evaluator: Evaluator = (BackendEvaluator(backend, budget, seed=seed * 1000 + i) if backend is not None
                                else ModelEvaluator(schedule, budget))
        env = SassScheduleEnv(schedule, evaluator, horizon=horizon)
        movable = len(env.movable)
        algorithm = "ppo" if searcher.startswith("ppo") else searcher
        policy = checkpoint if searcher == "ppo_pretrained" else None
        searches[searcher] = run_search(algorithm, env, seed=seed, policy=policy)
        searches[searcher].algorithm = searcher
    schedule.reset()
    noise = 1e-9
    if backend is not None:
        confirm(schedule, searches, backend)
        spreads = [r.confirmed_aa_spread for r in searches.values() if r.confirmed_aa_spread is not None]
        noise = max(spreads) if spreads else 0.0
    scores = {k: _score(r) for k, r in searches.items()}
    return {"name": name, "movable": movable, "noise": noise, "scores": scores, "winners": winners(scores, noise),
            "results": {k: r.as_dict() for k, r in searches.items()}}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Sole wins and shared wins (ties) per searcher, and pretrained PPO against scratch PPO."""
    out: dict[str, Any] = {s: {"sole_wins": 0, "shared_wins": 0} for s in SEARCHERS}
    for row in rows:
        w = row["winners"]
        for s in w:
            out[s]["sole_wins" if len(w) == 1 else "shared_wins"] += 1
    pre_vs_scratch = {"better": 0, "equal": 0, "worse": 0}
    for row in rows:
        a, b, noise = row["scores"]["ppo_pretrained"], row["scores"]["ppo_scratch"], row["noise"]
        pre_vs_scratch["equal" if abs(a - b) <= noise else "better" if a < b else "worse"] += 1
    return {"per_searcher": out, "pretrained_vs_scratch_ppo": pre_vs_scratch, "kernels": len(rows)}


def table(report: dict[str, Any]) -> str:
    label = report["label"]
    lines = [f"# PPO (pretrained, leave-one-out) vs scratch PPO, random, greedy — {label}", "",
             f"Budget per searcher: {report['budget']['evaluations']} evaluations "
             f"({report['budget']['seconds']} s); seed {report['budget']['seed']}. "
             f"Pretraining: {report['pretraining']['trained_on']}, {report['pretraining']['steps']} steps per "
             f"checkpoint, {len(report['pretraining']['folds'])} fold(s); each kernel tuned with a checkpoint "
             f"that never saw it. Ratio = time / baseline time (lower is faster); "
             f"{'re-timed ratios, ties within the A/A spread' if report['backend'] != 'model' else 'ties are equal estimates'}.",
             "", "| kernel | movable | " + " | ".join(SEARCHERS) + " | noise | winner(s) |",
             "|---|---|" + "---|" * len(SEARCHERS) + "---|---|"]
    for row in report["kernels"]:
        cells = []
        for s in SEARCHERS:
            r = row["results"][s]
            v = row["scores"][s]
            txt = "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"
            cells.append(f"{'**' + txt + '**' if s in row['winners'] else txt} ({r['evaluations']})")
        lines.append(f"| {row['name']} | {row['movable']} | " + " | ".join(cells) +
                     f" | {row['noise']:.2%} | {', '.join(row['winners']) or 'none'} |")
    s = report["summary"]
    lines += ["", "| searcher | sole wins | shared wins (ties) |", "|---|---|---|"]
    for name, c in s["per_searcher"].items():
        lines.append(f"| {name} | {c['sole_wins']} | {c['shared_wins']} |")
    p = s["pretrained_vs_scratch_ppo"]
    lines += ["", f"Pretrained PPO against scratch PPO: better on {p['better']}, equal on {p['equal']}, "
                  f"worse on {p['worse']} of {s['kernels']} kernels.", ""]
    return "\n".join(lines)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _gpu_jobs(names: list[str], configs_from: str | None) -> dict[str, tuple[bytes, str, Any]]:
    """Full-size cubins and KernelRefs for the GPU backend, on the configuration ``kbuild bench`` kept."""
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import compile_spec, load_spec
    from kbuild.commands.tune import autotuned_configs
    from kbuild.tune.measure.backend import KernelRef

    chosen = autotuned_configs(configs_from) if configs_from else {}
    jobs = {}
    for name in names:
        bench = load_spec(SUITE[name])
        labels = [c.label() for c in bench.configs]
        idx = labels.index(chosen[bench.name]) if chosen.get(bench.name) in labels else 0
        compiled = compile_spec(bench, bench.configs[idx], 90)
        jobs[name] = (compiled.asm["cubin"], compiled.metadata.name, KernelRef(spec=SUITE[name], config=idx))
    return jobs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["model", "gpu"], default="model")
    p.add_argument("--budget-evals", type=int, default=150)
    p.add_argument("--budget-seconds", type=float, default=300.0)
    p.add_argument("--only", action="append", metavar="NAME", help="compare on these suite kernels only")
    p.add_argument("--folds", type=int, default=0, help="pretraining folds (default 0: leave-one-out)")
    p.add_argument("--pretrain-steps", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--horizon", type=int, default=32)
    p.add_argument("--configs-from", metavar="BENCH_JSON", help="gpu: tune the configuration `kbuild bench` kept")
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "kbuild-ppo-cubins"))
    p.add_argument("--out", required=True, metavar="DIR")
    args = p.parse_args(argv)
    from kbuild.bench.kernels import SUITE
    from kbuild.tune.pretrain import TRAINED_ON, suite_cubins

    try:
        if args.budget_evals <= 0 or args.budget_seconds <= 0 or args.pretrain_steps <= 0:
            raise UsageError("--budget-evals, --budget-seconds and --pretrain-steps must be positive")
        names = args.only or list(SUITE)
        unknown = [n for n in names if n not in SUITE]
        if unknown:
            raise UsageError(f"--only: unknown suite kernel {unknown[0]!r}; known: {', '.join(SUITE)}")
    except UsageError as exc:
        print(f"ppo_compare: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    out = Path(args.out)
    started = time.monotonic()
    pool = suite_cubins(args.cache_dir)  # the pretraining pool: every suite kernel, small, sm_90, cost model
    small = {k.name: k for k in pool}
    names = [n for n in names if n in small]
    folds = folds_of(names, args.folds or len(names))
    checkpoints: dict[str, tuple[Path, dict]] = {}
    fold_meta = []
    for held_out in folds:
        path, meta = fold_checkpoint(pool, held_out, out / "checkpoints", steps=args.pretrain_steps, seed=args.seed)
        leaked = sorted(set(held_out) & set(meta["kernels"]))
        if leaked:  # leave-one-out honesty, checked on the checkpoint itself
            raise AssertionError(f"checkpoint {path} was pretrained on {leaked}, which it is used to tune")
        fold_meta.append({"held_out": held_out, "checkpoint": path.name, "kernels": meta["kernels"],
                          "seconds": meta["seconds"], "cost_model_evaluations": meta["cost_model_evaluations"]})
        for n in held_out:
            checkpoints[n] = (path, meta)
        print(f"pretrained without {', '.join(held_out)}: {meta['seconds']} s", file=sys.stderr)
    backend = None
    jobs: dict[str, tuple[bytes, str, Any]] = {n: (small[n].cubin, small[n].symbol, None) for n in names}
    if args.backend == "gpu":
        from kbuild.tune.measure.client import WorkerClient

        backend = WorkerClient()
        jobs = _gpu_jobs(names, args.configs_from)
    import sb3_contrib  # noqa: F401  (imported before any budget clock starts, as kbuild.tune.api does)

    rows = []
    try:
        for name in names:
            cubin, symbol, ref = jobs[name]
            t = time.monotonic()
            row = compare_kernel(name, cubin, symbol, checkpoint=checkpoints[name][0], backend=backend, ref=ref,
                                 evaluations=args.budget_evals, seconds=args.budget_seconds, seed=args.seed,
                                 horizon=args.horizon)
            rows.append(row)
            print(f"{name}: " + ", ".join(f"{k} {v:.4f}" for k, v in row["scores"].items()) +
                  f"; winner(s) {', '.join(row['winners'])} ({time.monotonic() - t:.0f} s)", file=sys.stderr)
    finally:
        if backend is not None:
            backend.close()
    report = {
        "label": MODEL_LABEL if args.backend == "model" else "GPU measurement (re-timed; ties within the A/A spread)",
        "backend": args.backend,
        "kernels_compiled": "small=True bench specs, sm_90, first configuration" if args.backend == "model"
        else f"full-size bench specs, sm_90, configurations from {args.configs_from or 'each spec first'}",
        "budget": {"evaluations": args.budget_evals, "seconds": args.budget_seconds, "seed": args.seed,
                   "horizon": args.horizon},
        "pretraining": {"trained_on": TRAINED_ON, "steps": args.pretrain_steps, "folds": fold_meta},
        "kernels": rows,
        "summary": summarise(rows),
        "seconds": round(time.monotonic() - started, 1),
        "command": "python benchmarks/ppo_compare.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    write_atomic(out / "ppo_compare.json", json.dumps(_finite(report), indent=2, allow_nan=False))
    write_atomic(out / "ppo_compare.md", table(report))
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
