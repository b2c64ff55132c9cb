"""benchmarks/tune_table.py reads the committed H200 tune reports; its figures come from them."""

from __future__ import annotations

import json
import math
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "h200" / "tune"


def _main(argv: list[str]) -> int:
    module = runpy.run_path(str(ROOT / "benchmarks" / "tune_table.py"))
    return int(module["main"](argv))


def test_table_and_summary_come_from_the_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "summary.json"
    assert _main([str(RESULTS), "--json", str(out)]) == 0
    reports = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.tune.json"))]
    table = capsys.readouterr().out
    assert sum(line.startswith("| ") and "region" not in line for line in table.splitlines()) == len(reports)
    shipped = [r["decision"]["speedup"] if r["accepted"] else 1.0 for r in reports]
    summary = json.loads(out.read_text())
    assert summary["geomean_speedup"] == pytest.approx(math.prod(shipped) ** (1 / len(shipped)))
    assert summary["max_speedup"] == max(shipped)
    assert sorted(summary["accepted"]) == sorted(r["name"] for r in reports if r["accepted"])
    assert sum(summary["ppo"].values()) == len(reports)


def test_an_empty_folder_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert _main([str(tmp_path)]) == 2
    assert "no *.tune.json reports" in capsys.readouterr().err


def test_a_report_that_is_not_a_tune_report_names_the_file_and_key(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]):
    (tmp_path / "x.tune.json").write_text(json.dumps({"algorithms": {}}))
    out = tmp_path / "summary.json"
    assert _main([str(tmp_path), "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "x.tune.json: not a `kbuild tune` report (no key 'decision')" in err
    assert not out.exists()
    (tmp_path / "x.tune.json").write_text("{")
    assert _main([str(tmp_path)]) == 2
    assert "x.tune.json: not JSON" in capsys.readouterr().err
