"""The three searches, on the same budget and the same environment.

* ``random``: random legal-move walks of ``horizon`` steps from the original schedule; the best
  schedule seen is kept.
* ``greedy``: hill-climbing. From the current best, try legal moves in a random order; keep the
  first that improves the ratio by more than ``min_gain``; restart the scan from there. Stops
  when no move improves or the budget is spent.
* ``ppo``: ``MaskablePPO`` from sb3-contrib over :class:`~kbuild.tune.env.SassScheduleEnv` with the
  size-independent :class:`~kbuild.tune.policy.InstructionPolicy`, trained on the CPU, stopped by a
  callback the moment the budget is spent. It starts from a checkpoint when given one (``policy``:
  a path; by default the shipped checkpoint, pretrained across the suite on the cost model, when
  present) and fine-tunes it on this kernel within the budget; ``policy=None`` starts from scratch.

One searcher per budget: :data:`DEFAULT_ALGORITHM` is the searcher that ``kbuild tune``, prewarm and
builds run alone on a kernel's whole budget; the other searchers stay for comparison reports. It is
greedy on the evidence so far: on the H200 (benchmarks/results/h200/tune, 333 evaluations each, 12
kernels) greedy had the lowest re-timed ratio on 5 kernels (random 4, PPO 3, most within the A/A
spread), found 2 of the 3 accepted schedules, and often converged well inside the budget (52–296
evaluations); PPO beat the best other search on none. On the cost model, pretrained PPO won alone on no
kernel either (benchmarks/results/ppo_compare_cpu_model*, from benchmarks/ppo_compare.py).

Every search returns a :class:`SearchResult` with the best ratio, the moves that reproduce it
from the original schedule, and the learning curve (best ratio after each evaluation).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kbuild.arch import DEFAULT_SM
from kbuild.settings.model import Settings, TuneRequest
from kbuild.tune.env import SassScheduleEnv

ALGORITHMS = ("ppo", "random", "greedy")
DEFAULT_ALGORITHM: str = Settings.__dataclass_fields__["algorithm"].default  # type: ignore[assignment]
"""The one searcher run on a kernel's whole budget when no algorithm is named (see the module docstring): the
settings model's default ``algorithm``."""
DEFAULT_POLICY: str = TuneRequest.__dataclass_fields__["policy"].default  # type: ignore[assignment]
"""``ppo_search(policy=DEFAULT_POLICY)``: the shipped checkpoint when present, else from scratch (a
:class:`~kbuild.settings.model.TuneRequest`'s default policy)."""


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
    confirmed_moves: list[Any] | None = None
    """The moves of the candidate that re-measured fastest."""
    confirmed_ci: tuple[float, float] | None = None
    """95% CI of ``confirmed_ratio``."""
    confirmed_aa_spread: float | None = None
    """The A/A spread of that re-timing: differences smaller than this are noise."""
    policy: str | None = None
    """PPO only: where the policy started ("scratch", or the checkpoint and what it was trained on)."""

    def as_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "best_ratio": self.best_ratio, "confirmed_ratio": self.confirmed_ratio,
                "confirmed_ci": self.confirmed_ci, "confirmed_aa_spread": self.confirmed_aa_spread,
                "moves": len(self.best_moves), "candidates": len(self.candidates),
                "evaluations": self.evaluations, "seconds": round(self.seconds, 3), "cache_hits": self.cache_hits,
                "invalid_candidates": self.invalid, "curve": self.curve,
                **({"policy": self.policy} if self.policy is not None else {})}


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


def resolve_policy(policy: str | Path | None, sm: int = DEFAULT_SM) -> Path | None:
    """The checkpoint ``ppo_search`` starts from: ``DEFAULT_POLICY`` → the one shipped for ``sm_<sm>`` if present
    (else None), ``None`` or ``"scratch"`` → None, anything else → that path."""
    if policy is None or policy == "scratch":
        return None
    if policy == DEFAULT_POLICY:
        from kbuild.tune.policy import default_checkpoint

        return default_checkpoint(sm)
    return Path(policy)


def ppo_search(env: SassScheduleEnv, *, seed: int, policy: str | Path | None = DEFAULT_POLICY, n_steps: int = 64,
               batch_size: int = 32, learning_rate: float | None = None, verbose: int = 0) -> SearchResult:
    """MaskablePPO on this kernel until the budget is spent, from ``policy`` (see :func:`resolve_policy`).

    Fine-tuning a checkpoint uses a smaller learning rate (1e-4) than training from scratch (3e-4) unless
    ``learning_rate`` is given. A checkpoint that does not fit this env is a UsageError naming the key."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback

    from kbuild.tune.policy import InstructionPolicy, load_into, policy_kwargs

    budget = env.evaluator.budget
    cubin = env.schedule.cubin  # None for a synthetic schedule: the default architecture's checkpoint
    checkpoint = resolve_policy(policy, DEFAULT_SM if cubin is None else cubin.sm)
    rec, started = _Recorder(env), time.monotonic()

    class StopAtBudget(BaseCallback):
        def _on_step(self) -> bool:
            rec.update()
            self.logger.record("kbuild/best_ratio", env.best_ratio)
            self.logger.record("kbuild/evaluations", budget.used)
            return not budget.exhausted

    lr = learning_rate if learning_rate is not None else (1e-4 if checkpoint is not None else 3e-4)
    model = MaskablePPO(InstructionPolicy, env, n_steps=n_steps, batch_size=batch_size, learning_rate=lr,
                        n_epochs=4, gamma=0.99, seed=seed, verbose=verbose, device="cpu",
                        policy_kwargs=policy_kwargs(env))
    origin = "scratch"
    if checkpoint is not None:
        meta = load_into(model.policy, checkpoint)  # type: ignore[arg-type]
        origin = f"{checkpoint.name} ({meta.get('trained_on', 'unknown training')}; " \
                 f"kernels: {', '.join(meta.get('kernels', [])) or 'unknown'})"
    # total_timesteps is an upper bound; the callback stops training at the evaluation/seconds budget.
    model.learn(total_timesteps=max(budget.evaluations * 8, n_steps * 2), callback=StopAtBudget())
    result = rec.result("ppo", started)
    result.policy = origin
    return result


def run_search(algorithm: str, env: SassScheduleEnv, *, seed: int,
               policy: str | Path | None = DEFAULT_POLICY) -> SearchResult:
    """Run one searcher on ``env``'s budget; ``policy`` is PPO's starting point (ignored by the others)."""
    if algorithm == "ppo":
        return ppo_search(env, seed=seed, policy=policy)
    if algorithm == "random":
        return random_search(env, seed=seed)
    if algorithm == "greedy":
        return greedy_search(env, seed=seed)
    raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {', '.join(ALGORITHMS)}")
