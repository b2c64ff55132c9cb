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
    assert "x.tune.json: not valid JSON" in capsys.readouterr().err


ACCEPTED = json.loads((RESULTS / "flash_attn_d64.tune.json").read_text())
KEPT = json.loads((RESULTS / "softmax.tune.json").read_text())


def _edited(report: dict, path: tuple, value: object = None, *, delete: bool = False) -> dict:
    out = json.loads(json.dumps(report))
    node = out
    for k in path[:-1]:
        node = node[k]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


# The edits the JSON-readers property test found (a None decision, a list or string speedup, a missing
# speedup_ci), and their neighbours: each was a TypeError/ValueError/AttributeError/KeyError/ZeroDivisionError.
EDITS = [
    pytest.param(KEPT, ("decision",), None, False, "decision: is null, expected an object", id="null decision"),
    pytest.param(ACCEPTED, ("decision", "speedup"), [1.1], False, "decision.speedup: is a list", id="list speedup"),
    pytest.param(KEPT, ("decision", "speedup"), "1.2", False, "decision.speedup: is a string", id="string speedup"),
    pytest.param(KEPT, ("decision", "speedup_ci"), None, True, "decision.speedup_ci: missing", id="no speedup_ci"),
    pytest.param(ACCEPTED, ("decision", "speedup_ci"), [1.0], False, "decision.speedup_ci: is a list, expected a [low",
                 id="short speedup_ci"),
    pytest.param(ACCEPTED, ("decision", "checks"), None, True, "decision.checks: missing", id="no checks"),
    pytest.param(ACCEPTED, ("decision", "speedup"), 0, False, "decision.speedup: is a number, expected a positive",
                 id="zero speedup"),
    pytest.param(KEPT, ("algorithms", "random", "best_ratio"), 0.0, False, "algorithms.random.best_ratio: is a number",
                 id="zero ratio"),
    pytest.param(KEPT, ("algorithms", "greedy"), "x", False, "algorithms.greedy: is a string", id="string algorithm"),
    pytest.param(KEPT, ("algorithms", "ppo", "evaluations"), True, False, "algorithms.ppo.evaluations: is a boolean",
                 id="boolean count"),
    pytest.param(KEPT, ("accepted",), "yes", False, "accepted: is a string", id="string accepted"),
    pytest.param(KEPT, ("region",), [], False, "region: is a list", id="list region"),
    pytest.param(KEPT, ("name",), "soft\x1b[31mmax", False, "name: is a string, expected a printable string",
                 id="escape in name"),
]


@pytest.mark.hostile(fault="malformed JSON", outcome="clean error")
@pytest.mark.parametrize(("report", "path", "value", "delete", "message"), EDITS)
def test_an_edited_report_is_one_line_naming_the_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              report: dict, path: tuple, value: object,
                                                              delete: bool, message: str):
    (tmp_path / "k.tune.json").write_text(json.dumps(_edited(report, path, value, delete=delete)))
    out = tmp_path / "summary.json"
    assert _main([str(tmp_path), "--json", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert f"k.tune.json: not a `kbuild tune` report ({message}" in captured.err
    assert "\x1b" not in captured.err and not out.exists()


def test_a_report_with_one_search_has_no_ppo_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """A PPO-only report (``kbuild tune --algo ppo``) used to raise ValueError (min of nothing)."""
    report = _edited(KEPT, ("algorithms",), {"ppo": KEPT["algorithms"]["ppo"]})
    (tmp_path / "k.tune.json").write_text(json.dumps(report))
    assert _main([str(tmp_path), "--json", str(tmp_path / "s.json")]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["per_kernel"][KEPT["name"]]["ppo"] is None and summary["ppo"] == {"won": 0, "tied": 0, "lost": 0}
    assert "| — |" in capsys.readouterr().out


@pytest.mark.hostile(fault="bad output path", outcome="clean error")
def test_an_unwritable_summary_path_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    (tmp_path / "k.tune.json").write_text(json.dumps(KEPT))
    (tmp_path / "dir").mkdir()
    assert _main([str(tmp_path), "--json", str(tmp_path / "dir")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "--json" in captured.err


def test_a_failed_retiming_is_written_as_null_and_read_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """kbuild tune records a re-timing that failed as NaN, which is no JSON; it writes null, and the table reads it."""
    from kbuild.commands.tune import report_json
    from kbuild.jsonio import load_json

    report = _edited(KEPT, ("algorithms", "greedy", "confirmed_ratio"), math.nan)
    text = report_json(report)
    assert load_json(text, where="report")["algorithms"]["greedy"]["confirmed_ratio"] is None
    (tmp_path / "k.tune.json").write_text(text)
    assert _main([str(tmp_path)]) == 0
    assert json.dumps(report).count("NaN") == 1  # what the old writer (json.dumps) produced
    (tmp_path / "k.tune.json").write_text(json.dumps(report))
    assert _main([str(tmp_path)]) == 2  # and that is refused as not JSON, in one line
    assert "k.tune.json: not valid JSON (NaN is not a JSON number)" in capsys.readouterr().err
