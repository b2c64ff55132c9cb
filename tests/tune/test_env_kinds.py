"""Issue 15: the environment's action kinds (far moves, yield, reuse, stall) on the CPU cost-model backend.

The cost model does not model yield or reuse (its ratio never moves on those edits): these tests check the
action space, the masks against the engine's own legality, replay of the recorded moves, and the searches'
use of the env, not speed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gymnasium.spaces import Discrete

from kbuild.sass.schedule import Schedule
from kbuild.tune.env import ACTIONS, FEATURES, KINDS, SassScheduleEnv
from kbuild.tune.evaluate import Budget, ModelEvaluator, schedule_digest
from kbuild.tune.search import greedy_search, random_search

CUBIN = (Path(__file__).resolve().parent.parent / "fixtures" / "sass" / "softmax.sm90.cubin").read_bytes()


@pytest.fixture(scope="module")
def schedule() -> Schedule:
    return Schedule.from_cubin(CUBIN)


def make_env(schedule: Schedule, kinds=KINDS, evaluations: int = 200) -> SassScheduleEnv:
    schedule.reset()
    return SassScheduleEnv(schedule, ModelEvaluator(schedule, Budget(evaluations, 600)), horizon=16, kinds=kinds)


def test_default_kinds_keep_the_one_slot_action_space(schedule):
    env = make_env(schedule, kinds=("moves",))
    assert isinstance(env.action_space, Discrete)
    assert env.actions == ("up", "down") and env.action_space.n == 2 * len(env.movable)
    assert env.observation_space.shape == (len(env.movable) * FEATURES,)
    full = make_env(schedule)
    assert isinstance(full.action_space, Discrete)
    assert full.action_space.n == sum(len(a) for a in ACTIONS.values()) * len(full.movable)
    assert full.observation_space.shape == (len(full.movable) * (FEATURES + 2),)
    with pytest.raises(ValueError, match="unknown action kinds"):
        make_env(schedule, kinds=("moves", "teleport"))


def test_every_unmasked_action_is_accepted_by_the_engine_and_masked_ones_are_not_taken(schedule):
    env = make_env(schedule)
    env.reset()
    mask = env.action_masks().reshape(len(env.movable), len(env.actions))
    assert all(mask[:, env.actions.index(a)].any() for a in ("up", "far_up", "yield", "reuse_clear", "stall_up"))
    for j, name in enumerate(env.actions):
        for m in np.flatnonzero(mask[:, j])[:5].tolist():
            env._apply(int(env.movable[m]), name)  # raises IllegalMove if the mask lied
            schedule.undo()
    assert schedule.moves == []
    bad = int(np.flatnonzero(~env.action_masks())[0])
    _, reward, terminated, _, info = env.step(bad)
    assert terminated and reward == -1.0 and info["illegal"] and schedule.moves == []


def test_far_action_goes_as_far_as_reach_and_one_undo_restores(schedule):
    env = make_env(schedule, kinds=("far",))
    env.reset()
    mask = env.action_masks()
    a = int(np.flatnonzero(mask)[0])
    m, j = divmod(a, 2)
    x = int(env.movable[m])
    d = j
    k = schedule.reach(int(schedule.pos[x]), d, bounds=env.region)
    before = int(schedule.pos[x])
    env.step(a)
    assert abs(int(schedule.pos[x]) - before) == k and len(schedule.moves) == 1
    schedule.undo()
    assert int(schedule.pos[x]) == before


def test_records_of_a_random_search_replay_to_the_same_machine_code(schedule):
    env = make_env(schedule, evaluations=120)
    rng = np.random.default_rng(0)
    env.reset()
    for _ in range(40):
        legal = np.flatnonzero(env.action_masks())
        env.step(int(rng.choice(legal)))
    recs = list(schedule.records)
    kinds = {r[0] if isinstance(r[0], str) else "moves" for r in recs}
    assert len(kinds) >= 3, kinds
    digest, words = schedule_digest(schedule), schedule.words()
    schedule.reset()
    for r in recs:
        schedule.apply_edit(r)
    assert schedule_digest(schedule) == digest and schedule.words() == words
    schedule.to_cubin(verify=True, disassemble_check=False)


def test_a_control_edit_changes_the_digest(schedule):
    schedule.reset()
    d0 = schedule_digest(schedule)
    x = next(x for x in range(schedule.n) if schedule.why_edit_illegal(("yield", x, int(not schedule.yield_[x]))) is None)
    schedule.apply_edit(("yield", x, int(not schedule.yield_[x])))
    assert schedule_digest(schedule) != d0
    schedule.undo()
    assert schedule_digest(schedule) == d0


@pytest.mark.parametrize("search", [random_search, greedy_search])
def test_searches_run_on_every_kind(schedule, search):
    env = make_env(schedule, evaluations=60)
    result = search(env, seed=1)
    assert env.evaluator.budget.used == 60
    schedule.reset()
    for r in result.best_moves:
        schedule.apply_edit(r)
    schedule.to_cubin(verify=True, disassemble_check=False)
