"""The assembly game as a ``gymnasium.Env``: move one instruction one slot up or down per step.

* **Movable set**: the instructions of the *hot region* that the engine does not pin. The hot
  region is the innermost loop with the most movable instructions (a matmul's K loop, an
  attention kernel's key/value loop), or, in kernels without a loop, the largest basic block;
  capped at ``max_movable`` instructions, memory operations first. Moves that would leave the
  region are masked, so the set never changes within an episode. (Until 2026-12-02 the region
  was the largest basic block, which in the suite's matmuls is the prologue or the epilogue.)
* **Action**: ``Discrete(A × movable)``; action ``A·m + j`` applies action ``j`` of :attr:`actions` to
  movable instruction ``m``. With the default ``kinds=("moves",)``, ``A = 2`` and action ``2m + d``
  moves instruction ``m`` one slot up (``d = 0``) or down (``d = 1``), as before issue 15. More kinds
  (issue 15; :data:`ACTIONS`): ``far`` (``far_up``/``far_down``: as far as :meth:`Schedule.reach` allows
  inside the region), ``yield`` (toggle the yield bit), ``reuse`` (``reuse_clear`` drops every flag,
  ``reuse_set`` sets every flag the engine proves), ``stall`` (``stall_up``/``stall_down`` by one cycle).
  :meth:`action_masks` (sb3-contrib's convention) comes from the engine's legality checks, so a masked
  policy never proposes an edit the engine would refuse. Every kind is an engine edit with a replayable
  record (:meth:`kbuild.sass.schedule.Schedule.apply_edit`): :attr:`best_moves` and :attr:`top` hold
  records. Only ``moves`` is on by default: the new kinds wait for their H200 fuzz before the tuner
  uses them (issue 15).
* **Observation**: per movable instruction, ``FEATURES`` values (opcode class, memory space and
  direction, variable latency, control-code fields, register-use counts, current and original
  position in the region), flattened to ``(movable × FEATURES,)``, float32 in [-1, 1]. With the
  ``yield`` or ``reuse`` kind on, two more per instruction: its yield bit and its reuse-flag count / 4
  (the CPU cost model does not model either: on it those edits never change the ratio).
* **Reward**: ``previous ratio − new ratio`` (ratios are times over the baseline time, so the
  reward is the throughput change normalised by the baseline). An invalid or faulting candidate
  gives ``-1`` and ends the episode. Episodes are truncated at ``horizon`` steps.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from kbuild.sass.control import NO_BARRIER
from kbuild.sass.isa import FEATURE_CLASSES, feature_class
from kbuild.tune.evaluate import BudgetExhausted, Evaluator, schedule_digest

FEATURES = 14
#: The per-instruction actions of each kind, in the order they take in the action space.
ACTIONS: dict[str, tuple[str, ...]] = {
    "moves": ("up", "down"),
    "far": ("far_up", "far_down"),
    "yield": ("yield",),
    "reuse": ("reuse_clear", "reuse_set"),
    "stall": ("stall_up", "stall_down"),
}
KINDS = tuple(ACTIONS)
TOP_K = 4
"""Distinct schedules each search keeps as candidates for re-timing (its ``TOP_K`` fastest)."""


def hot_region(schedule: Any) -> tuple[int, int]:
    """``(start, end)`` slots where the search moves instructions.

    The innermost loop with the most movable instructions (the main loop of a matmul or attention
    kernel: code that runs once per iteration, not once per program); for straight-line kernels
    (one row per program: softmax, norms) the largest basic block with a movable instruction.
    Legality is the engine's either way: moves never leave their basic block.
    """
    an = schedule.analysis
    pinned = np.array([s.pinned is not None for s in an.sems])
    all_loops = an.loops()
    inner = [(s, e) for s, e in all_loops
             if not any((s2, e2) != (s, e) and s <= s2 and e2 <= e for s2, e2 in all_loops)]
    scored = [(int((~pinned[s:e]).sum()), -s, (s, e)) for s, e in inner]
    scored = [x for x in scored if x[0] > 1]
    if scored:
        return max(scored)[2]
    best, best_len = (0, an.n), -1
    for b in range(len(an.block_start)):
        s, e = int(an.block_start[b]), int(an.block_end[b])
        movable = int((~pinned[s:e]).sum())
        if movable > 1 and e - s > best_len:
            best, best_len = (s, e), e - s
    return best


def region_kind(schedule: Any, region: tuple[int, int]) -> str:
    return "loop" if region in schedule.analysis.loops() else "block"


def _sets_barrier(sem: Any) -> bool:
    return bool(sem.wbar != NO_BARRIER or sem.rbar != NO_BARRIER)


def _popcount(value: Any) -> int:
    return bin(value).count("1") if isinstance(value, int) else len(value) if hasattr(value, "__len__") else 0


class SassScheduleEnv(gym.Env):
    """Reorder the SASS of one kernel; the reward is the measured (or modelled) speed change."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, schedule: Any, evaluator: Evaluator, *, horizon: int = 32, max_movable: int = 256,
                 invalid_reward: float = -1.0, render_mode: str | None = None,
                 kinds: tuple[str, ...] | list[str] = ("moves",)) -> None:
        super().__init__()
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown or not kinds:
            raise ValueError(f"unknown action kinds {unknown}; choose from {', '.join(KINDS)}")
        self.kinds = tuple(k for k in KINDS if k in kinds)
        self.actions: tuple[str, ...] = tuple(a for k in self.kinds for a in ACTIONS[k])
        self.features = FEATURES + (2 if {"yield", "reuse"} & set(self.kinds) else 0)
        self.schedule = schedule
        self.evaluator = evaluator
        self.horizon = horizon
        self.invalid_reward = invalid_reward
        self.render_mode = render_mode
        an = schedule.analysis
        self.region = hot_region(schedule)
        start, end = self.region
        candidates = [i for i in range(start, end) if an.sems[i].pinned is None]
        if len(candidates) > max_movable:  # keep memory operations first, then their neighbours
            mem = [i for i in candidates if an.sems[i].space is not None]
            rest = [i for i in candidates if an.sems[i].space is None]
            candidates = sorted((mem + rest)[:max_movable])
        if not candidates:
            raise ValueError(f"kernel {schedule.kernel!r} has no movable instruction in its hot region")
        self.movable = np.array(candidates, dtype=np.int64)  # instruction ids (= original slots)
        m = len(self.movable)
        self.action_space = gym.spaces.Discrete(len(self.actions) * m)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(m * self.features,), dtype=np.float32)
        self._static = self._static_features()
        self.ratio = 1.0
        self.best_ratio = 1.0
        self.best_moves: list[tuple] = []
        """Records (:meth:`Schedule.apply_edit`) of the best schedule; ``(slot, direction)`` for one-slot moves."""
        self.top: list[tuple[float, str, list[tuple]]] = []
        """The ``TOP_K`` fastest distinct schedules seen: (ratio, digest, moves from the original), fastest first."""
        self.steps = 0
        self.history: list[dict[str, Any]] = []

    # --- features ---------------------------------------------------------------------------
    def _static_features(self) -> np.ndarray:
        an = self.schedule.analysis
        feats = np.zeros((len(self.movable), self.features), dtype=np.float32)
        span = max(self.region[1] - self.region[0] - 1, 1)
        for row, i in enumerate(self.movable.tolist()):
            sem, ins = an.sems[i], an.instructions[i]
            cls = feature_class(an.spec.lookup(ins.base), mem_read=sem.mem_read, mem_write=sem.mem_write,
                                sets_barrier=_sets_barrier(sem))
            feats[row, FEATURE_CLASSES.index(cls)] = 1.0
            feats[row, 5] = {"global": 1.0, "shared": 0.5, "local": -0.5}.get(sem.space or "", 0.0)
            feats[row, 6] = 1.0 if _sets_barrier(sem) else 0.0
            feats[row, 7] = min(_popcount(sem.reads), 8) / 8
            feats[row, 8] = min(_popcount(sem.writes), 8) / 8
            feats[row, 9] = bin(sem.wait).count("1") / 6
            feats[row, 10] = 2.0 * (i - self.region[0]) / span - 1.0  # original position
        return feats

    def _obs(self) -> np.ndarray:
        obs = self._static.copy()
        sched = self.schedule
        span = max(self.region[1] - self.region[0] - 1, 1)
        pos = sched.pos[self.movable]
        obs[:, 11] = 2.0 * (pos - self.region[0]) / span - 1.0
        obs[:, 12] = sched.stall[self.movable] / 15.0
        obs[:, 13] = np.clip(pos - self.movable, -16, 16) / 16.0
        if self.features > FEATURES:
            obs[:, FEATURES] = sched.yield_[self.movable]
            obs[:, FEATURES + 1] = [bin(int(r)).count("1") / 4 for r in sched.reuse()[self.movable]]
        return obs.reshape(-1)

    # --- gymnasium API ----------------------------------------------------------------------
    def action_masks(self) -> np.ndarray:
        sched = self.schedule
        pos = sched.pos[self.movable]
        start, end = self.region
        cols: dict[str, np.ndarray] = {}
        if {"moves", "far"} & set(self.kinds):
            legal = sched.legal_moves()
            cols["up"] = cols["far_up"] = legal[pos, 0] & (pos - 1 >= start)
            cols["down"] = cols["far_down"] = legal[pos, 1] & (pos + 1 < end)
        xs = self.movable.tolist()
        if "yield" in self.kinds:
            cols["yield"] = np.array([sched.why_edit_illegal(("yield", x, int(not sched.yield_[x]))) is None
                                      for x in xs], dtype=bool)
        if "reuse" in self.kinds:
            cur = sched.reuse()[self.movable]
            cols["reuse_clear"] = cur != 0
            cols["reuse_set"] = np.array([bool(sched.yield_[x]) and bool(sched.reuse_settable(x) & ~int(c))
                                          for x, c in zip(xs, cur.tolist())], dtype=bool)
        if "stall" in self.kinds:
            st = sched.stall[self.movable]
            cols["stall_up"] = st < sched._max_stall[self.movable]
            cols["stall_down"] = np.array([sched.why_edit_illegal(("stall", x, int(s) - 1)) is None
                                           for x, s in zip(xs, st.tolist())], dtype=bool)
        return np.stack([cols[a] for a in self.actions], axis=1).reshape(-1)

    def _apply(self, x: int, name: str) -> None:
        """Apply action ``name`` to instruction ``x`` through the engine (one entry of ``schedule.moves``)."""
        sched = self.schedule
        slot = int(sched.pos[x])
        if name in ("up", "down"):
            sched.apply(slot, 0 if name == "up" else 1)
        elif name in ("far_up", "far_down"):
            d = 0 if name == "far_up" else 1
            sched.apply_far(slot, d, max(1, sched.reach(slot, d, bounds=self.region)))
        elif name == "yield":
            sched.apply_edit(("yield", x, int(not sched.yield_[x])))
        elif name == "reuse_clear":
            sched.apply_edit(("reuse", x, 0))
        elif name == "reuse_set":
            cur = int(sched.reuse()[x])
            sched.apply_edit(("reuse", x, cur | sched.reuse_settable(x)))
        else:
            sched.apply_edit(("stall", x, int(sched.stall[x]) + (1 if name == "stall_up" else -1)))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.schedule.reset()
        self.ratio = 1.0
        self.steps = 0
        return self._obs(), {"ratio": self.ratio}

    def step(self, action: int):
        self.steps += 1
        m, j = divmod(int(action), len(self.actions))
        if not self.action_masks()[int(action)]:
            # An illegal action never reaches the engine: it ends the episode like an invalid candidate.
            return self._obs(), float(self.invalid_reward), True, False, {"ratio": self.ratio, "illegal": True}
        self._apply(int(self.movable[m]), self.actions[j])
        try:
            ev = self.evaluator.evaluate(self.schedule)
        except BudgetExhausted:
            self.schedule.undo()
            return self._obs(), 0.0, False, True, {"ratio": self.ratio, "budget_exhausted": True}
        info: dict[str, Any] = {"ratio": ev.ratio, "valid": ev.valid}
        self.history.append({"evaluations": self.evaluator.budget.used, "ratio": ev.ratio if ev.valid else None,
                             "seconds": round(self.evaluator.budget.elapsed, 3)})
        if not ev.valid:
            info["reason"] = ev.reason
            self.schedule.undo()
            return self._obs(), float(self.invalid_reward), True, False, info
        reward = self.ratio - ev.ratio
        self.ratio = ev.ratio
        if ev.ratio < self.best_ratio:
            self.best_ratio = ev.ratio
            self.best_moves = list(self.schedule.records)
        if ev.ratio < 1.0:
            self._keep(ev.ratio)
        truncated = self.steps >= self.horizon or self.evaluator.budget.exhausted
        return self._obs(), float(reward), False, truncated, info

    def _keep(self, ratio: float) -> None:
        digest = schedule_digest(self.schedule)
        if any(d == digest for _, d, _ in self.top):
            return
        if len(self.top) < TOP_K or ratio < self.top[-1][0]:
            self.top.append((ratio, digest, list(self.schedule.records)))
            self.top.sort(key=lambda t: t[0])
            del self.top[TOP_K:]

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return f"step {self.steps}: ratio {self.ratio:.4f} (best {self.best_ratio:.4f})\n{self.schedule.diff()}"
        return None
