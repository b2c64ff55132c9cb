"""Write what ``kbuild bench`` measured: the JSON record (atomically), a PNG chart, and table rows.

Two tables: one row per kernel (:data:`COLUMNS`, :func:`rows`; the last column names the fastest peer that
agrees with the reference), and one row per kernel × peer (:data:`PEER_COLUMNS`, :func:`peer_rows`) with
``peer_ms / kernel_ms`` and its 95% interval: above 1 the kernel is faster than the peer."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from kbuild.fsutil import write_atomic

COLUMNS = ["kernel", "config", "time ms", "TFLOP/s", "GB/s", "bound", "% ceiling", "A/A spread", "fastest peer"]
PEER_COLUMNS = ["kernel", "kernel ms", "peer", "peer ms", "peer/kernel [95% CI]", "rel err", "status"]


def fastest_peer(kernel: dict[str, Any]) -> dict[str, Any] | None:
    """The timed peer of ``kernel``'s record with the lowest ratio among those that agree with the reference."""
    timed = [p for p in kernel.get("peers", []) if "ratio" in p and p.get("agrees", True)]
    return min(timed, key=lambda p: p["ratio"]) if timed else None


def _fastest(kernel: dict[str, Any]) -> str:
    if not kernel.get("peers"):
        return "-"
    p = fastest_peer(kernel)
    return f"{p['label']} {p['ratio']:.2f}x" if p else "none timed"


def peer_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per kernel × peer; unavailable peers and peers that disagree with the reference are listed too."""
    out = []
    for k in report["kernels"]:
        if "error" in k:
            continue
        for p in k.get("peers", []):
            kms = f"{k['time_ms']:.4f}"
            if not p.get("available"):
                out.append([k["name"], kms, p["label"], "-", "-", "-", f"unavailable: {p.get('reason', '?')[:90]}"])
                continue
            errs = p.get("rel_err") or {}
            err = f"{max(errs.values()):.1e}" if errs else "-"
            if errs and not p.get("agrees"):
                status = f"DISAGREES (rel err > {p.get('tol', '?')})"
            else:
                status = "ok" + (f"; {p['note']}" if p.get("note") else "")
            if "ratio" in p:
                lo, hi = p["ratio_ci"]
                ms, ratio = f"{p['median_ms']:.4f}", f"{p['ratio']:.3f}x [{lo:.3f}, {hi:.3f}]"
            else:
                ms = ratio = "-"
            out.append([k["name"], kms, p["label"], ms, ratio, err, status])
    return out


def rows(report: dict[str, Any]) -> list[list[str]]:
    out = []
    for k in report["kernels"]:
        if "error" in k:
            out.append([k["name"], "error", "-", "-", "-", "-", "-", k["error"][:60], "-"])
            continue
        out.append([k["name"], k["best_label"], f"{k['time_ms']:.4f}", f"{k['tflops']:.1f}", f"{k['gbps']:.0f}",
                    k["bound"], f"{k['pct_of_ceiling']:.1f}%",
                    f"{k['aa']['spread_pct']:.2f}% [{(k['aa']['ci'][0] - 1) * 100:+.2f}, {(k['aa']['ci'][1] - 1) * 100:+.2f}]",
                    _fastest(k)])
    for s in report.get("skipped", []):
        out.append([s["name"], "skipped", "-", "-", "-", "-", "-", s["reason"], "-"])
    return out


def ceiling_line(report: dict[str, Any]) -> str:
    c = report["ceilings"]
    return (f"ceilings: copy {c['copy']['gbps']:.0f} GB/s, bf16 matmul {c['matmul_bf16']['tflops']:.0f} TFLOP/s "
            f"({report['device']['gpu']}, driver {report['device'].get('driver')})")


def _markdown(columns: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def markdown_table(report: dict[str, Any]) -> str:
    """The kernel table, then the peer table when any kernel has peers."""
    text = _markdown(COLUMNS, rows(report))
    prs = peer_rows(report)
    if prs:
        text += ("\nPeers, timed interleaved with the kernel in the same rounds (peer/kernel > 1: the kernel is "
                 "faster):\n\n" + _markdown(PEER_COLUMNS, prs))
    return text


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
