"""Where a task of ``kbuild prewarm --ray`` runs: the node's GPUs as Ray resources, the task's whereabouts, the
project as the node sees it, and Ray's errors in one line.

The driver (:mod:`kbuild.prewarm.ray_engine`), the tasks (:mod:`kbuild.prewarm.tasks`), the tune workers
(:mod:`kbuild.prewarm.workers`) and the level-1 compile shards (:mod:`kbuild.prewarm.shards`) share these; this
module imports none of them.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path
from typing import Any

from kbuild.settings.model import Settings

#: The custom resource a GPU node declares once per GPU of compute capability ``cc``: ``kbuild_sm_<cc>``.
RESOURCE_PREFIX = "kbuild_sm_"


def resource_name(cc: int) -> str:
    """The Ray custom resource that stands for one GPU of compute capability ``cc`` (``kbuild_sm_90``)."""
    return f"{RESOURCE_PREFIX}{cc}"


def node_resources() -> dict[str, float]:
    """The custom resources this machine's GPUs give (``{"kbuild_sm_90": 8.0}``), for ``ray start --resources``."""
    from kbuild.device.probe import local_gpus

    out: dict[str, float] = {}
    for g in local_gpus():
        out[resource_name(g.cc)] = out.get(resource_name(g.cc), 0.0) + 1.0
    return out


def on_node(settings: Settings, shipped: bool) -> Settings:
    """The driver's settings as a task on a node uses them: with the project shipped, its project folder is the
    copy Ray unpacked, which is the task's working directory; otherwise unchanged (the same path everywhere)."""
    if not shipped:
        return settings
    here = Path.cwd().resolve()
    return settings if here == settings.project_dir else dataclasses.replace(settings, project_dir=here)


def where() -> dict[str, Any]:
    """This worker: host, Ray node id, pid, the GPUs it sees (``gpu``) and Ray's ids of those it was given
    (``gpu_ids``, empty for a task that asked for none)."""
    from kbuild.device.probe import local_gpus

    node, gpu_ids = None, []
    try:
        import ray

        if ray.is_initialized():
            ctx = ray.get_runtime_context()
            node = ctx.get_node_id()
            gpu_ids = [str(i) for i in ctx.get_accelerator_ids().get("GPU", [])]
    except Exception:
        node = None
    gpus = [f"{g.name} (sm_{g.cc})" for g in local_gpus()]
    return {"host": socket.gethostname(), "node": node, "pid": os.getpid(), "gpu": ", ".join(gpus) or "none",
            "gpu_ids": gpu_ids}


def ray_error(exc: BaseException) -> str:
    """Ray's error in one line: the task's own exception where Ray carries one (``RayTaskError.cause``), else the
    last line of Ray's message (its first is the task's name, the rest a traceback)."""
    from kbuild.console import printable

    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and cause is not exc:
        return f"{type(exc).__name__}: {ray_error(cause)}"
    lines = [printable(line).strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"


__all__ = ["RESOURCE_PREFIX", "node_resources", "on_node", "ray_error", "resource_name", "where"]
