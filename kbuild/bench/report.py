"""Write what ``kbuild bench`` measured: the JSON record (atomically), a PNG chart, and table rows."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from kbuild.fsutil import write_atomic

COLUMNS = ["kernel", "config", "time ms", "TFLOP/s", "GB/s", "bound", "% ceiling", "A/A spread"]


def rows(report: dict[str, Any]) -> list[list[str]]:
    out = []
    for k in report["kernels"]:
        if "error" in k:
            out.append([k["name"], "error", "-", "-", "-", "-", "-", k["error"][:60]])
            continue
        out.append([k["name"], k["best_label"], f"{k['time_ms']:.4f}", f"{k['tflops']:.1f}", f"{k['gbps']:.0f}",
                    k["bound"], f"{k['pct_of_ceiling']:.1f}%",
                    f"{k['aa']['spread_pct']:.2f}% [{(k['aa']['ci'][0] - 1) * 100:+.2f}, {(k['aa']['ci'][1] - 1) * 100:+.2f}]"])
    for s in report.get("skipped", []):
        out.append([s["name"], "skipped", "-", "-", "-", "-", "-", s["reason"]])
    return out


def ceiling_line(report: dict[str, Any]) -> str:
    c = report["ceilings"]
    return (f"ceilings: copy {c['copy']['gbps']:.0f} GB/s, bf16 matmul {c['matmul_bf16']['tflops']:.0f} TFLOP/s "
            f"({report['device']['gpu']}, driver {report['device'].get('driver')})")


def markdown_table(report: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(report)]
    return "\n".join(lines) + "\n"


def write_json(report: dict[str, Any], path: Path) -> None:
    write_atomic(path, json.dumps(report, indent=1, default=str).encode() + b"\n")


def write_chart(report: dict[str, Any], path: Path) -> bool:
    """Bar chart of percent of ceiling per kernel, A/A spread as error bars. False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ks = [k for k in report["kernels"] if "error" not in k]
    if not ks:
        return False
    names = [k["name"] for k in ks]
    pct = [k["pct_of_ceiling"] for k in ks]
    err = [k["pct_of_ceiling"] * k["aa"]["spread_pct"] / 100.0 for k in ks]
    colors = ["tab:blue" if k["bound"] == "compute" else "tab:orange" for k in ks]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(ks) + 1.8))
    ax.barh(names, pct, xerr=err, color=colors)
    for i, k in enumerate(ks):
        unit = f"{k['tflops']:.0f} TFLOP/s" if k["bound"] == "compute" else f"{k['gbps']:.0f} GB/s"
        ax.text(pct[i] + 1, i, f"{k['time_ms']:.3f} ms, {unit}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(110.0, max(pct) + 30))
    ax.set_xlabel("% of measured ceiling (blue: bf16 matmul rate, orange: copy bandwidth)")
    ax.set_title(f"kbuild bench — {report['device']['gpu']} — {ceiling_line(report).split(' (')[0]}", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=120)
    finally:
        plt.close(fig)
    write_atomic(path, buf.getvalue())
    return True
