"""The three searches, on the same budget and the same environment.

* ``random``: random legal-move walks of ``horizon`` steps from the original schedule; the best
  schedule seen is kept.
* ``greedy``: hill-climbing. From the current best, try legal moves in a random order; keep the
  first that improves the ratio by more than ``min_gain``; restart the scan from there. Stops
  when no move improves or the budget is spent.
* ``ppo``: ``MaskablePPO`` from sb3-contrib over :class:`~kbuild.tune.env.SassScheduleEnv`,
  trained on the CPU, stopped by a callback the moment the budget is spent.

Every search returns a :class:`SearchResult` with the best ratio, the moves that reproduce it
from the original schedule, and the learning curve (best ratio after each evaluation).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kbuild.tune.env import SassScheduleEnv

ALGORITHMS = ("ppo", "random", "greedy")


@dataclass
class SearchResult:
    algorithm: str
    best_ratio: float
    best_moves: list[tuple[int, int]]
    evaluations: int
    seconds: float
    cache_hits: int
    curve: list[tuple[int, float]] = field(default_factory=list)
    """(evaluations used, best ratio so far)."""
    invalid: int = 0
    candidates: list[tuple[float, list[tuple[int, int]]]] = field(default_factory=list)
    """The search's fastest distinct schedules, (search ratio, moves), fastest first: re-timed on GPU backends."""
    confirmed_ratio: float | None = None
    """The best re-measured ratio among ``candidates`` (GPU backends), free of the search's luck."""
    confirmed_moves: list[tuple[int, int]] | None = None
    """The moves of the candidate that re-measured fastest."""
    confirmed_ci: tuple[float, float] | None = None
    """95% CI of ``confirmed_ratio``."""
    confirmed_aa_spread: float | None = None
    """The A/A spread of that re-timing: differences smaller than this are noise."""

    def as_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "best_ratio": self.best_ratio, "confirmed_ratio": self.confirmed_ratio,
                "confirmed_ci": self.confirmed_ci, "confirmed_aa_spread": self.confirmed_aa_spread,
                "moves": len(self.best_moves), "candidates": len(self.candidates),
                "evaluations": self.evaluations, "seconds": round(self.seconds, 3), "cache_hits": self.cache_hits,
                "invalid_candidates": self.invalid, "curve": self.curve}


class _Recorder:
    """Tracks the best ratio and the learning curve from the env's step history."""

    def __init__(self, env: SassScheduleEnv) -> None:
        self.env = env
        self.curve: list[tuple[int, float]] = []
        self.seen = 0
        self.invalid = 0

    def update(self) -> None:
        for h in self.env.history[self.seen:]:
            if h["ratio"] is None:
                self.invalid += 1
            best = self.env.best_ratio
            if not self.curve or self.curve[-1] != (h["evaluations"], best):
                self.curve.append((h["evaluations"], best))
        self.seen = len(self.env.history)

    def result(self, algorithm: str, started: float) -> SearchResult:
        self.update()
        ev = self.env.evaluator
        return SearchResult(algorithm, self.env.best_ratio, list(self.env.best_moves), ev.budget.used,
                            time.monotonic() - started, int(getattr(ev, "cache_hits", 0)), self.curve, self.invalid,
                            [(ratio, list(moves)) for ratio, _, moves in self.env.top])


def random_search(env: SassScheduleEnv, *, seed: int) -> SearchResult:
    rng = np.random.default_rng(seed)
    rec, started = _Recorder(env), time.monotonic()
    budget = env.evaluator.budget
    env.reset(seed=seed)
    while not budget.exhausted:
        mask = env.action_masks()
        if not mask.any():
            break
        _, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(mask))))
        rec.update()
        if terminated or truncated:
            env.reset()
    return rec.result("random", started)


def greedy_search(env: SassScheduleEnv, *, seed: int, min_gain: float = 0.0005) -> SearchResult:
    rng = np.random.default_rng(seed)
    rec, started = _Recorder(env), time.monotonic()
    budget = env.evaluator.budget
    env.reset(seed=seed)
    env.horizon = 1 << 30  # greedy walks as far as it keeps improving
    improved = True
    while improved and not budget.exhausted:
        improved = False
        base = env.ratio
        for action in rng.permutation(np.flatnonzero(env.action_masks())).tolist():
            if budget.exhausted:
                break
            _, _, terminated, _, info = env.step(int(action))
            rec.update()
            if terminated:  # invalid candidate: env already undid the move; episode state is intact
                env.steps -= 1
                continue
            if info.get("budget_exhausted"):
                break
            if info.get("valid") and info["ratio"] < base - min_gain:
                improved = True
                break
            env.schedule.undo()
            env.ratio = base
    return rec.result("greedy", started)


def ppo_search(env: SassScheduleEnv, *, seed: int, n_steps: int = 64, batch_size: int = 32,
               learning_rate: float = 3e-4, verbose: int = 0) -> SearchResult:
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback

    budget = env.evaluator.budget
    rec, started = _Recorder(env), time.monotonic()

    class StopAtBudget(BaseCallback):
        def _on_step(self) -> bool:
            rec.update()
            self.logger.record("kbuild/best_ratio", env.best_ratio)
            self.logger.record("kbuild/evaluations", budget.used)
            return not budget.exhausted

    model = MaskablePPO("MlpPolicy", env, n_steps=n_steps, batch_size=batch_size, learning_rate=learning_rate,
                        n_epochs=4, gamma=0.99, seed=seed, verbose=verbose, device="cpu",
                        policy_kwargs={"net_arch": [128, 128]})
    # total_timesteps is an upper bound; the callback stops training at the evaluation/seconds budget.
    model.learn(total_timesteps=max(budget.evaluations * 8, n_steps * 2), callback=StopAtBudget())
    return rec.result("ppo", started)


def run_search(algorithm: str, env: SassScheduleEnv, *, seed: int) -> SearchResult:
    if algorithm == "ppo":
        return ppo_search(env, seed=seed)
    if algorithm == "random":
        return random_search(env, seed=seed)
    if algorithm == "greedy":
        return greedy_search(env, seed=seed)
    raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
