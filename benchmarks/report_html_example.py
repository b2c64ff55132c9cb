"""Make the example HTML tune report and its headless-Chromium screenshot from a CPU run on the cost model.

Level 1 (racing over the suite kernel's configuration space) and level 2 (a greedy SASS search of the chosen
configuration) both run on kbuild's CPU cost model: every figure is an **estimate, not a measurement**, and
the page says so. The cost model never accepts a schedule, so the page's right-hand column is the level-2
winner's candidate, rebuilt from its moves and labelled "NOT shipped".

    python benchmarks/report_html_example.py [--kernel matmul_leakyrelu_512x512x2048] [--out benchmarks/results]

Writes ``report_html_example_cost_model.html`` and ``report_html_example_cost_model.png`` under ``--out`` (the
PNG is committed; the HTML is left out of git, regenerate it with this script).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import compile_spec, load_spec
    from kbuild.sass.schedule import Schedule
    from kbuild.settings.model import Settings
    from kbuild.tune.api import learning_curve_png, tune
    from kbuild.tune.level1 import ModelConfigMeasurer, search_configs
    from kbuild.tune.measure.backend import MODEL_BACKEND
    from kbuild.tune.report_html import chromium_render, write_report_html

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="matmul_leakyrelu_512x512x2048", choices=sorted(SUITE))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--level1-evaluations", type=int, default=48)
    ap.add_argument("--level2-evaluations", type=int, default=40)
    ap.add_argument("--size", default="1200x3000", help="screenshot window WIDTHxHEIGHT")
    args = ap.parse_args(argv)

    spec = load_spec(SUITE[args.kernel], small=True)
    measurer = ModelConfigMeasurer(spec, small=True, jobs=1)
    try:
        l1 = search_configs(spec, measurer, method="racing", evaluations=args.level1_evaluations, seed=0, top=1)
    finally:
        measurer.close()
    chosen = l1.best
    compiled = compile_spec(spec, chosen, 90)
    baseline = compiled.asm["cubin"]
    request = Settings().tune_request(algorithms=("greedy",), evaluations=args.level2_evaluations, seed=0,
                                      kinds=("moves",))
    r = tune(baseline, request, kernel=compiled.metadata.name, backend=None)
    candidate = baseline
    if r.winner is not None:  # the cost model ships nothing; show the winner's schedule as a candidate
        schedule = Schedule.from_cubin(baseline, compiled.metadata.name)
        for record in r.searches[r.winner].best_moves:
            schedule.apply_edit(record)
        candidate = schedule.to_cubin(verify=True, disassemble_check=True)
    level2 = r.report()
    level2["backend"] = MODEL_BACKEND
    ms = {t.label: t.median_ms for t in l1.trials if t.status == "ok" and t.median_ms is not None}
    g1 = l1.autotune_best_ms / ms[chosen.label()] if chosen.label() in ms and l1.autotune_best_ms else None
    report = {
        "kernel": spec.name, "target": "sm_90", "gpu": None, "backend": MODEL_BACKEND, "estimate": True,
        "config_label": chosen.label(), "default_label": spec.configs[0].label(),
        "gains": {"level1": g1, "level2": 1.0, "total": g1, "final": None}, "final": None,
        "level1": l1.as_dict(), "level2": {chosen.label(): level2},
        "evaluations": l1.evaluations + level2["evaluations"], "seconds": round(l1.seconds + r.seconds, 2),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    curve = args.out / ".report_html_example_curve.png"
    png = curve.read_bytes() if learning_curve_png(r, str(curve)) else None
    curve.unlink(missing_ok=True)
    page = write_report_html(report, baseline, candidate, args.out / "report_html_example_cost_model.html",
                             kernel_symbol=compiled.metadata.name, curve_png=png)
    shot = args.out / "report_html_example_cost_model.png"
    w, h = (int(v) for v in args.size.split("x"))
    chromium_render(page, png=shot, size=(w, h))
    try:  # a palette PNG keeps the committed screenshot small
        from PIL import Image

        with Image.open(shot) as im:
            small = im.convert("RGB").quantize(colors=32)
        buf = io.BytesIO()
        small.save(buf, format="PNG", optimize=True)
        shot.write_bytes(buf.getvalue())
    except ImportError:
        pass
    print(f"{page}\n{shot} ({shot.stat().st_size} bytes); level 1 {l1.method}: {len(l1.trials)} configurations "
          f"tried, chosen {chosen.label()} (estimated {g1 or float('nan'):.3f}× over the autotune best); level 2 "
          f"winner {r.winner}: {r.decision.reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
