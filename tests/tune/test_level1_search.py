"""The level-1 searcher on a synthetic noisy landscape (a TEST FAKE: tests/tune/level1_fake.py, not a measurement).

Checked: a failing configuration (compile, launch, wrong result: the fastest point of all is wrong) is never
timed or chosen; racing finds the known optimum within 2 % over several seeds at ≤ 25 % of the exhaustive
sweep's evaluations; the budget holds; one seed gives one result.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from level1_fake import AUTOTUNE, FAST_BUT_WRONG, SPACE, FakeMeasurer, fate, optimum, spec, true_ms

from kbuild.bench.spec import Config
from kbuild.errors import UsageError
from kbuild.tune.level1 import Space, search_configs
from kbuild.tune.level1.search import NoWorkingConfig

SEEDS = range(6)


@pytest.fixture(scope="module")
def exhaustive():  # type: ignore[no-untyped-def]
    return search_configs(spec(), FakeMeasurer(0), method="exhaustive")


def test_space_of_a_grid_has_its_dimensions_and_a_list_its_index() -> None:
    grid = Space.of(SPACE)
    assert grid.grid and dict(grid.dimensions) == {"BLOCK_M": (32, 64, 128, 256), "BLOCK_N": (32, 64, 128, 256),
                                                   "num_warps": (2, 4, 8), "num_stages": (2, 3, 4)}
    for c in SPACE:
        assert grid.config(grid.params(c)) == c
    listed = Space.of(AUTOTUNE)
    assert not listed.grid and dict(listed.dimensions) == {"index": (0, 1, 2, 3)}
    assert [listed.config(listed.params(c)) for c in AUTOTUNE] == AUTOTUNE
    # One point missing from the grid: searched by index.
    assert not Space.of(SPACE[1:]).grid


def test_exhaustive_times_every_working_config_and_reports_every_failure(exhaustive) -> None:  # type: ignore[no-untyped-def]
    statuses = collections.Counter(t.status for t in exhaustive.trials)
    assert statuses == collections.Counter(fate(c) for c in SPACE)
    assert statuses["wrong-result"] and statuses["compile-error"] and statuses["launch-error"]
    n_ok = statuses["ok"]
    assert exhaustive.evaluations == n_ok * exhaustive.rounds
    assert exhaustive.launches == exhaustive.evaluations * exhaustive.reps
    _best, opt = optimum()
    assert true_ms(exhaustive.best) <= 1.02 * opt
    assert exhaustive.best.label() != FAST_BUT_WRONG.label()
    assert {c.label() for c in AUTOTUNE} >= {exhaustive.autotune_best.label()}
    assert exhaustive.gain == pytest.approx(exhaustive.autotune_best_ms / exhaustive.best_ms)
    assert exhaustive.gain > 1.0
    wrong = next(t for t in exhaustive.trials if t.label == FAST_BUT_WRONG.label())
    assert wrong.status == "wrong-result" and wrong.samples_ms == [] and wrong.error


def test_racing_finds_the_optimum_within_2pct_at_a_quarter_of_the_evaluations(exhaustive) -> None:  # type: ignore[no-untyped-def]
    _, opt = optimum()
    hits, ratios = 0, []
    for seed in SEEDS:
        fake = FakeMeasurer(seed)
        r = search_configs(spec(), fake, seed=seed, fraction=0.2)
        assert r.backend.endswith("(test fake, not a measurement)")
        assert fate(r.best) == "ok" and all(fate(c) == "ok" for c in r.top)
        assert r.evaluations <= r.budget
        assert sum(len(labels) * rounds for labels, rounds, _ in fake.timed) == r.evaluations
        ratios.append(r.evaluations / exhaustive.evaluations)
        hits += true_ms(r.best) <= 1.02 * opt
        # The final batch holds the autotune list's best beside the winner: the gain is read from one batch.
        final_labels, final_rounds, _ = fake.timed[-1]
        assert final_rounds == exhaustive.rounds
        assert r.best.label() in final_labels and r.autotune_best.label() in final_labels
        assert 1 <= len(r.top) <= 3 and r.top[0] == r.best
    rate = hits / len(SEEDS)
    print(f"racing within 2% of the optimum: {hits}/{len(SEEDS)} seeds; evaluations / exhaustive: "
          f"max {max(ratios):.3f}")
    assert rate == 1.0
    assert max(ratios) <= 0.25


def test_racing_respects_a_tight_budget_and_screens_the_autotune_list_first() -> None:
    fake = FakeMeasurer(3)
    r = search_configs(spec(), fake, seed=3, evaluations=90)
    assert r.evaluations <= 90 == r.budget
    first_batch = fake.timed[0][0]
    assert {c.label() for c in AUTOTUNE if fate(c) == "ok"} <= set(first_batch)
    assert len(r.trials) < len(SPACE)
    assert fate(r.best) == "ok"


def test_a_budget_below_the_final_rung_is_raised_and_says_so() -> None:
    r = search_configs(spec(), FakeMeasurer(1), seed=1, evaluations=5)
    assert r.budget > 5 and r.evaluations <= r.budget
    assert any("budget raised" in n for n in r.notes)


def test_one_seed_one_result() -> None:
    a = search_configs(spec(), FakeMeasurer(7), seed=7, evaluations=120)
    b = search_configs(spec(), FakeMeasurer(7), seed=7, evaluations=120)
    assert [t.label for t in a.trials] == [t.label for t in b.trials]
    assert a.best == b.best and a.best_ms == b.best_ms and a.evaluations == b.evaluations
    c = search_configs(spec(), FakeMeasurer(7), seed=8, evaluations=120)
    assert [t.label for t in c.trials] != [t.label for t in a.trials]


def test_as_dict_is_json_and_names_failures() -> None:
    import json

    r = search_configs(spec(), FakeMeasurer(2), seed=2, evaluations=120)
    d = json.loads(json.dumps(r.as_dict()))
    assert d["best_label"] == r.best.label() and d["gain"] == pytest.approx(r.gain)
    assert sum(d["failed"].values()) == sum(t["status"] != "ok" for t in d["trials"])


def test_nothing_works_is_an_error_naming_the_spec() -> None:
    import dataclasses

    broken = [Config({"BLOCK_M": 256, "BLOCK_N": 256}, num_warps=2, num_stages=s) for s in (2, 3)]
    s = dataclasses.replace(spec(), configs=broken, space=broken)
    for method in ("racing", "exhaustive"):
        with pytest.raises(NoWorkingConfig, match="synthetic"):
            search_configs(s, FakeMeasurer(0), method=method)  # type: ignore[arg-type]


def test_bad_arguments_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        search_configs(spec(), FakeMeasurer(0), method="greedy")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        search_configs(spec(), FakeMeasurer(0), fraction=0)
