"""``--mode cpu``: a workload on CPU tensors, its Triton launches recorded instead of run.

Nothing is compiled and nothing runs on a GPU. ``JITFunction.run`` is replaced (class attribute) by a recorder
that puts the call through Triton's own binder for each recorded target (``create_function_from_signature`` and
``compute_cache_key``, once per specialisation :func:`kbuild.runtime.keys.specialization_for_call`, which adds
``_pack_args`` and the hook mapping Triton hands ``jit_post_compile_hook``), so that a recorded specialisation is
the one the run time keys a GPU call to; the call returns None, as a launch that compiled nothing does.

``Autotuner.run`` is replaced too: it computes Triton's autotune key, prunes the configs with the autotuner's own
``prune_configs`` (``early_config_prune``, ``perf_model``), and calls the layer below with each remaining config,
as Triton would benchmark them, so that every configuration's specialisation is recorded (no choice: nothing was
measured; ``tunings[].choice`` is null). Each of those calls counts as a call of its configuration's
specialisation. Configs' ``pre_hook`` functions are not called (they prepare buffers for a launch that does not
happen). ``Heuristics.run`` is Triton's own, observed: the names it sets are recorded.

This is the pattern of ``tests/examples/test_liger_example.py`` made a mode of ``kbuild record``. Outputs of the
recorded launches are never written: a workload that checks its results fails its checks, and is still
recorded up to where it stops.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kbuild.record.recorder import Frame, Recorder, SpecState, autotune_key, config_index, json_value


def _jit_under(layer: Any) -> Any:
    from triton.runtime.jit import JITFunction

    fn = layer
    while not isinstance(fn, JITFunction):
        fn = fn.fn
    return fn


class CpuMode:
    """Installs the replacements; :meth:`uninstall` puts Triton's methods back."""

    def __init__(self, recorder: Recorder, *, targets: list[int], sm_count: int) -> None:
        self.recorder = recorder
        self.targets = list(targets)
        self.sm_count = int(sm_count)
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        from triton.runtime.autotuner import Autotuner, Heuristics
        from triton.runtime.jit import JITFunction

        mode = self
        heuristics_run = Heuristics.run

        def jit_run(jit: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
            mode.launch(jit, args, kwargs, grid=grid, warmup=warmup)
            return None

        def autotuner_run(autotuner: Any, *args: Any, **kwargs: Any) -> None:
            mode.autotune(autotuner, args, kwargs)
            return None

        def observed_heuristics_run(layer: Any, *args: Any, **kwargs: Any) -> Any:
            with mode.layer(Frame(layer, "heuristics")):
                return heuristics_run(layer, *args, **kwargs)

        for cls, name, fn in ((JITFunction, "run", jit_run), (Autotuner, "run", autotuner_run),
                              (Heuristics, "run", observed_heuristics_run)):
            self._saved.append((cls, name, cls.__dict__[name]))
            setattr(cls, name, fn)

    def uninstall(self) -> None:
        for cls, name, fn in reversed(self._saved):
            setattr(cls, name, fn)
        self._saved.clear()

    @contextmanager
    def layer(self, frame: Frame) -> Iterator[Frame]:
        stack = self.recorder.frames.stack
        stack.append(frame)
        try:
            yield frame
        finally:
            stack.pop()

    # -- the calls ------------------------------------------------------------------------------------

    def _binder(self, jit: Any, cc: int) -> tuple[Any, dict[Any, Any]]:
        memo = self.recorder.memo
        slot = ("binder", id(jit), cc)
        got = memo.get(slot)
        if got is None:
            from triton.backends.compiler import GPUTarget
            from triton.compiler import make_backend
            from triton.runtime.jit import create_function_from_signature

            backend = make_backend(GPUTarget("cuda", cc, 32))
            got = memo[slot] = (jit, create_function_from_signature(jit.signature, jit.params, backend), {})
        return got[1], got[2]

    def _state(self, jit: Any, cc: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[SpecState, Any]:
        from triton import knobs
        from triton.runtime.jit import compute_cache_key

        from kbuild.runtime.keys import specialization_for_call

        binder, key_cache = self._binder(jit, cc)
        kw = dict(kwargs)
        kw["debug"] = kw.get("debug", jit.debug) or knobs.runtime.debug  # as JITFunction.run does
        kw["instrumentation_mode"] = knobs.compilation.instrumentation_mode
        bound_args, specialization, options = binder(*args, **kw)
        frames = self.recorder.frames
        at = frames.autotuner()
        context = (id(at.layer), at.config) if at is not None else None, tuple(frames.heuristic_names().items())
        slot = ("spec", id(jit), cc, compute_cache_key(key_cache, specialization, options), context)
        state = self.recorder.memo.get(slot)
        if state is None:
            call = specialization_for_call(jit, *args, cc=cc, **kwargs)
            state = self.recorder.memo[slot] = self.recorder.specialization(jit, call)
        return state, bound_args

    def launch(self, jit: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, grid: Any, warmup: bool) -> None:
        """One ``jit[grid](*args, **kwargs)`` (or ``jit.warmup``): its specialisation per target, and the call."""
        bound: Any = None
        states = []
        for cc in self.targets:
            try:
                state, bound = self._state(jit, cc, args, kwargs)
            except TypeError:
                raise  # the call does not bind to the kernel's parameters: Triton raises the same
            except Exception as exc:
                self.recorder.note(f"{jit.fn.__module__}:{jit.fn.__qualname__}: a call could not be recorded "
                                   f"({type(exc).__name__}: {exc})")
                return
            states.append(state)
        if warmup:
            return
        if callable(grid):
            try:
                grid = grid(bound)
            except Exception:
                grid = None
        for state in states:
            state.call(bound, grid, self.sm_count)

    def autotune(self, autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """One call of an ``@triton.autotune`` kernel: every config it would benchmark (after pruning) recorded."""
        from kbuild.targets import Target

        autotuner.nargs = dict(zip(autotuner.arg_names, args))
        try:
            key = autotune_key(autotuner, args, kwargs)
            configs = autotuner.prune_configs(kwargs) if key is not None else list(autotuner.configs[:1])
            indices = [config_index(autotuner, c) for c in configs]
            with self.layer(Frame(autotuner, "autotune", key=key)) as frame:
                if key is not None:
                    slot = ("tuning", id(autotuner), repr(key), tuple(indices))
                    if slot not in self.recorder.memo:
                        self.recorder.memo[slot] = None  # type: ignore[assignment]
                        jit = _jit_under(autotuner)
                        for cc in self.targets:
                            self.recorder.tuning(jit, autotuner, {
                                "target": Target(cc).name, "key": json_value(list(key)),
                                "configs": sorted({i for i in indices if i is not None}), "choice": None,
                                "source": None, "sm_count": None})
                for config, index in zip(configs, indices):
                    frame.config = index
                    autotuner.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            autotuner.nargs = None


__all__ = ["CpuMode"]
