"""The PPO policy that transfers across kernels, and its checkpoints.

:class:`~kbuild.tune.env.SassScheduleEnv` observes ``FEATURES`` values per movable instruction
(flattened) and acts with ``actions-per-instruction × movable`` discrete actions, instruction-major
(action ``A·m + k`` is instruction ``m``'s ``k``-th action). A plain MLP over that flat vector has
weights tied to one kernel's size and instruction order. :class:`InstructionPolicy` instead shares
every weight across instructions, so one set of weights applies to any kernel:

1. a small MLP embeds each instruction's features (the same weights for every instruction);
2. a 1-D convolution over the instructions in program order mixes in each one's neighbours (what a
   one-slot move swaps with);
3. a masked mean and max over the instructions give a pooled context of the whole region;
4. per instruction, a shared head maps ``[own embedding, context]`` to that instruction's action
   logits; the value is an MLP of the pooled context.

All-zero observation rows are padding (a real instruction always has its opcode-class bit set) and
are left out of the pooling: :class:`kbuild.tune.pretrain.SuiteEnv` pads kernels to one shape.

Checkpoints (:func:`save_checkpoint` / :func:`load_checkpoint`) are a zip of ``meta.json`` (how the
policy was made: the kernels, the steps, what it was trained on) and ``policy.pt`` (the network's
``state_dict``, loaded with ``weights_only=True``): a few hundred kB, independent of kernel size.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

from kbuild import __version__
from kbuild.arch import DEFAULT_SM, find
from kbuild.errors import UsageError
from kbuild.fsutil import write_atomic
from kbuild.jsonio import load_json

CHECKPOINT_FORMAT = 1
SHIPPED_DIR = Path(__file__).resolve().parent / "policies"
"""Where the default PPO starting points live, one per architecture, named by its row's ``ppo_checkpoint``
(:mod:`kbuild.arch`: ``ppo_suite_sm90.zip``). None is shipped yet: on the cost model a pretrained policy did not
beat scratch PPO (benchmarks/results/ppo_compare_cpu_model), so PPO starts from scratch unless given one. A
checkpoint placed here must come with a README saying how it was made (``benchmarks/ppo_pretrain.py``)."""


def env_layout(env: Any) -> tuple[int, int, int]:
    """``(rows, features per row, actions per row)`` of an env's flat observation and discrete actions.

    Features per row: the env's ``features`` attribute when it has one, else ``kbuild.tune.env.FEATURES``.
    Rows: observation length / features (padded rows included). Actions per row: the env's
    ``actions_per_instruction`` when it has one, else ``action_space.n / rows``."""
    from kbuild.tune import env as env_module

    features = int(getattr(env, "features", None) or env_module.FEATURES)
    size = int(np.prod(env.observation_space.shape))
    if size % features:
        raise ValueError(f"observation of {size} values is not a whole number of {features}-feature rows")
    rows = size // features
    n = int(env.action_space.n)
    per_row = getattr(env, "actions_per_instruction", None)
    if per_row is None:
        if n % rows:
            raise ValueError(f"{n} actions do not divide evenly among {rows} instructions")
        per_row = n // rows
    per_row = int(per_row)
    if per_row * rows != n:
        raise ValueError(f"{n} actions are not {per_row} per instruction × {rows} instructions")
    return rows, features, per_row


class InstructionNet(nn.Module):
    """The shared per-instruction network (see the module docstring). ``forward`` takes the flat
    observation batch ``(B, rows × features)`` and returns ``(logits (B, rows × actions), context (B, hidden))``."""

    def __init__(self, features: int, actions: int, hidden: int = 64, kernel_size: int = 5) -> None:
        super().__init__()
        self.features, self.actions, self.hidden = features, actions, hidden
        self.embed = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.local = nn.Conv1d(hidden, hidden, kernel_size, padding=kernel_size // 2)
        self.head = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, actions))
        self.critic = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU())
        # Near-uniform initial logits, as SB3 does for its action net (gain 0.01).
        last = self.head[-1]
        assert isinstance(last, nn.Linear)
        nn.init.orthogonal_(last.weight, gain=0.01)
        nn.init.zeros_(last.bias)
        self.latent_dim_vf = hidden

    def _encode(self, flat: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        b = flat.shape[0]
        x = flat.reshape(b, -1, self.features)
        present = (x.abs().sum(-1) > 0).to(x.dtype).unsqueeze(-1)  # (B, R, 1)
        h = self.embed(x) * present
        h = h + th.relu(self.local(h.transpose(1, 2))).transpose(1, 2) * present
        count = present.sum(1).clamp(min=1.0)
        mean = h.sum(1) / count
        peak = h.amax(1)  # h >= 0 (ReLUs) and padding rows are 0, so they never win the max
        return h, th.cat([mean, peak], dim=-1)

    def forward_actor(self, flat: th.Tensor) -> th.Tensor:
        h, ctx = self._encode(flat)
        both = th.cat([h, ctx.unsqueeze(1).expand(-1, h.shape[1], -1)], dim=-1)
        return self.head(both).reshape(flat.shape[0], -1)

    def forward_critic(self, flat: th.Tensor) -> th.Tensor:
        return self.critic(self._encode(flat)[1])

    def forward(self, flat: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        h, ctx = self._encode(flat)
        both = th.cat([h, ctx.unsqueeze(1).expand(-1, h.shape[1], -1)], dim=-1)
        return self.head(both).reshape(flat.shape[0], -1), self.critic(ctx)


class InstructionPolicy(MaskableActorCriticPolicy):
    """MaskablePPO's actor-critic with :class:`InstructionNet` in place of the MLP extractor and action net.

    Its parameters do not depend on the number of instructions, so a ``state_dict`` trained on one kernel
    (or on the padded suite) loads into the policy of any other kernel with the same features and actions
    per instruction. ``features_per_instruction`` and ``actions_per_instruction``: see :func:`env_layout`."""

    def __init__(self, *args: Any, features_per_instruction: int, actions_per_instruction: int, hidden: int = 64,
                 **kwargs: Any) -> None:
        self.features_per_instruction = features_per_instruction
        self.actions_per_instruction = actions_per_instruction
        self.hidden = hidden
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = InstructionNet(  # type: ignore[assignment]
            self.features_per_instruction, self.actions_per_instruction, self.hidden)

    def _build(self, lr_schedule: Any) -> None:
        # MaskableActorCriticPolicy._build, less the size-bound action Linear: the logits come per instruction.
        self._build_mlp_extractor()
        self.action_net = nn.Identity()
        self.value_net = nn.Linear(self.mlp_extractor.latent_dim_vf, 1)
        nn.init.orthogonal_(self.value_net.weight, gain=1.0)
        nn.init.zeros_(self.value_net.bias)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1),  # type: ignore[call-arg]
                                              **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(features_per_instruction=self.features_per_instruction,
                    actions_per_instruction=self.actions_per_instruction, hidden=self.hidden)
        return data


def policy_kwargs(env: Any, *, hidden: int = 64) -> dict[str, Any]:
    """``policy_kwargs`` for ``MaskablePPO(InstructionPolicy, env, ...)``."""
    _, features, per_row = env_layout(env)
    return {"features_per_instruction": features, "actions_per_instruction": per_row, "hidden": hidden}


# --- checkpoints --------------------------------------------------------------------------------
def save_checkpoint(policy: InstructionPolicy, path: str | Path, meta: dict[str, Any]) -> Path:
    """Write ``policy``'s weights and ``meta`` (plus the layout it needs) as a zip; returns the path."""
    full = {**meta, "format": CHECKPOINT_FORMAT, "kbuild_version": __version__,
            "features_per_instruction": policy.features_per_instruction,
            "actions_per_instruction": policy.actions_per_instruction, "hidden": policy.hidden}
    weights = io.BytesIO()
    th.save({k: v.detach().cpu() for k, v in policy.state_dict().items()}, weights)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("meta.json", json.dumps(full, indent=2, sort_keys=True))
        z.writestr("policy.pt", weights.getvalue())
    out = Path(path)
    write_atomic(out, buf.getvalue())
    return out


MAX_CHECKPOINT_BYTES = 64 * 2**20


def load_checkpoint(path: str | Path) -> tuple[dict[str, th.Tensor], dict[str, Any]]:
    """``(state_dict, meta)`` from a checkpoint written by :func:`save_checkpoint`. Anything else is a
    :class:`~kbuild.errors.UsageError` naming the file and what is wrong."""
    where = f"PPO policy checkpoint {path}"
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{where}: no such file")
    if p.stat().st_size > MAX_CHECKPOINT_BYTES:
        raise UsageError(f"{where}: larger than {MAX_CHECKPOINT_BYTES} bytes; not a policy checkpoint")
    try:
        with zipfile.ZipFile(p) as z:
            names = set(z.namelist())
            for member in ("meta.json", "policy.pt"):
                if member not in names:
                    raise UsageError(f"{where}: {member}: missing from the zip")
                if z.getinfo(member).file_size > MAX_CHECKPOINT_BYTES:
                    raise UsageError(f"{where}: {member}: larger than {MAX_CHECKPOINT_BYTES} bytes")
            meta_bytes, weights = z.read("meta.json"), z.read("policy.pt")
    except (zipfile.BadZipFile, OSError) as exc:
        raise UsageError(f"{where}: not a zip file ({exc})") from None
    meta = load_json(meta_bytes, where=f"{where}: meta.json")
    if not isinstance(meta, dict):
        raise UsageError(f"{where}: meta.json: expected an object")
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise UsageError(f"{where}: meta.json: format: expected {CHECKPOINT_FORMAT}, got {meta.get('format')!r}")
    for key in ("features_per_instruction", "actions_per_instruction", "hidden"):
        if not isinstance(meta.get(key), int) or isinstance(meta.get(key), bool) or meta[key] <= 0:
            raise UsageError(f"{where}: meta.json: {key}: expected a positive integer")
    try:
        state = th.load(io.BytesIO(weights), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt or hostile pickle
        raise UsageError(f"{where}: policy.pt: not a weights file ({type(exc).__name__})") from None
    if not isinstance(state, dict) or not all(isinstance(v, th.Tensor) for v in state.values()):
        raise UsageError(f"{where}: policy.pt: expected a state_dict of tensors")
    return state, meta


def load_into(policy: InstructionPolicy, path: str | Path) -> dict[str, Any]:
    """Load a checkpoint's weights into ``policy`` (built for another kernel's env); returns its meta.
    A checkpoint made for other features or actions per instruction is a UsageError naming the key."""
    state, meta = load_checkpoint(path)
    where = f"PPO policy checkpoint {path}: meta.json"
    for key, have in (("features_per_instruction", policy.features_per_instruction),
                      ("actions_per_instruction", policy.actions_per_instruction), ("hidden", policy.hidden)):
        if meta[key] != have:
            raise UsageError(f"{where}: {key}: the checkpoint has {meta[key]}, this env's policy needs {have} "
                             f"(pretrain again for this env)")
    try:
        policy.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise UsageError(f"{where.removesuffix(': meta.json')}: policy.pt: does not fit the policy "
                         f"({str(exc).splitlines()[0]})") from None
    return meta


def default_checkpoint(sm: int = DEFAULT_SM) -> Path | None:
    """The checkpoint shipped for ``sm_<sm>`` (its row's ``ppo_checkpoint`` under :data:`SHIPPED_DIR`) when
    present, else None (PPO then starts from scratch)."""
    row = find(sm)
    name = row.ppo_checkpoint if row is not None else None
    path = SHIPPED_DIR / name if name else None
    return path if path is not None and path.is_file() else None
