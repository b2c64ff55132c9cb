"""``kbuild bench`` on a machine without a GPU, and the report writers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kbuild.bench import report
from kbuild.bench.kernels import SUITE


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kbuild.bench", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def test_no_gpu_is_exit_2_with_a_clear_message(tmp_path: Path) -> None:
    res = run("softmax", "--out", str(tmp_path))
    assert res.returncode == 2
    assert "error: no sm_90 GPU here; measurement needs one" in res.stderr
    assert "Traceback" not in res.stderr
    assert not list(tmp_path.iterdir())


def test_list_needs_no_gpu() -> None:
    res = run("--list", "--json")
    assert res.returncode == 0
    assert json.loads(res.stdout)["kernels"] == SUITE


def test_unknown_kernel_is_a_usage_error() -> None:
    res = run("softmx")
    assert res.returncode == 2 and "did you mean 'softmax'" in res.stderr


def test_verb_registers_on_a_subparser() -> None:
    import argparse

    from kbuild.bench.cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "softmax", "--small", "--json"])
    assert args.kernels == ["softmax"] and args.small and args.json and callable(args.func)


def fake_report() -> dict[str, Any]:
    kernel = {"name": "softmax", "best_label": "w8,s1", "time_ms": 0.25, "tflops": 5.4, "gbps": 4100.0,
              "bound": "memory", "pct_of_ceiling": 95.3, "aa": {"ratio": 1.001, "ci": [0.999, 1.003],
                                                                   "spread_pct": 0.1}}
    return {"device": {"gpu": "NVIDIA H200", "driver": "580"},
            "ceilings": {"copy": {"gbps": 4300.0}, "matmul_bf16": {"tflops": 790.0}},
            "kernels": [kernel, {"name": "broken", "error": "no configuration compiled"}],
            "skipped": [{"name": "tma_matmul_4096", "reason": "needs sm_90"}]}


def test_report_writers(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rep = fake_report()
    report.write_json(rep, tmp_path / "out" / "bench.json")
    assert json.loads((tmp_path / "out" / "bench.json").read_text())["kernels"][0]["name"] == "softmax"
    table = report.markdown_table(rep)
    assert "| softmax | w8,s1 | 0.2500 |" in table and "| broken | error |" in table and "skipped" in table
    assert report.write_chart(rep, tmp_path / "out" / "bench.png")
    assert (tmp_path / "out" / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert "4300 GB/s" in report.ceiling_line(rep)
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")] == []
