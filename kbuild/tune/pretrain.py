"""Pretraining the transferable PPO policy across the bench suite, on the CPU cost model.

This module owns the *suite side* of PPO's transfer (issue 15, item 5): the suite kernels' sm_90
cubins (compiled once from their ``small=True`` bench specs and cached by spec, configuration and
architecture in a directory), the :class:`SuiteEnv` that plays one suite kernel per episode, and
:func:`pretrain`, which trains :class:`kbuild.tune.policy.InstructionPolicy` with MaskablePPO over it
and writes a checkpoint (:func:`kbuild.tune.policy.save_checkpoint`).

Every reward here comes from :class:`kbuild.tune.evaluate.ModelEvaluator`, the static cost model: a
checkpoint made here is "pretrained on the cost model, CPU estimate" and says so in its metadata
(``trained_on``); it never saw a GPU. Leave-one-out honesty: ``exclude`` keeps kernels out of the
pretraining set, and the checkpoint lists both the kernels it saw and those it excluded, so a report
can check that the kernel it tunes was not among them.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from kbuild.arch import DEFAULT_SM
from kbuild.fsutil import write_atomic
from kbuild.tune.env import SassScheduleEnv

TRAINED_ON = "pretrained on the cost model, CPU estimate"
"""The label every checkpoint made here carries (``meta["trained_on"]``) and every report repeats."""

UNLIMITED_EVALS = 1 << 40
UNLIMITED_SECONDS = 1e12


@dataclass(frozen=True)
class SuiteCubin:
    """One suite kernel compiled for the pretraining set."""

    name: str
    cubin: bytes
    symbol: str
    config: str


def suite_cubins(cache_dir: str | Path, *, names: Sequence[str] | None = None, arch: int = DEFAULT_SM,
                 small: bool = True) -> list[SuiteCubin]:
    """The suite kernels' cubins for ``sm_<arch>`` (each spec's first configuration), compiled with
    :func:`kbuild.bench.spec.compile_spec` and cached in ``cache_dir`` under a name that digests the spec
    reference, its configuration label, ``arch`` and ``small`` (a Triton compile takes seconds to
    minutes). Kernels whose spec does not support ``arch`` are skipped."""
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import compile_spec, load_spec

    chosen = list(SUITE) if names is None else list(names)
    unknown = [n for n in chosen if n not in SUITE]
    if unknown:
        raise ValueError(f"unknown suite kernel {unknown[0]!r}; known: {', '.join(SUITE)}")
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for name in chosen:
        spec = load_spec(SUITE[name], small=small)
        if arch not in spec.archs:
            continue
        config = spec.configs[0]
        tag = hashlib.sha256(f"{SUITE[name]}|{config.label()}|{arch}|{small}".encode()).hexdigest()[:16]
        cubin_path, symbol_path = cache / f"{name}.{tag}.cubin", cache / f"{name}.{tag}.symbol"
        if cubin_path.is_file() and symbol_path.is_file():
            out.append(SuiteCubin(name, cubin_path.read_bytes(), symbol_path.read_text().strip(), config.label()))
            continue
        compiled = compile_spec(spec, config, arch)
        cubin, symbol = compiled.asm["cubin"], compiled.metadata.name
        write_atomic(cubin_path, cubin)
        write_atomic(symbol_path, symbol.encode())
        out.append(SuiteCubin(name, cubin, symbol, config.label()))
    return out


def model_env(cubin: bytes, symbol: str | None, *, evaluations: int = UNLIMITED_EVALS,
              seconds: float = UNLIMITED_SECONDS, horizon: int = 32, max_movable: int = 256) -> SassScheduleEnv:
    """A :class:`SassScheduleEnv` over one cubin scored by the cost model (CPU estimate)."""
    from kbuild.sass.schedule import Schedule
    from kbuild.tune.evaluate import Budget, ModelEvaluator

    schedule = Schedule.from_cubin(cubin, symbol)
    return SassScheduleEnv(schedule, ModelEvaluator(schedule, Budget(evaluations, seconds)), horizon=horizon,
                           max_movable=max_movable)


class SuiteEnv(gym.Env):
    """Several kernels' envs behind one fixed-shape env: each episode plays one kernel, drawn at random.

    SB3 needs one observation and action shape, so each kernel's observation rows are padded with zero
    rows to the largest kernel's, and its action mask with ``False``: the policy
    (:class:`kbuild.tune.policy.InstructionPolicy`) treats an all-zero row as absent and masked actions are
    never taken. Rewards are the kernels' own (ratio change, cost model) times ``reward_scale``: the cost
    model's ratio changes are about 1e-3 per move, too small for PPO's value loss."""

    metadata = {"render_modes": []}

    def __init__(self, envs: Sequence[SassScheduleEnv], *, reward_scale: float = 100.0) -> None:
        super().__init__()
        from kbuild.tune.policy import env_layout

        if not envs:
            raise ValueError("SuiteEnv needs at least one kernel's env")
        self.envs = list(envs)
        layouts = [env_layout(e) for e in self.envs]
        self.features = layouts[0][1]
        self.per_row = layouts[0][2]
        if any(f != self.features or a != self.per_row for _, f, a in layouts):
            raise ValueError(f"kernels' envs disagree on features or actions per instruction: {layouts}")
        self.rows = max(r for r, _, _ in layouts)
        self.reward_scale = reward_scale
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(self.rows * self.features,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(self.rows * self.per_row)
        self.current = 0
        self.rng = np.random.default_rng(0)

    @property
    def env(self) -> SassScheduleEnv:
        return self.envs[self.current]

    def _pad_obs(self, obs: np.ndarray) -> np.ndarray:
        out = np.zeros(self.rows * self.features, dtype=np.float32)
        out[:obs.shape[0]] = obs
        return out

    def action_masks(self) -> np.ndarray:
        inner = self.env.action_masks()
        out = np.zeros(self.rows * self.per_row, dtype=bool)
        out[:inner.shape[0]] = inner
        if not out.any():  # a kernel with no legal move: let the episode end on the first (illegal) step
            out[0] = True
        return out

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.current = int(self.rng.integers(len(self.envs)))
        obs, info = self.env.reset()
        return self._pad_obs(obs), {**info, "kernel": self.current}

    def step(self, action: int):
        inner_n = int(self.env.action_space.n)  # type: ignore[attr-defined]
        if int(action) >= inner_n:
            return self._pad_obs(self.env._obs()), -1.0, True, False, {"illegal": True}
        obs, reward, terminated, truncated, info = self.env.step(int(action))
        return self._pad_obs(obs), float(reward) * self.reward_scale, terminated, truncated, info


@dataclass
class PretrainResult:
    path: Path
    meta: dict[str, Any]


def pretrain(kernels: Sequence[SuiteCubin], out: str | Path, *, steps: int = 20_000, seed: int = 0,
             exclude: Sequence[str] = (), hidden: int = 64, n_steps: int = 256, batch_size: int = 64,
             learning_rate: float = 3e-4, horizon: int = 32, max_movable: int = 256,
             verbose: int = 0) -> PretrainResult:
    """Train :class:`~kbuild.tune.policy.InstructionPolicy` with MaskablePPO for ``steps`` env steps over the
    ``kernels`` not in ``exclude`` (cost model rewards), and write the checkpoint to ``out``."""
    from sb3_contrib import MaskablePPO

    from kbuild.tune.policy import InstructionPolicy, policy_kwargs, save_checkpoint

    unknown = sorted(set(exclude) - {k.name for k in kernels})
    if unknown:
        raise ValueError(f"--exclude: {unknown[0]!r} is not one of the pretraining kernels "
                         f"({', '.join(k.name for k in kernels)})")
    chosen = [k for k in kernels if k.name not in set(exclude)]
    if not chosen:
        raise ValueError("every kernel is excluded: nothing to pretrain on")
    started = time.monotonic()
    envs = [model_env(k.cubin, k.symbol, horizon=horizon, max_movable=max_movable) for k in chosen]
    suite = SuiteEnv(envs)
    suite.reset(seed=seed)
    model = MaskablePPO(InstructionPolicy, suite, n_steps=n_steps, batch_size=batch_size,
                        learning_rate=learning_rate, n_epochs=4, gamma=0.99, ent_coef=0.01, seed=seed,
                        verbose=verbose, device="cpu", policy_kwargs=policy_kwargs(suite, hidden=hidden))
    model.learn(total_timesteps=steps)
    evaluations = sum(e.evaluator.budget.used for e in envs)
    meta = {
        "trained_on": TRAINED_ON,
        "kernels": [k.name for k in chosen],
        "excluded": sorted(exclude),
        "configs": {k.name: k.config for k in chosen},
        "steps": int(steps),
        "cost_model_evaluations": int(evaluations),
        "seed": int(seed),
        "horizon": int(horizon),
        "reward_scale": suite.reward_scale,
        "ppo": {"n_steps": n_steps, "batch_size": batch_size, "learning_rate": learning_rate, "n_epochs": 4,
                "ent_coef": 0.01},
        "seconds": round(time.monotonic() - started, 1),
        "best_ratio_per_kernel": {k.name: round(float(e.best_ratio), 5) for k, e in zip(chosen, envs)},
    }
    path = save_checkpoint(model.policy, out, meta)  # type: ignore[arg-type]
    return PretrainResult(path, meta)
