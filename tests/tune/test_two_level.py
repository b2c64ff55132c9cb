"""Two levels, one budget (issue 15): the choice of what ships, the side-by-side acceptance rule for a change of
configuration, the budget split, a project's space as the level-1 space, and the whole search end to end on
the CPU cost model through ``kbuild tune`` (an estimate: nothing it finds ships)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kbuild.bench.spec import Config, load_spec
from kbuild.tune.two_level import choose, final_beats_reference, level1_budget, project_spec

ROOT = Path(__file__).resolve().parents[2]


def test_what_ships_is_the_smallest_level1_time_over_its_accepted_level2_speedup() -> None:
    assert choose({"a": 1.0, "b": 1.05}, {}) == "a"
    assert choose({"a": 1.0, "b": 1.05}, {"b": 1.10}) == "b"  # 1.05 / 1.10 < 1.0
    assert choose({"a": 1.0, "b": 1.05}, {"b": 1.04}) == "a"
    assert choose({"b": 1.0, "a": 1.0}, {}) == "a"  # ties break by label: the same answer every run


def _final(speedup: float, lo: float, aa: tuple[float, float] = (0.998, 1.002)) -> dict[str, object]:
    return {"speedup": speedup, "speedup_ci": [lo, speedup + 0.01], "aa_ratio": 1.0, "aa_ci": list(aa)}


@pytest.mark.parametrize(("final", "ships"), [
    pytest.param(_final(1.062, 1.058), True, id="clear gain"),
    pytest.param(_final(1.003, 1.001), False, id="inside the A/A spread"),
    pytest.param(_final(1.02, 1.01, aa=(0.98, 1.02)), False, id="noisy run"),
    pytest.param(_final(0.95, 0.94), False, id="slower"),
    pytest.param({"error": "the shipped kernel failed its check: wrong-result"}, False, id="failed check"),
])
def test_a_new_configuration_ships_only_when_it_beats_the_autotune_best_beyond_the_aa_spread(
        final: dict[str, object], ships: bool) -> None:
    ok, why = final_beats_reference(final)
    assert ok is ships and why


def test_level1_gets_a_quarter_of_the_sweep_and_at_most_its_share_of_the_budget() -> None:
    assert level1_budget(48, 1000) == 96          # 0.25 × 48 configurations × 8 rounds
    assert level1_budget(288, 1000) == 300        # capped at 30% of the kernel's evaluations
    assert level1_budget(1, 3) == 1
    # an 18-point derived space: a quarter of its sweep (36) left room to screen the default alone; it gets what
    # screening every point once and both rungs take (18 + 3 × 8 + 7 × 2 + 1), within level 1's share
    assert level1_budget(18, 400) == 57 and level1_budget(18, 100) == 30


def test_a_projects_declared_space_becomes_the_level1_space_with_the_default_as_the_autotune_list() -> None:
    spec = load_spec("kbuild.bench.kernels.softmax:softmax", small=True)
    points = [{"constexprs": {"BLOCK": 1024}, "num_warps": 4, "num_stages": 3, "maxnreg": None, "num_ctas": 1},
              {"constexprs": {"BLOCK": 1024}, "num_warps": 8, "num_stages": 3, "maxnreg": 128, "num_ctas": 1}]
    ps = project_spec(spec, points)
    assert [c.label() for c in ps.configs] == [Config.from_dict(points[0]).label()]
    assert [c.label() for c in ps.search_space()] == [Config.from_dict(p).label() for p in points]
    assert "BLOCK" not in ps.constexprs and ps.ref == spec.ref


def test_kbuild_tune_runs_both_levels_on_the_cost_model_and_writes_json_png_and_html(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "kbuild", "tune", "--suite", "--only", "softmax", "--backend",
                           "model", "--budget-evals", "120", "--budget-seconds", "60", "--kinds", "moves,far",
                           "--jobs", "2", "--out", str(out), "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rep,) = json.loads(proc.stdout)
    assert rep["name"] == "softmax" and rep["backend"].startswith("cost-model")
    assert rep["level1"]["space_size"] == len(load_spec("kbuild.bench.kernels.softmax:softmax").search_space())
    assert rep["level1"]["evaluations"] <= level1_budget(rep["level1"]["space_size"], 120)
    assert rep["evaluations"] <= 120 + rep["level1"]["evaluations"]  # level 2 spends what level 1 left
    assert rep["config_label"] in {t["label"] for t in rep["level1"]["trials"] if t["status"] == "ok"}
    assert rep["final"] is None and rep["gains"]["final"] is None  # no GPU: nothing re-timed side by side
    assert rep["shipped_schedule"] == "untouched"  # the cost model never accepts a schedule
    assert rep["budget"]["kinds"] == ["moves", "far"]
    for suffix in ("json", "png", "html"):
        assert (out / f"softmax.tune.{suffix}").stat().st_size > 0
    assert "CPU estimate, not a measurement" in (out / "softmax.tune.html").read_text()


@pytest.mark.hostile(fault="bad command-line value", outcome="clean error")
@pytest.mark.parametrize(("flag", "value", "message"), [
    pytest.param("--kinds", "moves,teleport", "--kinds: unknown kind 'teleport'", id="unknown kind"),
    pytest.param("--top", "0", "--top must be at least 1", id="top 0"),
])
def test_bad_tune_flags_are_exit_2_naming_the_flag(flag: str, value: str, message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "kbuild", "tune", "--suite", "--backend", "model", flag, value],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
