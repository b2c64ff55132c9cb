"""The transferable PPO policy (issue 15, item 5): size independence, padding, checkpoints, pretraining,
fine-tuning within the budget, and the comparison script's judging. All on the CPU cost model."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch as th
from gymnasium.spaces import Discrete
from script_helpers import load_benchmark

from kbuild.errors import UsageError
from kbuild.sass.schedule import Schedule
from kbuild.tune.env import SassScheduleEnv
from kbuild.tune.evaluate import Budget, ModelEvaluator
from kbuild.tune.policy import (
    InstructionPolicy,
    env_layout,
    load_checkpoint,
    load_into,
    policy_kwargs,
    save_checkpoint,
)
from kbuild.tune.pretrain import TRAINED_ON, SuiteCubin, SuiteEnv, pretrain
from kbuild.tune.search import ALGORITHMS, DEFAULT_ALGORITHM, ppo_search

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sass"


def _env(name: str, evaluations: int = 10_000, horizon: int = 8) -> SassScheduleEnv:
    schedule = Schedule.from_cubin((FIXTURES / f"{name}.sm90.cubin").read_bytes())
    return SassScheduleEnv(schedule, ModelEvaluator(schedule, Budget(evaluations, 600)), horizon=horizon)


def _policy(env) -> InstructionPolicy:
    return InstructionPolicy(env.observation_space, env.action_space, lambda _: 3e-4, **policy_kwargs(env))


@pytest.fixture(scope="module")
def envs() -> dict[str, SassScheduleEnv]:
    return {n: _env(n) for n in ("softmax", "matmul_leaky")}


def test_layout_follows_the_env(envs):
    env = envs["softmax"]
    rows, features, per_row = env_layout(env)
    assert rows == len(env.movable) and per_row * rows == env.action_space.n
    assert features * rows == env.observation_space.shape[0]


def test_weights_trained_on_one_kernel_drive_another_of_a_different_size(envs, tmp_path):
    a, b = envs["softmax"], envs["matmul_leaky"]
    assert a.action_space.n != b.action_space.n  # the point: different sizes
    pa = _policy(a)
    with th.no_grad():
        for p in pa.parameters():
            p.add_(th.randn_like(p) * 0.1)
    save_checkpoint(pa, tmp_path / "a.zip", {"trained_on": "test"})
    pb = _policy(b)
    load_into(pb, tmp_path / "a.zip")
    for k, v in pa.state_dict().items():
        assert th.equal(v, pb.state_dict()[k]), k
    obs, _ = b.reset()
    mask = b.action_masks()
    action, _ = pb.predict(obs, deterministic=True, action_masks=mask)
    assert mask[int(action)]
    dist = pb.get_distribution(th.as_tensor(obs[None]), action_masks=mask[None])
    assert isinstance(dist.distribution, th.distributions.Categorical) and isinstance(b.action_space, Discrete)
    assert dist.distribution.logits.shape == (1, b.action_space.n)
    assert (tmp_path / "a.zip").stat().st_size < 1_000_000


def test_zero_padding_rows_do_not_change_the_real_rows_logits_or_the_value(envs):
    env = envs["matmul_leaky"]
    policy = _policy(env)
    with th.no_grad():
        for p in policy.parameters():
            p.add_(th.randn_like(p) * 0.2)
    obs, _ = env.reset()
    _, features, per_row = env_layout(env)
    padded = np.concatenate([obs, np.zeros(7 * features, dtype=np.float32)])
    net = policy.mlp_extractor
    with th.no_grad():
        logits, value = net(th.as_tensor(obs[None]))
        plogits, pvalue = net(th.as_tensor(padded[None]))
    assert plogits.shape[1] == logits.shape[1] + 7 * per_row
    assert th.allclose(plogits[:, :logits.shape[1]], logits, atol=1e-5)
    assert th.allclose(pvalue, value, atol=1e-5)
    # ...while a real change to one instruction's features does change the logits.
    other = obs.copy()
    other[:features] = -other[:features] + 0.5
    with th.no_grad():
        assert not th.allclose(net(th.as_tensor(other[None]))[0], logits)


def test_suite_env_pads_to_the_largest_kernel_and_masks_the_padding(envs):
    small, big = _env("softmax"), _env("matmul_leaky")
    suite = SuiteEnv([small, big])
    assert isinstance(suite.action_space, Discrete)
    assert isinstance(small.action_space, Discrete) and isinstance(big.action_space, Discrete)
    assert suite.action_space.n == max(small.action_space.n, big.action_space.n)
    seen = set()
    for seed in range(8):
        obs, info = suite.reset(seed=seed)
        seen.add(info["kernel"])
        inner = suite.env
        assert isinstance(inner.action_space, Discrete) and inner.observation_space.shape is not None
        n = inner.action_space.n
        mask = suite.action_masks()
        assert obs.shape == suite.observation_space.shape
        assert not mask[n:].any() and (mask[:n] == inner.action_masks()).all()
        assert not obs[inner.observation_space.shape[0]:].any()
    assert seen == {0, 1}


def test_pretrain_writes_a_small_labelled_checkpoint_that_excludes_what_it_was_told(tmp_path):
    kernels = [SuiteCubin(n, (FIXTURES / f"{n}.sm90.cubin").read_bytes(), "", "test")
               for n in ("softmax", "rmsnorm", "layernorm")]
    kernels = [SuiteCubin(k.name, k.cubin, Schedule.from_cubin(k.cubin).kernel, k.config) for k in kernels]
    result = pretrain(kernels, tmp_path / "p.zip", steps=64, n_steps=32, batch_size=16, exclude=["rmsnorm"])
    _, meta = load_checkpoint(result.path)
    assert meta["trained_on"] == TRAINED_ON
    assert meta["kernels"] == ["softmax", "layernorm"] and meta["excluded"] == ["rmsnorm"]
    assert meta["cost_model_evaluations"] > 0 and meta["steps"] == 64
    assert result.path.stat().st_size < 1_000_000
    with pytest.raises(ValueError, match="not one of the pretraining kernels"):
        pretrain(kernels, tmp_path / "q.zip", steps=32, exclude=["nope"])
    assert not (tmp_path / "q.zip").exists()


def test_fine_tuning_from_a_checkpoint_stays_in_budget_and_says_where_it_started(envs, tmp_path):
    save_checkpoint(_policy(envs["softmax"]), tmp_path / "c.zip", {"trained_on": TRAINED_ON, "kernels": ["softmax"]})
    env = _env("rmsnorm", evaluations=40)
    r = ppo_search(env, seed=0, policy=tmp_path / "c.zip")
    assert r.evaluations == 40 and r.best_ratio <= 1.0
    assert r.policy is not None and TRAINED_ON in r.policy and "c.zip" in r.policy and r.as_dict()["policy"] == r.policy
    scratch = ppo_search(_env("rmsnorm", evaluations=40), seed=0, policy=None)
    assert scratch.policy == "scratch" and scratch.evaluations == 40


def test_one_searcher_per_budget_is_a_known_algorithm():
    assert DEFAULT_ALGORITHM in ALGORITHMS and DEFAULT_ALGORITHM != "ppo"


def _zip(tmp_path: Path, members: dict[str, bytes]) -> Path:
    p = tmp_path / "bad.zip"
    with zipfile.ZipFile(p, "w") as z:
        for k, v in members.items():
            z.writestr(k, v)
    return p


def _weights() -> bytes:
    buf = io.BytesIO()
    th.save({"w": th.zeros(2)}, buf)
    return buf.getvalue()


GOOD_META = {"format": 1, "features_per_instruction": 14, "actions_per_instruction": 2, "hidden": 64}


@pytest.mark.hostile(fault="malformed policy checkpoint", outcome="clean error")
@pytest.mark.parametrize("members, key", [
    ({"meta.json": b"{}"}, "policy.pt"),
    ({"meta.json": b"[1, 2", "policy.pt": b""}, "meta.json"),
    ({"meta.json": json.dumps({**GOOD_META, "hidden": "64"}).encode(), "policy.pt": b""}, "hidden"),
    ({"meta.json": json.dumps({**GOOD_META, "format": 9}).encode(), "policy.pt": b""}, "format"),
    ({"meta.json": json.dumps(GOOD_META).encode(), "policy.pt": b"\x80\x04not a pickle"}, "policy.pt"),
])
def test_a_malformed_checkpoint_is_a_usage_error_naming_the_file_and_key(tmp_path, members, key):
    p = _zip(tmp_path, members)
    with pytest.raises(UsageError, match=key) as exc:
        load_checkpoint(p)
    assert str(p) in str(exc.value)


@pytest.mark.hostile(fault="malformed policy checkpoint", outcome="clean error")
def test_a_checkpoint_that_is_not_a_zip_or_does_not_fit_is_refused(tmp_path, envs):
    p = tmp_path / "x.zip"
    p.write_bytes(b"not a zip")
    with pytest.raises(UsageError, match="not a zip"):
        load_checkpoint(p)
    wrong = _zip(tmp_path, {"meta.json": json.dumps({**GOOD_META, "actions_per_instruction": 5}).encode(),
                            "policy.pt": _weights()})
    with pytest.raises(UsageError, match="actions_per_instruction"):
        load_into(_policy(envs["softmax"]), wrong)
    misfit = _zip(tmp_path, {"meta.json": json.dumps(GOOD_META).encode(), "policy.pt": _weights()})
    with pytest.raises(UsageError, match="does not fit"):
        load_into(_policy(envs["softmax"]), misfit)


def _compare_module():
    return load_benchmark("ppo_compare")


def test_compare_judges_ties_by_noise_and_keeps_folds_disjoint():
    mod = _compare_module()
    assert mod.winners({"a": 0.99, "b": 0.995, "c": float("nan")}, 0.0) == ["a"]
    assert mod.winners({"a": 0.99, "b": 0.995}, 0.01) == ["a", "b"]
    names = [f"k{i}" for i in range(7)]
    folds = mod.folds_of(names, 3)
    assert sorted(n for fold in folds for n in fold) == sorted(names) and len(folds) == 3
    assert mod.folds_of(names, 1) == [names] and len(mod.folds_of(names, 99)) == 7


def test_compare_runs_four_searchers_on_the_same_budget(tmp_path, envs):
    mod = _compare_module()
    save_checkpoint(_policy(envs["softmax"]), tmp_path / "c.zip", {"trained_on": TRAINED_ON, "kernels": ["softmax"]})
    cubin = (FIXTURES / "rmsnorm.sm90.cubin").read_bytes()
    row = mod.compare_kernel("rmsnorm", cubin, Schedule.from_cubin(cubin).kernel, checkpoint=tmp_path / "c.zip",
                             backend=None, ref=None, evaluations=30, seconds=60, seed=0, horizon=8)
    assert set(row["results"]) == set(mod.SEARCHERS)
    assert all(r["evaluations"] <= 30 for r in row["results"].values())
    assert row["results"]["ppo_pretrained"]["policy"].startswith("c.zip")
    assert row["results"]["ppo_scratch"]["policy"] == "scratch"
    best = min(row["scores"].values())
    assert row["winners"] and all(abs(row["scores"][w] - best) <= 1e-9 for w in row["winners"])
    summary = mod.summarise([row])
    assert sum(c["sole_wins"] + c["shared_wins"] for c in summary["per_searcher"].values()) >= 1
