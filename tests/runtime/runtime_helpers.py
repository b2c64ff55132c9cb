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
    """Just enough of Triton's driver for ``JITFunction.run`` on a CPU: warmup (compile, hooks), and a launch
    whose load and launch steps are stubbed (recorded, labelled stand-ins for the GPU)."""

    def __init__(self, cc: int) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", cc, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self.target

    # -- Stand-ins for the GPU (CPU tests only): the driver's load and launch steps record what
    # -- reaches them instead of calling CUDA. Nothing here runs a kernel.

    @property
    def loads(self) -> list[tuple[str, bytes, int, int]]:
        """``(symbol, cubin bytes, shared, device)`` of each ``utils.load_binary`` call."""
        return self.utils.loads

    @property
    def launches(self) -> list[tuple[Any, ...]]:
        """The arguments of each launch (grid x, y, z, stream, function, ...)."""
        return _StubLauncher.launches

    @property
    def launcher_cls(self) -> type:
        return _StubLauncher

    @property
    def utils(self) -> _StubUtils:
        if not hasattr(self, "_utils"):
            self._utils = _StubUtils()
            _StubLauncher.launches = []
        return self._utils


class _StubUtils:
    """CPU stand-in for ``driver.active.utils``: records the cubin handed to the driver's load step."""

    def __init__(self) -> None:
        self.loads: list[tuple[str, bytes, int, int]] = []

    def get_device_properties(self, device: int) -> dict[str, int]:
        return {"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536, "warpSize": 32}

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int) -> tuple[int, int, int, int, int]:
        self.loads.append((name, bytes(kernel), shared, device))
        return (1, 2, 32, 0, 1024)  # module, function, n_regs, n_spills, n_max_threads (stand-in values)


class _StubLauncher:
    """CPU stand-in for Triton's compiled C launcher: records the launch instead of calling cuLaunchKernel."""

    launches: list[tuple[Any, ...]] = []

    def __init__(self, src: Any, metadata: Any) -> None:
        self.src, self.metadata = src, metadata

    def __call__(self, *args: Any) -> None:
        _StubLauncher.launches.append(args)


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
