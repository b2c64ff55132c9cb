"""The tuner on the CPU cost-model backend: env contract, budgets, determinism, searches, acceptance."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium.spaces import Discrete

from kbuild.cli import main
from kbuild.sass.schedule import Schedule
from kbuild.settings.model import Settings, TuneRequest
from kbuild.settings.variables import Override
from kbuild.tune.accept import decide
from kbuild.tune.api import tune
from kbuild.tune.env import SassScheduleEnv
from kbuild.tune.evaluate import Budget, ModelEvaluator
from kbuild.tune.measure.backend import GPU_BACKEND, CheckResult, TimeResult
from kbuild.tune.search import greedy_search, ppo_search, random_search


def request(**changes: Any) -> TuneRequest:
    """The settings model's default tuning request with the SASS edit kind the tuners searched when they took keywords
    (``moves`` alone), ``changes`` over it."""
    return Settings().tune_request(**{"kinds": ("moves",), **changes})


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sass"
CUBIN = (FIXTURES / "softmax.sm90.cubin").read_bytes()


@pytest.fixture(scope="module")
def schedule() -> Schedule:
    return Schedule.from_cubin(CUBIN)


def make_env(schedule: Schedule, evaluations: int = 50, horizon: int = 16) -> SassScheduleEnv:
    schedule.reset()
    return SassScheduleEnv(schedule, ModelEvaluator(schedule, Budget(evaluations, 600)), horizon=horizon)


def test_env_passes_gymnasium_and_sb3_checkers(schedule):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = make_env(schedule, evaluations=10_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)
        sb3_check_env(make_env(schedule, evaluations=10_000), warn=True)
    obs, _ = env.reset(seed=3)
    assert obs.shape == env.observation_space.shape and env.observation_space.contains(obs)
    mask = env.action_masks()
    assert isinstance(env.action_space, Discrete)
    assert mask.shape == (env.action_space.n,) and mask.any()


def test_masked_actions_are_the_engines_legal_moves(schedule):
    env = make_env(schedule)
    env.reset()
    legal = schedule.legal_moves()
    mask = env.action_masks()
    for m, instr in enumerate(env.movable.tolist()):
        slot = int(schedule.pos[instr])
        assert not mask[2 * m] or legal[slot, 0]
        assert not mask[2 * m + 1] or legal[slot, 1]
    # A masked-out action never reaches the engine: the episode ends with the invalid reward.
    bad = int(np.flatnonzero(~mask)[0])
    _, reward, terminated, _, info = env.step(bad)
    assert terminated and reward == -1.0 and info["illegal"]
    assert schedule.moves == []


def test_ppo_stops_exactly_at_its_evaluation_budget(schedule):
    env = make_env(schedule, evaluations=40)
    result = ppo_search(env, seed=0, n_steps=16, batch_size=16)
    assert result.evaluations == 40
    assert env.evaluator.budget.used == 40


def test_seconds_budget_stops_the_search(schedule):
    env = make_env(schedule, evaluations=10**9)
    env.evaluator.budget.seconds = 0.5
    result = random_search(env, seed=0)
    assert result.seconds < 5 and result.evaluations > 0


def test_same_seed_same_result_on_the_model(schedule):
    a = tune(CUBIN, request(algorithms=("ppo", "random", "greedy"), evaluations=30, seed=7))
    b = tune(CUBIN, request(algorithms=("ppo", "random", "greedy"), evaluations=30, seed=7))
    for algo in ("ppo", "random", "greedy"):
        assert a.searches[algo].best_ratio == b.searches[algo].best_ratio
        assert a.searches[algo].best_moves == b.searches[algo].best_moves
        assert a.searches[algo].curve == b.searches[algo].curve
    assert a.diff == b.diff


def test_random_and_greedy_find_and_replay_improvements(schedule):
    for search in (random_search, greedy_search):
        env = make_env(schedule, evaluations=60)
        result = search(env, seed=1)
        assert result.evaluations <= 60
        assert result.best_ratio <= 1.0
        assert [c[1] for c in result.curve] == sorted((c[1] for c in result.curve), reverse=True)
        # The recorded moves reproduce the recorded ratio.
        schedule.reset()
        for slot, d in result.best_moves:
            schedule.apply(slot, d)
        if result.best_moves:
            fresh = ModelEvaluator(schedule, Budget(1, 60))
            assert math.isclose(fresh.evaluate(schedule).ratio, result.best_ratio)


def test_model_results_never_ship(schedule):
    r = tune(CUBIN, request(algorithms=("greedy",), evaluations=40, seed=0))
    assert not r.accepted
    assert r.cubin == CUBIN
    assert "cost model" in r.decision.reason or "no schedule beat" in r.decision.reason
    rep = r.report()
    assert rep["backend"].startswith("cost-model") and json.dumps(rep)


def _timing(ratio, ci, aa_ci):
    return TimeResult(backend=GPU_BACKEND, ratio=ratio, ci=ci, aa_ratio=1.0, aa_ci=aa_ci, baseline_ms=1.0,
                      candidate_ms=ratio)


GOOD_CHECK = CheckResult(valid=True, backend=GPU_BACKEND, k=10)


def test_acceptance_rule():
    # Inside the noise: the CI reaches past the A/A spread -> baseline kept.
    d = decide(verifier_problems=[], check=GOOD_CHECK, timing=_timing(0.995, (0.990, 0.999), (0.994, 1.006)))
    assert not d.accepted and "does not beat the A/A spread" in d.reason
    # Clearly faster: accepted, with the speedup and its interval.
    d = decide(verifier_problems=[], check=GOOD_CHECK, timing=_timing(0.90, (0.88, 0.92), (0.995, 1.004)))
    assert d.accepted and d.speedup is not None and math.isclose(d.speedup, 1 / 0.90)
    assert "samples_ms" in d.as_dict()  # the report keeps the raw acceptance timings
    # Any verifier problem, too few input sets, or a failed check keeps the baseline.
    assert not decide(verifier_problems=["x"], check=GOOD_CHECK, timing=_timing(0.5, (0.4, 0.6), (1, 1))).accepted
    few = CheckResult(valid=True, backend=GPU_BACKEND, k=3)
    assert "only 3 input sets" in decide(verifier_problems=[], check=few, timing=_timing(0.5, (0.4, 0.6), (1, 1))).reason
    bad = CheckResult(valid=False, backend=GPU_BACKEND, k=1, reason="output mismatch")
    assert "output mismatch" in decide(verifier_problems=[], check=bad, timing=None).reason


class NoisyBackend:
    """A synthetic GPU-like backend: every candidate is 'faster' by less than the noise."""

    name = GPU_BACKEND

    def load(self, kernel, baseline):
        return None

    def check(self, candidate, k=3, *, seed=0):
        return CheckResult(valid=True, backend=self.name, k=k)

    def time(self, candidate, *, rounds=8, reps=10):
        return _timing(0.997, (0.992, 1.002), (0.995, 1.005))

    def close(self):
        pass


def test_noise_level_candidate_comes_back_as_baseline_kept():
    from kbuild.tune.measure.backend import KernelRef

    r = tune(CUBIN, request(algorithms=("random",), evaluations=10),
             backend=NoisyBackend(), kernel_ref=KernelRef(spec="x:y"))
    assert not r.accepted and r.cubin == CUBIN
    assert "baseline kept" in r.decision.reason


def test_cli_bad_input(capsys, example_project: Path):
    cfg = str(example_project / "pyproject.toml")
    assert main(["tune", "softmax", "--config", cfg, "--target", "sm_90"]) == 2
    assert "tuning sm_90 needs an sm_90 GPU; this machine has none" in capsys.readouterr().err
    assert main(["tune", "nope", "--config", cfg, "--backend", "model"]) == 2
    assert "no kernel named 'nope'" in capsys.readouterr().err
    assert main(["tune", "softmax", "--config", cfg, "--backend", "model", "--budget-evals", "0"]) == 2
    assert "--budget-evals: must be positive, got 0" in capsys.readouterr().err


def test_cli_model_backend_json(capsys, example_project: Path, tmp_path: Path, kbuild_env: Override):
    kbuild_env.set(store=tmp_path / "store")
    code = main(["tune", "softmax", "--config", str(example_project / "pyproject.toml"), "--backend", "model",
                 "--algo", "greedy", "--budget-evals", "20", "--json", "--out", str(tmp_path / "rep")])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    assert doc["backend"].startswith("cost-model") and doc["accepted"] is False
    assert doc["algorithms"]["greedy"]["evaluations"] <= 20
    assert (tmp_path / "rep" / "softmax.tune.json").exists()


def test_cli_suite_tunes_the_configuration_bench_kept(capsys, tmp_path: Path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"kernels": [{"name": "softmax", "best_label": "w4,s1"}]}))
    code = main(["tune", "--suite", "--only", "softmax", "--backend", "model", "--algo", "random",
                 "--budget-evals", "3", "--configs-from", str(bench), "--total-seconds", "60", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    (doc,) = json.loads(out)
    assert doc["kernel_ref"] == {"spec": "kbuild.bench.kernels.softmax:softmax", "config": 1}
    assert doc["algorithms"]["random"]["evaluations"] <= 3
    assert doc["budget"]["seconds"] <= 60


def test_cli_suite_bad_configs_from(capsys, tmp_path: Path):
    missing = tmp_path / "nope.json"
    assert main(["tune", "--suite", "--only", "softmax", "--backend", "model", "--configs-from", str(missing)]) == 2
    assert f"--configs-from: {missing}: cannot read" in capsys.readouterr().err
    wrong = tmp_path / "bench.json"
    wrong.write_text(json.dumps({"kernels": [{"name": "softmax", "best_label": "w3,s9"}]}))
    assert main(["tune", "--suite", "--only", "softmax", "--backend", "model", "--configs-from", str(wrong)]) == 2
    assert "configuration 'w3,s9' is not in the spec's space" in capsys.readouterr().err
    assert main(["tune", "--suite", "--backend", "model", "--total-seconds", "0"]) == 2
    assert "--total-seconds must be positive" in capsys.readouterr().err


def test_deadline_share():
    from kbuild.commands.tune import OVERHEAD_PER_KERNEL_S, share_of_deadline

    assert share_of_deadline(3 * (OVERHEAD_PER_KERNEL_S + 30), 3, 3) == pytest.approx(10.0)
    assert share_of_deadline(5.0, 4, 3) == 1.0  # never zero: every algorithm gets a look


@pytest.mark.parametrize(("name", "kind"), [("matmul_leakyrelu_512x512x2048", "loop"), ("softmax", "block")])
def test_search_region_is_the_main_loop(name: str, kind: str):
    """Matmuls search their K loop (runs once per iteration), not the prologue or epilogue; one-row kernels
    have no loop and search their largest block."""
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import compile_spec, load_spec
    from kbuild.sass.schedule import Schedule
    from kbuild.tune.api import describe_region
    from kbuild.tune.env import hot_region

    spec = load_spec(SUITE[name])
    compiled = compile_spec(spec, spec.configs[0], 90)
    schedule = Schedule.from_cubin(compiled.asm["cubin"], compiled.metadata.name)
    region = describe_region(schedule, hot_region(schedule))
    assert region["kind"] == kind
    opcodes = {schedule.analysis.instructions[i].base for i in range(region["start"], region["end"])}
    if kind == "loop":
        assert "HGMMA" in opcodes and schedule.analysis.instructions[region["end"] - 1].base == "BRA"
    else:
        assert region["start"] == 0


class LuckyBackend(NoisyBackend):
    """Search timings (5 rounds) flatter every candidate; longer re-timings tell the truth."""

    def __init__(self, truth: float) -> None:
        self.truth = truth
        self.rounds: list[int] = []

    def time(self, candidate, *, rounds=8, reps=10):
        self.rounds.append(rounds)
        if rounds <= 5:
            return _timing(0.95, (0.94, 0.96), (0.995, 1.005))
        return _timing(self.truth, (self.truth - 0.002, self.truth + 0.002), (0.999, 1.001))


def test_the_winner_is_picked_by_its_re_timing_not_its_search_luck():
    from kbuild.tune.api import CONFIRM_ROUNDS
    from kbuild.tune.measure.backend import KernelRef

    lucky = LuckyBackend(truth=1.01)
    r = tune(CUBIN, request(algorithms=("random", "greedy"), evaluations=6),
             backend=lucky, kernel_ref=KernelRef(spec="x:y"))
    assert not r.accepted and r.cubin == CUBIN
    assert "no search's best beat the baseline when re-timed" in r.decision.reason
    assert all(s.best_ratio == 0.95 and s.confirmed_ratio == 1.01 for s in r.searches.values())
    assert CONFIRM_ROUNDS in lucky.rounds and 15 not in lucky.rounds  # no acceptance run for a loser
    assert r.report()["algorithms"]["random"]["confirmed_ratio"] == 1.01

    real = LuckyBackend(truth=0.97)
    r = tune(CUBIN, request(algorithms=("random",), evaluations=6),
             backend=real, kernel_ref=KernelRef(spec="x:y"))
    assert r.accepted and r.cubin != CUBIN and r.searches["random"].confirmed_ratio == 0.97


class RunnerUpBackend(NoisyBackend):
    """The search's timings make each new candidate look faster than the last; re-timing shows that only
    the first candidate the search saw is really faster (0.96) and every later one is slower (1.01)."""

    def __init__(self) -> None:
        self.search_ratio = 1.0
        self.truth: dict[bytes, float] = {}

    def time(self, candidate, *, rounds=8, reps=10):
        if rounds <= 5:
            self.truth.setdefault(candidate, 0.96 if not self.truth else 1.01)
            self.search_ratio -= 0.005
            return _timing(self.search_ratio, (self.search_ratio - 0.002, self.search_ratio + 0.002), (0.999, 1.001))
        t = self.truth[candidate]
        return _timing(t, (t - 0.002, t + 0.002), (0.999, 1.001))


def test_a_search_runner_up_that_re_times_faster_is_the_one_accepted():
    from kbuild.tune.env import TOP_K
    from kbuild.tune.measure.backend import KernelRef

    backend = RunnerUpBackend()
    r = tune(CUBIN, request(algorithms=("greedy",), evaluations=TOP_K),
             backend=backend, kernel_ref=KernelRef(spec="x:y"))
    search = r.searches["greedy"]
    assert len(search.candidates) == TOP_K and search.candidates[0][0] == search.best_ratio
    assert search.confirmed_ratio == 0.96 and search.confirmed_moves != search.best_moves
    assert search.confirmed_ci == (0.958, 0.962) and search.confirmed_aa_spread == pytest.approx(0.001)
    assert r.accepted and r.decision.as_dict()["speedup"] == pytest.approx(1 / 0.96, rel=1e-3)
    assert backend.truth[r.cubin] == 0.96  # the shipped cubin is the runner-up the re-timing picked
    assert r.report()["algorithms"]["greedy"]["candidates"] == TOP_K


def test_ppo_verdict_calls_a_difference_inside_the_noise_a_tie():
    from kbuild.tune.api import ppo_verdict
    from kbuild.tune.search import SearchResult

    def search(name: str, confirmed: float) -> SearchResult:
        return SearchResult(name, 0.99, [(1, 0)], 10, 1.0, 0, confirmed_ratio=confirmed)

    searches = {"ppo": search("ppo", 0.9988), "random": search("random", 0.9989)}
    assert ppo_verdict(searches, noise=0.0009).startswith("PPO tied with random: the difference is inside")
    assert ppo_verdict(searches).startswith("PPO beat the baselines (re-measured best 0.9988")
    searches["random"] = search("random", 0.98)
    assert ppo_verdict(searches, noise=0.0009).startswith("PPO did not beat random")


def test_cli_suite_derived_space_is_inside_the_total_and_the_summary_is_kept(capsys, tmp_path: Path, monkeypatch):
    """``--total-seconds`` covers deriving and pruning each kernel's space (on the H100 the derivations of the
    whole suite took about 3 minutes before the first search, and a run given 390 s ran past 420 s): a derivation
    comes out of its kernel's share, and ``suite.json`` is rewritten after each kernel."""
    import time

    from kbuild.commands import tune_space

    real = tune_space.derived_suite_space

    def slow(*a: Any, **k: Any) -> Any:
        time.sleep(4.0)  # a derivation that takes a visible part of the share
        return real(*a, **k)

    monkeypatch.setattr(tune_space, "derived_suite_space", slow)
    out = tmp_path / "rep"
    code = main(["tune", "--suite", "--only", "softmax", "--derive-space", "--max-points", "3", "--backend", "model",
                 "--budget-evals", "4", "--total-seconds", "30", "--json", "--out", str(out)])
    assert code == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["derived_space"]["wall_seconds"] >= 4.0
    assert doc["budget"]["seconds"] <= 30 - 4.0  # the derivation came out of the kernel's share
    summary = json.loads((out / "suite.json").read_text())
    assert summary["planned"] == 1 and summary["kernels"] == 1 and summary["complete"]
    k = summary["per_kernel"]["softmax"]
    assert k["derived_space"]["size"] == 3 and k["budget_seconds"] == doc["budget"]["seconds"]
    # the peers a user would pick instead are in the report: named here, timed beside what ships on a GPU
    assert doc["peers"]["not_timed"] and {p["label"] for p in doc["peers"]["peers"]} == {"torch_softmax"}
    assert k["peers"] == {"not_timed": doc["peers"]["not_timed"]}
    # the cost model runs no side-by-side check: a configuration other than the default is not counted as measured
    if doc["config_label"] != doc["default_label"]:
        assert k["shipped_speedup"] is None and summary["not_measured_side_by_side"] == ["softmax"]
        assert summary["geomean_speedup"] is None
    else:
        assert k["shipped_speedup"] == 1.0 and summary["geomean_speedup"] == 1.0


def test_suite_summary_counts_measured_finals_and_kept_defaults():
    from kbuild.commands.tune import suite_summary

    def rep(name: str, final: float | None, label: str) -> dict[str, Any]:
        return {"name": name, "gains": {"final": final}, "config_label": label, "default_label": "d",
                "seconds": 1.0, "budget": {"seconds": 2.0}, "decision": "default kept: a race"}

    timed = {"kernel_ms": 0.1, "peers": [{"label": "cuBLAS", "ratio": 0.93}, {"label": "cuDNN", "ratio": None}]}
    s = suite_summary([{**rep("a", 1.21, "x"), "peers": timed}, rep("b", None, "d"), rep("c", None, "y")], planned=4)
    assert s["per_kernel"]["a"]["peers"] == {"cuBLAS": 0.93, "cuDNN": None} and s["per_kernel"]["b"]["peers"] is None
    assert s["kernels"] == 3 and not s["complete"] and s["not_measured_side_by_side"] == ["c"]
    assert math.isclose(s["geomean_speedup"], 1.21 ** 0.5) and s["max_speedup"] == 1.21
    assert s["per_kernel"]["b"]["kept_default_because"] == "default kept: a race"
    assert s["per_kernel"]["a"]["kept_default_because"] is None
