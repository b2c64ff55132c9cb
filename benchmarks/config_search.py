"""Level 1 of the tuner on the suite: the racing searcher against the exhaustive sweep, side by side (issue 15).

For each suite kernel, in one process and with one measurer (compiles and checks are shared; each
method's evaluations, launches and compiles are counted for itself): the exhaustive sweep over the
kernel's level-1 space, racing with ``--seeds`` seeds, then one head-to-head batch timing the
exhaustive best, each racing best and the autotune list's best interleaved for ``--rounds`` rounds.
"Within 2 %" is read from that batch. Raw samples of every trial go into ``--out``.

    python benchmarks/config_search.py [--only a,b] [--small] [--backend gpu|model] [--out FILE.json]

``--backend gpu`` (default) needs an sm_80/sm_90 GPU and measures in the isolated worker process.
``--backend model`` runs on a CPU: every number is then the cost model's estimate, NOT a measurement.
The racing budget is ``--fraction`` × space size × rounds evaluations (0.2 by default: the sweep's own
cost counts only configurations that work, so 0.2 of the whole space stays under 25 % of the sweep
unless a fifth of the space fails).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run_kernel(name: str, ref: str, args: argparse.Namespace) -> dict[str, Any]:
    from kbuild.bench.spec import load_spec
    from kbuild.device import stats
    from kbuild.tune.level1 import GpuConfigMeasurer, ModelConfigMeasurer, search_configs

    spec = load_spec(ref, small=args.small)
    measurer: Any
    if args.backend == "gpu":
        measurer = GpuConfigMeasurer(spec, small=args.small, jobs=args.jobs)
    else:
        measurer = ModelConfigMeasurer(spec, small=args.small, jobs=args.jobs)
    common = {"rounds": args.rounds, "reps": args.reps}
    try:
        t0 = time.perf_counter()
        ex = search_configs(spec, measurer, method="exhaustive", **common)
        ex_wall = time.perf_counter() - t0
        races = []
        for seed in range(args.seeds):
            t0 = time.perf_counter()
            r = search_configs(spec, measurer, method="racing", fraction=args.fraction, seed=seed, **common)
            races.append((r, time.perf_counter() - t0))
        # Head to head, in one interleaved batch.
        contenders = {c.label(): c for c in [ex.best, ex.autotune_best, *(r.best for r, _ in races)]}
        batch = measurer.time(list(contenders.values()), rounds=args.rounds, reps=args.reps)
        med = {label: stats.median(s) for label, s in batch.samples.items()}
    finally:
        measurer.close()
    ex_ms = med.get(ex.best.label(), float("nan"))
    auto_ms = med.get(ex.autotune_best.label(), float("nan"))
    racing_rows = []
    for r, wall in races:
        r_ms = med.get(r.best.label(), float("nan"))
        racing_rows.append({
            "seed": r.seed, "best_label": r.best.label(), "best_ms_head_to_head": r_ms,
            "ratio_to_exhaustive_best": r_ms / ex_ms, "within_2pct": r_ms <= 1.02 * ex_ms,
            "evaluations": r.evaluations, "evaluations_ratio": r.evaluations / ex.evaluations,
            "launches": r.launches, "launches_ratio": r.launches / ex.launches, "compiles": r.compiles,
            "tried": len(r.trials), "gain_over_autotune_best": auto_ms / r_ms, "wall_s": round(wall, 1),
            "result": r.as_dict()})
    return {
        "kernel": name, "ref": ref, "backend": ex.backend, "space_size": ex.space_size, "space_kind": ex.space_kind,
        "exhaustive": {"best_label": ex.best.label(), "best_ms_head_to_head": ex_ms, "evaluations": ex.evaluations,
                       "launches": ex.launches, "compiles": ex.compiles, "failed": ex.failed,
                       "gain_over_autotune_best": auto_ms / ex_ms, "wall_s": round(ex_wall, 1),
                       "result": ex.as_dict()},
        "autotune_best": {"label": ex.autotune_best.label(), "ms_head_to_head": auto_ms},
        "head_to_head_samples_ms": dict(batch.samples), "racing": racing_rows}


def main() -> int:
    from kbuild import console
    from kbuild.bench.kernels import SUITE

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated suite kernel names")
    p.add_argument("--small", action="store_true", help="the specs' reduced problem sizes")
    p.add_argument("--backend", choices=("gpu", "model"), default="gpu")
    p.add_argument("--out", type=Path)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--fraction", type=float, default=0.2)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--jobs", type=int, default=None, help="compile processes (default: cores - 1)")
    args = p.parse_args()
    names = args.only.split(",") if args.only else list(SUITE)
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        p.error(f"unknown kernel(s) {unknown}; the suite has {', '.join(SUITE)}")
    report: dict[str, Any] = {"backend": args.backend, "small": args.small, "options": vars(args) | {"out": str(args.out)},
                              "kernels": []}
    if args.backend == "model":
        report["note"] = "cost-model (CPU estimate, not a measurement): no number here was measured on a GPU"
    else:
        from kbuild.device import timing

        report["device"] = timing.device_report()
    started = time.perf_counter()
    for name in names:
        console.info(f"{name} ...")
        try:
            report["kernels"].append(run_kernel(name, SUITE[name], args))
        except Exception as exc:  # keep going: the record says what failed
            report["kernels"].append({"kernel": name, "error": f"{type(exc).__name__}: {exc}"[:1000]})
        if args.out:
            args.out.write_text(json.dumps(report, indent=1, default=str))
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    rows = []
    for k in report["kernels"]:
        if "error" in k:
            rows.append([k["kernel"], "-", k["error"][:60], "", "", "", "", "", ""])
            continue
        ex = k["exhaustive"]
        for r in k["racing"]:
            rows.append([k["kernel"], k["space_size"], f"{ex['best_label']} {ex['best_ms_head_to_head']:.4g}",
                         f"{r['best_label']} {r['best_ms_head_to_head']:.4g}", "yes" if r["within_2pct"] else "NO",
                         f"{r['evaluations_ratio']:.3f} ({r['evaluations']}/{ex['evaluations']})",
                         f"{r['launches_ratio']:.3f}", f"{r['gain_over_autotune_best']:.3f}",
                         ", ".join(f"{s} {n}" for s, n in ex["failed"].items()) or "none"])
    title = "level 1: racing vs exhaustive" + (" (COST MODEL, CPU estimate, not a measurement)"
                                                 if args.backend == "model" else "")
    console.print_table(title, ["kernel", "space", "exhaustive best (ms)", "racing best (ms)", "within 2%",
                                "evaluations ratio", "launches ratio", "gain vs autotune", "failed configs"], rows)
    report["table"] = rows
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
