"""Tuners the Ray tests hand to the tasks (pickled by value: Ray's workers cannot import the tests folder).

:func:`recording_model_tuner` is kbuild's cost-model tuner (the CPU stand-in for GPU measurements, labelled as
such in every result) that also appends one line per start and finish to a log file, so that a test can count
how often each entry was tuned to the end. Entries named in ``faults`` raise as a GPU fault would."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RecordingModelTuner:
    log: str
    faults: tuple[tuple[str, str], ...] = ()
    seen: list[Any] = field(default_factory=list)

    def _write(self, event: str, settings: Any, b: Any) -> None:
        import ray

        import kbuild

        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        with open(self.log, "a") as f:
            f.write(json.dumps({"event": event, "kernel": b.spec.name, "target": b.target.name, "node": node,
                                "key": b.tuned_key.hex, "pid": os.getpid(), "time": time.time(),
                                # where this worker found kbuild, the project, and the kernel's module
                                "kbuild": kbuild.__file__, "project": str(settings.project_dir),
                                "module": getattr(sys.modules.get(getattr(b.fn, "__module__", "")), "__file__", None)}) + "\n")

    def __call__(self, settings: Any, b: Any, *, pool: Any = None) -> Any:
        from kbuild.prewarm.tasks import model_tuner

        self._write("start", settings, b)
        if (b.spec.name, b.target.name) in self.faults:
            raise RuntimeError("CUDA error: an illegal memory access was encountered (stand-in GPU fault)")
        art = model_tuner(settings, b, pool=pool)
        self._write("finish", settings, b)
        return art


def events(log: str) -> list[dict[str, Any]]:
    try:
        with open(log) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def dying_compile_task(settings: Any, kernel: str, target: str, *, shipped: bool = False) -> Any:
    """A compile task whose worker process dies on the spot, as one the kernel's out-of-memory killer took would:
    Ray retries it, and its raylet reports each death to the driver (``(raylet) A worker died...``)."""
    os._exit(1)
