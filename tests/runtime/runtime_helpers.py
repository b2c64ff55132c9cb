"""Helpers for the kbuild.runtime tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
JIT_EXAMPLE = ROOT / "examples" / "jit-package"

#: Appended to the baseline cubin to make a distinct "tuned" cubin (still an ELF file; never loaded here).
MARKER = b"kbuild-runtime-test"


class FakeDriver:
    """Just enough of Triton's driver for ``JITFunction.run(warmup=True)``."""

    def __init__(self, cc: int) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", cc, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self.target


def make_tuned(settings: Any, build: Any, *, speedup: float = 1.25, marker: bytes = MARKER) -> Any:
    """Turn a baseline build into a "tuned" one with a distinct cubin, as the tuner's store entry would be."""
    from kbuild.cache import Artefact
    from kbuild.key import KernelKey, tuner_component
    from kbuild.tune import TUNER_VERSION

    tuned = dataclasses.replace(settings, tune="auto")
    tuner = tuner_component(tuned, version=TUNER_VERSION)
    build.tuned_key = KernelKey({**build.baseline_key.components, "tuner": tuner})
    build.tuned = True
    meta = {**build.artefact.meta, "tuned": True, "speedup": speedup, "key": build.tuned_key.hex}
    build.artefact = Artefact.create(key=build.tuned_key.hex, cubin=build.artefact.cubin + marker, meta=meta)
    return build
